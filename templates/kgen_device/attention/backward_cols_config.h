// Shared memory of the column-share wgmma backward (backward_wgmma.cuh,
// attention_backward_wgmma_kv_cols) with its dQ staging tile. Shared by the host (config checks,
// launch sizes) and the template (static_asserts). Plain constexpr C++.
#pragma once

#include "kgen_device/attention/backward_config.h"

namespace kgen {
namespace attention_bwd {

// Whether the column-share kernel at tile head dim D can add dQ by TMA reduce-adds from staging
// boxes (its entry attention_backward_wgmma_kv_cols_tma): at the 192-column tile from a staging
// tile of its own (215,040 bytes), at the 256-column tile in the finished stage's Q and dO tiles
// (wgmma_cols_dq_in_place).
KGEN_HOST_DEVICE constexpr bool wgmma_cols_tma_dq(int tile) { return tile == 192 || tile == 256; }
// Whether its atomic mode does so at head_dim on that tile: every head dim of the 192-column tile;
// at the 256-column tile only at 256, since in place the next loads of a stage wait for the TMA
// reads of its boxes, which costs more than the red_add2 it saves when fewer columns are real
// (head dims 216-240 measured 1-6 % slower that way, 256 5-6 % faster).
KGEN_HOST_DEVICE constexpr bool wgmma_cols_tma_dq(int tile, int head_dim) {
  return tile == 192 || (tile == 256 && head_dim == 256);
}
// Whether dQ's staging boxes are the query tile's own Q and dO columns (each warpgroup's half of
// both, once its dK and dV products have read them): at 256 columns, where no staging tile fits.
KGEN_HOST_DEVICE constexpr bool wgmma_cols_dq_in_place(int tile) { return tile == 256; }
// wgmma_cols_smem_bytes with, for dQ by TMA from a staging tile of its own, the fp32 staging tile
// (block_m × head_dim) between the Pᵀ/dSᵀ tiles and the statistics.
KGEN_HOST_DEVICE constexpr int wgmma_cols_smem_bytes(int head_dim, int block_m, bool tma_dq) {
  return wgmma_cols_smem_bytes(head_dim, block_m) +
         (tma_dq && !wgmma_cols_dq_in_place(head_dim) ? block_m * head_dim * 4 : 0);
}

}  // namespace attention_bwd
}  // namespace kgen
