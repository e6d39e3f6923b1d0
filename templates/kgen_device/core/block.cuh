// Block-level plumbing: the kernel's dynamic shared memory, named barriers, and reads of the
// thread and block indices that the compiler may not reuse. A second vendor provides
// dynamic_smem (HIP: the same extern __shared__ array), reread (any read the compiler treats as
// a fresh value, or threadIdx / blockIdx where that does not matter), and named_barrier only if
// it ports the sm_90a kernels that use it.
#pragma once

namespace kgen {

// Base of the kernel's dynamic shared memory (128-byte aligned). Every template declares it the
// same way so several can live in one translation unit.
__device__ __forceinline__ unsigned char* dynamic_smem() {
  extern __shared__ __align__(128) unsigned char kgen_dynamic_smem[];
  return kgen_dynamic_smem;
}

// Waits until Threads threads (a multiple of 32) reached barrier Id (1 .. 15; 0 is the one of
// __syncthreads).
template <int Id, int Threads>
__device__ __forceinline__ void named_barrier() {
  asm volatile("bar.sync %0, %1;" ::"n"(Id), "n"(Threads) : "memory");
}

// threadIdx.x or blockIdx.{x,y,z}, read through volatile asm: the compiler can neither hoist
// such a read out of a loop nor merge it with another, so the values derived from it in a loop
// body are recomputed there instead of staying live in registers across the whole loop.
enum class GridIndex { thread_x, block_x, block_y, block_z };

template <GridIndex I>
__device__ __forceinline__ int reread() {
  int v;
  if constexpr (I == GridIndex::thread_x) asm volatile("mov.u32 %0, %%tid.x;" : "=r"(v));
  else if constexpr (I == GridIndex::block_x) asm volatile("mov.u32 %0, %%ctaid.x;" : "=r"(v));
  else if constexpr (I == GridIndex::block_y) asm volatile("mov.u32 %0, %%ctaid.y;" : "=r"(v));
  else asm volatile("mov.u32 %0, %%ctaid.z;" : "=r"(v));
  return v;
}

}  // namespace kgen
