// Scalar math shared by the templates (attention softmax, LRPE): infinities, the hardware
// approximations of exp2, log2, sin, cos and 1/x, integer min/max, within the errors stated
// below. On AMD (CDNA) they are the v_exp_f32, v_log_f32, v_sin_f32, v_cos_f32 and v_rcp_f32
// instructions through their compiler builtins (hiprtc 5.2's LLVM 15 lacks
// __builtin_amdgcn_exp2f/logf; there the generic builtins lower to the same instructions).
#pragma once

#include "kgen_device/core/vendor.cuh"

namespace kgen {

constexpr float kLn2 = 0.693147180559945309f;
constexpr float kLog2e = 1.44269504088896341f;

#if KGEN_AMD
// Bit patterns: NVRTC lacks __builtin_huge_valf, and the two vendors share this spelling.
__device__ __forceinline__ float infinity_f32() { return __builtin_bit_cast(float, 0x7f800000); }
__device__ __forceinline__ double infinity_f64() { return __builtin_bit_cast(double, 0x7ff0000000000000LL); }

// 2^x (v_exp_f32: 1 ulp); exp2(-inf) = +0.
__device__ __forceinline__ float exp2_approx(float x) {
#if __has_builtin(__builtin_amdgcn_exp2f)
  return __builtin_amdgcn_exp2f(x);
#else
  return __builtin_exp2f(x);
#endif
}
// log2(x) (v_log_f32); log2(0) = -inf.
__device__ __forceinline__ float log2_approx(float x) {
#if __has_builtin(__builtin_amdgcn_logf)
  return __builtin_amdgcn_logf(x);
#else
  return __builtin_log2f(x);
#endif
}

// v_sin_f32 / v_cos_f32 take their argument in turns (r / 2π); 1/x by v_rcp_f32 (1 ulp).
constexpr float kInv2Pi = 0.159154943091895336f;
__device__ __forceinline__ float sin_approx(float r) { return __builtin_amdgcn_sinf(r * kInv2Pi); }
__device__ __forceinline__ float cos_approx(float r) { return __builtin_amdgcn_cosf(r * kInv2Pi); }
__device__ __forceinline__ float rcp_approx(float x) { return __builtin_amdgcn_rcpf(x); }
#else

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
#endif  // KGEN_AMD

// c ? a : b for two elements of a register array. AMD reads both first: a select between two
// elements otherwise becomes a load through a selected address under hiprtc 5.2 (LLVM 15), which
// keeps the whole array in scratch memory (the simt forward's reduce-scatter, 144 B per lane).
#if KGEN_AMD
__device__ __forceinline__ float pick(bool c, float a, float b) { return c ? a : b; }
#else
__device__ __forceinline__ float pick(bool c, const float& a, const float& b) { return c ? a : b; }
#endif

__device__ __forceinline__ int imin(int a, int b) { return a < b ? a : b; }
__device__ __forceinline__ int imax(int a, int b) { return a > b ? a : b; }

}  // namespace kgen
