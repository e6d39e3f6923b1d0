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

// Shared memory: 1024 bytes of alignment; the K and V tiles (96 × 192 each, v's too when its head
// dim is below q's); two stages of the Q and dO tiles (64 × 192 each; dQ's fp32 staging boxes take
// the finished stage); the Pᵀ and dSᵀ tiles (96 × 64); two stages of the rows' lse2 and delta.
constexpr int kWideSmemBytes = 1024 +
                               (2 * kWideKeys * kWideHeadDim + 4 * kWideQueryRows * kWideHeadDim +
                                2 * kWideKeys * kWideQueryRows) * 2 +
                               4 * kWideQueryRows * 4;
static_assert(kWideSmemBytes == 198656, "the wide kernel's shared memory");

// Its warp-specialised form (backward_wide_ws.cuh): a producer warpgroup and two consumers that
// split a key block. At the 192-column tile (config "wg:bm64:bn96:a1:t:l:w") blocks of 96 keys;
// at the 256-column tile ("wg:bm64:bn48:a1:t:l:w") of 48, the most that fit beside two Q stages
// and dQ's 64 KiB staging tile. V and dO tiles span v's head dim rounded up to 64 columns; dO has
// two stages up to 128 of them, else one.
KGEN_HOST_DEVICE constexpr bool wide_ws_tile(int tile) { return tile == kWideHeadDim || tile == 256; }
KGEN_HOST_DEVICE constexpr int wide_ws_keys(int tile) { return tile == 256 ? 48 : kWideKeys; }
KGEN_HOST_DEVICE constexpr int wide_ws_v_cols(int head_dim_v) { return (head_dim_v + 63) / 64 * 64; }
KGEN_HOST_DEVICE constexpr int wide_ws_do_stages(int head_dim_v) { return wide_ws_v_cols(head_dim_v) <= 128 ? 2 : 1; }
// dSᵀ tiles: two where v's tiles leave room (no barrier before a tile's dSᵀ is written), else one.
KGEN_HOST_DEVICE constexpr int wide_ws_ds_bufs(int head_dim_v) { return wide_ws_v_cols(head_dim_v) <= 128 ? 2 : 1; }
// 1024 bytes of alignment; K (keys × tile) and V (keys × v's columns); two stages of Q (64 × tile)
// and wide_ws_do_stages of dO (64 × v's columns); the Pᵀ tile and wide_ws_ds_bufs dSᵀ tiles (keys ×
// 64); dQ's fp32 staging (64 × tile); two stages of the rows' lse2 and delta; the mbarriers (Q
// full and empty per stage, dO full and empty per stage, dQ full and empty per consumer).
KGEN_HOST_DEVICE constexpr int wide_ws_smem_bytes(int head_dim_v, int tile = kWideHeadDim) {
  const int dv = wide_ws_v_cols(head_dim_v), do_stages = wide_ws_do_stages(head_dim_v), keys = wide_ws_keys(tile);
  return 1024 +
         (keys * (tile + dv) + kWideQueryRows * (2 * tile + do_stages * dv) +
          (1 + wide_ws_ds_bufs(head_dim_v)) * keys * kWideQueryRows) * 2 +
         kWideQueryRows * tile * 4 + 2 * 2 * kWideQueryRows * 4 + (8 + 2 * do_stages) * 8;
}
static_assert(wide_ws_smem_bytes(192) == 223312 && wide_ws_smem_bytes(128) == 231520,
              "the warp-specialised wide kernel's shared memory");
static_assert(wide_ws_smem_bytes(256, 256) == 227408 && wide_ws_smem_bytes(128, 256) <= 232448,
              "the 256-column form's shared memory (227 KiB at most)");

}  // namespace attention_bwd
}  // namespace kgen
