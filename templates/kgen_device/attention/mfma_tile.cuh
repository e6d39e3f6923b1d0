// Tile moves of the MFMA attention kernels (forward_mfma.cuh, backward_mfma.cuh): global rows
// into padded LDS tiles, and MFMA operands gathered from LDS, global memory or an accumulator,
// each placed by the lane layouts of kgen_device/core/mfma_layout.h. A and B operands share one
// lane mapping (a lane's row or column is lane mod 32, its k run a_k = b_k), so one gather serves
// either: `row` below is A's row or B's column. The forward stages its tiles through registers
// (TileStage: global loads for a whole tile, then LDS writes) and keeps V transposed in LDS, so
// every operand it reads is 4 or 8 consecutive elements (ds_read_b64/b128); so do the
// backward's dQ kernel (K transposed beside K) and kv kernel (Q and dO in both layouts, Kᵀ).
#pragma once

#include "kgen_device/attention/mfma_config.h"
#include "kgen_device/core/math.cuh"
#include "kgen_device/core/mfma.cuh"
#include "kgen_device/core/types.cuh"

namespace kgen {
namespace mfma_detail {

using attention_mfma::lds_row;

// 16-byte and 8-byte register groups of the tile moves.
typedef unsigned mfma_u32x4 __attribute__((ext_vector_type(4)));
typedef unsigned mfma_u32x2 __attribute__((ext_vector_type(2)));
// 16 bytes (8 columns) or 8 bytes (4) of one row of a tile move.
template <int Cols>
struct RowChunk {
  typedef mfma_u32x4 type;
};
template <>
struct RowChunk<4> {
  typedef mfma_u32x2 type;
};
typedef short mfma_s16x4 __attribute__((ext_vector_type(4)));

// X where B holds, else Y (a kernel's choice of tile layout).
template <bool B, class X, class Y>
struct PickLayout {
  typedef X type;
};
template <class X, class Y>
struct PickLayout<false, X, Y> {
  typedef Y type;
};

// Compile-time flag of the forward's tile step (masked or not).
template <bool B>
struct Flag {
  static constexpr bool value = B;
};

// A Rows x Cols tile (Cols a multiple of 8) of a row-major global matrix of 16-bit elements (row
// stride `stride` elements, rows 16-byte aligned) on its way into LDS through registers: load()
// issues every global load of the tile and returns, store()
// writes LDS once they have landed, so a tile costs one wait, and a tile's loads may be in flight
// while the block computes on the previous one. Each thread moves chunks of kChunkCols columns
// (8: 16-byte loads):
//   Transposed = false: chunk i is 8 columns of one row; LDS row-major (row stride lds_row(Cols)).
//   Transposed = true:  chunk i is kChunkCols columns of 4 consecutive rows (four loads), written
//     as kChunkCols LDS rows of the transposed tile (dst[c · lds_row_transposed(Rows) + r] =
//     tile[r][c]), 4 rows each (8 bytes). Consecutive threads take the 4 row groups of 4 rows
//     first, then the column chunks, so a load instruction reads 4 whole global rows of the tile
//     (64 lanes: 4 row groups x 16 column chunks at Cols = 128) and 4 threads write 32
//     consecutive bytes. Where 8-column chunks would leave half the block's threads without one
//     (at Rows · Cols = 16 · Threads: the forward's 64-key V tile at d = 64), the chunks are 4
//     columns (8-byte loads), one per thread.
// Rows at or past `n_rows` (n_rows ≥ 1) repeat row n_rows − 1 instead of branching around their
// loads: their keys are masked (S = −inf, P = 0) and their V rows finite where the inputs are.
// Layout (mfma_config.h: PaddedLds, SwizzledLds) places the elements in LDS.
template <int Rows, int Cols, int Threads, bool Transposed, class Layout = attention_mfma::PaddedLds>
struct TileStage {
  static_assert(Cols % 8 == 0 && (!Transposed || Rows % 16 == 0), "16-byte chunks (transposed: of 4 rows, 4 row groups)");
  static constexpr int kRowsPerChunk = Transposed ? 4 : 1;
  static constexpr int kChunkCols = Transposed && Rows * Cols == 16 * Threads ? 4 : 8;
  static constexpr int kColChunks = Cols / kChunkCols;
  static constexpr int kChunks = Rows / kRowsPerChunk * kColChunks;
  static constexpr int kIters = (kChunks + Threads - 1) / Threads;
  using Chunk = typename RowChunk<kChunkCols>::type;
  Chunk w[kIters][kRowsPerChunk];

  // Row (first of the chunk's rows) and first column of chunk i.
  __device__ __forceinline__ static void chunk(int i, int& r, int& c) {
    if constexpr (Transposed) {
      r = 4 * (i % 4 + 4 * (i / (4 * kColChunks)));
      c = kChunkCols * (i / 4 % kColChunks);
    } else {
      r = i / kColChunks;
      c = kChunkCols * (i % kColChunks);
    }
  }

  template <class T>
  __device__ __forceinline__ void load(const T* src, long long stride, int row0, int n_rows, int tid) {
#pragma unroll
    for (int it = 0; it < kIters; ++it) {
      const int i = tid + it * Threads;
      int r, c;
      chunk(i, r, c);
      if (kChunks % Threads != 0 && i >= kChunks) break;
#pragma unroll
      for (int j = 0; j < kRowsPerChunk; ++j)
        w[it][j] = *reinterpret_cast<const Chunk*>(src + static_cast<long long>(imin(row0 + r + j, n_rows - 1)) * stride + c);
    }
  }

  // The same loads with 32-bit offsets from the tile's first row (`tile`, wave-uniform: one
  // scalar base, global_load's saddr form). Offsets::fits(stride) must hold: every offset inside
  // a tile fits 32 bits. Rows past `rows_left` (n_rows − 1 − row0 ≥ 0) repeat that row, clamped
  // in bytes: min(r·s, L·s) = min(r, L)·s for s ≥ 0, one v_min per load.
  // The offsets take a VGPR per load, so stages of more than 8 loads per thread (the 2-wave
  // blocks of 128-key tiles: 16) keep the 64-bit addresses (fits() is false): with both forms
  // the gfx950 bf16 d = 128 mfma:bm64:bn128:w2 forward ran out of registers (512) and spilled.
  static constexpr bool kNarrow = kIters * kRowsPerChunk <= 8;
  struct Offsets {
    unsigned at[kIters][kRowsPerChunk];  // ((r + j)·stride + c)·2 of load (it, j)
    unsigned col[kIters];                // c·2 of chunk it

    __device__ __forceinline__ static bool fits(long long stride) {
      return kNarrow && stride >= 0 && stride <= (0xffffffffll - 2 * Cols) / (2 * (Rows > 1 ? Rows - 1 : 1));
    }
    __device__ __forceinline__ Offsets(long long stride, int tid) {
      const unsigned s2 = static_cast<unsigned>(stride) * 2u;
#pragma unroll
      for (int it = 0; it < kIters; ++it) {
        int r, c;
        chunk(tid + it * Threads, r, c);
        col[it] = 2u * c;
#pragma unroll
        for (int j = 0; j < kRowsPerChunk; ++j) at[it][j] = static_cast<unsigned>(r + j) * s2 + col[it];
      }
    }
    // The offsets made opaque to the compiler where they are (opaque_u32 on each, in place: no
    // copy, no instruction), so that LLVM keeps global_load's scalar-base form on loads that take
    // them unclamped (load_whole), as it does on min_u32_opaque's results in load().
    __device__ __forceinline__ void make_opaque() {
#pragma unroll
      for (int it = 0; it < kIters; ++it)
#pragma unroll
        for (int j = 0; j < kRowsPerChunk; ++j) at[it][j] = opaque_u32(at[it][j]);
    }
  };

  template <class T>
  __device__ __forceinline__ void load(const T* tile, long long stride, int rows_left, const Offsets& o, int tid) {
    const unsigned lim = static_cast<unsigned>(imin(rows_left, Rows - 1)) * (static_cast<unsigned>(stride) * 2u);
#pragma unroll
    for (int it = 0; it < kIters; ++it) {
      if (kChunks % Threads != 0 && tid + it * Threads >= kChunks) break;
#pragma unroll
      for (int j = 0; j < kRowsPerChunk; ++j) {
        const unsigned off = min_u32_opaque(o.at[it][j], lim + o.col[it]);
        w[it][j] = *reinterpret_cast<const Chunk*>(reinterpret_cast<const char*>(tile) + off);
      }
    }
  }

  // The same for a tile whose rows are all below n_rows: no clamp (o made opaque first,
  // Offsets::make_opaque).
  template <class T>
  __device__ __forceinline__ void load_whole(const T* tile, const Offsets& o, int tid) {
#pragma unroll
    for (int it = 0; it < kIters; ++it) {
      if (kChunks % Threads != 0 && tid + it * Threads >= kChunks) break;
#pragma unroll
      for (int j = 0; j < kRowsPerChunk; ++j) {
        w[it][j] = *reinterpret_cast<const Chunk*>(reinterpret_cast<const char*>(tile) + o.at[it][j]);
      }
    }
  }

  __device__ __forceinline__ void store(unsigned short* dst, int tid) const {
    if constexpr (!Transposed) {
      store_rows(dst, tid);
    } else {
      // Swizzled, row c + k of a chunk (c a multiple of kChunkCols, k < kChunkCols) lies at
      // k · Rows + (transposed(c, r) ^ transposed_xor(k)) (SwizzledLds). The base is made opaque
      // each tile (opaque_u32_in_place), so the XORs stay in the loop (one VALU each) and keep
      // no registers across it; it is in bytes (2·(a ^ b) = 2a ^ 2b), so that no shift follows
      // each XOR.
#pragma unroll
      for (int it = 0; it < kIters; ++it) {
        const int i = tid + it * Threads;
        if (kChunks % Threads != 0 && i >= kChunks) break;
        int r, c;
        chunk(i, r, c);
        unsigned base = 0;
        if constexpr (Layout::kSwizzled)
          base = opaque_u32_in_place(2u * static_cast<unsigned>(Layout::template transposed<Rows>(c, r)));
        // ChainPairLds: c is even, so row c + k starts row_start(k) after row c, and the 4 rows
        // r .. r + 3 (r a multiple of 4) lie at chain_position(r) .. + 3.
        if constexpr (Layout::kChainPairs) base = static_cast<unsigned>(Layout::template transposed<Rows>(c, r));
        // Column c + 2m + h of rows r .. r + 3: halves h of dword m of the four loaded rows.
#pragma unroll
        for (int m = 0; m < kChunkCols / 2; ++m)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            unsigned x[2];
#pragma unroll
            for (int q = 0; q < 2; ++q) {
              // h = 0: (a & 0xffff) | (b << 16); h = 1: (a >> 16) | (b & 0xffff0000); one v_perm_b32.
              x[q] = perm_b32(w[it][2 * q + 1][m], w[it][2 * q][m], h == 0 ? 0x05040100u : 0x07060302u);
            }
            const int k = 2 * m + h;
            if constexpr (Layout::kSwizzled)
              *reinterpret_cast<mfma_u32x2*>(reinterpret_cast<char*>(dst) + 2 * k * Rows +
                                             (base ^ 2u * Layout::template transposed_xor<Rows>(k))) = mfma_u32x2{x[0], x[1]};
            else if constexpr (Layout::kChainPairs)
              *reinterpret_cast<mfma_u32x2*>(dst + base + Layout::template row_start<Rows>(k)) = mfma_u32x2{x[0], x[1]};
            else
              *reinterpret_cast<mfma_u32x2*>(dst + (c + k) * attention_mfma::lds_row_transposed(Rows) + r) =
                  mfma_u32x2{x[0], x[1]};
          }
      }
    }
  }

  // The loaded rows row-major (row stride lds_row(Cols)): store() of an untransposed stage, and
  // for a transposed one the tile's untransposed copy from the same loads, one 16-byte write per
  // loaded row.
  __device__ __forceinline__ void store_rows(unsigned short* dst, int tid) const {
    if constexpr (Layout::kSwizzled && !Transposed) {
      // Chunk it + 1 lies kRowStep rows below chunk it, which keeps the row's swizzle (kRowStep a
      // multiple of 8): one address, the rest immediate offsets.
      constexpr int kRowStep = Threads / kColChunks;
      static_assert(Threads % kColChunks == 0 && kRowStep % 8 == 0, "chunks it and it + 1 share a swizzle");
      int r, c;
      chunk(tid, r, c);
      const int base = Layout::template row_major<Cols>(r, c);
#pragma unroll
      for (int it = 0; it < kIters; ++it) {
        if (kChunks % Threads != 0 && tid + it * Threads >= kChunks) break;
        *reinterpret_cast<Chunk*>(dst + base + it * kRowStep * Cols) = w[it][0];
      }
      return;
    }
#pragma unroll
    for (int it = 0; it < kIters; ++it) {
      const int i = tid + it * Threads;
      if (kChunks % Threads != 0 && i >= kChunks) break;
      int r, c;
      chunk(i, r, c);
#pragma unroll
      for (int j = 0; j < kRowsPerChunk; ++j) *reinterpret_cast<Chunk*>(dst + (r + j) * lds_row(Cols) + c) = w[it][j];
    }
  }
};

// How a kernel addresses its staged tiles' loads (TileStage): 32-bit offsets per thread from a
// scalar tile base (NarrowOffsets, the two stages' Offsets) or 64-bit row addresses (WideOffsets).
template <class KStage, class VStage>
struct NarrowOffsets {
  typename KStage::Offsets k;
  typename VStage::Offsets v;
  Flag<true> narrow;
};
struct WideOffsets {
  Flag<false> narrow;
};

// Rows run[g .. g + 3] of chain step s: the positions a_k(K, lane, 4g + i), i < 4, of a lane stand
// for 4 consecutive rows of the chained accumulator, so a transposed tile serves them with one
// 8-byte read. Checked here for both halves of the wavefront and every step.
KGEN_HOST_DEVICE constexpr bool chain_runs_of_four(int k) {
  for (int s = 0; s < 32 / k; ++s)
    for (int lane = 0; lane < 64; lane += 32)
      for (int e = 0; e < mfma::operand_elements(k); ++e)
        if (mfma::chain_row(k, s, mfma::a_k(k, lane, e)) != mfma::chain_row(k, s, mfma::a_k(k, lane, e / 4 * 4)) + e % 4 ||
            mfma::chain_row(k, s, mfma::a_k(k, lane, e / 4 * 4)) % 4 != 0)
          return false;
  return true;
}

// Chain step s of K = 8 takes rows 8·s .. 8·s + 7 in order (chain_row(8, s, kk) = 8·s + kk).
KGEN_HOST_DEVICE constexpr bool chain_rows_in_order() {
  for (int s = 0; s < 4; ++s)
    for (int kk = 0; kk < 8; ++kk)
      if (mfma::chain_row(8, s, kk) != 8 * s + kk) return false;
  return true;
}

// The elements at[chain_row(K, s, a_k(K, lane, e))] of one LDS row: runs of 4 consecutive
// elements, one 8-byte read each (`at` 8-byte aligned).
__device__ __forceinline__ mfma_operand lds_chain_runs(const unsigned short* at, int s, int lane) {
  static_assert(chain_runs_of_four(kMfmaK), "chained k runs of 4 rows");
  mfma_s16x4 g[kMfmaElements / 4];
#pragma unroll
  for (int q = 0; q < kMfmaElements / 4; ++q)
    g[q] = *reinterpret_cast<const mfma_s16x4*>(at + mfma::chain_row(kMfmaK, s, mfma::a_k(kMfmaK, lane, 4 * q)));
#if defined(__gfx950__)
  return __builtin_shufflevector(g[0], g[1], 0, 1, 2, 3, 4, 5, 6, 7);
#else
  return g[0];
#endif
}

// The operand of Zᵀ for Z kept transposed in LDS (TileStage<..., true>: tile_t[c][r] = Z[r][c]),
// k (Z's rows) in the order of chain step s: element e = Z[row0 + chain_row(K, s, a_k(K, lane, e))][col0 + a_row(lane)],
// Rows the transposed tile's row length (Z's rows). 8-byte reads, one per 4 elements.
template <int Rows>
__device__ __forceinline__ mfma_operand lds_transposed_operand(const unsigned short* tile_t, int row0, int col0, int s,
                                                               int lane) {
  return lds_chain_runs(tile_t + (col0 + mfma::a_row(lane)) * attention_mfma::lds_row_transposed(Rows) + row0, s, lane);
}

#if defined(__gfx950__)
// The positions (ChainPairLds::chain_position) of the rows chain step s takes, element e of a
// lane: 16·s + 8·h + e (h = lane / 32), for every step and both halves of the wavefront.
KGEN_HOST_DEVICE constexpr bool chain_positions_in_order() {
  for (int s = 0; s < 32 / kMfmaK; ++s)
    for (int lane = 0; lane < 64; lane += 32)
      for (int e = 0; e < kMfmaElements; ++e)
        if (attention_mfma::ChainPairLds::chain_position(mfma::chain_row(kMfmaK, s, mfma::a_k(kMfmaK, lane, e))) !=
            16 * s + 8 * (lane / 32) + e)
          return false;
  return true;
}

// lds_transposed_operand of a ChainPairLds tile (row0, col0 multiples of 32): element e =
// Z[row0 + chain_row(K, s, a_k(K, lane, e))][col0 + a_row(lane)], the 8 elements in one 16-byte
// read of row col0 + a_row(lane); its address is one per-lane offset and a constant.
template <int Rows>
__device__ __forceinline__ mfma_operand lds_chain_pair_operand(const unsigned short* tile_t, int row0, int col0, int s,
                                                               int lane) {
  static_assert(kMfmaK == 16 && chain_positions_in_order(), "a lane's k run: positions 16·s + 8·h .. + 7");
  return *reinterpret_cast<const mfma_operand*>(
      tile_t + col0 * attention_mfma::lds_row_transposed(Rows) +
      attention_mfma::ChainPairLds::row_start<Rows>(mfma::a_row(lane)) + row0 + 16 * s + 8 * (lane / 32));
}
#endif

// Operand with its rows along the tile's rows and k along its columns (contiguous k):
// element e = tile[row0 + a_row(lane)][col0 + a_k(K, lane, e)].
template <int Cols>
__device__ __forceinline__ mfma_operand lds_operand(const unsigned short* tile, int row0, int col0, int lane) {
  mfma_operand v;
  const unsigned short* at = tile + (row0 + mfma::a_row(lane)) * lds_row(Cols) + col0;
#pragma unroll
  for (int e = 0; e < kMfmaElements; ++e) v[e] = static_cast<short>(at[mfma::a_k(kMfmaK, lane, e)]);
  return v;
}

// The same with k in the order of chain step s (the A operand multiplying a chained B):
// element e = tile[row0 + a_row(lane)][col0 + chain_row(K, s, a_k(K, lane, e))]. 8-byte reads
// (col0 a multiple of 4).
template <int Cols>
__device__ __forceinline__ mfma_operand lds_operand_chained(const unsigned short* tile, int row0, int col0, int s,
                                                            int lane) {
  return lds_chain_runs(tile + (row0 + mfma::a_row(lane)) * lds_row(Cols) + col0, s, lane);
}

// Operand straight from a row-major global matrix (kept in registers for a whole kernel):
// element e = src[row0 + b_col(lane)][col0 + b_k(K, lane, e)], zero at rows at or past n_rows.
template <class T>
__device__ __forceinline__ mfma_operand global_operand(const T* src, long long stride, int row0, int n_rows, int col0,
                                                       int lane) {
  mfma_operand v;
  const int row = row0 + mfma::b_col(lane);
  const T* at = src + static_cast<long long>(row) * stride + col0;
#pragma unroll
  for (int e = 0; e < kMfmaElements; ++e) v[e] = row < n_rows ? static_cast<short>(at[mfma::b_k(kMfmaK, lane, e)].bits) : 0;
  return v;
}

// The same operand in one 8-byte (gfx950: 16-byte) load per lane: a lane's elements are
// consecutive columns (b_k(K, lane, e) = b_k(K, lane, 0) + e), which lie inside one aligned
// vector (col0 a multiple of K, rows 16-byte aligned); zero at rows at or past n_rows.
template <class T>
__device__ __forceinline__ mfma_operand global_operand_vector(const T* src, long long stride, int row0, int n_rows,
                                                              int col0, int lane) {
  static_assert(mfma::b_k(kMfmaK, 32, kMfmaElements - 1) == mfma::b_k(kMfmaK, 32, 0) + kMfmaElements - 1,
                "a lane's elements are consecutive columns");
  const int row = row0 + mfma::b_col(lane);
  mfma_operand v = {};
  if (row < n_rows)
    v = *reinterpret_cast<const mfma_operand*>(src + static_cast<long long>(row) * stride + col0 +
                                                mfma::b_k(kMfmaK, lane, 0));
  return v;
}

// B operand of chain step s from an accumulator X (the next product's k runs over X's rows):
// element e = register chain_register(K, s, b_k(K, lane, e)) of x, rounded to T. That register
// depends on e alone (b_k(K, lane, e) mod K/2 = e), which keeps the index a constant.
// gfx950 converts a pair to bf16 or fp16 in one instruction (v_cvt_pk_bf16_f32,
// v_cvt_pk_f16_f32), rounding to nearest even; the other targets round each element
// (types.cuh's from_float: bf16 in software).
template <class T>
__device__ __forceinline__ mfma_operand chained_operand(const mfma_acc& x, int s) {
#if defined(__gfx950__)
  typedef float f2 __attribute__((ext_vector_type(2)));
  typedef unsigned words __attribute__((ext_vector_type(kMfmaElements / 2)));
  words v;
#pragma unroll
  for (int e = 0; e < kMfmaElements; e += 2) {
    const f2 pair = {x[mfma::chain_register(kMfmaK, s, e)], x[mfma::chain_register(kMfmaK, s, e + 1)]};
    if constexpr (is_same<T, bfloat16_t>::value) {
      typedef __bf16 b2 __attribute__((ext_vector_type(2)));
      v[e / 2] = __builtin_bit_cast(unsigned, __builtin_convertvector(pair, b2));
    } else {
      typedef _Float16 h2 __attribute__((ext_vector_type(2)));
      v[e / 2] = __builtin_bit_cast(unsigned, __builtin_convertvector(pair, h2));
    }
  }
  return __builtin_bit_cast(mfma_operand, v);
#else
  if constexpr (is_same<T, half_t>::value) {
    typedef unsigned words __attribute__((ext_vector_type(kMfmaElements / 2)));
    words v;
#pragma unroll
    for (int e = 0; e < kMfmaElements; e += 2)
      v[e / 2] = pack_half2(x[mfma::chain_register(kMfmaK, s, e)], x[mfma::chain_register(kMfmaK, s, e + 1)]);
    return __builtin_bit_cast(mfma_operand, v);
  } else {
    mfma_operand v;
#pragma unroll
    for (int e = 0; e < kMfmaElements; ++e) v[e] = static_cast<short>(from_float<T>(x[mfma::chain_register(kMfmaK, s, e)]).bits);
    return v;
  }
#endif
}

typedef float mfma_f32x2 __attribute__((ext_vector_type(2)));

// Two probabilities (each in [0, 1], or NaN: the softmax P of the forward and of the backward)
// rounded to T, to nearest, packed into one register (the first in bits 0..15). gfx950 converts
// a pair in one instruction (v_cvt_pk_bf16_f32, v_cvt_pk_f16_f32: ties to even). gfx90a and
// gfx942 have no bf16 conversion; there each element gets half a bf16 ulp added to its bit
// pattern (x + 0x8000: a carry into the upper half rounds up) and one v_perm_b32 takes the two
// upper halves: 3 instructions a pair (2 on gfx942: one 64-bit add). That is rounding to nearest
// with ties away from zero (types.cuh's from_float rounds ties to even: the bits differ only
// where the lower 16 bits are exactly 0x8000), within half a bf16 ulp as from_float. Every x in
// [0, 1] keeps its sign and exponent field (no carry out of bit 31 below 0x7fff8000); a NaN stays
// NaN unless the top eight bits of its payload are all ones. fp16 there: pack_half2
// (core/mfma.cuh), ties to even.
template <class T>
__device__ __forceinline__ unsigned pack_probabilities(mfma_f32x2 x) {
#if defined(__gfx950__)
  if constexpr (is_same<T, bfloat16_t>::value) {
    typedef __bf16 b2 __attribute__((ext_vector_type(2)));
    return __builtin_bit_cast(unsigned, __builtin_convertvector(x, b2));
  } else {
    typedef _Float16 h2 __attribute__((ext_vector_type(2)));
    return __builtin_bit_cast(unsigned, __builtin_convertvector(x, h2));
  }
#else
  if constexpr (is_same<T, bfloat16_t>::value) {
#if defined(__gfx942__)
    // Both adds in one 64-bit add (v_lshl_add_u64): no carry crosses from the first element
    // into the second below 0xffff8000.
    const unsigned long long both = __builtin_bit_cast(unsigned long long, x) + 0x0000800000008000ull;
    return perm_b32(static_cast<unsigned>(both >> 32), static_cast<unsigned>(both), 0x07060302u);
#else
    // Elements copied out first: clang 22 bit-casts an element of an ext_vector (x[1]) as the
    // vector's first element.
    const float lo = x[0], hi = x[1];
    return perm_b32(__builtin_bit_cast(unsigned, hi) + 0x8000u, __builtin_bit_cast(unsigned, lo) + 0x8000u,
                    0x07060302u);
#endif
  } else {
    const float lo = x[0], hi = x[1];
    return pack_half2(lo, hi);
  }
#endif
}

// The B operand of chain step s (chained_operand's) from an accumulator whose register pairs
// (2i, 2i + 1) were packed into words[i]: chain_register(K, s, e) = (K/2)·s + e, so the step's
// elements are the words [K/4 · s, K/4 · (s + 1)).
__device__ __forceinline__ mfma_operand chained_words(const unsigned (&words)[mfma::kAccRegisters / 2], int s) {
  typedef unsigned w_t __attribute__((ext_vector_type(kMfmaElements / 2)));
  static_assert(mfma::chain_register(kMfmaK, 1, 0) == kMfmaElements && mfma::chain_register(kMfmaK, 0, 1) == 1,
                "a chain step's elements are consecutive registers");
  w_t v;
#pragma unroll
  for (int i = 0; i < kMfmaElements / 2; ++i) v[i] = words[kMfmaElements / 2 * s + i];
  return __builtin_bit_cast(mfma_operand, v);
}

// chained_operand for an accumulator of probabilities (pack_probabilities' rounding).
template <class T>
__device__ __forceinline__ mfma_operand chained_probabilities(const mfma_acc& x, int s) {
  typedef unsigned w_t __attribute__((ext_vector_type(kMfmaElements / 2)));
  w_t v;
#pragma unroll
  for (int e = 0; e < kMfmaElements; e += 2)
    v[e / 2] = pack_probabilities<T>(mfma_f32x2{x[mfma::chain_register(kMfmaK, s, e)], x[mfma::chain_register(kMfmaK, s, e + 1)]});
  return __builtin_bit_cast(mfma_operand, v);
}

// X = Σ_t tile-rows(row0 .. row0 + 31) · frag[t]: the product of 32 rows of an LDS tile (over
// D columns) with operands kept in registers (global_operand over the same D columns). The tile's
// operands are read G at a time and made available together (operands_together): one wait per
// G reads.
template <class T, int D, int G = 1>
__device__ __forceinline__ mfma_acc lds_rows_times(const unsigned short* tile, int row0, const mfma_operand (&frag)[D / kMfmaK],
                                                   int lane) {
  static_assert(D / kMfmaK % G == 0, "whole groups");
  mfma_acc x = mfma_zero();
#pragma unroll
  for (int t = 0; t < D / kMfmaK; t += G) {
    mfma_operand a[G];
#pragma unroll
    for (int g = 0; g < G; ++g) a[g] = lds_operand<D>(tile, row0, (t + g) * kMfmaK, lane);
    operands_together(a);
#pragma unroll
    for (int g = 0; g < G; ++g) x = mfma_32x32<T>(a[g], frag[t + g], x);
  }
  return x;
}

#if !defined(__gfx950__)
// The forward's reads of its SwizzledLds tiles (gfx90a, gfx942: K = 8). Each lane's swizzle is a
// per-lane XOR on the address bits that a compile-time offset also sets, split off below so
// that the offsets above them stay immediates: per lane, 4 distinct K addresses (d = 128) and
// 8 Vᵀ addresses (64 keys) serve every read of a tile.

// The k-steps of a product over D columns in the order of 16-byte reads: step t takes columns
// 16·(t / 2) + 8·h + 4·(t mod 2) + e of lane half h (h = lane / 32, e < 4), so one 16-byte read
// of a row serves steps 2i and 2i + 1. A register operand for the same product
// (global_operand) starts step t at column k_unit_column(t, lane) − a_k(K, lane, 0).
__device__ __forceinline__ int k_unit_column(int t, int lane) { return 16 * (t / 2) + 8 * (lane / 32) + 4 * (t % 2); }

// Per-lane element offsets of the forward's reads of its SwizzledLds tiles, made opaque once per
// kernel (opaque_u32) so that the offsets the reads add to them stay immediates: 4 for K (one per
// 16 columns of every 64) and 8 for Vᵀ (one per 8 keys of every 64; 4 at BN = 32). D: K's row
// length, BN: Vᵀ's.
template <int D, int BN>
struct SwizzledReads {
  static constexpr int kK = 4;
  static constexpr int kVt = BN >= 64 ? 8 : BN / 8;
  unsigned k[kK];    // SwizzledLds::row_major<D>(a_row(lane), k_unit_column(2j, lane)), j < 4
  unsigned vt[kVt];  // SwizzledLds::transposed<BN>(a_row(lane), 8j + 4·(lane / 32))

  __device__ __forceinline__ explicit SwizzledReads(int lane) {
    const int row = mfma::a_row(lane);
#pragma unroll
    for (int j = 0; j < kK; ++j)
      k[j] = opaque_u32(attention_mfma::SwizzledLds::row_major<D>(row, k_unit_column(2 * j, lane)));
#pragma unroll
    for (int j = 0; j < kVt; ++j)
      vt[j] = opaque_u32(attention_mfma::SwizzledLds::transposed<BN>(row, 8 * j + 4 * (lane / 32)));
  }

  // X = Σ_t K-rows(row0 .. row0 + 31) · frag[t] over D columns (row0 a multiple of 32), frag[t]
  // over k_unit_column's columns: one 16-byte read per two k-steps. Column 16·i ^ the lane's
  // bits (3..5) = (16·i & ~63) + k[i mod 4]. The operands of G k-steps (G / 2 reads) are made
  // available together (operands_together): one wait per G / 2 reads.
  template <class T, int G = 2>
  __device__ __forceinline__ mfma_acc k_rows_times(const unsigned short* tile, int row0,
                                                   const mfma_operand (&frag)[D / kMfmaK]) const {
    static_assert(kMfmaK == 8, "two k-steps per 16-byte read");
    static_assert((G == 2 || G == 4 || G == 8) && D / kMfmaK % G == 0, "whole groups of 16-byte reads");
    mfma_acc x = mfma_zero();
#pragma unroll
    for (int t0 = 0; t0 < D / kMfmaK; t0 += G) {
      mfma_operand a[G];
#pragma unroll
      for (int t = t0; t < t0 + G; t += 2) {
        const mfma_u32x4 g =
            *reinterpret_cast<const mfma_u32x4*>(tile + row0 * D + (8 * t & ~63) + k[t / 2 % kK]);
        if constexpr (G == 2) {
          x = mfma_32x32<T>(__builtin_bit_cast(mfma_operand, mfma_u32x2{g[0], g[1]}), frag[t], x);
          x = mfma_32x32<T>(__builtin_bit_cast(mfma_operand, mfma_u32x2{g[2], g[3]}), frag[t + 1], x);
        } else {
          a[t - t0] = __builtin_bit_cast(mfma_operand, mfma_u32x2{g[0], g[1]});
          a[t - t0 + 1] = __builtin_bit_cast(mfma_operand, mfma_u32x2{g[2], g[3]});
        }
      }
      if constexpr (G > 2) {
        operands_together(a);
#pragma unroll
        for (int t = 0; t < G; ++t) x = mfma_32x32<T>(a[t], frag[t0 + t], x);
      }
    }
    return x;
  }

  // lds_transposed_operand of the Vᵀ tile (row0, col0 multiples of 32): element e =
  // V[row0 + chain_row(K, s, a_k(K, lane, e))][col0 + a_row(lane)], keys row0 + 8·s + 4·h .. + 3
  // of row col0 + a_row(lane) in one 8-byte read. vt_swizzle depends on the row mod 32 alone.
  __device__ __forceinline__ mfma_operand vt_operand(const unsigned short* tile_t, int row0, int col0, int s) const {
    static_assert(kMfmaK == 8 && chain_rows_in_order(), "a lane's k run: rows 8·s + 4·h .. + 3");
    const int key = row0 + 8 * s;
    return *reinterpret_cast<const mfma_operand*>(tile_t + col0 * BN + (key & ~63) + vt[key % 64 / 8]);
  }
};
#endif

// X = A-rows(row0 .. row0 + 31 of a_tile) · B-rows(b_row0 .. b_row0 + 31 of b_tile)ᵀ over D
// columns: the product of two row-major LDS tiles, the second one's rows as X's columns.
template <class T, int D>
__device__ __forceinline__ mfma_acc lds_rows_times_rows(const unsigned short* a_tile, int a_row0,
                                                        const unsigned short* b_tile, int b_row0, int lane) {
  mfma_acc x = mfma_zero();
#pragma unroll
  for (int t = 0; t < D / kMfmaK; ++t)
    x = mfma_32x32<T>(lds_operand<D>(a_tile, a_row0, t * kMfmaK, lane), lds_operand<D>(b_tile, b_row0, t * kMfmaK, lane), x);
  return x;
}

// Whether key `key` is visible to query row `row`: below n_k and, causal, at most row + diag
// (diag = n_k − n_q, the bottom-right aligned mask).
template <bool Causal>
__device__ __forceinline__ bool visible(int key, int row, int n_k, int diag) {
  return key < n_k && (!Causal || key <= row + diag);
}

// Where a wave of a query-major kernel (the forward, the backward's dQ kernel) works: BM query
// rows per block (blockIdx.x), 32 per wave; heads and batch from blockIdx.y and z.
struct QueryWave {
  int tid, wave, lane;
  int m0, q0, query;     // the block's and the wave's first query row; this lane's (C and B layouts)
  int head, kv_head, batch;
  int diag;              // n_k − n_q
  int n_end, wave_end;   // keys [0, n_end) are visible to some row of the block, [0, wave_end) of the wave
  bool active;           // the wave has a row below n_q
};

template <int BM, bool Causal>
__device__ __forceinline__ QueryWave query_wave(int n_q, int n_k, int head_group) {
  QueryWave w;
  w.tid = threadIdx.x;
  w.wave = w.tid / 64;
  w.lane = w.tid % 64;
  w.m0 = blockIdx.x * BM;
  w.q0 = w.m0 + w.wave * attention_mfma::kWaveRows;
  w.query = w.q0 + mfma::c_col(w.lane);
  w.head = blockIdx.y;
  w.kv_head = w.head / head_group;
  w.batch = blockIdx.z;
  w.diag = n_k - n_q;
  w.n_end = w.wave_end = n_k;
  if constexpr (Causal) {
    w.n_end = imin(n_k, imin(w.m0 + BM, n_q) + w.diag);
    w.wave_end = imin(n_k, imin(w.q0 + attention_mfma::kWaveRows, n_q) + w.diag);
  }
  w.active = w.q0 < n_q;
  return w;
}

}  // namespace mfma_detail
}  // namespace kgen
