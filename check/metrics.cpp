#include "check/metrics.h"

#include <cmath>
#include <cstdio>

namespace kgen {

Tolerance tolerance_for(DType dtype) {
  switch (dtype) {
    case DType::f32: return {1e-5, 1e-5, 1e-5};
    case DType::f16: return {1e-2, 1e-2, 1e-2};
    case DType::bf16: return {1e-2, 2e-2, 2e-2};
  }
  return {1e-2, 1e-2, 1e-2};
}

Tolerance second_order_tolerance_for(DType dtype) {
  Tolerance t = tolerance_for(dtype);
  if (dtype != DType::f32) t.rel_l2 = 2e-2;
  return t;
}

Comparison compare(std::span<const double> out, std::span<const double> ref, const Tolerance& tol) {
  Comparison c;
  c.count = ref.size();
  if (out.size() != ref.size()) {
    c.why = "size mismatch";
    return c;
  }
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
  if (c.non_finite) c.why = std::to_string(c.non_finite) + " NaN/Inf outputs (unwritten or overflowed)";
  else if (inf_mismatch) c.why = std::to_string(inf_mismatch) + " elements differ where the reference is infinite";
  else if (c.ref_norm > 0 && c.out_norm == 0) c.why = "output is all zero where the reference is not";
  else if (!(c.rel_l2 <= tol.rel_l2)) c.why = "rel_l2 above the bound";
  else if (c.ref_norm > 0 && !(c.cosine > 0.999)) c.why = "cosine below 0.999";
  c.pass = c.why.empty();
  return c;
}

std::string to_string(const Comparison& c) {
  char buf[200];
  std::snprintf(buf, sizeof buf, "rel_l2 %.2e cos %.6f max_abs %.2e outside_tol %zu/%zu%s%s", c.rel_l2, c.cosine,
                c.max_abs, c.outside_tolerance, c.count, c.pass ? "" : " FAIL: ", c.why.c_str());
  return buf;
}

}  // namespace kgen
