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
  // d_o as a view with a zero stride along n (each (batch, head) one row, as torch's expand gives):
  // such a view has no tensor map, so the launch serves it with cp.async loads.
  bool expand_d_o = false;
};

// "deterministic workspace gq gk" style summary (cotangents only for the double backward).
std::string to_string(const BackwardBenchOptions& o, bool double_backward);

// The fp64 inputs of a backward check, contiguous (b, h, n, d): q, k, v, dO, and the double
// backward's cotangents (empty = absent, i.e. zero).
struct GradientInputs {
  std::vector<double> q, k, v, d_o, gq, gk, gv;
};

// The reference of a backward check over the (batch, kv head) groups it compares: per output
// (dq, dk, dv; or q_bar, k_bar, v_bar, do_bar), the values of the group's rows in (group, head,
// row, column) order: the query heads of each group for q-shaped outputs, its kv head for
// k-shaped ones.
struct GradientReference {
  std::string description;
  std::vector<std::pair<int, int>> groups;
  std::vector<std::vector<double>> values;
};

// The output names of the backward (dq, dk, dv) or double backward (q_bar, k_bar, v_bar, do_bar).
std::vector<std::string> attention_gradient_output_names(bool double_backward);

// The fp64 CPU reference of every output over `groups` (all groups when empty).
GradientReference attention_gradient_reference_cpu(const AttentionCase& c, bool double_backward,
                                                   const GradientInputs& in,
                                                   const std::vector<std::pair<int, int>>& groups = {});

// The comparison step of a backward check, without a device: each output (host copies in the
// case's layout and dtype, in attention_gradient_output_names order) against the reference, rows
// of head_dim, with the first-order bounds of the dtype or, for the double backward, the
// second-order ones.
HarnessCheck compare_attention_gradient_outputs(const AttentionCase& c, bool double_backward,
                                                const std::vector<HostTensor>& outputs, const GradientReference& ref);

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
class AttentionGradientBench : public HarnessBench {
 public:
  ~AttentionGradientBench() override;
  AttentionGradientBench(const AttentionGradientBench&) = delete;
  AttentionGradientBench& operator=(const AttentionGradientBench&) = delete;

  const AttentionCase& problem() const;
  const BackwardBenchOptions& options() const;
  bool double_backward() const;
  // Every output compared with the reference; deterministic mode runs twice and compares the bits.
  HarnessCheck check(const std::string& config) override;
  Timing time(const std::string& config, int warmup, int reps) override;

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
HarnessCheck check_attention_backward(const AttentionCase& c, const BackwardBenchOptions& o = {}, int device = 0);
HarnessCheck check_attention_double_backward(const AttentionCase& c, const BackwardBenchOptions& o = {},
                                              int device = 0);

// Checks the naive GPU reference of the (double) backward itself against the fp64 CPU
// reference, on every element of `groups` ((batch, kv head) pairs; all when empty).
HarnessCheck check_backward_reference_gpu_against_cpu(const AttentionCase& c, bool double_backward,
                                                       const BackwardBenchOptions& o = {},
                                                       const std::vector<std::pair<int, int>>& groups = {},
                                                       int device = 0);

}  // namespace kgen
