// Hopper (sm_90) asynchronous copies and warp specialisation: transaction barriers (mbarrier),
// tensor-map copies (TMA) between global and shared memory, named-barrier arrivals and register
// reallocation between warpgroups. NVIDIA only (see mma_sm80.cuh): a second vendor provides
// nothing here.
//
// An mbarrier is 8 bytes of shared memory that completes a phase when its expected arrivals and
// its expected transaction bytes have both come in; waiters name the phase by its parity (0 for
// the first, 1 for the second, ...). A TMA load counts its box's bytes against the barrier it
// names (out-of-bounds elements are zero-filled and counted too), so one arrive_expect_tx of the
// box bytes plus the copies complete a phase.
//
// A tensor map (CUtensorMap, 128 bytes, 64-byte aligned) is built on the host and passed in a
// __grid_constant__ kernel parameter; the device takes its address.
#pragma once

namespace kgen {
namespace tma {

__device__ __forceinline__ void barrier_init(unsigned bar, unsigned arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(arrivals) : "memory");
}
// Makes barrier initialisation visible to the async proxy (TMA) before the block barrier that
// follows it.
__device__ __forceinline__ void fence_barrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
// One arrival that also announces `bytes` of transactions for the current phase.
__device__ __forceinline__ void arrive_expect_tx(unsigned bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void arrive(unsigned bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
// Waits until the phase of parity `parity` has completed. Cluster: acquiring at cluster scope
// what arrivals from other blocks of the cluster released (cluster.cuh).
template <bool Cluster = false>
__device__ __forceinline__ void wait(unsigned bar, unsigned parity) {
  unsigned done;
  do {
    if constexpr (Cluster)
      asm volatile(
          "{\n .reg .pred p;\n mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n"
          " selp.u32 %0, 1, 0, p;\n}"
          : "=r"(done)
          : "r"(bar), "r"(parity)
          : "memory");
    else
      asm volatile(
          "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
          : "=r"(done)
          : "r"(bar), "r"(parity)
          : "memory");
  } while (!done);
}

// Arrives on `bar` once every cp.async this thread issued before it has landed; the barrier's
// expected arrivals must count it (noinc). Readers fence the copies for the async proxy
// (fence_proxy_async) after their wait, before wgmma reads them.
__device__ __forceinline__ void cp_async_arrive(unsigned bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(bar) : "memory");
}

// Copies the box at element coordinates (c0 innermost .. c3) of the 4-d tensor map `map` into
// shared memory at `dst`, counting its bytes against barrier `bar`.
__device__ __forceinline__ void load_4d(unsigned dst, const void* map, int c0, int c1, int c2, int c3, unsigned bar) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], [%6];"
      ::"r"(dst), "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
      : "memory");
}
// Copies shared memory at `src` into the box at (c0 .. c3) of `map`; elements outside the tensor
// are not written. Completion is tracked by bulk groups of the issuing thread.
__device__ __forceinline__ void store_4d(const void* map, unsigned src, int c0, int c1, int c2, int c3) {
  asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.tile.bulk_group [%0, {%2, %3, %4, %5}], [%1];"
               ::"l"(map), "r"(src), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
               : "memory");
}
// Adds the fp32 box at `src` in shared memory element-wise into the box at (c0, c1, c2) of the
// 3-d fp32 map `map` (a reduction in L2; elements outside the tensor are not touched).
// Completion is tracked by bulk groups of the issuing thread, as store_4d.
__device__ __forceinline__ void reduce_add_3d(const void* map, unsigned src, int c0, int c1, int c2) {
  asm volatile("cp.reduce.async.bulk.tensor.3d.global.shared::cta.add.tile.bulk_group [%0, {%2, %3, %4}], [%1];"
               ::"l"(map), "r"(src), "r"(c0), "r"(c1), "r"(c2)
               : "memory");
}
__device__ __forceinline__ void store_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
// Waits until this thread's committed stores have finished reading shared memory (with Pending,
// all but its newest Pending groups).
template <int Pending = 0>
__device__ __forceinline__ void store_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(Pending) : "memory");
}
// Orders this thread's earlier generic-proxy shared-memory writes before later async-proxy
// accesses (a TMA store) once a barrier has been passed.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
__device__ __forceinline__ void prefetch_map(const void* map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(map) : "memory");
}

// Register reallocation between warpgroups (sm_90a, warpgroup-uniform, the kernel compiled with
// a register cap from __launch_bounds__(threads, 1)): producers give registers back, consumers
// take them.
template <int Registers>
__device__ __forceinline__ void release_registers() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(Registers));
}
template <int Registers>
__device__ __forceinline__ void claim_registers() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(Registers));
}

// Arrives at named barrier `id` (counted towards `threads`) without waiting: the other side of
// a bar.sync (named_barrier in block.cuh) that waits for this thread group.
__device__ __forceinline__ void barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

}  // namespace tma
}  // namespace kgen
