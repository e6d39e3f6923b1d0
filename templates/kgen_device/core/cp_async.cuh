// cp.async (sm_80+): asynchronous 16-byte global -> shared copies, grouped and awaited.
// Global source and shared destination must both be 16-byte aligned. NVIDIA only (see
// mma_sm80.cuh): a second vendor provides nothing here.
#pragma once

namespace kgen {

// Copies 16 bytes, or writes 16 zero bytes when !valid (src-size 0: nothing is read, but `src`
// must still be a mapped address; callers pass a clamped in-range row). L2 only (.cg).
__device__ __forceinline__ void cp_async_16(unsigned smem_addr, const void* src, bool valid) {
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(smem_addr), "l"(src),
               "r"(src_bytes)
               : "memory");
}

// Copies 4 bytes (L1-cached), or writes 4 zero bytes when !valid (nothing is read; `src` must
// still be a mapped address). Both addresses 4-byte aligned.
__device__ __forceinline__ void cp_async_4(unsigned smem_addr, const void* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(smem_addr), "l"(src), "r"(valid ? 4 : 0)
               : "memory");
}

// Closes the group of cp.async issued since the previous commit (an empty group is allowed).
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;" ::: "memory");
}

// Waits until at most N of this thread's committed groups are still in flight. Other threads'
// copies need a __syncthreads() afterwards to be visible.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

}  // namespace kgen
