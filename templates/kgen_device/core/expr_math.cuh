// Float math for the code that kgen generates from attention-variant expressions
// (generator/variant.h): exp, log, tanh, sigmoid, sqrt, abs, min and max of a score
// modification, built on math.cuh's hardware approximations so that one body serves NVIDIA and
// AMD. Relative error about 1e-6 or better over the float range (tanh: absolute, below; ftz:
// subnormal results are 0);
// infinities give the limits (tanh(±inf) = ±1, sigmoid(−inf) = 0), never NaN. Also the interval
// arithmetic of a variant's tile() (expr_interval.h) and the integer abs.
#pragma once

#include "kgen_device/core/expr_interval.h"
#include "kgen_device/core/math.cuh"

namespace kgen {

// A read of a variant's input tensor, which no kernel writes while it runs: on NVIDIA a
// non-coherent load written as a pure instruction, so the compiler merges equal reads and
// hoists reads that do not change over the key loop.
#if KGEN_AMD
__device__ __forceinline__ float expr_load(const float* p) { return *p; }
__device__ __forceinline__ int expr_load(const int* p) { return *p; }
#else
__device__ __forceinline__ float expr_load(const float* p) {
  float y;
  asm("ld.global.nc.f32 %0, [%1];" : "=f"(y) : "l"(p));
  return y;
}
__device__ __forceinline__ int expr_load(const int* p) {
  int y;
  asm("ld.global.nc.s32 %0, [%1];" : "=r"(y) : "l"(p));
  return y;
}
#endif

constexpr float kExprLog2e = 1.44269504088896341f;
constexpr float kExprLn2Hi = 0.693145751953125f;       // ln 2 to 16 bits: n · kExprLn2Hi is exact
constexpr float kExprLn2Lo = 1.42860682030941723e-6f;  // ln 2 − kExprLn2Hi

// x / y by the hardware reciprocal (2 ulp): a pure instruction, so 1/y of a scalar is hoisted.
__device__ __forceinline__ float expr_div(float x, float y) { return x * rcp_approx(y); }
__device__ __forceinline__ float expr_min(float a, float b) { return a < b ? a : b; }
__device__ __forceinline__ float expr_max(float a, float b) { return a > b ? a : b; }
// |x| and x's sign on y: bit operations (a free operand modifier for |x| on NVIDIA), not a
// compare and select.
#if KGEN_AMD
__device__ __forceinline__ float expr_abs(float x) { return __builtin_fabsf(x); }
__device__ __forceinline__ float expr_copysign(float y, float x) { return __builtin_copysignf(y, x); }
#else
__device__ __forceinline__ float expr_abs(float x) { return fabsf(x); }
__device__ __forceinline__ float expr_copysign(float y, float x) { return copysignf(y, x); }
#endif
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

// tanh x = sign(x)·(1 − e)/(1 + e), e = 2^{−2|x|·log2 e} ∈ (0, 1]: one exp2 and one reciprocal,
// no branch, since a softcap runs it on every score. Its error is absolute, about 3e-7 (relative
// near 0, where 1 − e cancels, it grows to 3e-7/|x|): a softcap c·tanh(s/c) moves a logit by at
// most 3e-7·c, far below what the softmax of 16-bit inputs resolves. ±1 at ±inf, never NaN.
__device__ __forceinline__ float expr_tanh(float x) {
  const float e = exp2_approx(-2.0f * kExprLog2e * expr_abs(x));
  return expr_copysign((1.0f - e) * rcp_approx(1.0f + e), x);
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
