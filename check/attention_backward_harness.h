// Checking and timing the attention backward and double backward on a GPU, the counterpart of
// attention_harness.h's AttentionForwardBench (docs/attention.md §5): fresh random normal inputs
// (q, k, v, dO and the cotangents), o and lse from kgen's forward, every output compared with
// an fp64 reference after a run on NaN-poisoned outputs and workspace, before any timing.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "check/attention_harness.h"

namespace kgen {

struct BackwardBenchOptions {
  // AttentionBackwardOptions::deterministic. check() then runs twice (outputs re-poisoned) and
  // also requires bitwise-equal outputs.
  bool deterministic = false;
  // true: the bench passes a workspace of attention_(double_)backward_workspace_bytes bytes,
  // NaN-poisoned before each checked run; false: a null workspace (kgen allocates its own).
  bool external_workspace = true;
  // Double backward only: which cotangents gq, gk, gv are present (absent = null = zero).
  bool gq = true, gk = true, gv = true;
};

// "deterministic workspace gq gk" style summary (cotangents only for the double backward).
std::string to_string(const BackwardBenchOptions& o, bool double_backward);

// The verdict of one checked run: one comparison per output, in the order of `names`
// (dq, dk, dv; or q_bar, k_bar, v_bar, do_bar).
struct GradientCheck {
  std::string config;     // the config that ran ("" = kgen's default choice)
  std::string reference;  // which reference, over which rows
  std::vector<std::string> names;
  std::vector<Comparison> outputs;
  bool determinism_checked = false;  // ran twice (deterministic mode)
  bool bitwise_equal = true;         // and both runs wrote the same bits
  bool pass = false;                 // every output passes (and bitwise_equal)
  // The comparison of output `name`; throws std::out_of_range for an unknown name.
  const Comparison& get(const std::string& name) const;
};

// One line per output ("  dq: rel_l2 ... "), plus the determinism verdict when checked.
std::string to_string(const GradientCheck& c);

// 2.5 × attention_forward_flops (docs/attention.md §6).
double attention_backward_flops(const AttentionCase& c);

// The double backward's n×n×d matmuls per (query tile, key tile) in kgen's kernel plan (5 for r
// and c, 9 for Q̄ and dŌ, 8 for K̄ and V̄); a parameter of the FLOP count below, which must be
// printed with any TFLOPS.
inline constexpr int kDoubleBackwardMatmuls = 22;
// matmuls · 2·b·h_q·n_q·n_k·d, halved for causal.
double attention_double_backward_flops(const AttentionCase& c, int matmuls = kDoubleBackwardMatmuls);
// "double backward FLOPs = 22 n×n×d matmuls × 2·b·h_q·n_q·n_k·d (11× forward), halved for causal".
std::string attention_double_backward_flops_convention(int matmuls = kDoubleBackwardMatmuls);

// One problem's inputs (q, k, v, dO, cotangents; o and lse from kgen's forward) and reference,
// computed once, against which any number of configs are checked and timed. References: the
// fp64 CPU reference on every element for small problems; for large ones the naive fp64 GPU
// reference (itself checked against the CPU in the GPU tests) on every element of all
// (batch, kv head) groups, or of evenly spread groups when even that would be too slow.
class AttentionGradientBench {
 public:
  ~AttentionGradientBench();
  AttentionGradientBench(const AttentionGradientBench&) = delete;
  AttentionGradientBench& operator=(const AttentionGradientBench&) = delete;

  const AttentionCase& problem() const;
  const BackwardBenchOptions& options() const;
  bool double_backward() const;
  // Runs `config` ("" = the default choice) on NaN-poisoned outputs (and workspace) and compares
  // every output with the reference; deterministic mode runs twice and compares the bits.
  GradientCheck check(const std::string& config);
  // Median/p20/p80 of `reps` device-event-timed runs after `warmup`, inputs rotated beyond L2.
  // Does not check: callers check() the config first (docs/attention.md §5 rule 1).
  Timing time(const std::string& config, int warmup, int reps);

 protected:
  AttentionGradientBench(const AttentionCase& c, const BackwardBenchOptions& o, bool double_backward, int device);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// dq, dk, dv of attention_backward.
class AttentionBackwardBench : public AttentionGradientBench {
 public:
  explicit AttentionBackwardBench(const AttentionCase& c, const BackwardBenchOptions& o = {}, int device = 0)
      : AttentionGradientBench(c, o, false, device) {}
};

// q_bar, k_bar, v_bar, do_bar of attention_double_backward.
class AttentionDoubleBackwardBench : public AttentionGradientBench {
 public:
  explicit AttentionDoubleBackwardBench(const AttentionCase& c, const BackwardBenchOptions& o = {}, int device = 0)
      : AttentionGradientBench(c, o, true, device) {}
};

// One checked run of c.config on fresh inputs. Throws Error(no_device) without a GPU.
GradientCheck check_attention_backward(const AttentionCase& c, const BackwardBenchOptions& o = {}, int device = 0);
GradientCheck check_attention_double_backward(const AttentionCase& c, const BackwardBenchOptions& o = {},
                                              int device = 0);

// Checks the naive GPU reference of the (double) backward itself against the fp64 CPU
// reference, on every element of `groups` ((batch, kv head) pairs; all when empty).
GradientCheck check_backward_reference_gpu_against_cpu(const AttentionCase& c, bool double_backward,
                                                       const BackwardBenchOptions& o = {},
                                                       const std::vector<std::pair<int, int>>& groups = {},
                                                       int device = 0);

}  // namespace kgen
