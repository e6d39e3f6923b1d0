// The correctness metrics of kgen (docs/attention.md §5): rel_l2, cosine, the worst row's own
// error, max_abs, count of elements outside atol + rtol·|ref|, non-finite outputs, and a pass
// verdict.
#pragma once

#include <cstddef>
#include <span>
#include <string>

#include "kgen/types.hpp"

namespace kgen {

struct Tolerance {
  double rel_l2;  // bound on ‖out − ref‖ / ‖ref‖
  double atol, rtol;
};

// The bounds for outputs computed from inputs of `dtype` (fp32 plain math: 1e-5 ... 16-bit: 1e-2).
Tolerance tolerance_for(DType dtype);

// The bounds for second-order gradients (attention_double_bwd): 16-bit kernels round P, dS, S̄
// and H to 16 bits to feed the tensor cores, and S̄'s rows sum to zero, so K̄ and Q̄ cancel:
// rel_l2 2e-2 for fp16/bf16 (cos > 0.999 still required); fp32 keeps tolerance_for's 1e-5.
Tolerance second_order_tolerance_for(DType dtype);

// The row rule (docs/attention.md §5.2): no row's own error may exceed kRowErrorMultiple times
// the rel_l2 bound. A row's error is ‖out_r − ref_r‖ / max(‖ref_r‖, kRowNormFloor · rms), where
// rms = ‖ref‖ / √rows is the root-mean-square row norm of the whole output, so that rows whose
// exact value is tiny (cancellation, a one-key softmax) are judged against the output's scale.
// Rows of one value (lse) are held to the element rule instead: |out − ref| ≤ atol + rtol·|ref|.
inline constexpr double kRowErrorMultiple = 20;
inline constexpr double kRowNormFloor = 0.5;

struct Comparison {
  // The first rule an output failed (none on pass).
  enum class Failure { none, size, non_finite, inf_mismatch, zero_output, rel_l2, row, cosine };
  double rel_l2 = 0, cosine = 0, max_abs = 0, out_norm = 0, ref_norm = 0;
  std::size_t outside_tolerance = 0, non_finite = 0, count = 0;
  // Rows of `row_length` consecutive elements: how many, the one with the largest own error
  // (index among the compared rows), that error and the bound it is held to.
  std::size_t rows = 0, worst_row = 0;
  double worst_row_error = 0, row_bound = 0;
  bool pass = false;
  Failure failed = Failure::none;
  std::string why;  // the first failed rule, empty on pass
};

// Compares `out` with `ref`, both made of rows of `row_length` consecutive elements (the last
// dim of the output; 1 for a per-row statistic such as LSE). Elements where ref is ±inf (e.g.
// LSE of fully masked rows) must be equal in `out` and are left out of the norms.
Comparison compare(std::span<const double> out, std::span<const double> ref, const Tolerance& tol,
                   std::size_t row_length);

// "rel_l2 1.2e-03 cos 0.999998 worst_row 2.1e-03 max_abs 3.1e-03 outside_tol 0/4096" style one-liner.
std::string to_string(const Comparison& c);

}  // namespace kgen
