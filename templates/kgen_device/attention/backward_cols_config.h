// Shared memory of the column-share wgmma backward (backward_wgmma.cuh,
// attention_backward_wgmma_kv_cols) with its dQ staging tile. Shared by the host (config checks,
// launch sizes) and the template (static_asserts). Plain constexpr C++.
#pragma once

#include "kgen_device/attention/backward_config.h"

namespace kgen {
namespace attention_bwd {

// Whether the column-share kernel's atomic mode adds dQ by TMA reduce-adds from a staging tile
// (its entry attention_backward_wgmma_kv_cols_tma): where the tile fits beside the others, at
// the 192-column tile (215,040 bytes); at 256 columns by red_add2.
KGEN_HOST_DEVICE constexpr bool wgmma_cols_tma_dq(int head_dim) { return head_dim == 192; }
// wgmma_cols_smem_bytes with, for dQ by TMA, the fp32 staging tile (block_m × head_dim) between
// the Pᵀ/dSᵀ tiles and the statistics.
KGEN_HOST_DEVICE constexpr int wgmma_cols_smem_bytes(int head_dim, int block_m, bool tma_dq) {
  return wgmma_cols_smem_bytes(head_dim, block_m) + (tma_dq ? block_m * head_dim * 4 : 0);
}

}  // namespace attention_bwd
}  // namespace kgen
