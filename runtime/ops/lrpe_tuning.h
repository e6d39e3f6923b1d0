// The description of one call of lrpe_cosine or md_lrpe_cosine (what the tuner tunes and the
// checking layer checks) and their TuningProblems (runtime/ops/tuning_support.h has what every
// operator's share).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "generator/lrpe.h"
#include "kgen/types.hpp"
#include "ops/buckets.h"
#include "ops/cases.h"
#include "tuning/autotune.h"

namespace kgen {

// One lrpe_cosine or md_lrpe_cosine call.
struct LrpeCase {
  LrpeOp op = LrpeOp::cosine;
  LrpeDirection direction = LrpeDirection::forward;
  DType dtype = DType::bf16;
  LrpeAct act = LrpeAct::none;
  int batch = 1, heads = 1, n = 1, d = 64;
  Layout layout = Layout::bhnd;
  bool three_dim = false;        // heads == 1 passed as (batch, n, d) tensors
  int theta_kind = 0;            // 0: (heads, width), 1: (heads, 1), 2: (1, width)
  std::int64_t offset = 0;       // lrpe_cosine
  std::vector<int> grid;         // md: n_1..n_m (n = extra + Π grid)
  int extra = 0;                 // md: l
  int e = 0;                     // md: frequencies per dim; 0 = ceil(d / m)
  bool cache = false;            // md: pass an angle buffer (the forward writes it, the backward reads it)
  double x_scale = 1;            // x ~ N(0, x_scale²): large values take softmax's shifted paths
  std::string config;            // "" = what the API would choose
  std::uint64_t seed = 1;
};

// Rule for lrpe_cosine and md_lrpe_cosine: n, bh, d, and for md also m, where n is rounded up
// to a power of two (as above), bh = batch * heads rounded up to a power of two, d = the head
// dim exactly and m = the md grid's number of dims (1, 2 or 3; 0 leaves m out). Offset, grid
// sizes, extra tokens and theta's broadcast do not enter (run-time parameters of the same cost);
// op, direction, dtype, act and the md angle cache are in the variant key.
ShapeBucket lrpe_bucket(const LrpeShape& shape, int md_dims = 0);

// lrpe_cosine or md_lrpe_cosine (problem.op) on `problem`; variant lrpe_variant_key(spec,
// problem.cache), bucket lrpe_bucket, rate in GB/s of the bytes a call must move.
std::unique_ptr<TuningProblem> lrpe_tuning(const LrpeCase& problem);

// The call a problem made here describes: nullptr for another operator's problem.
const LrpeCase* lrpe_case_of(const TuningProblem& problem);

}  // namespace kgen
