// Float math for the code that kgen generates from attention-variant expressions
// (generator/variant.h): exp, log, tanh, sigmoid, sqrt, abs, min and max of a score
// modification, built on math.cuh's hardware approximations so that one body serves NVIDIA and
// AMD. Relative error about 1e-6 or better over the float range (ftz: subnormal results are 0);
// infinities give the limits (tanh(±inf) = ±1, sigmoid(−inf) = 0), never NaN. Also the interval
// arithmetic of a variant's tile() (expr_interval.h) and the integer abs.
#pragma once

#include "kgen_device/core/expr_interval.h"
#include "kgen_device/core/math.cuh"

namespace kgen {

constexpr float kExprLog2e = 1.44269504088896341f;
constexpr float kExprLn2Hi = 0.693145751953125f;       // ln 2 to 16 bits: n · kExprLn2Hi is exact
constexpr float kExprLn2Lo = 1.42860682030941723e-6f;  // ln 2 − kExprLn2Hi

__device__ __forceinline__ float expr_min(float a, float b) { return a < b ? a : b; }
__device__ __forceinline__ float expr_max(float a, float b) { return a > b ? a : b; }
__device__ __forceinline__ float expr_abs(float x) { return x < 0.0f ? -x : x; }
__device__ __forceinline__ int expr_iabs(int x) { return x < 0 ? -x : x; }

// e^x = 2^n · e^r with n = ⌊x·log2 e⌋ and r = x − n·ln 2 ∈ [0, ln 2) reduced in two steps: a
// plain exp2(x·log2 e) loses |x|·2^-24 relative to the rounding of the product (5e-6 at x = 80).
// The clamp keeps n an exact small integer (e^±104 is already 0 or inf in float); 2^n by the
// hardware is exact for an integer n, and a floor rather than a rounding keeps 2^n finite up
// to e^88.7.
__device__ __forceinline__ float expr_exp(float x) {
  if (x != x) return x;
  const float xc = expr_min(expr_max(x, -104.0f), 104.0f);
  const float t = xc * kExprLog2e;
  int n = static_cast<int>(t);
  if (static_cast<float>(n) > t) n -= 1;
  const float nf = static_cast<float>(n);
  const float r = (xc - nf * kExprLn2Hi) - nf * kExprLn2Lo;
  return exp2_approx(nf) * exp2_approx(r * kExprLog2e);
}

// log x = log2(x)·ln 2, except near 1, where log2's absolute error would be a large relative
// one: there log x = 2·atanh(u), u = (x − 1)/(x + 1), |u| < 0.12, by its odd series.
__device__ __forceinline__ float expr_log(float x) {
  if (x > 0.78f && x < 1.28f) {
    const float u = (x - 1.0f) * rcp_approx(x + 1.0f), u2 = u * u;
    const float p = 1.0f / 3 + u2 * (1.0f / 5 + u2 * (1.0f / 7 + u2 * (1.0f / 9 + u2 * (1.0f / 11))));
    return 2.0f * (u + u * u2 * p);
  }
  return log2_approx(x) * kLn2;
}

// tanh x: for |x| < 0.625 the odd polynomial x + x³·P(x²) (least squares over the range,
// 2e-8 relative); beyond, 1 − 2/(e^{2|x|} + 1) with the sign, which is exactly ±1 once e^{2|x|}
// is inf.
__device__ __forceinline__ float expr_tanh(float x) {
  const float ax = expr_abs(x);
  if (ax < 0.625f) {
    const float u = x * x;
    const float p = -0.333333291f +
                    u * (0.133327823f + u * (-0.0538525003f + u * (0.0210036509f + u * -0.00610495905f)));
    return x + x * u * p;
  }
  const float t = 1.0f - 2.0f * rcp_approx(expr_exp(2.0f * ax) + 1.0f);
  return x < 0.0f ? -t : t;
}

// 1/(1 + e^{−x}): 0 at −inf (1/inf), 1 at +inf.
__device__ __forceinline__ float expr_sigmoid(float x) { return rcp_approx(1.0f + expr_exp(-x)); }

// √x: 2^{log2(x)/2}, then one Newton step y + (x/y − y)/2 for the rounding of log2 x at large x.
// 0, inf, negative x and NaN keep the first estimate (0, inf, NaN, NaN).
__device__ __forceinline__ float expr_sqrt(float x) {
  const float y = exp2_approx(0.5f * log2_approx(x));
  if (!(x > 0.0f && x < infinity_f32())) return y;
  return 0.5f * (y + x * rcp_approx(y));
}

}  // namespace kgen
