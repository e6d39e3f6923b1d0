// Hand-offs between the blocks of one grid through global memory: a block stores data, then
// publishes a value in a flag (release, GPU scope); another block waits until the flag holds that
// value (acquire, GPU scope) and then reads the data past its SM's L1 (relaxed, GPU scope).
// Waiting on another block needs that block to make progress without waiting on the waiter.
// NVIDIA only (as tma.cuh): a second vendor provides nothing here.
#pragma once

namespace kgen {

// Orders this thread's earlier stores before its later ones at GPU scope (each writer of the data
// runs it before the barrier that precedes flag_publish).
__device__ __forceinline__ void fence_gpu() { asm volatile("fence.acq_rel.gpu;" ::: "memory"); }

// *flag = value, after every earlier store of this thread (and of the threads a barrier ordered
// before it) is visible to the GPU.
__device__ __forceinline__ void flag_publish(unsigned long long* flag, unsigned long long value) {
  asm volatile("st.release.gpu.global.b64 [%0], %1;" ::"l"(flag), "l"(value) : "memory");
}

// Returns once *flag == value; the stores published with it are then visible to this thread
// (and, after a barrier, to the threads it orders after this one).
__device__ __forceinline__ void flag_wait(const unsigned long long* flag, unsigned long long value) {
  for (;;) {
    unsigned long long seen;
    asm volatile("ld.acquire.gpu.global.b64 %0, [%1];" : "=l"(seen) : "l"(flag) : "memory");
    if (seen == value) return;
    asm volatile("nanosleep.u32 64;" ::: "memory");
  }
}

// Two floats at `ptr` (8-byte aligned) as the GPU's memory holds them, not an L1 copy.
__device__ __forceinline__ void ld_global_gpu_f2(const float* ptr, float& x, float& y) {
  asm volatile("ld.relaxed.gpu.global.v2.f32 {%0, %1}, [%2];" : "=f"(x), "=f"(y) : "l"(ptr) : "memory");
}

// One float at `ptr`, as ld_global_gpu_f2.
__device__ __forceinline__ float ld_global_gpu_f1(const float* ptr) {
  float x;
  asm volatile("ld.relaxed.gpu.global.f32 %0, [%1];" : "=f"(x) : "l"(ptr) : "memory");
  return x;
}

}  // namespace kgen
