// The TuningProblem of each registered operator (runtime/tuning/autotune.h; checking and timing
// come from the checking layer through runtime/tuning/bench_registry.h): what `kgen tune --op`,
// KGEN_AUTOTUNE and the launch paths' database lookups share, so the variant key and bucket a
// launch looks up are the ones the tuner recorded.
#pragma once

#include <memory>

#include "ops/cases.h"
#include "tuning/autotune.h"

namespace kgen {

// attention_fwd on `problem` (its config field is ignored); variant to_string(spec), bucket
// attention_bucket(shape), rate in TFLOPS.
std::unique_ptr<TuningProblem> attention_forward_tuning(const AttentionCase& problem);

// attention_bwd on `problem`, atomic-dQ or deterministic mode; variant
// attention_backward_variant_key, bucket attention_bucket, TFLOPS (2.5 × forward).
std::unique_ptr<TuningProblem> attention_backward_tuning(const AttentionCase& problem, bool deterministic);

// attention_double_bwd on `problem` with every cotangent present; variant
// double_backward_variant_key, bucket attention_bucket, TFLOPS (22 matmuls).
std::unique_ptr<TuningProblem> attention_double_backward_tuning(const AttentionCase& problem);

// lrpe_cosine or md_lrpe_cosine (problem.op) on `problem`; variant lrpe_variant_key(spec,
// problem.cache), bucket lrpe_bucket, rate in GB/s of the bytes a call must move.
std::unique_ptr<TuningProblem> lrpe_tuning(const LrpeCase& problem);

// The call a problem made here describes: nullptr for another kind of problem. What the checking
// layer's benches are built from.
const AttentionCase* attention_case_of(const TuningProblem& problem);
// Whether an attention_bwd problem tunes the deterministic mode.
bool deterministic_of(const TuningProblem& problem);
const LrpeCase* lrpe_case_of(const TuningProblem& problem);

}  // namespace kgen
