// Checking and timing lrpe_cosine / md_lrpe_cosine on a GPU, shared by the GPU tests and
// `kgen check|bench|tune --op lrpe_cosine|md_lrpe_cosine`. Every timing is preceded by a check on
// the same buffers with NaN-poisoned outputs against the fp64 reference: no figure for a
// failing variant.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <utility>
#include <string>
#include <vector>

#include "generator/lrpe.h"
#include "check/harness_check.h"
#include "check/harness_support.h"
#include "check/host_tensor.h"
#include "ops/lrpe_tuning.h"

namespace kgen {

std::string to_string(const LrpeCase& c);

// The bytes a call must move at the least (docs/lrpe.md §5).
double lrpe_floor_bytes(const LrpeCase& c);

// Device memory one call of the case holds, as the reports' memory tables count it for their
// kernels (peak of live allocations): inputs, outputs and scratch. Forward: x, theta, o (+ the
// md angle cache (heads, n, d) fp32, + softmax-over-the-sequence statistics); backward: x,
// theta, dO, dx (+ angles, + statistics). kgen allocates nothing else on the call path.
std::size_t lrpe_footprint_bytes(const LrpeCase& c, int device = 0);

// theta of a case, fp32 as the kernels read it: (rows, cols) = (heads or 1, width or 1) by the
// case's theta_kind, θ[h, i] = 10000^(−i / width) times a random factor in [0.5, 1).
struct LrpeTheta {
  std::vector<float> values;
  int rows = 1, cols = 1;
};
LrpeTheta make_lrpe_theta(const LrpeCase& c, std::mt19937_64& rng);

// The reference of an lrpe check on the (b, h) slices it compares: the output (o: rows of 2d,
// or dx: rows of d) of each slice in (slice, row, feature) order, and for the md cache forward
// the cos and sin of the angles (cos, sin pairs, rows of 2d), fp64.
struct LrpeReference {
  std::string description;
  std::vector<std::pair<int, int>> slices;
  std::vector<double> out, angles;
};

// The fp64 CPU reference of every (b, h) slice while the case is small, else of four spread
// slices (docs/lrpe.md §6); x (and dO for the backward) are the inputs, contiguous (b, h, n, ·).
LrpeReference lrpe_reference_cpu(const LrpeCase& c, const LrpeTheta& theta, const std::vector<double>& x,
                                 const std::vector<double>& d_o);

// The comparison step of an lrpe check, without a device: the output "o" (forward) or "dx"
// (backward), a host copy in the case's layout and dtype, with the bounds of the dtype; and, when
// the reference has them, "angles": the cos and sin of `angles` (the md cache, (heads, n, d)
// fp32) with fp32 bounds.
HarnessCheck compare_lrpe_outputs(const LrpeCase& c, const HostTensor& out, const std::vector<float>& angles,
                                  const LrpeReference& ref);

// One problem's inputs and reference, computed once; configs are checked (outputs poisoned
// before every run) and timed on the same buffers (inputs rotated beyond L2 for timing).
class LrpeBench final : public HarnessBench {
 public:
  LrpeBench(const LrpeCase& c, int device = 0);
  ~LrpeBench() override;
  LrpeBench(const LrpeBench&) = delete;
  LrpeBench& operator=(const LrpeBench&) = delete;

  const LrpeCase& problem() const;
  HarnessCheck check(const std::string& config) override;
  Timing time(const std::string& config, int warmup, int reps) override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Runs the case once on poisoned outputs against the fp64 reference. Throws Error(no_device)
// without a GPU.
HarnessCheck check_lrpe(const LrpeCase& c, int device = 0);

// Device-to-device copy rate in bytes/s (bytes read + written per second) of a `bytes` copy,
// median of `reps` event-timed cuMemcpyDtoDAsync.
double measure_copy_bandwidth(std::size_t bytes, int device = 0, int reps = 20);

}  // namespace kgen
