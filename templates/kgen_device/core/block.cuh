// Block-level plumbing: the kernel's dynamic shared memory, named barriers, and reads of the
// thread and block indices that the compiler may not reuse. On AMD dynamic_smem is the same
// extern __shared__ array (LDS), reread an index passed through an empty volatile asm (a fresh
// value the compiler can neither hoist nor merge), and named_barrier, used only by the sm_90a
// kernels, has no body.
#pragma once

#include "kgen_device/core/vendor.cuh"

namespace kgen {

// A compiler barrier (no instruction): memory reads after it are not merged with reads before
// it, so a value read again after one is reloaded instead of kept live in a register.
__device__ __forceinline__ void compiler_barrier() { asm volatile("" ::: "memory"); }

// reread<I>(): threadIdx.x or blockIdx.{x,y,z}, read through volatile asm: the compiler can neither
// hoist such a read out of a loop nor merge it with another, so the values derived from it in a
// loop body are recomputed there instead of staying live in registers across the whole loop.
enum class GridIndex { thread_x, block_x, block_y, block_z };

#if KGEN_AMD
__device__ __forceinline__ unsigned char* dynamic_smem() {
  extern __shared__ __attribute__((aligned(128))) unsigned char kgen_dynamic_smem[];
  return kgen_dynamic_smem;
}

template <GridIndex I>
__device__ __forceinline__ int reread() {
  int v;
  if constexpr (I == GridIndex::thread_x) {
    v = __builtin_amdgcn_workitem_id_x();
    asm volatile("" : "+v"(v));
  } else {
    if constexpr (I == GridIndex::block_x) v = __builtin_amdgcn_workgroup_id_x();
    else if constexpr (I == GridIndex::block_y) v = __builtin_amdgcn_workgroup_id_y();
    else v = __builtin_amdgcn_workgroup_id_z();
    asm volatile("" : "+s"(v));
  }
  return v;
}
#else

// Base of the kernel's dynamic shared memory (128-byte aligned). Every template declares it the
// same way so several can live in one translation unit.
__device__ __forceinline__ unsigned char* dynamic_smem() {
  extern __shared__ __align__(128) unsigned char kgen_dynamic_smem[];
  return kgen_dynamic_smem;
}

// The same region declared 1024-byte aligned, for kernels without static shared memory whose
// 128-byte-swizzled tiles repeat every 1024 bytes: it starts at an aligned offset, so they need
// no rounding up and no padding bytes (sm_90a kernels only).
__device__ __forceinline__ unsigned char* dynamic_smem_1024() {
  extern __shared__ __align__(1024) unsigned char kgen_dynamic_smem_1024[];
  return kgen_dynamic_smem_1024;
}

// Waits until Threads threads (a multiple of 32) reached barrier Id (1 .. 15; 0 is the one of
// __syncthreads).
template <int Id, int Threads>
__device__ __forceinline__ void named_barrier() {
  asm volatile("bar.sync %0, %1;" ::"n"(Id), "n"(Threads) : "memory");
}

template <GridIndex I>
__device__ __forceinline__ int reread() {
  int v;
  if constexpr (I == GridIndex::thread_x) asm volatile("mov.u32 %0, %%tid.x;" : "=r"(v));
  else if constexpr (I == GridIndex::block_x) asm volatile("mov.u32 %0, %%ctaid.x;" : "=r"(v));
  else if constexpr (I == GridIndex::block_y) asm volatile("mov.u32 %0, %%ctaid.y;" : "=r"(v));
  else asm volatile("mov.u32 %0, %%ctaid.z;" : "=r"(v));
  return v;
}
#endif  // KGEN_AMD

}  // namespace kgen
