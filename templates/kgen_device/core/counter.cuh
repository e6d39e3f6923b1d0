// A work counter in global memory that the blocks of a grid draw indices from (relaxed, device
// scope: the value orders nothing else).
#pragma once

#include "kgen_device/core/vendor.cuh"

namespace kgen {

// *addr += x; returns the value before.
__device__ __forceinline__ unsigned fetch_add_relaxed(unsigned* addr, unsigned x) {
#if KGEN_AMD
  return __hip_atomic_fetch_add(addr, x, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT);
#else
  unsigned old;
  asm volatile("atom.relaxed.gpu.global.add.u32 %0, [%1], %2;" : "=r"(old) : "l"(addr), "r"(x) : "memory");
  return old;
#endif
}

}  // namespace kgen
