// Scalar math shared by the templates (attention softmax, LRPE): infinities, the hardware
// approximations of exp2, log2, sin, cos and 1/x, integer min/max. A second vendor provides the
// same names within the errors stated below (HIP on CDNA: the v_exp_f32, v_log_f32, v_sin_f32,
// v_cos_f32 and v_rcp_f32 instructions through their compiler builtins).
#pragma once

namespace kgen {

constexpr float kLn2 = 0.693147180559945309f;

__device__ __forceinline__ float infinity_f32() { return __int_as_float(0x7f800000); }
__device__ __forceinline__ double infinity_f64() {
  return __longlong_as_double(0x7ff0000000000000LL);
}

// 2^x with the hardware approximation (rel. error ~2^-22); exp2(-inf) = +0.
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
// log2(x) with the hardware approximation; log2(0) = -inf.
__device__ __forceinline__ float log2_approx(float x) {
  float y;
  asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// sin/cos with the hardware approximation (max abs error 2^-20.5 on [−π, π]); 1/x (1 ulp).
__device__ __forceinline__ float sin_approx(float r) {
  float y;
  asm("sin.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(r));
  return y;
}
__device__ __forceinline__ float cos_approx(float r) {
  float y;
  asm("cos.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(r));
  return y;
}
__device__ __forceinline__ float rcp_approx(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ int imin(int a, int b) { return a < b ? a : b; }
__device__ __forceinline__ int imax(int a, int b) { return a > b ? a : b; }

}  // namespace kgen
