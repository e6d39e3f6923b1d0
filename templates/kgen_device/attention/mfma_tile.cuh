// Tile moves of the MFMA attention kernels (forward_mfma.cuh, backward_mfma.cuh): global rows
// into padded LDS tiles, and MFMA operands gathered from LDS, global memory or an accumulator,
// each placed by the lane layouts of kgen_device/core/mfma_layout.h. A and B operands share one
// lane mapping (a lane's row or column is lane mod 32, its k run a_k = b_k), so one gather serves
// either: `row` below is A's row or B's column. Written for clarity, not speed: transposed
// gathers read LDS one element at a time.
#pragma once

#include "kgen_device/attention/mfma_config.h"
#include "kgen_device/core/math.cuh"
#include "kgen_device/core/mfma.cuh"
#include "kgen_device/core/types.cuh"

namespace kgen {
namespace mfma_detail {

using attention_mfma::lds_row;

// Rows x Cols tile (Cols a multiple of 8) of a row-major global matrix of 16-bit elements (row
// stride `stride` elements, rows 16-byte aligned) from row `row0` into LDS (row stride
// lds_row(Cols)); rows at or past `n_rows` become zero. 16-byte chunks spread over the block.
template <int Rows, int Cols, int Threads, class T>
__device__ __forceinline__ void load_tile(unsigned short* dst, const T* src, long long stride, int row0, int n_rows,
                                          int tid) {
  constexpr int kChunks = Cols / 8;
  for (int i = tid; i < Rows * kChunks; i += Threads) {
    const int r = i / kChunks;
    const int c = (i % kChunks) * 8;
    unsigned w[4] = {0u, 0u, 0u, 0u};
    if (row0 + r < n_rows) {
      const unsigned* g = reinterpret_cast<const unsigned*>(src + static_cast<long long>(row0 + r) * stride + c);
#pragma unroll
      for (int j = 0; j < 4; ++j) w[j] = g[j];
    }
    unsigned* l = reinterpret_cast<unsigned*>(dst + r * lds_row(Cols) + c);
#pragma unroll
    for (int j = 0; j < 4; ++j) l[j] = w[j];
  }
}

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
// element e = tile[row0 + a_row(lane)][col0 + chain_row(K, s, a_k(K, lane, e))].
template <int Cols>
__device__ __forceinline__ mfma_operand lds_operand_chained(const unsigned short* tile, int row0, int col0, int s,
                                                            int lane) {
  mfma_operand v;
  const unsigned short* at = tile + (row0 + mfma::a_row(lane)) * lds_row(Cols) + col0;
#pragma unroll
  for (int e = 0; e < kMfmaElements; ++e)
    v[e] = static_cast<short>(at[mfma::chain_row(kMfmaK, s, mfma::a_k(kMfmaK, lane, e))]);
  return v;
}

// Transposed and chained: the operand of Zᵀ for Z stored row-major in the tile, its k (Z's rows)
// in the order of chain step s: element e = tile[row0 + chain_row(K, s, a_k(K, lane, e))][col0 + a_row(lane)].
template <int Cols>
__device__ __forceinline__ mfma_operand lds_operand_transposed(const unsigned short* tile, int row0, int col0, int s,
                                                               int lane) {
  mfma_operand v;
  const unsigned short* at = tile + row0 * lds_row(Cols) + col0 + mfma::a_row(lane);
#pragma unroll
  for (int e = 0; e < kMfmaElements; ++e)
    v[e] = static_cast<short>(at[mfma::chain_row(kMfmaK, s, mfma::a_k(kMfmaK, lane, e)) * lds_row(Cols)]);
  return v;
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

// B operand of chain step s from an accumulator X (the next product's k runs over X's rows):
// element e = register chain_register(K, s, b_k(K, lane, e)) of x, rounded to T. That register
// depends on e alone (b_k(K, lane, e) mod K/2 = e), which keeps the index a constant.
template <class T>
__device__ __forceinline__ mfma_operand chained_operand(const mfma_acc& x, int s) {
  mfma_operand v;
#pragma unroll
  for (int e = 0; e < kMfmaElements; ++e) v[e] = static_cast<short>(from_float<T>(x[mfma::chain_register(kMfmaK, s, e)]).bits);
  return v;
}

// X = Σ_t tile-rows(row0 .. row0 + 31) · frag[t]: the product of 32 rows of an LDS tile (over
// D columns) with operands kept in registers (global_operand over the same D columns).
template <class T, int D>
__device__ __forceinline__ mfma_acc lds_rows_times(const unsigned short* tile, int row0, const mfma_operand (&frag)[D / kMfmaK],
                                                   int lane) {
  mfma_acc x = mfma_zero();
#pragma unroll
  for (int t = 0; t < D / kMfmaK; ++t) x = mfma_32x32<T>(lds_operand<D>(tile, row0, t * kMfmaK, lane), frag[t], x);
  return x;
}

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
