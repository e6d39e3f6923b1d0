// Checking and timing attention kernels on a GPU, shared by the GPU tests, `kgen check`,
// `kgen bench` and the README's main job. Every timing is preceded by a check on the same
// buffers with NaN-poisoned outputs (docs/attention.md §5): no figure for a failing variant.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "generator/attention_forward.h"
#include "check/harness_support.h"
#include "check/metrics.h"

namespace kgen {


std::string to_string(const AttentionCase& c);

// 4·b·h_q·n_q·n_k·d, halved for causal (docs/attention.md §6).
double attention_forward_flops(const AttentionCase& c);

struct AttentionCheck {
  std::string config;     // the config that ran
  std::string reference;  // "cpu-fp64 all rows" or "cpu-fp64 sampled rows"
  Comparison o, lse;
  bool pass = false;
};

// Runs kgen's forward once on fresh inputs with NaN-poisoned o and lse, and compares both
// against the fp64 CPU reference (all rows when small, evenly spread rows of every head when
// large). Throws Error(no_device) without a GPU.
AttentionCheck check_attention_forward(const AttentionCase& c, int device = 0);

// One problem's inputs and reference, computed once, against which any number of configs are
// checked (NaN-poisoned outputs before each run) and timed: what `kgen tune` and `kgen bench`
// use, so every candidate is checked on the same buffers before it is timed.
class AttentionForwardBench {
 public:
  AttentionForwardBench(const AttentionCase& c, int device = 0);
  ~AttentionForwardBench();
  AttentionForwardBench(const AttentionForwardBench&) = delete;
  AttentionForwardBench& operator=(const AttentionForwardBench&) = delete;

  const AttentionCase& problem() const;
  // Runs `config` ("" = the default choice) once on poisoned outputs and compares with the reference.
  AttentionCheck check(const std::string& config);
  // Median/p20/p80 of `reps` device-event-timed runs after `warmup`, inputs rotated beyond L2.
  Timing time(const std::string& config, int warmup, int reps);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Checks the GPU reference itself: every row of every head against the fp64 CPU reference.
AttentionCheck check_reference_gpu_against_cpu(const AttentionCase& c, int device = 0);



}  // namespace kgen
