// The TuningProblems of lrpe_cosine and md_lrpe_cosine (runtime/ops/tuning_support.h has what
// every operator's share).
#pragma once

#include <memory>

#include "ops/cases.h"
#include "tuning/autotune.h"

namespace kgen {

// lrpe_cosine or md_lrpe_cosine (problem.op) on `problem`; variant lrpe_variant_key(spec,
// problem.cache), bucket lrpe_bucket, rate in GB/s of the bytes a call must move.
std::unique_ptr<TuningProblem> lrpe_tuning(const LrpeCase& problem);

// The call a problem made here describes: nullptr for another operator's problem.
const LrpeCase* lrpe_case_of(const TuningProblem& problem);

}  // namespace kgen
