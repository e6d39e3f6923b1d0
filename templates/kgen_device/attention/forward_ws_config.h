// Shared memory of the warp-specialised forward (forward_ws.cuh) with V tiles of their own width:
// v_cols columns (v's head dim rounded up to 64 for MLA, docs/kernels/mla.md; head_dim
// otherwise, where each function equals its forward_config.h counterpart). Shared by the host
// (config checks, launch sizes) and the template (static_asserts). Plain constexpr C++.
#pragma once

#include "kgen_device/attention/forward_config.h"

namespace kgen {
namespace attention_fwd {

// The kernel's V and O columns: the q tile's `tile_cols` where v has q's head dim, else v's own
// head dim rounded up to whole 64-column blocks.
KGEN_HOST_DEVICE constexpr int ws_v_cols(int tile_cols, int head_dim, int head_dim_v) {
  return head_dim_v == head_dim ? tile_cols : (head_dim_v + 63) / 64 * 64;
}

// ws_smem_bytes with `stages` V tiles of block_n × v_cols in place of block_n × head_dim.
KGEN_HOST_DEVICE constexpr int ws_smem_bytes_v(int head_dim, int v_cols, int block_n, int stages, int q_buffers,
                                               int block_m) {
  return ws_smem_bytes(head_dim, block_n, stages, q_buffers, block_m) + stages * block_n * (v_cols - head_dim) * 2;
}
// ws_q_buffers for those tiles.
KGEN_HOST_DEVICE constexpr int ws_q_buffers_v(int head_dim, int v_cols, int block_n, int stages, int block_m,
                                              bool persistent) {
  return persistent && ws_smem_bytes_v(head_dim, v_cols, block_n, stages, 2, block_m) <= kWsMaxSmemBytes ? 2 : 1;
}
// ws_config_smem_bytes for those tiles.
KGEN_HOST_DEVICE constexpr int ws_config_smem_bytes_v(int head_dim, int v_cols, int block_n, int stages, int block_m,
                                                      bool persistent) {
  return ws_smem_bytes_v(head_dim, v_cols, block_n, stages,
                         ws_q_buffers_v(head_dim, v_cols, block_n, stages, block_m, persistent), block_m);
}

// Causal grids of one block per query tile start their blocks in index order, each head's
// heaviest query tile first. Head after head, the last heads' heaviest tiles then start when the
// other SMs have little work left, and the grid ends on them. Sections of 2^s heads of one batch
// instead start the heaviest tiles of all their heads first; s is the largest with 2^s dividing
// the heads and the section's K and V rows (query heads of one kv head counted once) within
// kWsSectionBytes of L2.
inline constexpr long long kWsSectionBytes = 16ll << 20;
KGEN_HOST_DEVICE constexpr int ws_causal_sections_log2(int heads_q, int head_group, long long n_k, int key_bytes) {
  const long long head_bytes = n_k * key_bytes / (head_group > 0 ? head_group : 1);
  int s = 0;
  while (heads_q % (2 << s) == 0 && (2ll << s) * head_bytes <= kWsSectionBytes) ++s;
  return s;
}

}  // namespace attention_fwd
}  // namespace kgen
