// Control over where ptxas places an instruction within the kernels' straight-line code.
// NVIDIA only, as wgmma is: the kernels that need it are NVIDIA kernels.
#pragma once

#include "kgen_device/core/types.cuh"

namespace kgen {

// ptxas moves wgmma.wait_group up to the top of its basic block, ahead of arithmetic it does not
// depend on, so a wait placed after work meant to run under the wgmma still in flight would come
// first. A loop on x that never runs (no arithmetic result has the all-ones bit pattern) ends the
// block, so everything x depends on issues before the wait that follows.
__device__ __forceinline__ void end_block_after(float x) {
  while (__float_as_uint(x) == 0xffffffffu) asm volatile("nanosleep.u32 32;");
}

}  // namespace kgen
