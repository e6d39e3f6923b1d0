// The description of one call of attention_fwd, attention_bwd or attention_double_bwd (what the
// tuner tunes and the checking layer checks) and their TuningProblems
// (runtime/ops/tuning_support.h has what every operator's share).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "kgen/types.hpp"
#include "generator/attention_forward.h"
#include "ops/buckets.h"
#include "ops/cases.h"
#include "tuning/autotune.h"

namespace kgen {

// One attention call (attention_fwd, attention_bwd, attention_double_bwd).
struct AttentionCase {
  DType dtype = DType::bf16;
  int batch = 1, heads_q = 1, heads_kv = 1, n_q = 1, n_k = 1, head_dim = 64;
  bool causal = false;
  Layout layout = Layout::bhnd;
  double scale = 0;
  std::string config;      // empty = what attention_forward would choose
  std::uint64_t seed = 1;  // inputs are fresh random normal values from this seed
};

// Rule for attention_fwd: nq, nk, g, bh, where nq and nk are n_q and n_k rounded UP to the next
// power of two (a power of two maps to itself: 4096 -> 4096, 4097 -> 8192, 1 -> 1), g =
// heads_q / heads_kv exactly (GQA group size, not rounded), and bh = batch * heads_q rounded up
// to a power of two. Values below 1 count as 1.
//
// Rule for attention_bwd and attention_double_bwd: the forward's (their variant keys carry
// dtype, head dim, causal, and for the backward deterministic mode).
ShapeBucket attention_bucket(const AttentionShape& shape);

// attention_fwd on `problem` (its config field is ignored); variant to_string(spec), bucket
// attention_bucket(shape), rate in TFLOPS.
std::unique_ptr<TuningProblem> attention_forward_tuning(const AttentionCase& problem);

// attention_bwd on `problem`, atomic-dQ or deterministic mode; variant
// attention_backward_variant_key, bucket attention_bucket, TFLOPS (2.5 × forward).
std::unique_ptr<TuningProblem> attention_backward_tuning(const AttentionCase& problem, bool deterministic);

// attention_double_bwd on `problem` with every cotangent present; variant
// double_backward_variant_key, bucket attention_bucket, TFLOPS (22 matmuls).
std::unique_ptr<TuningProblem> attention_double_backward_tuning(const AttentionCase& problem);

// The call a problem made here describes: nullptr for another operator's problem. What the
// checking layer's benches are built from.
const AttentionCase* attention_case_of(const TuningProblem& problem);
// Whether an attention_bwd problem tunes the deterministic mode.
bool deterministic_of(const TuningProblem& problem);

}  // namespace kgen
