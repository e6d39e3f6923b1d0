// Tile geometry of the attention forward kernels, shared by the host (config space, launch
// sizes) and the device templates (static_asserts). Plain constexpr C++, no device code.
#pragma once

#include "kgen_device/core/host_device.h"

namespace kgen {
namespace attention_fwd {

// The tensor-core kernels (forward, backward, double backward) serve every 16-bit head dim that
// is a multiple of 8 up to 256. A kernel is rendered for the exact head dim on a tile padded to
// the width its shared-memory layout wants; the padding is zero-filled and never stored.
KGEN_HOST_DEVICE constexpr bool tensor_core_head_dim(int d) { return d >= 8 && d <= 256 && d % 8 == 0; }
// fa2 tiles: rows of a multiple of 32 elements (the ldmatrix swizzle's 64-byte unit).
KGEN_HOST_DEVICE constexpr int fa2_tile_head_dim(int d) { return (d + 31) / 32 * 32; }
// wgmma tiles: whole 64-column blocks of the 128-byte swizzle (64, 128, 192 or 256). The
// backward's wgmma kernel takes the first two only.
KGEN_HOST_DEVICE constexpr int wgmma_tile_head_dim(int d) { return (d + 63) / 64 * 64; }
// Head-dim columns the mma work covers: d rounded up to 16, the k of one 16-bit mma step.
KGEN_HOST_DEVICE constexpr int mma_head_dim(int d) { return (d + 15) / 16 * 16; }

// Tensor-core (mma.sync m16n8k16) FA2-class kernel: `warps` warps share the block_m query rows,
// block_m / warps (16 or 32) each. 32 rows per warp halve the shared-memory reads of K and V per
// mma; 16 rows per warp halve the registers.
KGEN_HOST_DEVICE constexpr int fa2_threads(int warps) { return warps * 32; }

// Dynamic shared memory: Q tile plus `stages` buffers of K and V tiles, 16-bit elements.
KGEN_HOST_DEVICE constexpr int fa2_smem_bytes(int head_dim, int block_m, int block_n, int stages) {
  return (block_m * head_dim + stages * 2 * block_n * head_dim) * 2;
}

// Hopper (sm_90a) wgmma kernel: `wgs` warpgroups of 128 threads, 64 query rows each.
KGEN_HOST_DEVICE constexpr int wgmma_threads(int wgs) { return wgs * 128; }
// Dynamic shared memory: 1024 bytes to align the base for the 128-byte swizzle, the Q tile
// (64·wgs rows) and `stages` K and V tiles, 16-bit elements.
KGEN_HOST_DEVICE constexpr int wgmma_smem_bytes(int head_dim, int wgs, int block_n, int stages) {
  return 1024 + (64 * wgs * head_dim + stages * 2 * block_n * head_dim) * 2;
}

// Warp-specialised Hopper kernel (forward_ws.cuh): a producer warpgroup and two or three consumer
// warpgroups of 64 query rows (block_m = 128 or 192).
KGEN_HOST_DEVICE constexpr int ws_threads(int block_m = 128) { return 128 * (1 + block_m / 64); }
constexpr int kWsBarrierBytes = 256;  // the mbarriers (8 bytes each: 4 per stage, up to 4 stages, and 4 for Q)
// Dynamic shared memory: the 1024-byte alignment slack, `q_buffers` Q tiles of block_m rows (two
// in a persistent grid), `stages` K and V tiles, then the barriers.
KGEN_HOST_DEVICE constexpr int ws_smem_bytes(int head_dim, int block_n, int stages, int q_buffers = 1,
                                             int block_m = 128) {
  return 1024 + (q_buffers * block_m * head_dim + stages * 2 * block_n * head_dim) * 2 + kWsBarrierBytes;
}
// sm_90a's opt-in shared memory per block (generator/target.cpp's sm_90a limit, which a
// generator test holds equal), the only target of the warp-specialised kernel.
constexpr int kWsMaxSmemBytes = 232448;
// Q buffers of the kernel: one, or in a persistent grid two where they fit in shared memory (the
// next tile's Q loads under the current tile's work), else one (the next tile's Q and K/V wait
// for the current tile's stores).
KGEN_HOST_DEVICE constexpr int ws_q_buffers(int head_dim, int block_n, int stages, int block_m, bool persistent) {
  return persistent && ws_smem_bytes(head_dim, block_n, stages, 2, block_m) <= kWsMaxSmemBytes ? 2 : 1;
}
// Dynamic shared memory of a ws config: ws_smem_bytes with the Q buffers it gets.
KGEN_HOST_DEVICE constexpr int ws_config_smem_bytes(int head_dim, int block_n, int stages, int block_m, bool persistent) {
  return ws_smem_bytes(head_dim, block_n, stages, ws_q_buffers(head_dim, block_n, stages, block_m, persistent), block_m);
}

// Combine kernel of a split-keys launch (forward_combine.cuh): one warp per query row.
constexpr int kCombineRows = 4;  // rows (warps) per block

// General (SIMT) path: any dtype, any head_dim <= max_head_dim; one warp per query row,
// K/V tiles of block_n rows staged in fp32 shared memory.
KGEN_HOST_DEVICE constexpr int simt_threads(int warps) { return warps * 32; }
// Query rows per block of the general path (one warp per row): gridDim.x = ceil(n_q / this).
KGEN_HOST_DEVICE constexpr int simt_block_m(int warps) { return warps; }
KGEN_HOST_DEVICE constexpr int simt_smem_bytes(int max_head_dim, int block_n) {
  return 2 * block_n * max_head_dim * 4;
}

}  // namespace attention_fwd
}  // namespace kgen
