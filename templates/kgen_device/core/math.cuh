// Scalar math and warp reductions shared by the templates (attention softmax, LRPE).
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

// Reductions over the 4 lanes of a quad (lanes 4g .. 4g+3), as held by mma accumulators.
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// Reductions over a full warp; every lane gets the result.
__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
  for (int level = 0; level < 5; ++level) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 16 >> level));
  return x;
}
__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int level = 0; level < 5; ++level) x += __shfl_xor_sync(0xffffffffu, x, 16 >> level);
  return x;
}

}  // namespace kgen
