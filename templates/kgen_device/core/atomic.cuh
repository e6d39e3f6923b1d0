// Float additions into global memory by many threads at once (relaxed, device scope), whose
// result nobody reads. A second vendor provides red_add and red_add2 as atomic adds with the
// result discarded (HIP: atomicAdd on float, or unsafeAtomicAdd where the memory allows it).
#pragma once

namespace kgen {

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

}  // namespace kgen
