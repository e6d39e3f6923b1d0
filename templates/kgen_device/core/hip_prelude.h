// What hiprtc declares before every program, for clang's deviceless HIP compile (`-nogpuinc`
// declares nothing, `-nogpulib` links no device library): the CUDA-style keywords, the thread and
// block indices, __syncthreads, and the few CUDA math names the portable templates call
// (__launch_bounds__ is kgen's own, in kgen_device/core/vendor.cuh, for both AMD compilers). kgen's
// clang backend passes it with `-include`; hiprtc never sees it. Every body is a compiler
// builtin, so nothing needs ROCm's device libraries.
#pragma once

#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __host__ __attribute__((host))
#define __shared__ __attribute__((shared))
#define __constant__ __attribute__((constant))
#define __forceinline__ inline __attribute__((always_inline))

struct kgen_hip_uint3 {
  unsigned x, y, z;
};
#define threadIdx \
  (kgen_hip_uint3{__builtin_amdgcn_workitem_id_x(), __builtin_amdgcn_workitem_id_y(), __builtin_amdgcn_workitem_id_z()})
#define blockIdx \
  (kgen_hip_uint3{__builtin_amdgcn_workgroup_id_x(), __builtin_amdgcn_workgroup_id_y(), __builtin_amdgcn_workgroup_id_z()})
#define blockDim                                                                                     \
  (kgen_hip_uint3{__builtin_amdgcn_workgroup_size_x(), __builtin_amdgcn_workgroup_size_y(), \
                  __builtin_amdgcn_workgroup_size_z()})
// HIP launches whole blocks, so the grid's work-items are a multiple of the block's.
#define gridDim                                                                       \
  (kgen_hip_uint3{__builtin_amdgcn_grid_size_x() / __builtin_amdgcn_workgroup_size_x(), \
                  __builtin_amdgcn_grid_size_y() / __builtin_amdgcn_workgroup_size_y(), \
                  __builtin_amdgcn_grid_size_z() / __builtin_amdgcn_workgroup_size_z()})

__device__ __forceinline__ void __syncthreads() {
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
  __builtin_amdgcn_s_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
}

__device__ __forceinline__ float __int_as_float(int x) { return __builtin_bit_cast(float, x); }
__device__ __forceinline__ float __uint_as_float(unsigned x) { return __builtin_bit_cast(float, x); }
__device__ __forceinline__ int __float_as_int(float x) { return __builtin_bit_cast(int, x); }
__device__ __forceinline__ unsigned __float_as_uint(float x) { return __builtin_bit_cast(unsigned, x); }
__device__ __forceinline__ double __longlong_as_double(long long x) { return __builtin_bit_cast(double, x); }
__device__ __forceinline__ float fmaf(float a, float b, float c) { return __builtin_fmaf(a, b, c); }
__device__ __forceinline__ float fmaxf(float a, float b) { return __builtin_fmaxf(a, b); }
__device__ __forceinline__ float fminf(float a, float b) { return __builtin_fminf(a, b); }
// Correctly rounded, never fused with a neighbouring operation (the LRPE angle split relies on it).
__device__ __forceinline__ float __fmaf_rn(float a, float b, float c) { return __builtin_fmaf(a, b, c); }
__device__ __forceinline__ float __fmul_rn(float a, float b) {
#pragma clang fp contract(off)
  return a * b;
}
__device__ __forceinline__ float __fadd_rn(float a, float b) {
#pragma clang fp contract(off)
  return a + b;
}
