// Checking and timing attention kernels on a GPU, shared by the GPU tests, `kgen check`,
// `kgen bench` and the README's main job. Every timing is preceded by a check on the same
// buffers with NaN-poisoned outputs (docs/attention.md §5): no figure for a failing variant.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "generator/attention_forward.h"
#include "check/harness_check.h"
#include "check/harness_support.h"
#include "check/host_tensor.h"
#include "ops/attention_tuning.h"

namespace kgen {

std::string to_string(const AttentionCase& c);

// 4·b·h_q·n_q·n_k·d, halved for causal (docs/attention.md §6).
double attention_forward_flops(const AttentionCase& c);

// The reference of a forward check on the rows it compares: (b, h, i) triples, o (head_dim
// values per row) and lse (one per row) in that order, fp64.
struct AttentionReferenceRows {
  std::vector<std::array<int, 3>> rows;
  std::vector<double> o, lse;
  std::string description;
};

// Appends the fp64 CPU reference of query rows `rows` of every (b, h) to `ref`; q64, k64, v64
// are the inputs, contiguous (b, h, n, d). Fully masked rows get o = 0 and lse = −inf.
void append_attention_forward_cpu_rows(const AttentionCase& c, const std::vector<double>& q64,
                                       const std::vector<double>& k64, const std::vector<double>& v64,
                                       const std::vector<int>& rows, AttentionReferenceRows& ref);

// The host copies of one forward run's outputs.
struct AttentionForwardOutputs {
  HostTensor o;            // (b, h_q, n_q, d) in the case's layout and dtype
  std::vector<float> lse;  // (b, h_q, n_q), contiguous
};

// The comparison step of a forward check, without a device: "o" (rows of head_dim) and "lse"
// (one value per row) against the reference rows, with the bounds of the case's dtype.
HarnessCheck compare_attention_forward_outputs(const AttentionCase& c, const AttentionForwardOutputs& out,
                                               const AttentionReferenceRows& ref);

// Runs kgen's forward once on fresh inputs with NaN-poisoned o and lse, and compares both
// against the fp64 CPU reference (all rows when small, evenly spread rows of every head when
// large). Throws Error(no_device) without a GPU.
HarnessCheck check_attention_forward(const AttentionCase& c, int device = 0);

// One problem's inputs and reference, computed once, against which any number of configs are
// checked (NaN-poisoned outputs before each run) and timed: what `kgen tune` and `kgen bench`
// use, so every candidate is checked on the same buffers before it is timed.
class AttentionForwardBench final : public HarnessBench {
 public:
  AttentionForwardBench(const AttentionCase& c, int device = 0);
  ~AttentionForwardBench() override;
  AttentionForwardBench(const AttentionForwardBench&) = delete;
  AttentionForwardBench& operator=(const AttentionForwardBench&) = delete;

  const AttentionCase& problem() const;
  HarnessCheck check(const std::string& config) override;
  Timing time(const std::string& config, int warmup, int reps) override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Checks the GPU reference itself: every row of every head against the fp64 CPU reference.
HarnessCheck check_reference_gpu_against_cpu(const AttentionCase& c, int device = 0);

}  // namespace kgen
