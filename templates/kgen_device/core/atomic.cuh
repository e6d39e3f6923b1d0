// Float additions into global memory by many threads at once (relaxed, device scope), whose
// result nobody reads. On AMD: relaxed agent-scope atomic adds with the result discarded.
#pragma once

#include "kgen_device/core/vendor.cuh"

namespace kgen {

#if KGEN_AMD
// *addr += x.
__device__ __forceinline__ void red_add(float* addr, float x) {
  __hip_atomic_fetch_add(addr, x, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT);
}
// addr[0] += x, addr[1] += y.
__device__ __forceinline__ void red_add2(float* addr, float x, float y) {
  red_add(addr, x);
  red_add(addr + 1, y);
}
#else

// *addr += x.
__device__ __forceinline__ void red_add(float* addr, float x) {
  asm volatile("red.global.add.f32 [%0], %1;" ::"l"(addr), "f"(x) : "memory");
}

// addr[0] += x, addr[1] += y (addr 8-byte aligned; one instruction from sm_90 on).
__device__ __forceinline__ void red_add2(float* addr, float x, float y) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("red.global.add.v2.f32 [%0], {%1, %2};" ::"l"(addr), "f"(x), "f"(y) : "memory");
#else
  red_add(addr, x);
  red_add(addr + 1, y);
#endif
}
#endif  // KGEN_AMD

}  // namespace kgen
