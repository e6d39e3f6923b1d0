// Programmatic dependent launches (NVIDIA sm_90 and later). A kernel that the runtime launches
// with GpuDriver::launch_after_prior may be scheduled while the previous grid on its stream still
// runs: wait_for_prior_grid() holds its threads until that grid has completed and its memory
// writes are visible, so only the launch latency overlaps. allow_dependent_grid() in the previous
// grid lets the next one be scheduled once every block of it has called it (or exited), instead
// of at its end. Both compile to nothing on other targets, and do nothing in kernels launched
// without the attribute.
#pragma once

#include "kgen_device/core/vendor.cuh"

namespace kgen {

__device__ __forceinline__ void wait_for_prior_grid() {
#if !KGEN_AMD && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void allow_dependent_grid() {
#if !KGEN_AMD && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

}  // namespace kgen
