// Checking and timing lrpe_cosine / md_lrpe_cosine on a GPU, shared by the GPU tests,
// `kgen check lrpe` and `kgen bench lrpe`. Every timing is preceded by a check on the same
// buffers with NaN-poisoned outputs against the fp64 reference: no figure for a failing variant.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "generator/lrpe.h"
#include "check/harness_support.h"
#include "check/metrics.h"

namespace kgen {


std::string to_string(const LrpeCase& c);

// The bytes a call must move at the least (docs/lrpe.md §5).
double lrpe_floor_bytes(const LrpeCase& c);

// Device memory one call of the case holds, as the reports' memory tables count it for their
// kernels (peak of live allocations): inputs, outputs and scratch. Forward: x, theta, o (+ the
// md angle cache (heads, n, d) fp32, + softmax-over-the-sequence statistics); backward: x,
// theta, dO, dx (+ angles, + statistics). kgen allocates nothing else on the call path.
std::size_t lrpe_footprint_bytes(const LrpeCase& c, int device = 0);

struct LrpeCheck {
  std::string config;     // the config that ran ("" = default)
  std::string reference;  // which rows the fp64 reference covered
  Comparison out;         // o (forward) or dx (backward)
  Comparison angles;      // md cache forward: cos/sin of the written angles (count 0 otherwise)
  bool pass = false;
};

// One problem's inputs and reference, computed once; configs are checked (outputs poisoned
// before every run) and timed on the same buffers (inputs rotated beyond L2 for timing).
class LrpeBench {
 public:
  LrpeBench(const LrpeCase& c, int device = 0);
  ~LrpeBench();
  LrpeBench(const LrpeBench&) = delete;
  LrpeBench& operator=(const LrpeBench&) = delete;

  const LrpeCase& problem() const;
  LrpeCheck check(const std::string& config);
  Timing time(const std::string& config, int warmup, int reps);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Runs the case once on poisoned outputs against the fp64 reference. Throws Error(no_device)
// without a GPU.
LrpeCheck check_lrpe(const LrpeCase& c, int device = 0);

// Device-to-device copy rate in bytes/s (bytes read + written per second) of a `bytes` copy,
// median of `reps` event-timed cuMemcpyDtoDAsync.
double measure_copy_bandwidth(std::size_t bytes, int device = 0, int reps = 20);

}  // namespace kgen
