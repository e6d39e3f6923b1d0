// Tile geometry of the attention backward and double-backward kernels, shared by the host
// (config space, launch sizes) and the device templates (static_asserts). Plain constexpr C++.
#pragma once

#include "kgen_device/attention/forward_config.h"

namespace kgen {
namespace attention_bwd {

// Key-major tensor-core kernel (dK, dV; dQ by fp32 atomics when not deterministic): a block owns
// block_n keys, `warps` warps own block_n / warps (16 or 32) of them, and it walks query tiles
// of block_m rows. Shared memory: K and V tiles, two stages of Q and dO tiles, the dSᵀ tile
// (only with atomic dQ), two stages of per-row lse2 and delta.
KGEN_HOST_DEVICE constexpr int fa2_kv_smem_bytes(int head_dim, int block_m, int block_n, bool atomic_dq) {
  return (2 * block_n * head_dim + 4 * block_m * head_dim + (atomic_dq ? block_n * block_m : 0)) * 2 +
         4 * block_m * 4;
}

// Hopper key-major kernel (sm_90a wgmma): `wgs` warpgroups own 64 keys each (block_n = 64·wgs)
// and walk query tiles of block_m rows. Shared memory: 1024 bytes to align the base for the
// 128-byte swizzle, K and V tiles, two stages of Q and dO tiles, the dSᵀ tile (only with atomic
// dQ), two stages of per-row lse2 and delta.
KGEN_HOST_DEVICE constexpr int wgmma_kv_smem_bytes(int head_dim, int block_m, int wgs, bool atomic_dq) {
  return 1024 + (2 * 64 * wgs * head_dim + 4 * block_m * head_dim + (atomic_dq ? 64 * wgs * block_m : 0)) * 2 +
         4 * block_m * 4;
}

// Hopper key-major kernel with decoupled warpgroups (sm_90a wgmma, two warpgroups of 64 keys,
// atomic dQ): 1024 bytes of alignment, K and V tiles, wgmma_kv_async_stages stages of Q and dO tiles,
// the dSᵀ ring, with TmaDQ the fp32 dQ staging tile (block_m × head_dim), as many
// stages of per-row lse2 and delta, and 8-byte mbarriers (full and empty per stage and per dSᵀ
// tile). The ring holds three dSᵀ tiles, two with TmaDQ at head_dim 128 (the staging tile takes
// the third's room), and two with 128-row query tiles (three would not fit). With `dq_writer`
// (the warp-specialised kernel's producer warp adding dQ, backward_ws.cuh) four more mbarriers
// follow (dq_full and dq_empty per warpgroup).
constexpr int kWgmmaAsyncStages = 3;
// Stages of the Q/dO ring: three, two with 128-row query tiles and TmaDQ (the warp-specialised
// form wg:bm128:bn128:a2:t:l:w, whose 32 KB staging tile takes the third stage's room).
KGEN_HOST_DEVICE constexpr int wgmma_kv_async_stages(int block_m, bool tma_dq) {
  return block_m > 64 && tma_dq ? 2 : kWgmmaAsyncStages;
}
KGEN_HOST_DEVICE constexpr int wgmma_kv_async_ds_bufs(int head_dim, int block_m, bool tma_dq) {
  return (tma_dq && head_dim > 64) || block_m > 64 ? 2 : 3;
}
KGEN_HOST_DEVICE constexpr int wgmma_kv_async_smem_bytes(int head_dim, int block_m, bool tma_dq = false,
                                                         bool dq_writer = false) {
  const int stages = wgmma_kv_async_stages(block_m, tma_dq);
  return 1024 +
         (2 * 128 * head_dim + 2 * stages * block_m * head_dim +
          wgmma_kv_async_ds_bufs(head_dim, block_m, tma_dq) * 128 * block_m) * 2 +
         (tma_dq ? block_m * head_dim * 4 : 0) + stages * 2 * block_m * 4 +
         2 * (stages + wgmma_kv_async_ds_bufs(head_dim, block_m, tma_dq)) * 8 + (dq_writer ? 4 * 8 : 0);
}

// Hopper key-major kernel above 128 columns (sm_90a wgmma, D = 192 or 256): two warpgroups
// share 64 keys, splitting the query rows of Sᵀ/dPᵀ and the columns of dK, dV and dQ. Shared
// memory: 1024 bytes of alignment, K and V tiles, two stages of Q and dO tiles, the Pᵀ and dSᵀ
// tiles (both modes: dK and dV read them from shared memory), two stages of lse2 and delta.
constexpr int kWgmmaColsThreads = 256;  // two warpgroups
// The warp-specialised key-major kernel (backward_ws.cuh): a producer and two consumer warpgroups.
constexpr int kWgmmaWsThreads = 384;
KGEN_HOST_DEVICE constexpr int wgmma_cols_smem_bytes(int head_dim, int block_m) {
  return 1024 + (2 * 64 * head_dim + 4 * block_m * head_dim + 2 * 64 * block_m) * 2 + 4 * block_m * 4;
}

// Query-major tensor-core kernel (dQ of the deterministic mode): a block owns block_m query rows
// (block_m / warps per warp) and walks key tiles of block_n, double-buffered K and V.
KGEN_HOST_DEVICE constexpr int fa2_q_smem_bytes(int head_dim, int block_m, int block_n) {
  return (2 * block_m * head_dim + 4 * block_n * head_dim) * 2;
}

// Double backward, query-major pass (r, c, Q̄, dŌ): Q, dO, gQ tiles; double-buffered K, V, gK, gV.
KGEN_HOST_DEVICE constexpr int fa2_dbl_q_smem_bytes(int head_dim, int block_m, int block_n) {
  return (3 * block_m * head_dim + 8 * block_n * head_dim) * 2;
}

// Double backward, key-major pass (K̄, V̄): K, V, gK, gV tiles; double-buffered Q, dO, gQ tiles
// and four per-row statistics (lse2, delta, r, c).
KGEN_HOST_DEVICE constexpr int fa2_dbl_kv_smem_bytes(int head_dim, int block_m, int block_n) {
  return (4 * block_n * head_dim + 6 * block_m * head_dim) * 2 + 2 * 4 * block_m * 4;
}

// Double backward on Hopper wgmma (double_backward_wgmma.cuh), 64 rows per warpgroup and score
// tiles `tile` wide, from a 1024-byte aligned base (no padding). Query-major: the Q, dO and gQ rows, two stages of
// K, V, gK and gV tiles, four per-row statistics of the rows. Key-major: the K, V, gK and gV rows, two stages of Q, dO and gQ tiles
// and of four per-row statistics (lse2, delta, r, c).
KGEN_HOST_DEVICE constexpr int wgmma_dbl_q_smem_bytes(int head_dim, int wgs, int tile) {
  return (3 * 64 * wgs * head_dim + 8 * tile * head_dim) * 2 + 4 * 64 * wgs * 4;
}
KGEN_HOST_DEVICE constexpr int wgmma_dbl_kv_smem_bytes(int head_dim, int wgs, int tile) {
  return (4 * 64 * wgs * head_dim + 6 * tile * head_dim) * 2 + 2 * 4 * tile * 4;
}

// Row-wise helper kernels (preprocess, dQ conversion) and the general path: warps of 32 lanes.
KGEN_HOST_DEVICE constexpr int row_threads(int warps) { return warps * 32; }

// Lanes per row of the row-wise helper kernels: one per `cols` columns (by default 4, a 16-byte
// piece of the fp32 dQ row), rounded up to a power of 2, at most 32; a warp takes 32 / that rows
// at once, so at d = 64 each lane moves 8 or 16 bytes per access instead of 2 and no lane idles.
KGEN_HOST_DEVICE constexpr int row_lanes(int head_dim, int cols = 4) {
  int lanes = 1;
  while (lanes < 32 && lanes * cols < head_dim) lanes *= 2;
  return lanes;
}
// Rows per block of the row-wise helper kernels.
KGEN_HOST_DEVICE constexpr int row_block_rows(int warps, int head_dim) { return warps * (32 / row_lanes(head_dim)); }

// The preprocess kernel reads two 16-bit rows (O and dO) per fp32 row it zeroes, so it takes one
// lane per 8 columns (16 bytes of each input) and kPreprocessRows rows per lane, all loads issued
// before the first sum, so that each thread keeps 2 · kPreprocessRows loads in flight.
constexpr int kPreprocessRows = 4;
KGEN_HOST_DEVICE constexpr int preprocess_lanes(int head_dim) { return row_lanes(head_dim, 8); }
KGEN_HOST_DEVICE constexpr int preprocess_block_rows(int warps, int head_dim) {
  return warps * (32 / preprocess_lanes(head_dim)) * kPreprocessRows;
}

}  // namespace attention_bwd
}  // namespace kgen
