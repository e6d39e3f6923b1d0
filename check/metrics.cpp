#include "check/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

namespace kgen {

Tolerance tolerance_for(DType dtype) {
  switch (dtype) {
    case DType::f32: return {1e-5, 1e-5, 1e-5};
    case DType::f16: return {1e-2, 1e-2, 1e-2};
    case DType::bf16: return {1e-2, 2e-2, 2e-2};
    case DType::i32: break;
    case DType::f8e4m3: break;
  }
  return {1e-2, 1e-2, 1e-2};
}

Tolerance second_order_tolerance_for(DType dtype) {
  Tolerance t = tolerance_for(dtype);
  if (dtype != DType::f32) t.rel_l2 = 2e-2;
  return t;
}

namespace {

std::string scientific(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2e", v);
  return buf;
}

}  // namespace

Comparison compare(std::span<const double> out, std::span<const double> ref, const Tolerance& tol,
                   std::size_t row_length) {
  Comparison c;
  c.count = ref.size();
  auto fail = [&](Comparison::Failure f, std::string why) {
    c.failed = f;
    c.why = std::move(why);
  };
  if (out.size() != ref.size() || row_length == 0 || ref.size() % row_length != 0) {
    fail(Comparison::Failure::size, out.size() != ref.size() ? "size mismatch"
                                                              : "size is no multiple of the row length " +
                                                                    std::to_string(row_length));
    return c;
  }
  c.rows = ref.size() / row_length;
  // Per row: squared norms of the difference and of the reference, over its finite elements.
  std::vector<double> row_diff2(c.rows, 0.0), row_ref2(c.rows, 0.0);
  double diff2 = 0, ref2 = 0, out2 = 0, dot = 0;
  std::size_t inf_mismatch = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double r = ref[i], o = out[i];
    if (std::isinf(r)) {
      if (o != r) ++inf_mismatch;
      continue;
    }
    if (!std::isfinite(o)) {
      ++c.non_finite;
      continue;
    }
    const double d = o - r;
    row_diff2[i / row_length] += d * d;
    row_ref2[i / row_length] += r * r;
    diff2 += d * d;
    ref2 += r * r;
    out2 += o * o;
    dot += o * r;
    c.max_abs = std::max(c.max_abs, std::abs(d));
    if (std::abs(d) > tol.atol + tol.rtol * std::abs(r)) ++c.outside_tolerance;
  }
  c.ref_norm = std::sqrt(ref2);
  c.out_norm = std::sqrt(out2);
  c.rel_l2 = c.ref_norm > 0 ? std::sqrt(diff2) / c.ref_norm : std::sqrt(diff2);
  c.cosine = (c.ref_norm > 0 && c.out_norm > 0) ? dot / (c.ref_norm * c.out_norm) : (c.ref_norm == c.out_norm ? 1.0 : 0.0);
  // The row rule needs a scale: an exactly-zero reference has none (rel_l2 is absolute there).
  c.row_bound = kRowErrorMultiple * tol.rel_l2;
  if (row_length == 1) {
    // Rows of one value (lse) have no norm of their own to err against: each value must lie
    // within atol + rtol·|ref|, and a row's error is its share of that allowance.
    c.row_bound = 1;
    for (std::size_t r = 0; r < c.rows; ++r) {
      const double e = std::sqrt(row_diff2[r]) / (tol.atol + tol.rtol * std::sqrt(row_ref2[r]));
      if (e > c.worst_row_error) c.worst_row_error = e, c.worst_row = r;
    }
  } else if (c.ref_norm > 0) {
    const double floor = kRowNormFloor * c.ref_norm / std::sqrt(double(c.rows));
    for (std::size_t r = 0; r < c.rows; ++r) {
      const double e = std::sqrt(row_diff2[r]) / std::max(std::sqrt(row_ref2[r]), floor);
      if (e > c.worst_row_error) c.worst_row_error = e, c.worst_row = r;
    }
  }
  using F = Comparison::Failure;
  if (c.non_finite) fail(F::non_finite, std::to_string(c.non_finite) + " NaN/Inf outputs (unwritten or overflowed)");
  else if (inf_mismatch) fail(F::inf_mismatch, std::to_string(inf_mismatch) + " elements differ where the reference is infinite");
  else if (c.ref_norm > 0 && c.out_norm == 0) fail(F::zero_output, "output is all zero where the reference is not");
  else if (!(c.rel_l2 <= tol.rel_l2)) fail(F::rel_l2, "rel_l2 above the bound");
  else if (!(c.worst_row_error <= c.row_bound))
    fail(F::row, "row " + std::to_string(c.worst_row) + " of " + std::to_string(c.rows) + ": its error " +
                     scientific(c.worst_row_error) + " is above " + scientific(c.row_bound) +
                     (row_length == 1 ? std::string(" (of atol + rtol·|ref|)")
                                      : " (" + std::to_string(int(kRowErrorMultiple)) + " × the rel_l2 bound)"));
  else if (c.ref_norm > 0 && !(c.cosine > 0.999)) fail(F::cosine, "cosine below 0.999");
  c.pass = c.failed == F::none;
  return c;
}

std::string to_string(const Comparison& c) {
  char buf[200];
  std::snprintf(buf, sizeof buf, "rel_l2 %.2e cos %.6f worst_row %.2e max_abs %.2e outside_tol %zu/%zu%s", c.rel_l2,
                c.cosine, c.worst_row_error, c.max_abs, c.outside_tolerance, c.count, c.pass ? "" : " FAIL: ");
  return buf + c.why;
}

}  // namespace kgen
