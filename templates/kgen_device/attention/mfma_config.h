// Tile geometry of the MFMA attention kernels (AMD CDNA: forward_mfma.cuh, backward_mfma.cuh),
// shared by the host (validity rules, launch sizes) and the device templates (static_asserts).
// Plain constexpr C++, no device code.
#pragma once

#include "kgen_device/attention/forward_config.h"

namespace kgen {
namespace attention_mfma {

// Every wave (64 lanes) owns 32 rows: query rows in the forward and the dQ kernel, keys in the
// key-major backward kernel.
constexpr int kWaveRows = 32;
KGEN_HOST_DEVICE constexpr int threads(int waves) { return waves * 64; }

// LDS tiles are row-major 16-bit with 8 elements of padding per row: rows stay 16-byte aligned
// and consecutive rows start in other banks.
constexpr int kLdsPad = 8;
KGEN_HOST_DEVICE constexpr int lds_row(int cols) { return cols + kLdsPad; }
KGEN_HOST_DEVICE constexpr int lds_tile_bytes(int rows, int cols) { return rows * lds_row(cols) * 2; }
// A tile stored transposed (a row per column of the global matrix, its rows along the LDS row) is
// read 8 bytes per lane, one LDS row per lane of a 32-lane half: 4 elements of padding make
// consecutive rows start 2 banks apart, so those reads touch every bank once.
constexpr int kLdsPadTransposed = 4;
KGEN_HOST_DEVICE constexpr int lds_row_transposed(int rows) { return rows + kLdsPadTransposed; }

// K and V tiles of block_n keys, row-major.
KGEN_HOST_DEVICE constexpr int kv_tiles_lds_bytes(int head_dim, int block_n) { return 2 * lds_tile_bytes(block_n, head_dim); }
// The deterministic backward's query-major dQ kernel: those tiles and K's tile again, transposed
// (head_dim rows of block_n keys: dQ's Kᵀ operand in 8-byte reads).
KGEN_HOST_DEVICE constexpr int dq_lds_bytes(int head_dim, int block_n) {
  return kv_tiles_lds_bytes(head_dim, block_n) + head_dim * lds_row_transposed(block_n) * 2;
}
// Forward: the K tile of block_n keys row-major and the V tile transposed (head_dim rows of block_n keys).
KGEN_HOST_DEVICE constexpr int forward_lds_bytes(int head_dim, int block_n) {
  return lds_tile_bytes(block_n, head_dim) + head_dim * lds_row_transposed(block_n) * 2;
}

// Key-major backward kernel (its K and V operands in registers): the Q and dO tiles of block_m
// query rows, row-major and transposed (head_dim rows of block_m queries), and their lse2 and
// delta rows; with atomic dQ also the dS tile (block_m x block_n) and K's tile transposed
// (head_dim rows of block_n keys).
KGEN_HOST_DEVICE constexpr int kv_lds_bytes(int head_dim, int block_m, int block_n, bool atomic_dq) {
  return 2 * lds_tile_bytes(block_m, head_dim) + 2 * head_dim * lds_row_transposed(block_m) * 2 + 2 * block_m * 4 +
         (atomic_dq ? lds_tile_bytes(block_m, block_n) + head_dim * lds_row_transposed(block_n) * 2 : 0);
}

// Query-major dQ kernel of the deterministic backward: 2 waves (64 query rows), 64-key tiles.
constexpr int kDqWaves = 2;
constexpr int kDqBlockN = 64;

// VGPRs per lane (32-bit registers, architectural and accumulation together), estimated from the
// fragments each wave keeps: forward: Q operands (D/4), the O accumulator (D/2), S (BN/2) and P
// packed (BN/4); key-major backward (one 32-query block at a time): dK and dV accumulators (D),
// S and dP (32), P and dS packed (16); plus addressing and softmax state. The key-major estimate
// leaves out the wave's K and V operands (D/2, over the whole head dim also with column splits),
// which the code objects place within the accumulation registers' slack: every default fits
// without scratch (tests/replay/amd.tsv records their registers).
KGEN_HOST_DEVICE constexpr int forward_vgpr_estimate(int d, int bn) { return d / 4 + d / 2 + bn / 2 + bn / 4 + 40; }
KGEN_HOST_DEVICE constexpr int kv_vgpr_estimate(int d) { return d + 32 + 16 + 48; }

}  // namespace attention_mfma
}  // namespace kgen
