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

// The forward's LDS layout on gfx90a and gfx942 (forward_mfma.cuh; gfx950 keeps the padded one
// above): K and Vᵀ unpadded (rows of 2·cols bytes), their units XOR-swizzled by row, so that a
// d = 128, 64-key block needs 32 KiB and two blocks share a compute unit's 64 KiB. LDS there has
// 32 banks of 4 bytes (bank = byte address / 4 mod 32); a wavefront's access is served in phases
// of 8 lanes for 16-byte accesses and 16 lanes for 8-byte ones (128 bytes each, lanes in order).
// A phase is conflict-free when its lanes' bytes fall in distinct banks.
//   K (block_n rows of head_dim columns): 16-byte unit v of row r at unit v ^ (r mod 8). The
//     forward reads it 16 bytes a lane, the 8 lanes of a phase on 8 consecutive rows at one unit:
//     r mod 8 sends them to the 8 units of a 128-byte line (so it does for the phases some
//     descriptions of gfx942 give, lanes 0-3 with 20-23, 4-7 with 16-19, …: four rows with r mod
//     8 < 4 beside four with r mod 8 ≥ 4). Written 16 bytes a lane, 8 lanes on the 8 units of a
//     line of one row: a permutation of the line.
//   Vᵀ (head_dim rows of block_n keys): 8-byte unit u of row c at unit u ^ vt_swizzle(c,
//     block_n). Read 8 bytes a lane, the 16 lanes of a phase on 16 consecutive rows (from a
//     multiple of 16) at one unit: vt_swizzle takes 16 distinct values there (block_n ≥ 64; at
//     block_n = 32, two 64-byte rows a line, (c / 2) mod 8 and the row's half of the line). The
//     transposed stage (mfma_tile.cuh's TileStage) writes 8 bytes a lane to rows c + k (c a
//     multiple of 8, k < 8) at key unit a + 4·g (a = lane mod 4, g per wave): row bit 3 and,
//     XORed into unit bit 2, row bit 4 keep the 4 column chunks of a phase apart (block_n ≥ 64:
//     conflict-free; block_n = 32: two ways, no linear swizzle of 3 bits avoids both).
// tests/generator/attention_mfma_test.cpp checks every forward config's reads and writes under
// this model, and that the layouts are permutations.
KGEN_HOST_DEVICE constexpr int k_swizzle(int row) { return row & 7; }
KGEN_HOST_DEVICE constexpr int vt_swizzle(int row, int keys) { return keys >= 64 ? (row & 15) ^ (row >> 2 & 4) : row >> 1 & 7; }
// The tile layouts of TileStage (mfma_tile.cuh): PaddedLds, rows of lds_row(Cols) and
// lds_row_transposed(Rows) elements; SwizzledLds, as element offsets of row-major tiles (K: row
// r, column c) and transposed ones (Vᵀ: row c of the global matrix's column, its element r),
// Rows x Cols as TileStage names them. Column offsets inside one swizzle unit move with it (c mod
// 8 of 16 bytes, r mod 4 of 8).
struct PaddedLds {
  static constexpr bool kSwizzled = false;
  static constexpr bool kChainPairs = false;
};
struct SwizzledLds {
  static constexpr bool kSwizzled = true;
  static constexpr bool kChainPairs = false;
  template <int Cols>
  KGEN_HOST_DEVICE static constexpr int row_major(int r, int c) { return r * Cols + (c ^ k_swizzle(r) << 3); }
  template <int Rows>
  KGEN_HOST_DEVICE static constexpr int transposed(int c, int r) { return c * Rows + (r ^ vt_swizzle(c, Rows) << 2); }
  // transposed(c + k, r) = k · Rows + (transposed(c, r) ^ transposed_xor(k)) for c a multiple of
  // 8 and k < 8 (of 4 and k < 4): the transposed stage's rows of one chunk from one address.
  template <int Rows>
  KGEN_HOST_DEVICE static constexpr int transposed_xor(int k) { return vt_swizzle(k, Rows) << 2; }
};

// The key-major backward's transposed Q and dO tiles on gfx950 (K = 16) at 32-query tiles
// (backward_mfma.cuh), in the padded tiles' space (Cols · lds_row_transposed(Rows) elements):
//   - the rows in pairs, a pair 2·Rows + 8 elements (its two rows, then 16 bytes of padding),
//     so that every row starts 16-byte aligned;
//   - inside a row, element r at chain_position(r): bits 2 and 3 of r swapped, so that the 8
//     rows a lane takes for one chain step of v_mfma_f32_32x32x16 (16·s + 4·h + {0..3} and
//     16·s + 8 + 4·h + {0..3}, h = lane / 32) lie at 16·s + 8·h + {0..7}, in that order: one
//     16-byte read (ds_read_b128) instead of two 8-byte ones.
// Reads of 16 bytes by the 8 lanes of a phase (8 consecutive rows, one 16-byte unit; Rows = 32:
// rows of 4 units, a pair 9) fall in the 8 units of a 128-byte line once: units 9·(c / 2) +
// 4·(c mod 2) mod 8 are distinct for 8 consecutive rows from an even one. The writes of
// TileStage (8 bytes, rows c + k of a chunk from one address and offsets row_start(k)) touch the
// banks as the padded layout's do.
struct ChainPairLds {
  static constexpr bool kSwizzled = false;
  static constexpr bool kChainPairs = true;
  KGEN_HOST_DEVICE static constexpr int chain_position(int r) { return (r & ~12) | (r & 4) << 1 | (r & 8) >> 1; }
  template <int Rows>
  KGEN_HOST_DEVICE static constexpr int row_start(int c) { return c / 2 * (2 * Rows + 8) + c % 2 * Rows; }
  template <int Rows>
  KGEN_HOST_DEVICE static constexpr int transposed(int c, int r) { return row_start<Rows>(c) + chain_position(r); }
};

// K and V tiles of block_n keys, row-major.
KGEN_HOST_DEVICE constexpr int kv_tiles_lds_bytes(int head_dim, int block_n) { return 2 * lds_tile_bytes(block_n, head_dim); }
// The deterministic backward's query-major dQ kernel: those tiles and K's tile again, transposed
// (head_dim rows of block_n keys: dQ's Kᵀ operand in 8-byte reads).
KGEN_HOST_DEVICE constexpr int dq_lds_bytes(int head_dim, int block_n) {
  return kv_tiles_lds_bytes(head_dim, block_n) + head_dim * lds_row_transposed(block_n) * 2;
}
// Forward: the K tile of block_n keys row-major and the V tile transposed (head_dim rows of block_n
// keys), padded or swizzled (SwizzledLds: gfx90a, gfx942).
KGEN_HOST_DEVICE constexpr int forward_lds_bytes(int head_dim, int block_n, bool swizzled) {
  return swizzled ? 2 * block_n * head_dim * 2
                  : lds_tile_bytes(block_n, head_dim) + head_dim * lds_row_transposed(block_n) * 2;
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
