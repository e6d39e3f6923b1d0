// Hopper (sm_90) thread-block clusters: the blocks of a cluster run at once on neighbouring SMs
// and reach each other's shared memory (distributed shared memory) and mbarriers. NVIDIA only,
// as tma.cuh.
//
// Addresses: a block's shared-memory address (smem_u32) names its own window; remote() gives the
// same place in another block of the cluster (that block's shared::cluster window is contiguous,
// so the difference of one such pair serves a whole tile).
// Ordering: a remote arrival with release semantics at cluster scope publishes the arriving
// thread's earlier stores and loads; the waiter acquires them at cluster scope (tma::wait<true>).
#pragma once

#include "kgen_device/core/tma.cuh"

namespace kgen {
namespace cluster {

// This block's rank in its cluster (x fastest). Not volatile: the compiler may read it again
// rather than hold it in a register.
__device__ __forceinline__ unsigned rank() {
  unsigned r;
  asm("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}

// This block's shared-memory address `addr` in block `peer` of the cluster (the shared::cluster
// window).
__device__ __forceinline__ unsigned remote(unsigned addr, unsigned peer) {
  unsigned r;
  asm("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(addr), "r"(peer));
  return r;
}

// Every thread of every block of the cluster: arrive (release) and wait (acquire). After it,
// barriers initialised before it are visible cluster-wide; at the end of a kernel, it keeps a
// block alive until no other block will touch its shared memory.
__device__ __forceinline__ void sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}

// Four floats from a remote block's shared memory (`addr` in the shared::cluster window).
__device__ __forceinline__ float4 ld_remote_16f(unsigned addr) {
  float4 v;
  asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(addr)
               : "memory");
  return v;
}

// One arrival on a remote block's mbarrier (`bar` in the shared::cluster window), releasing this
// thread's earlier stores and loads at cluster scope.
__device__ __forceinline__ void arrive_remote(unsigned bar) {
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" ::"r"(bar) : "memory");
}

}  // namespace cluster
}  // namespace kgen
