// The wide-head-dim wgmma backward (backward_wide.cuh, config "wg:bm64:bn96:c3"): its block
// shape and shared memory. Shared by the host (config checks, launch sizes) and the template
// (static_asserts). Plain constexpr C++.
#pragma once

#include "kgen_device/core/host_device.h"

namespace kgen {
namespace attention_bwd {

// Three warpgroups share a block of 96 keys (32 each for S and dP; 64 head-dim rows each of dKᵀ,
// dVᵀ and 64 columns each of dQ) at the 192-column tile, against query tiles of 64 rows.
constexpr int kWideThreads = 384;
constexpr int kWideKeys = 96;
constexpr int kWideQueryRows = 64;
constexpr int kWideHeadDim = 192;

// A head dim's tile columns as the wide kernel stores them: 64-column blocks.
KGEN_HOST_DEVICE constexpr int wide_tile_cols(int head_dim) { return (head_dim + 63) / 64 * 64; }

// Shared memory: 1024 bytes of alignment; K (96 × d) and V (96 × d_v) tiles; two stages of Q
// (64 × d) and dO (64 × d_v); the Pᵀ and dSᵀ tiles (96 × 64); with dQ by TMA the fp32 staging tile
// (64 × d); two stages of the rows' lse2 and delta. Columns are the tiles' (wide_tile_cols).
KGEN_HOST_DEVICE constexpr int wide_smem_bytes(int head_dim, int head_dim_v, bool tma_dq) {
  const int d = wide_tile_cols(head_dim), dv = wide_tile_cols(head_dim_v);
  return 1024 + (kWideKeys * (d + dv) + 2 * kWideQueryRows * (d + dv) + 2 * kWideKeys * kWideQueryRows) * 2 +
         (tma_dq ? kWideQueryRows * d * 4 : 0) + 4 * kWideQueryRows * 4;
}

}  // namespace attention_bwd
}  // namespace kgen
