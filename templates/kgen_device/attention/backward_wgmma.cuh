// Hopper attention backward (sm_90a): the key-major kernel of backward_fa2.cuh on warpgroup MMA.
//
// Grid (ceil(n_k / BN), heads_kv, batch) with BN = 64 · WGs; WGs warpgroups of 128 threads,
// warpgroup wg owns keys [n0 + 64·wg, +64) and warp w of it 16 of them. The block walks every
// query tile of BM = 64 rows of every query head of its kv group (GQA: dK and dV sum over the
// group in registers), skipping causal tiles that see none of its keys, exactly as
// attention_backward_fa2_kv. Per query tile and warpgroup (keys as rows, queries as columns):
//   Sᵀ = K_wg·Qᵀ and dPᵀ = V_wg·dOᵀ   wgmma m64n64k16, A (K or V rows) and B (Q or dO) both
//                                      K-major by descriptor, two groups in flight;
//   Pᵀ = exp2(Sᵀ·scale_log2 − lse2), masked; dSᵀ = Pᵀ∘(dPᵀ − delta)   (registers);
//   dV += Pᵀ·dO and dK += dSᵀ·Q       wgmma m64nDk16, A = Pᵀ or dSᵀ packed to 16 bits in
//                                      registers, B = dO or Q MN-major (transposed by descriptor);
//   with AtomicDQ: dSᵀ to shared memory (each warpgroup its 64 rows, then a block barrier), then
//     dQ = dS·K over all BN keys by wgmma with A = dS read M-major and B = K MN-major, warpgroup
//     wg taking the columns [wg·D/WGs, +D/WGs), added to the fp32 accumulator with
//     red_add2 (attention_backward_dq_convert scales and converts).
// Epilogue: dK = scale·Σ dSᵀ·Q and dV to global memory.
//
// Shared memory (dynamic; the base rounded up to 1024 bytes): K, V (wgmma::Sw128<BN, D>), two
// stages of Q and dO (Sw128<BM, D>), dSᵀ (Sw128<BN, BM>, rows = keys), two stages of the rows'
// lse2 and delta. Q/dO tile it+1 loads by cp.async while tile it is computed.
//
// Masking and requirements: as backward_fa2.cuh (rows >= n_q zero-filled, their lse2 and delta
// too, so P = 1 multiplies zero rows and dS = 0; keys >= n_k zero-filled and masked, 16-byte
// aligned pointers and row strides, p.head_dim == HeadDim).
// Head dims: D is the tile's (64 or 128), HeadDim the tensors' (a multiple of 8 in (D − 64, D]).
// Sᵀ and dPᵀ reduce over HeadDim rounded up to 16 (zero-filled past HeadDim); dV, dK and dQ run
// all D columns (wgmma's N), and the columns past that rounding, never loaded, are never stored
// or added.
#pragma once

#include "kgen_device/attention/backward_cols_config.h"
#include "kgen_device/attention/backward_config.h"
#include "kgen_device/attention/backward_fa2.cuh"
#include "kgen_device/core/atomic.cuh"
#include "kgen_device/core/block.cuh"
#include "kgen_device/core/tma.cuh"
#include "kgen_device/core/wgmma.cuh"

namespace kgen {
namespace bwd_detail {

template <int D, int BM, int WGs, bool AtomicDQ>
constexpr int kWgKvSmemBytes = attention_bwd::wgmma_kv_smem_bytes(D, BM, WGs, AtomicDQ);

// Byte step of k-step kk (16 elements) inside a K-major Sw128 tile with column blocks of
// `block_bytes`: 32 bytes inside a 64-column block, a whole block every 4 steps.
__device__ __forceinline__ unsigned k_major_step(int kk, int block_bytes) {
  return static_cast<unsigned>((kk / 4) * block_bytes + (kk % 4) * 32);
}

// acc (+)= A·Bᵀ: wgmma m64nNk16 over HeadDim rounded up to 16, A (64 rows) and B (N rows) K-major
// by descriptor in Sw128 tiles of ABlockBytes / BBlockBytes column blocks; `accumulate` = 0
// overwrites acc with the first k-step. The caller fences and commits.
template <class T, int N, int HeadDim, int ABlockBytes, int BBlockBytes>
__device__ __forceinline__ void wgmma_abt(float (&acc)[N / 2], unsigned long long a, unsigned long long b,
                                          int accumulate) {
#pragma unroll
  for (int kk = 0; kk < (HeadDim + 15) / 16; ++kk)
    wgmma::Mma<N>::template ss<T, 0, 0>(acc, a + (k_major_step(kk, ABlockBytes) >> 4),
                                         b + (k_major_step(kk, BBlockBytes) >> 4), accumulate | (kk > 0));
}

// acc += X·B: X (64 rows × K, fp32 accumulator registers of an earlier wgmma) rounded to 16 bits
// as the A operand in registers, B a K-row Sw128 tile read MN-major from `b_mn` (the descriptor
// of its first row; k-step kk is 16 rows of 128 bytes). The caller fences and commits.
template <class T, int N, int K>
__device__ __forceinline__ void wgmma_xb(float (&acc)[N / 2], const unsigned (&x)[K / 16][4],
                                         unsigned long long b_mn) {
#pragma unroll
  for (int kk = 0; kk < K / 16; ++kk) wgmma::Mma<N>::template rs<T, 1>(acc, x[kk], b_mn + ((kk * 16 * 128) >> 4), 1);
}

// Sᵀ = K·Qᵀ into s and dPᵀ = V·dOᵀ into dp: wgmma m64nNk16 over HeadDim rounded up to 16, every
// operand K-major by descriptor (K/V and Q/dO tiles of KVBlockBytes / QBlockBytes column
// blocks). One commit group, or with TwoGroups one per product (Sᵀ first).
// HeadDimV: v's and dO's head dim (dPᵀ reduces over it rounded up to 16) when below q's.
template <class T, int N, int HeadDim, int KVBlockBytes, int QBlockBytes, bool TwoGroups, int HeadDimV = HeadDim>
__device__ __forceinline__ void issue_sdp(float (&s)[N / 2], float (&dp)[N / 2], unsigned long long k_a,
                                          unsigned long long v_a, unsigned long long q_b, unsigned long long do_b) {
  wgmma::fence();
  wgmma_abt<T, N, HeadDim, KVBlockBytes, QBlockBytes>(s, k_a, q_b, 0);
  if constexpr (TwoGroups) wgmma::commit();
  wgmma_abt<T, N, HeadDimV, KVBlockBytes, QBlockBytes>(dp, v_a, do_b, 0);
  wgmma::commit();
}

// The block's place in a key-major walk of BN keys per block: its first key, kv head and batch
// (bwd_detail::key_major_block: heaviest first in small causal grids), the lengths and the
// causal diagonal n_k − n_q.
struct KeyBlock {
  int n0, kv_head, batch, n_q, n_k, diag;
  template <bool Causal>
  __device__ __forceinline__ static KeyBlock of(const AttentionBackwardParams& p, int bn) {
    const auto [x, y, z] = key_major_block<Causal>();
    return {x * bn, y, z, p.n_q, p.n_k, p.n_k - p.n_q};
  }
};

// The key-major regions of dynamic shared memory from a base rounded up to 1024 bytes (the
// 128-byte swizzle repeats every 1024 bytes), the statistics `stats_offset` bytes past it.
template <int KVBytes, int QBytes, int BM>
__device__ __forceinline__ KeyMajorSmem<KVBytes, QBytes, BM> wgmma_key_major_smem(int stats_offset) {
  unsigned char* smem_raw = dynamic_smem();
  const unsigned raw = smem_u32(smem_raw);
  const unsigned base = (raw + 1023u) & ~1023u;
  return {base, reinterpret_cast<float*>(smem_raw + (base - raw) + stats_offset)};
}

// Shared memory of attention_backward_wgmma_kv_async from a base rounded up to 1024 bytes: K and
// V (Sw128<BN, D>), kStages stages of Q and dO (Sw128<BM, D>), kDsBufs dSᵀ tiles (Sw128<BN, BM>),
// with TmaDQ the fp32 dQ staging tile (BM rows × D in boxes of 64 rows × 32 columns, each
// 128-byte swizzled: box c holds columns [32·c, +32), and with 128-row tiles box (D / 32)·r + c
// those of the rows [64·r, +64)), kStages stages of BM lse2 and BM delta values, then the mbarriers
// full[kStages], empty[kStages], ds_full[kDsBufs], ds_empty[kDsBufs]; with DqWriter
// (backward_ws.cuh) then dq_full[2 warpgroups] and dq_empty[2].
template <int D, int BM, int BN, bool TmaDQ = false, bool DqWriter = false>
struct AsyncKvSmem {
  static constexpr int kStages = attention_bwd::wgmma_kv_async_stages(BM, TmaDQ);
  static constexpr int kDsBufs = attention_bwd::wgmma_kv_async_ds_bufs(D, BM, TmaDQ);
  using KVTile = wgmma::Sw128<BN, D>;
  using QTile = wgmma::Sw128<BM, D>;
  using DsTile = wgmma::Sw128<BN, BM>;
  static constexpr int kDqBoxBytes = 64 * 128;  // 64 rows of 32 fp32 columns
  static constexpr int kDqOffset = 2 * KVTile::kBytes + 2 * kStages * QTile::kBytes + kDsBufs * DsTile::kBytes;
  static constexpr int kStatsOffset = kDqOffset + (TmaDQ ? BM * D * 4 : 0);
  static constexpr int kBarrierOffset = kStatsOffset + kStages * 2 * BM * 4;
  static constexpr int kRingBarriers = 2 * (kStages + kDsBufs);
  static constexpr int kBytes = 1024 + kBarrierOffset + (kRingBarriers + (DqWriter ? 4 : 0)) * 8;
  unsigned base;  // shared-memory address, 1024-byte aligned
  float* stats_base;
  __device__ __forceinline__ static AsyncKvSmem at(unsigned char* raw) {
    const unsigned raw_addr = smem_u32(raw);
    const unsigned base = (raw_addr + 1023u) & ~1023u;
    return {base, reinterpret_cast<float*>(raw + (base - raw_addr) + kStatsOffset)};
  }
  __device__ __forceinline__ unsigned k() const { return base; }
  __device__ __forceinline__ unsigned v() const { return base + KVTile::kBytes; }
  __device__ __forceinline__ unsigned q(int stage) const { return base + 2 * KVTile::kBytes + stage * 2 * QTile::kBytes; }
  __device__ __forceinline__ unsigned d_o(int stage) const { return q(stage) + QTile::kBytes; }
  __device__ __forceinline__ unsigned ds(int buf) const {
    return base + 2 * KVTile::kBytes + 2 * kStages * QTile::kBytes + buf * DsTile::kBytes;
  }
  // The staging box of the dQ columns [32·box, +32).
  __device__ __forceinline__ unsigned dq_box(int box) const { return base + kDqOffset + box * kDqBoxBytes; }
  __device__ __forceinline__ float* stats(int stage) const { return stats_base + stage * 2 * BM; }
  __device__ __forceinline__ unsigned barrier(int i) const { return base + kBarrierOffset + 8 * i; }
  __device__ __forceinline__ unsigned full(int stage) const { return barrier(stage); }
  __device__ __forceinline__ unsigned empty(int stage) const { return barrier(kStages + stage); }
  __device__ __forceinline__ unsigned ds_full(int buf) const { return barrier(2 * kStages + buf); }
  __device__ __forceinline__ unsigned ds_empty(int buf) const { return barrier(2 * kStages + kDsBufs + buf); }
  // DqWriter: warpgroup wg's staging boxes written (dq_full) and read by the writer's reduce-adds
  // (dq_empty).
  __device__ __forceinline__ unsigned dq_full(int wg) const { return barrier(kRingBarriers + wg); }
  __device__ __forceinline__ unsigned dq_empty(int wg) const { return barrier(kRingBarriers + 2 + wg); }
};

// The lse2 and delta of the BM rows from m0 of (batch, head) into `stage` of `sm`, by 4-byte
// cp.async from the first 2·BM threads (a plain load would stall the warpgroup's next wgmma on its
// latency); rows >= n_q get zeros.
template <int BM, int Threads, class Smem>
__device__ __forceinline__ void load_tile_stats(const AttentionBackwardParams& p, const Smem& sm, int batch, int head,
                                                int m0, int stage, int tid) {
  static_assert(2 * BM <= Threads, "one thread per statistic");
  if (tid < 2 * BM) {
    const int which = tid / BM;  // 0: lse2, 1: delta
    const int row = m0 + tid % BM;
    const float* src = (which == 0 ? p.lse2 : p.delta) + stat_row(p, batch, head, 0);
    cp_async_4(smem_u32(sm.stats(stage) + tid), row < p.n_q ? src + row : src, row < p.n_q);
  }
}

// The same statistics into `st` from the 32 lanes of one warp (the warp-specialised kernels'
// load warps; row_base: stat_row of the tile's head, m0: its first row).
template <int BM>
__device__ __forceinline__ void warp_load_tile_stats(const AttentionBackwardParams& p, float* st, long long row_base,
                                                     int m0, int lane) {
#pragma unroll
  for (int i = 0; i < 2 * BM / 32; ++i) {
    const int idx = lane + 32 * i;  // [0, BM): lse2, [BM, 2·BM): delta
    const int row = m0 + idx % BM;
    const float* src = (idx < BM ? p.lse2 : p.delta) + row_base;
    cp_async_4(smem_u32(st + idx), row < p.n_q ? src + row : src, row < p.n_q);
  }
}

// Issues the cp.async loads of query tile `it` of `walk` into `stage` of `sm`: the Q and dO tiles
// (Threads threads; dO's HeadDimV columns) and the rows' lse2 and delta (load_tile_stats). Rows
// >= n_q are zero-filled: those rows have zero Q and dO, so P = 1 there multiplies zeros (dV, dK)
// and dS = 0.
template <class T, int BM, int D, int Threads, class QTile, int HeadDim, int HeadDimV = HeadDim, class Walk, class Smem>
__device__ __forceinline__ void load_query_tile_async(const AttentionBackwardParams& p, const Walk& walk,
                                                      const Smem& sm, int kv_head, int batch, int it, int stage,
                                                      int tid) {
  const int head = walk.head(kv_head, it);
  const int m0 = walk.m0(it);
  fa2_detail::load_tile_async<T, BM, D, Threads, QTile, HeadDim>(sm.q(stage), head_ptr<const T>(p.q, batch, head),
                                                                 p.q.stride_n, m0, p.n_q, tid);
  fa2_detail::load_tile_async<T, BM, D, Threads, QTile, HeadDimV>(sm.d_o(stage), head_ptr<const T>(p.d_o, batch, head),
                                                                  p.d_o.stride_n, m0, p.n_q, tid);
  load_tile_stats<BM, Threads>(p, sm, batch, head, m0, stage, tid);
}

// Column-share steps of attention_backward_wgmma_kv_cols on one piece of Cols columns (32, 64 or
// 128; the accumulators hold at least Cols / 2 registers): dQ = dS·K over BN keys (A = dS read
// M-major from the dSᵀ tile, B = K MN-major) and dV += Pᵀ·dO, dK += dSᵀ·Q over BM queries
// (A = Pᵀ or dSᵀ K-major, one 64-column block: k-step kk is 32 bytes along its rows; B = dO or Q
// MN-major); the caller fences and commits.
template <class T, int Cols, int BN, int N>
__device__ __forceinline__ void wgmma_cols_dq(float (&dq)[N], unsigned long long ds_m, unsigned long long k_b) {
  static_assert(Cols / 2 <= N, "the accumulator holds Cols columns");
  auto& acc = reinterpret_cast<float(&)[Cols / 2]>(dq);
#pragma unroll
  for (int kk = 0; kk < BN / 16; ++kk)
    wgmma::Mma<Cols>::template ss<T, 1, 1>(acc, ds_m + ((kk * 16 * 128) >> 4), k_b + ((kk * 16 * 128) >> 4), kk > 0);
}

// WithDv = false: dK alone (the piece holds no column of v's narrower head dim).
template <class T, int Cols, int BM, int N, bool WithDv = true>
__device__ __forceinline__ void wgmma_cols_dkdv(float (&dv)[N], float (&dk)[N], unsigned long long p_a,
                                                unsigned long long ds_a, unsigned long long do_b, unsigned long long q_b) {
  static_assert(Cols / 2 <= N, "the accumulators hold Cols columns");
  auto& v = reinterpret_cast<float(&)[Cols / 2]>(dv);
  auto& k = reinterpret_cast<float(&)[Cols / 2]>(dk);
  if constexpr (WithDv) {
#pragma unroll
    for (int kk = 0; kk < BM / 16; ++kk)
      wgmma::Mma<Cols>::template ss<T, 0, 1>(v, p_a + ((kk * 32) >> 4), do_b + ((kk * 16 * 128) >> 4), 1);
  }
#pragma unroll
  for (int kk = 0; kk < BM / 16; ++kk)
    wgmma::Mma<Cols>::template ss<T, 0, 1>(k, ds_a + ((kk * 32) >> 4), q_b + ((kk * 16 * 128) >> 4), 1);
}

// Top of query tile `it`: waits for its loads and for every warpgroup to be done with tile
// it − 1 (a block barrier), then issues the loads of tile it + 1 (of `total`) into the stage
// other than `stage`.
template <class T, int BM, int D, int Threads, class QTile, int HeadDim, int HeadDimV = HeadDim, class Walk, class Smem>
__device__ __forceinline__ void next_query_tile(const AttentionBackwardParams& p, const Walk& walk, const Smem& sm,
                                                int kv_head, int batch, int it, int total, int stage, int tid) {
  cp_async_wait<0>();
  wgmma::fence_proxy_async();
  __syncthreads();
  if (it + 1 < total)
    load_query_tile_async<T, BM, D, Threads, QTile, HeadDim, HeadDimV>(p, walk, sm, kv_head, batch, it + 1, stage ^ 1,
                                                                       tid);
  cp_async_commit();
}

// Adds this warp's 16 rows (from row0; rows >= n_q skipped; g, t: the lane's place, wgmma::Lane) of a wgmma accumulator over Cols
// columns to the fp32 dQ rows of HeadDim at `acc_base`, columns col0 + [0, cols) below HeadDim,
// with red_add2 (the accumulator layout of wgmma.cuh: two adjacent columns per register pair).
template <int Cols, int D, int HeadDim>
__device__ __forceinline__ void add_dq_rows(float* acc_base, const float (&dq)[Cols / 2], int row0, int n_q,
                                            int col0, int cols, int g, int t) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = row0 + g + 8 * h;
    if (row >= n_q) continue;
    float* acc_row = acc_base + static_cast<long long>(row) * HeadDim + col0 + 2 * t;
#pragma unroll
    for (int j = 0; j < Cols / 8; ++j)
      if (8 * j < cols && (HeadDim == D || col0 + 8 * j < HeadDim))
        red_add2(acc_row + 8 * j, dq[4 * j + 2 * h], dq[4 * j + 2 * h + 1]);
  }
}

// Bottom of a query tile: every wgmma of this warpgroup done, dV and dK readable again.
template <int N>
__device__ __forceinline__ void end_query_tile(float (&dv)[N], float (&dk)[N]) {
  wgmma::wait<0>();
  wgmma::fence_operand(dv);
  wgmma::fence_operand(dk);
}

// Stores this warp's 16 rows (from row0; rows >= row_end skipped) of two wgmma accumulators over
// Cols columns, `a` times p.scale and `b` as they are, to the columns col0 + [0, cols_a) of the
// rows of `dst_a` and col0 + [0, cols_b) of those of `dst_b` (batch, head; none where the count
// is <= 0), once the last cp.async landed.
template <class T, int Cols, int StoreCols = Cols>
__device__ __forceinline__ void store_pair(const AttentionBackwardParams& p, const AttentionTensorArg& dst_a,
                                           const AttentionTensorArg& dst_b, int batch, int head, int col0, int row0,
                                           int row_end, const float (&a)[Cols / 2], const float (&b)[Cols / 2],
                                           int cols_a = StoreCols, int cols_b = StoreCols) {
  cp_async_wait<0>();
  using Acc = const float(&)[1][Cols / 8][4];
  store_rows<T, 1, Cols, StoreCols>(head_ptr<T>(dst_a, batch, head) + col0, dst_a.stride_n, row0, row_end,
                                    reinterpret_cast<Acc>(a), p.scale, cols_a);
  store_rows<T, 1, Cols, StoreCols>(head_ptr<T>(dst_b, batch, head) + col0, dst_b.stride_n, row0, row_end,
                                    reinterpret_cast<Acc>(b), 1.f, cols_b);
}

// Epilogue of the key-major kernels: stores this warp's 16 key rows (from key0) of the dK (times
// p.scale) and dV accumulators over Cols columns to the columns col0 + [0, cols) of the kv
// head's dK rows and col0 + [0, cols_v) of its dV rows (v's head dim may be below k's).
template <class T, int Cols, int StoreCols = Cols>
__device__ __forceinline__ void store_dkdv(const AttentionBackwardParams& p, int batch, int kv_head, int col0, int key0,
                                           const float (&dk)[Cols / 2], const float (&dv)[Cols / 2],
                                           int cols = StoreCols, int cols_v = StoreCols) {
  store_pair<T, Cols, StoreCols>(p, p.dk, p.dv, batch, kv_head, col0, key0, p.n_k, dk, dv, cols, cols_v);
}

// GroupSplit epilogue: adds this warp's 16 key rows (from key0; keys >= n_k skipped; g, t: the
// lane's place) of scale·dK and dV (accumulators over D columns, the first HeadDim of them
// added) to the fp32 rows of the K/V head in dkv_accum (dK rows, then as many dV rows), with
// red_add2.
template <int D, int HeadDim>
__device__ __forceinline__ void add_dkdv_rows(const AttentionBackwardParams& p, int batch, int kv_head, int key0,
                                              float (&dk)[D / 2], const float (&dv)[D / 2], int g, int t) {
#pragma unroll
  for (int i = 0; i < D / 2; ++i) dk[i] *= p.scale;
  const long long dv_rows = static_cast<long long>(p.batch) * p.heads_kv * p.n_k;
  float* dk_base = p.dkv_accum + (static_cast<long long>(batch) * p.heads_kv + kv_head) * p.n_k * HeadDim;
  add_dq_rows<D, D, HeadDim>(dk_base, dk, key0, p.n_k, 0, D, g, t);
  add_dq_rows<D, D, HeadDim>(dk_base + dv_rows * HeadDim, dv, key0, p.n_k, 0, D, g, t);
}

// MN-major B descriptor of the columns [col, col + N) of a 128-byte-swizzled tile at `tile` with
// column blocks of BlockBytes (rows = k): the block holding `col`, then 2 bytes per column inside
// its 128-byte rows (the piece must stay inside the block).
template <int BlockBytes>
__device__ __forceinline__ unsigned long long mn_major_cols(unsigned tile, int col) {
  return wgmma::desc_sw128(tile + (col / 64) * BlockBytes + (col % 64) * 2, BlockBytes, 1024);
}

// The template arguments every wgmma backward kernel takes: 16-bit T, query tiles of 64 rows (one
// wgmma M) or 128 on the 64-column tile, and a HeadDim that pads to the tile's D (a multiple of 8
// in (D − 64, D]).
template <class T, int D, int BM, int HeadDim>
__device__ __forceinline__ constexpr void check_wgmma_backward_args() {
  static_assert(is_same<T, half_t>::value || is_same<T, bfloat16_t>::value,
                "the wgmma backward takes half_t or bfloat16_t");
  static_assert(HeadDim % 8 == 0 && HeadDim > D - 64 && HeadDim <= D, "HeadDim must pad to D");
  static_assert(BM == 64 || (BM == 128 && D == 64), "query tiles of 64 rows, or 128 on the 64-column tile");
}

// Pᵀ = exp2(Sᵀ·scale_log2 − lse2), masked (keys >= n_k, and above the causal diagonal), in place
// in s, for this thread's part of a warpgroup's 64 keys × BM queries (key0: the warp's first key;
// m0: the tile's first query; st: the tile's BM lse2 values, then with WithDs its BM delta
// values). WithDs: dSᵀ = Pᵀ∘(dPᵀ − delta) in place in dp in the same pass (one pass, not
// key_major_p then key_major_ds: the two passes cost the key-major kernels up to 24 bytes of
// spills at D = 128); without it dp is not touched.
template <bool Causal, int BM, bool WithDs>
__device__ __forceinline__ void key_major_p_pass(float (&s)[BM / 2], float (&dp)[BM / 2], const float* st,
                                                 float scale_log2, bool needs_mask, int key0, int n_k, int m0,
                                                 int diag, int g, int t) {
#pragma unroll
  for (int j = 0; j < BM / 8; ++j)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int col = 8 * j + 2 * t + e;
      const float l2 = st[col];
      float dl = 0.f;
      if constexpr (WithDs) dl = st[BM + col];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float pe = exp2_approx(fmaf(s[4 * j + 2 * h + e], scale_log2, -l2));
        if (needs_mask) {
          const int key = key0 + g + 8 * h;
          if (key >= n_k || (Causal && key > m0 + col + diag)) pe = 0.f;
        }
        s[4 * j + 2 * h + e] = pe;
        if constexpr (WithDs) dp[4 * j + 2 * h + e] = pe * (dp[4 * j + 2 * h + e] - dl);
      }
    }
}

// Pᵀ alone (key_major_p_pass above).
template <bool Causal, int BM>
__device__ __forceinline__ void key_major_p(float (&s)[BM / 2], const float* st, float scale_log2, bool needs_mask,
                                            int key0, int n_k, int m0, int diag, int g, int t) {
  key_major_p_pass<Causal, BM, false>(s, s, st, scale_log2, needs_mask, key0, n_k, m0, diag, g, t);
}

// dSᵀ = Pᵀ∘(dPᵀ − delta) in place in dp (p: Pᵀ; delta: the tile's BM delta values).
template <int BM>
__device__ __forceinline__ void key_major_ds(float (&dp)[BM / 2], const float (&p)[BM / 2], const float* delta, int t) {
#pragma unroll
  for (int j = 0; j < BM / 8; ++j)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const float dl = delta[8 * j + 2 * t + e];
#pragma unroll
      for (int h = 0; h < 2; ++h) dp[4 * j + 2 * h + e] = p[4 * j + 2 * h + e] * (dp[4 * j + 2 * h + e] - dl);
    }
}

// Pᵀ into s and dSᵀ into dp in one pass (key_major_p_pass above).
template <bool Causal, int BM>
__device__ __forceinline__ void key_major_p_ds(float (&s)[BM / 2], float (&dp)[BM / 2], const float* st,
                                               float scale_log2, bool needs_mask, int key0, int n_k, int m0,
                                               int diag, int g, int t) {
  key_major_p_pass<Causal, BM, true>(s, dp, st, scale_log2, needs_mask, key0, n_k, m0, diag, g, t);
}

// dV += Pᵀ·dO and dK += dSᵀ·Q over the tile's BM queries: A = Pᵀ (s) or dSᵀ (dp) packed to 16
// bits in registers, B = the dO or Q tile (QTile at `d_o`, `q`) read MN-major. One commit group.
template <class T, int D, int BM, class QTile>
__device__ __forceinline__ void issue_dv_dk(float (&dv)[D / 2], float (&dk)[D / 2], const float (&s)[BM / 2],
                                            const float (&dp)[BM / 2], unsigned q, unsigned d_o) {
  unsigned pa[BM / 16][4], da[BM / 16][4];
#pragma unroll
  for (int kk = 0; kk < BM / 16; ++kk) {
    wgmma::pack_a<T>(pa[kk], s, kk);
    wgmma::pack_a<T>(da[kk], dp, kk);
  }
  const unsigned long long do_b = wgmma::desc_sw128(d_o, QTile::kBlockBytes, 1024);
  const unsigned long long q_b = wgmma::desc_sw128(q, QTile::kBlockBytes, 1024);
  wgmma::fence_operand(dv);
  wgmma::fence_operand(dk);
  wgmma::fence();
#pragma unroll
  for (int kk = 0; kk < BM / 16; ++kk) wgmma::Mma<D>::template rs<T, 1>(dv, pa[kk], do_b + ((kk * 16 * 128) >> 4), 1);
#pragma unroll
  for (int kk = 0; kk < BM / 16; ++kk) wgmma::Mma<D>::template rs<T, 1>(dk, da[kk], q_b + ((kk * 16 * 128) >> 4), 1);
  wgmma::commit();
}

// Writes this warp's dSᵀ values (dp: 64 keys of warpgroup wg × BM queries) rounded to 16 bits
// into the dSᵀ tile at `ds` (DsTile, rows = the block's keys), then fences them for wgmma.
// ByStmatrix: one stmatrix.x4 per two 16-byte chunks (16 queries) of the warp's 16 rows:
// matrices 0 / 1 are rows 0–7 / 8–15 of chunk c, 2 / 3 those of chunk c + 1, so lane i
// addresses row i % 8 (+ 8 for matrices 1 and 3) of chunk c + i / 16. c is even, so chunk c + x
// is c ^ x and its swizzled place (c ^ x) ^ (row % 8): one base per lane, c by XOR of
// immediates (ds is 1024-aligned). Measured (BENCHMARKS.md, "dSᵀ by stmatrix"): 1.0–1.8 %
// faster on the 64-row tiles (d = 128) and on 128-row tiles with TMA loads; 1.5 % slower on
// 128-row tiles with cp.async loads (d = 64, n = 1k), which keep the 32-bit stores, as does
// the block-synchronous kernel (not measured).
template <class T, int BM, class DsTile, bool ByStmatrix = true>
__device__ __forceinline__ void store_ds_rows(unsigned ds, const float (&dp)[BM / 2], int wg, int warp, int g, int t) {
  if constexpr (ByStmatrix) {
    const int lane = 4 * g + t;
    const int row = wg * 64 + warp * 16 + (lane & 7) + 8 * ((lane >> 3) & 1);
    const unsigned lane_base = ds + row * 128 + (((lane >> 4) ^ (row & 7)) << 4);
#pragma unroll
    for (int c = 0; c < BM / 8; c += 2)
      wgmma::stmatrix_x4((lane_base + (c >> 3) * DsTile::kBlockBytes) ^ ((c & 7) << 4),
                         pack2<T>(dp[4 * c], dp[4 * c + 1]), pack2<T>(dp[4 * c + 2], dp[4 * c + 3]),
                         pack2<T>(dp[4 * c + 4], dp[4 * c + 5]), pack2<T>(dp[4 * c + 6], dp[4 * c + 7]));
  } else {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = wg * 64 + warp * 16 + g + 8 * h;
#pragma unroll
      for (int j = 0; j < BM / 8; ++j)
        st_shared_4(ds + DsTile::offset(row, j) + 4 * t, pack2<T>(dp[4 * j + 2 * h], dp[4 * j + 2 * h + 1]));
    }
  }
  wgmma::fence_proxy_async();
}

// dQ = dS·K over BN keys for the columns [col0, col0 + Cols): A = dS (the dSᵀ tile at `ds`,
// DsTile, read M-major), B = the K rows (KVTile at `k`) MN-major from column col0 (a 64-column
// block, then 2 bytes per column inside its 128-byte rows). One commit group.
template <class T, int Cols, int BN, class KVTile, class DsTile>
__device__ __forceinline__ void issue_dq(float (&dq)[Cols / 2], unsigned ds, unsigned k, int col0) {
  const unsigned long long ds_a = wgmma::desc_sw128(ds, DsTile::kBlockBytes, 1024);
  const unsigned long long k_b =
      wgmma::desc_sw128(k + (col0 / 64) * KVTile::kBlockBytes + (col0 % 64) * 2, KVTile::kBlockBytes, 1024);
  wgmma::fence();
#pragma unroll
  for (int kk = 0; kk < BN / 16; ++kk)
    wgmma::Mma<Cols>::template ss<T, 1, 1>(dq, ds_a + ((kk * 16 * 128) >> 4), k_b + ((kk * 16 * 128) >> 4), kk > 0);
  wgmma::commit();
}

// attention_backward_wgmma_kv_async's ring steps. Query tile j into stage j % kStages of `sm`
// (nothing past `total`), once both warpgroups are done with tile j − kStages; this thread's
// copies arrive on full[stage].
template <class T, int BM, int D, int Threads, class QTile, int HeadDim, class Walk, class Smem>
__device__ __forceinline__ void load_stage(const AttentionBackwardParams& p, const Walk& walk, const Smem& sm,
                                           int kv_head, int batch, int j, int total, int tid) {
  if (j >= total) return;
  const int stage = j % Smem::kStages;
  if (j >= Smem::kStages) tma::wait(sm.empty(stage), (j / Smem::kStages - 1) & 1);
  load_query_tile_async<T, BM, D, Threads, QTile, HeadDim>(p, walk, sm, kv_head, batch, j, stage, tid);
  tma::cp_async_arrive(sm.full(stage));
}

// The same with the Q and dO tiles by TMA (`q_map`, `do_map`: 4-d maps of q and d_o in boxes of
// 64 columns by BM rows under the 128-byte swizzle, AttentionBackwardTmaParams): thread 0
// announces their bytes on full[stage] and issues one copy per 64-column block of each; the
// rows' lse2 and delta come by cp.async as before, and every thread arrives on full[stage] as
// before (so full expects Threads + 1 arrivals; every thread takes the same path, which keeps
// the register count of the cp.async form). Rows past n_q and columns past the head dim come
// zero-filled, as from load_query_tile_async.
template <class QTile, int BM, int D, int Threads, class Walk, class Smem>
__device__ __forceinline__ void load_stage_tma(const AttentionBackwardParams& p, const void* q_map, const void* do_map,
                                               const Walk& walk, const Smem& sm, int kv_head, int batch, int j,
                                               int total, int tid) {
  if (j >= total) return;
  const int stage = j % Smem::kStages;
  if (j >= Smem::kStages) tma::wait(sm.empty(stage), (j / Smem::kStages - 1) & 1);
  const int head = walk.head(kv_head, j);
  const int m0 = walk.m0(j);
  if (tid == 0) {
    tma::arrive_expect_tx(sm.full(stage), 2 * QTile::kBytes);
#pragma unroll
    for (int b = 0; b < D / 64; ++b) {
      tma::load_4d(sm.q(stage) + b * QTile::kBlockBytes, q_map, 64 * b, m0, head, batch, sm.full(stage));
      tma::load_4d(sm.d_o(stage) + b * QTile::kBlockBytes, do_map, 64 * b, m0, head, batch, sm.full(stage));
    }
  }
  load_tile_stats<BM, Threads>(p, sm, batch, head, m0, stage, tid);
  tma::cp_async_arrive(sm.full(stage));
}

// load_stage or, with TmaLoads, load_stage_tma.
template <bool TmaLoads, class T, int BM, int D, int Threads, class QTile, int HeadDim, class Walk,
          class Smem>
__device__ __forceinline__ void load_ring_stage(const AttentionBackwardParams& p, const void* q_map,
                                                const void* do_map, const Walk& walk, const Smem& sm, int kv_head,
                                                int batch, int j, int total, int tid) {
  if constexpr (TmaLoads)
    load_stage_tma<QTile, BM, D, Threads>(p, q_map, do_map, walk, sm, kv_head, batch, j, total, tid);
  else
    load_stage<T, BM, D, Threads, QTile, HeadDim>(p, walk, sm, kv_head, batch, j, total, tid);
}

// dQ of tile j over the columns [col0, +Cols) of its 64 rows from row0 (0, or 64 in 128-row
// tiles: the dSᵀ tile's second 64-column block), once both warpgroups wrote its dSᵀ (ring slot
// j % kDsBufs); one commit group.
template <class T, int Cols, int BN, class KVTile, class DsTile, class Smem>
__device__ __forceinline__ void issue_ring_dq(float (&dq)[Cols / 2], const Smem& sm, int j, int row0, int col0) {
  const int buf = j % Smem::kDsBufs;
  tma::wait(sm.ds_full(buf), (j / Smem::kDsBufs) & 1);
  issue_dq<T, Cols, BN, KVTile, DsTile>(dq, sm.ds(buf) + (row0 / 64) * DsTile::kBlockBytes, sm.k(), col0);
}

// Adds this warp's rows of the dQ of query tile j of `walk` (the tile's 64 rows from row0,
// columns [col0, +Cols)).
template <int Cols, int D, int HeadDim, class Walk>
__device__ __forceinline__ void add_tile_dq(const AttentionBackwardParams& p, const Walk& walk,
                                            const float (&dq)[Cols / 2], int kv_head, int batch, int j, int row0,
                                            int col0, int warp, int g, int t) {
  float* acc_base = p.dq_accum + stat_row(p, batch, walk.head(kv_head, j), 0) * HeadDim;
  add_dq_rows<Cols, D, HeadDim>(acc_base, dq, walk.m0(j) + row0 + warp * 16, p.n_q, col0, Cols, g, t);
}

// Writes this thread's dQ values (a warpgroup's 64 rows × Cols columns) into the staging boxes
// [box0, +Cols / 32) of `sm` at the places of the map's 128-byte swizzle (row r's 16-byte chunk
// c at c ^ r % 8).
// Row warp·16 + g (+ 8h), columns 8jj + 2t: chunk 2(jj % 4) + t / 2 of its box, whose bits are
// disjoint, so the swizzled chunk is (t / 2 ^ g) ^ 2(jj % 4): one base per thread, the rest
// immediates. A 64-bit store goes to the banks in two half-warps (g = 0..3, then 4..7), where
// the chunks (t / 2) ^ g of one jj are only four: lanes of odd g store jj ^ 2 in jj's turn
// (chunk ^ 4), so that each half-warp covers all eight chunks (one wavefront, not two). The
// values land where they did; only the order of a lane's stores changes.
template <int Cols, class Smem>
__device__ __forceinline__ void write_dq_boxes(const Smem& sm, const float (&dq)[Cols / 2], int box0, int warp, int g,
                                               int t) {
  const bool odd = g & 1;
  const unsigned lane_base =
      (sm.dq_box(box0) + (warp * 16 + g) * 128 + (((t >> 1) ^ g) << 4) + 8 * (t & 1)) ^ ((g & 1) << 6);
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int jj = 0; jj < Cols / 8; ++jj) {
      const int mine = 4 * jj + 2 * h, swapped = 4 * (jj ^ 2) + 2 * h;
      st_shared_8f((lane_base + (jj / 4) * Smem::kDqBoxBytes + h * 8 * 128) ^ (32u * (jj % 4)),
                   odd ? dq[swapped] : dq[mine], odd ? dq[swapped + 1] : dq[mine + 1]);
    }
}

// TmaDQ: adds this warpgroup's dQ of query tile j of `walk` (Cols columns from col0, whole
// 32-column boxes) to dq_accum through its staging boxes in `sm` and TMA reduce-adds (`map`: the
// dq_map of AttentionBackwardTmaParams). The warpgroup's first thread waits until its previous
// reduce-adds have read the boxes; named barrier `bar` (the warpgroup's 128 threads); every
// thread writes its values (row r's 16-byte chunk c at c ^ (r % 8): the swizzle of the map) and
// fences them for the async proxy; named barrier bar + 2; the first thread issues one
// reduce-add per box. (Only the first thread needs to wait at the second barrier, but the others
// passing it with bar.arrive cost 28 registers at D = 64.) Rows past n_q and columns past the
// head dim fall outside the map, and TMA leaves them alone.
template <int Cols, class Smem, class Walk>
__device__ __forceinline__ void reduce_tile_dq(const AttentionBackwardParams& p, const void* map, const Walk& walk,
                                               const Smem& sm, const float (&dq)[Cols / 2], int kv_head, int batch,
                                               int j, int col0, int warp, int lane, int g, int t, int bar) {
  static_assert(Cols % 32 == 0, "whole 32-column boxes");
  const bool leader = warp == 0 && lane == 0;
  if (leader) tma::store_wait_read();
  tma::barrier_sync(bar, 128);
  write_dq_boxes<Cols>(sm, dq, col0 / 32, warp, g, t);
  tma::fence_proxy_async();
  tma::barrier_sync(bar + 2, 128);
  if (leader) {
    const int row_base = batch * p.heads_q + walk.head(kv_head, j);
#pragma unroll
    for (int b = 0; b < Cols / 32; ++b) tma::reduce_add_3d(map, sm.dq_box(col0 / 32 + b), col0 + 32 * b, walk.m0(j), row_base);
    tma::store_commit();
  }
}

// attention_backward_wgmma_kv_async's dQ of query tile j, this warpgroup's 64 rows from row0 (0
// with TmaDQ) and columns from col0: reduce_tile_dq with TmaDQ (named barriers 3 + wg and 5 + wg),
// else add_tile_dq.
template <bool TmaDQ, int Cols, int D, int HeadDim, class Smem, class Walk>
__device__ __forceinline__ void add_async_dq(const AttentionBackwardParams& p, const void* dq_map, const Walk& walk,
                                             const Smem& sm, const float (&dq)[Cols / 2], int kv_head, int batch,
                                             int j, int row0, int col0, int wg, int warp, int lane, int g, int t) {
  if constexpr (TmaDQ)
    reduce_tile_dq<Cols>(p, dq_map, walk, sm, dq, kv_head, batch, j, col0, warp, lane, g, t, 3 + wg);
  else
    add_tile_dq<Cols, D, HeadDim>(p, walk, dq, kv_head, batch, j, row0, col0, warp, g, t);
}

// The column-share kernel's dQ staging tile (64 rows × D fp32 in boxes of 64 rows × 32 columns,
// box c holding the columns [32·c, +32), each 128-byte swizzled as the dq_map's boxes).
struct DqStaging {
  static constexpr int kDqBoxBytes = 64 * 128;
  unsigned base;  // shared-memory address, 1024-byte aligned
  __device__ __forceinline__ unsigned dq_box(int box) const { return base + box * kDqBoxBytes; }
};

// The column-share kernel's dQ of one query tile (this warpgroup's 64 rows from m0 of dq_accum's
// row block `row_base` = batch·heads_q + head): its pieces of ColsA columns from col_a and ColsB
// from col_b (none when 0) through the staging boxes and one TMA reduce-add per box, as
// reduce_tile_dq: the warpgroup's first thread waits until its previous reduce-adds have read the
// boxes; named barrier `bar` (the warpgroup's 128 threads); every thread writes its values and
// fences them for the async proxy; `bar`; the first thread issues the reduce-adds.
template <int ColsA, int ColsB, int NB>
__device__ __forceinline__ void reduce_cols_dq(const void* map, const DqStaging& sm, const float (&dq)[ColsA / 2],
                                               const float (&dq_b)[NB], int row_base, int m0, int col_a, int col_b,
                                               int warp, int lane, int g, int t, int bar) {
  static_assert(ColsA % 32 == 0 && ColsB % 32 == 0 && (ColsB == 0 || ColsB / 2 == NB), "whole 32-column boxes");
  const bool leader = warp == 0 && lane == 0;
  if (leader) tma::store_wait_read();
  tma::barrier_sync(bar, 128);
  write_dq_boxes<ColsA>(sm, dq, col_a / 32, warp, g, t);
  if constexpr (ColsB > 0) write_dq_boxes<ColsB>(sm, reinterpret_cast<const float(&)[ColsB / 2]>(dq_b), col_b / 32, warp, g, t);
  tma::fence_proxy_async();
  tma::barrier_sync(bar, 128);
  if (leader) {
#pragma unroll
    for (int b = 0; b < ColsA / 32; ++b) tma::reduce_add_3d(map, sm.dq_box(col_a / 32 + b), col_a + 32 * b, m0, row_base);
#pragma unroll
    for (int b = 0; b < ColsB / 32; ++b) tma::reduce_add_3d(map, sm.dq_box(col_b / 32 + b), col_b + 32 * b, m0, row_base);
    tma::store_commit();
  }
}

// The 256-column tile's dQ of one query tile through boxes in the finished stage: warpgroup wg's
// 128 columns from col_a, the first 64 in its two 64-column blocks of the Q tile `q`, the other
// 64 in its two of the dO tile `d_o` (the blocks its dK and dV products read; the caller waited
// for them). Every thread writes its values and fences them for the async proxy; named barrier
// `bar` (the warpgroup's 128 threads); the first thread issues the four reduce-adds. The caller
// waits for their reads (tma::store_wait_read) before the stage is loaded again.
__device__ __forceinline__ void reduce_cols_dq_in_place(const void* map, unsigned q, unsigned d_o, const float (&dq)[64],
                                                        int row_base, int m0, int col_a, int warp, int lane, int g,
                                                        int t, int bar) {
  const DqStaging in_q{q}, in_do{d_o};  // boxes of 32 fp32 columns over the tiles' 64-column blocks
  const int box0 = col_a / 64;  // this warpgroup's first 64-column block
  write_dq_boxes<64>(in_q, reinterpret_cast<const float(&)[32]>(dq[0]), box0, warp, g, t);
  write_dq_boxes<64>(in_do, reinterpret_cast<const float(&)[32]>(dq[32]), box0, warp, g, t);
  tma::fence_proxy_async();
  tma::barrier_sync(bar, 128);
  if (warp == 0 && lane == 0) {
#pragma unroll
    for (int b = 0; b < 2; ++b) {
      tma::reduce_add_3d(map, in_q.dq_box(box0 + b), col_a + 32 * b, m0, row_base);
      tma::reduce_add_3d(map, in_do.dq_box(box0 + b), col_a + 64 + 32 * b, m0, row_base);
    }
    tma::store_commit();
  }
}

}  // namespace bwd_detail

// T: half_t or bfloat16_t. D: 64 or 128. BM: query rows per tile (64; 128 on the 64-column tile
// without AtomicDQ: the deterministic mode of the decoupled kernel's wg:bm128 configs). WGs:
// warpgroups (64 keys each). Causal: bottom-right mask. AtomicDQ: also add dQ (else
// attention_backward_fa2_dq does).
template <class T, int D, int BM, int WGs, bool Causal, bool AtomicDQ, int HeadDim = D>
__device__ __forceinline__ void attention_backward_wgmma_kv(const AttentionBackwardParams& p) {
  static_assert(D == 64 || D == 128, "D must be 64 or 128");
  static_assert(BM == 64 || !AtomicDQ, "the dQ passes take 64-row query tiles");
  bwd_detail::check_wgmma_backward_args<T, D, BM, HeadDim>();
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int BN = 64 * WGs;
  constexpr int kThreads = 128 * WGs;
  using KVTile = wgmma::Sw128<BN, D>;
  using QTile = wgmma::Sw128<BM, D>;
  using DsTile = wgmma::Sw128<BN, BM>;  // dSᵀ: rows = keys, columns = queries
  constexpr int kDsBytes = AtomicDQ ? DsTile::kBytes : 0;
  constexpr int kStatsOffset = 2 * KVTile::kBytes + 4 * QTile::kBytes + kDsBytes;
  static_assert(1024 + kStatsOffset + 4 * BM * 4 == bwd_detail::kWgKvSmemBytes<D, BM, WGs, AtomicDQ>,
                "shared memory layout must match wgmma_kv_smem_bytes");
  constexpr int kSRegs = BM / 2;          // 64 keys x BM queries per warpgroup
  constexpr int kDRegs = D / 2;           // 64 keys x D
  // dQ: each warpgroup owns D / WGs columns, computed in passes of at most 64 (32 registers).
  constexpr int kDqCols = D / WGs < 64 ? D / WGs : 64;
  constexpr int kDqPasses = D / WGs / kDqCols;

  const int tid = threadIdx.x;
  const auto [wg, warp, lane, g, t] = wgmma::Lane::of(tid);

  const auto [n0, kv_head, batch, n_q, n_k, diag] = bwd_detail::KeyBlock::of<Causal>(p, BN);
  const float scale_log2 = p.scale_log2;
  const bwd_detail::QueryTileWalk<BM, Causal> walk(n0, n_q, n_k, p.head_group);
  const int total = walk.total;
  const auto sm = bwd_detail::wgmma_key_major_smem<KVTile::kBytes, QTile::kBytes, BM>(kStatsOffset);

  fa2_detail::load_tile_async<T, BN, D, kThreads, KVTile, HeadDim>(sm.k, bwd_detail::head_ptr<const T>(p.k, batch, kv_head),
                                                          p.k.stride_n, n0, n_k, tid);
  fa2_detail::load_tile_async<T, BN, D, kThreads, KVTile, HeadDim>(sm.v(), bwd_detail::head_ptr<const T>(p.v, batch, kv_head),
                                                          p.v.stride_n, n0, n_k, tid);
  if (total > 0) bwd_detail::load_query_tile_async<T, BM, D, kThreads, QTile, HeadDim>(p, walk, sm, kv_head, batch, 0, 0, tid);
  cp_async_commit();

  // Descriptors (wgmma.cuh): this warpgroup's K and V rows as K-major A; Q, dO as K-major B
  // (Sᵀ, dPᵀ) or MN-major B (dK, dV); dSᵀ rows as M-major A and K rows as MN-major B (dQ).
  const unsigned wg_rows = wg * 64 * 128;
  const unsigned long long k_a = wgmma::desc_sw128(sm.k + wg_rows, 16, 1024);
  const unsigned long long v_a = wgmma::desc_sw128(sm.v() + wg_rows, 16, 1024);

  float dk[kDRegs], dv[kDRegs];
#pragma unroll
  for (int i = 0; i < kDRegs; ++i) dk[i] = dv[i] = 0.f;
  const int key0 = n0 + wg * 64 + warp * 16;  // first key of this warp

  for (int it = 0; it < total; ++it) {
    const int stage = it & 1;
    const int head = walk.head(kv_head, it);
    const int m0 = walk.m0(it);
    bwd_detail::next_query_tile<T, BM, D, kThreads, QTile, HeadDim>(p, walk, sm, kv_head, batch, it, total, stage, tid);
    const float* st = sm.stats(stage);

    // ---- Sᵀ = K_wg·Qᵀ, dPᵀ = V_wg·dOᵀ ----
    float s[kSRegs], dp[kSRegs];
    {
      const unsigned long long q_b = wgmma::desc_sw128(sm.q(stage), 16, 1024);
      const unsigned long long do_b = wgmma::desc_sw128(sm.d_o(stage), 16, 1024);
      bwd_detail::issue_sdp<T, BM, HeadDim, KVTile::kBlockBytes, QTile::kBlockBytes, false>(s, dp, k_a, v_a, q_b, do_b);
      wgmma::wait<0>();
      wgmma::fence_operand(s);
      wgmma::fence_operand(dp);
    }

    // ---- Pᵀ = exp2(Sᵀ·scale_log2 − lse2), masked; dSᵀ = Pᵀ∘(dPᵀ − delta) ----
    const bool needs_mask = n0 + BN > n_k || (Causal && n0 + BN - 1 > m0 + diag);
    bwd_detail::key_major_p_ds<Causal, BM>(s, dp, st, scale_log2, needs_mask, key0, n_k, m0, diag, g, t);

    // ---- dV += Pᵀ·dO, dK += dSᵀ·Q ----
    bwd_detail::issue_dv_dk<T, D, BM, QTile>(dv, dk, s, dp, sm.q(stage), sm.d_o(stage));

    if constexpr (AtomicDQ) {
      // ---- dQ += dS·K through shared dSᵀ and fp32 atomics; warpgroup wg computes the columns
      // [wg·D/WGs, +D/WGs) over all BN keys, in passes of kDqCols ----
      bwd_detail::store_ds_rows<T, BM, DsTile, false>(sm.ds(), dp, wg, warp, g, t);
      named_barrier<1, kThreads>();  // all dSᵀ rows written
      float* acc_base = p.dq_accum + bwd_detail::stat_row(p, batch, head, 0) * HeadDim;
#pragma unroll
      for (int pass = 0; pass < kDqPasses; ++pass) {
        const int col0 = wg * (D / WGs) + pass * kDqCols;
        float dq[kDqCols / 2];
        bwd_detail::issue_dq<T, kDqCols, BN, KVTile, DsTile>(dq, sm.ds(), sm.k, col0);
        wgmma::wait<0>();
        wgmma::fence_operand(dq);
        bwd_detail::add_dq_rows<kDqCols, D, HeadDim>(acc_base, dq, m0 + warp * 16, n_q, col0, kDqCols, g, t);
      }
    }
    bwd_detail::end_query_tile(dv, dk);
  }

  // ---- epilogue: dK = s·Σ dSᵀ·Q, dV ----
  bwd_detail::store_dkdv<T, D, HeadDim>(p, batch, kv_head, 0, key0, dk, dv);
#endif
}

// Hopper key-major backward with decoupled warpgroups (sm_90a wgmma, config "wg:bm64:bn128:a1"):
// the products and tiles of attention_backward_wgmma_kv with two warpgroups (BN = 128 keys) and
// atomic dQ, without a block barrier per query tile, so one warpgroup's exponentials and dQ
// reductions can run under the other's wgmma. Per query tile `it` and warpgroup:
//   wait full[it % 3]; Sᵀ, dPᵀ (one group, waited); Pᵀ and dSᵀ in registers;
//   dV += Pᵀ·dO, dK += dSᵀ·Q (one group);
//   dSᵀ(it) into the dSᵀ ring (after ds_empty: the ring slot's last dQ read it), ds_full;
//   dQ(it − 1) = dS(it − 1)·K over the columns [wg·D/2, +D/2) (after ds_full: both halves of
//   that tile's dSᵀ are written), waited with dV and dK; empty[it % 3] and ds_empty;
//   the dQ(it − 1) rows added with red_add2; the loads of tile it + 2 (after empty: both
//   warpgroups are done with tile it − 1, the previous user of that stage).
// So the warpgroups meet only through the mbarriers of the rings, at most about one tile apart;
// with Stagger the second starts once the first has formed its first Pᵀ and dSᵀ, so that their
// exponentials and their wgmma alternate.
//
// Rings (mbarriers, one arrival per thread): Q, dO, lse2 and delta in kStages stages, each thread
// arriving on full[s] by cp.async.mbarrier.arrive.noinc once its copies land (every reader then
// fences them for the async proxy); empty[s] after the stage's last wgmma read. dSᵀ in kDsBufs
// tiles, ds_full after a warpgroup's rows are written and fenced, ds_empty once its dQ read.
// Masking, requirements and padded head dims: as attention_backward_wgmma_kv.
// TmaDQ: dQ goes through shared memory and TMA reduce-adds (bwd_detail::reduce_tile_dq, `dq_map`)
// instead of red_add2 from registers.
// TmaLoads: the Q and dO tiles come by TMA (bwd_detail::load_stage_tma, `q_map`, `do_map`).
// BM = 128 (the 64-column tile, dQ by red_add2): each warpgroup's Sᵀ and dPᵀ are m64n128 (64
// registers each), dV and dK take 8 k-steps a tile, the dSᵀ ring has two slots, and warpgroup
// wg takes the dQ of the rows [64·wg, +64) over all D columns instead of half the columns of
// all rows. Half as many tiles per key block: half the waits, statistics loads and ring steps,
// and wgmma twice as wide.
template <class T, int D, int BM, bool Causal, bool Stagger, bool TmaDQ, int HeadDim, bool TmaLoads = false,
          int GroupSplit = 1>
__device__ __forceinline__ void attention_backward_wgmma_kv_async_body(const AttentionBackwardParams& p,
                                                                       const void* dq_map, const void* q_map = nullptr,
                                                                       const void* do_map = nullptr) {
  static_assert(D == 64 || D == 128, "D must be 64 or 128");
  static_assert(BM == 64 || !TmaDQ, "128-row query tiles add dQ by red_add2");
  static_assert(GroupSplit == 1 || GroupSplit == 2 || GroupSplit == 4 || GroupSplit == 8,
                "a K/V head's query heads split in 2, 4 or 8");
  bwd_detail::check_wgmma_backward_args<T, D, BM, HeadDim>();
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int WGs = 2;
  constexpr int BN = 64 * WGs;
  constexpr int kThreads = 128 * WGs;
  using Smem = bwd_detail::AsyncKvSmem<D, BM, BN, TmaDQ>;
  using KVTile = typename Smem::KVTile;
  using QTile = typename Smem::QTile;
  using DsTile = typename Smem::DsTile;
  constexpr int kStages = Smem::kStages, kDsBufs = Smem::kDsBufs;
  static_assert(Smem::kBytes == attention_bwd::wgmma_kv_async_smem_bytes(D, BM, TmaDQ),
                "shared memory layout must match");
  // dQ of a tile, one pass: with 64-row tiles warpgroup wg takes the columns [wg·D/2, +D/2) of
  // every row, with 128-row tiles the rows [64·wg, +64) of every column (32 registers at most).
  constexpr bool kDqRowSplit = BM == 128;
  constexpr int kDqCols = kDqRowSplit ? D : D / WGs;

  const int tid = threadIdx.x;
  const auto [wg, warp, lane, g, t] = wgmma::Lane::of(tid);
  const auto [n0, kv_y, batch, n_q, n_k, diag] = bwd_detail::KeyBlock::of<Causal>(p, BN);
  const float scale_log2 = p.scale_log2;
  // GroupSplit: grid y = kv_head·GroupSplit + part, and the block walks the query heads
  // [part·G, +G) of its K/V head's group, G = head_group / GroupSplit (walk.head(kv_y, ·) lands
  // there); its dK and dV are partial sums, added into dkv_accum.
  const int kv_head = kv_y / GroupSplit;
  const bwd_detail::QueryTileWalk<BM, Causal> walk(n0, n_q, n_k, p.head_group / GroupSplit);
  const int total = walk.total;
  const Smem sm = Smem::at(dynamic_smem());

  if (tid == 0) {
    for (int i = 0; i < kStages; ++i) {
      tma::barrier_init(sm.full(i), TmaLoads ? kThreads + 1 : kThreads);
      tma::barrier_init(sm.empty(i), kThreads);
    }
    for (int i = 0; i < kDsBufs; ++i) {
      tma::barrier_init(sm.ds_full(i), kThreads);
      tma::barrier_init(sm.ds_empty(i), kThreads);
    }
    tma::fence_barrier_init();
  }
  fa2_detail::load_tile_async<T, BN, D, kThreads, KVTile, HeadDim>(sm.k(), bwd_detail::head_ptr<const T>(p.k, batch, kv_head),
                                                                   p.k.stride_n, n0, n_k, tid);
  fa2_detail::load_tile_async<T, BN, D, kThreads, KVTile, HeadDim>(sm.v(), bwd_detail::head_ptr<const T>(p.v, batch, kv_head),
                                                                   p.v.stride_n, n0, n_k, tid);
  cp_async_commit();
  __syncthreads();  // the barriers initialised
  for (int j = 0; j < kStages - 1; ++j)
    bwd_detail::load_ring_stage<TmaLoads, T, BM, D, kThreads, QTile, HeadDim>(p, q_map, do_map, walk, sm, kv_y,
                                                                               batch, j, total, tid);
  cp_async_wait<0>();  // K and V (the one committed group; the tiles arrive on their barriers)
  wgmma::fence_proxy_async();
  __syncthreads();

  const unsigned wg_rows = wg * 64 * 128;
  const unsigned long long k_a = wgmma::desc_sw128(sm.k() + wg_rows, 16, 1024);
  const unsigned long long v_a = wgmma::desc_sw128(sm.v() + wg_rows, 16, 1024);
  float dk[D / 2], dv[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) dk[i] = dv[i] = 0.f;
  const int key0 = n0 + wg * 64 + warp * 16;
  const int col0 = kDqRowSplit ? 0 : wg * kDqCols;
  const int row0 = kDqRowSplit ? 64 * wg : 0;

  for (int it = 0; it < total; ++it) {
    const int stage = it % kStages;
    const int m0 = walk.m0(it);
    tma::wait(sm.full(stage), (it / kStages) & 1);
    wgmma::fence_proxy_async();  // the cp.async writes of every thread, before wgmma reads them
    if (Stagger && it == 0 && wg == 1) tma::barrier_sync(2, kThreads);

    // ---- Sᵀ = K_wg·Qᵀ, dPᵀ = V_wg·dOᵀ; Pᵀ, dSᵀ ----
    float s[BM / 2], dp[BM / 2];
    bwd_detail::issue_sdp<T, BM, HeadDim, KVTile::kBlockBytes, QTile::kBlockBytes, false>(
        s, dp, k_a, v_a, wgmma::desc_sw128(sm.q(stage), 16, 1024), wgmma::desc_sw128(sm.d_o(stage), 16, 1024));
    wgmma::wait<0>();
    wgmma::fence_operand(s);
    wgmma::fence_operand(dp);
    const bool needs_mask = n0 + BN > n_k || (Causal && n0 + BN - 1 > m0 + diag);
    bwd_detail::key_major_p_ds<Causal, BM>(s, dp, sm.stats(stage), scale_log2, needs_mask, key0, n_k, m0, diag, g, t);
    if (Stagger && it == 0 && wg == 0) tma::barrier_arrive(2, kThreads);

    // ---- dV += Pᵀ·dO, dK += dSᵀ·Q ----
    bwd_detail::issue_dv_dk<T, D, BM, QTile>(dv, dk, s, dp, sm.q(stage), sm.d_o(stage));

    // ---- dSᵀ(it) into its ring slot ----
    const int buf = it % kDsBufs;
    if (it >= kDsBufs) tma::wait(sm.ds_empty(buf), (it / kDsBufs - 1) & 1);
    bwd_detail::store_ds_rows<T, BM, DsTile, BM == 64 || TmaLoads>(sm.ds(buf), dp, wg, warp, g, t);
    tma::arrive(sm.ds_full(buf));

    // ---- dQ(it − 1) under dV and dK; the stage and the slot released; its rows added ----
    float dq[kDqCols / 2];
    if (it > 0) bwd_detail::issue_ring_dq<T, kDqCols, BN, KVTile, DsTile>(dq, sm, it - 1, row0, col0);
    bwd_detail::end_query_tile(dv, dk);
    tma::arrive(sm.empty(stage));
    if (it > 0) {
      wgmma::fence_operand(dq);
      tma::arrive(sm.ds_empty((it - 1) % kDsBufs));
      bwd_detail::add_async_dq<TmaDQ, kDqCols, D, HeadDim>(p, dq_map, walk, sm, dq, kv_y, batch, it - 1,
                                                                     row0, col0, wg, warp, lane, g, t);
    }
    bwd_detail::load_ring_stage<TmaLoads, T, BM, D, kThreads, QTile, HeadDim>(p, q_map, do_map, walk, sm, kv_y,
                                                                               batch, it + kStages - 1, total, tid);
  }
  if (total > 0) {
    float dq[kDqCols / 2];
    bwd_detail::issue_ring_dq<T, kDqCols, BN, KVTile, DsTile>(dq, sm, total - 1, row0, col0);
    wgmma::wait<0>();
    wgmma::fence_operand(dq);
    bwd_detail::add_async_dq<TmaDQ, kDqCols, D, HeadDim>(p, dq_map, walk, sm, dq, kv_y, batch, total - 1,
                                                                   row0, col0, wg, warp, lane, g, t);
  }
  if (TmaDQ && warp == 0 && lane == 0) tma::store_wait_read();  // the staging boxes read before the block exits

  // ---- epilogue: dK = s·Σ dSᵀ·Q, dV ----
  if constexpr (GroupSplit > 1)
    bwd_detail::add_dkdv_rows<D, HeadDim>(p, batch, kv_head, key0, dk, dv, g, t);
  else
    bwd_detail::store_dkdv<T, D, HeadDim>(p, batch, kv_head, 0, key0, dk, dv);
#endif
}

template <class T, int D, int BM, bool Causal, bool Stagger, int HeadDim = D>
__device__ __forceinline__ void attention_backward_wgmma_kv_async(const AttentionBackwardParams& p) {
  attention_backward_wgmma_kv_async_body<T, D, BM, Causal, Stagger, false, HeadDim>(p, nullptr);
}

// The same kernel with dQ added by TMA from shared memory.
template <class T, int D, int BM, bool Causal, bool Stagger, int HeadDim = D>
__device__ __forceinline__ void attention_backward_wgmma_kv_async_tma(const AttentionBackwardTmaParams& tp) {
  attention_backward_wgmma_kv_async_body<T, D, BM, Causal, Stagger, true, HeadDim>(tp.a, &tp.dq_map);
}

// The same with any of the map-using forms: TmaDQ (":t"), TmaLoads (":l").
// GroupSplit (":g2"): the query heads of each K/V head's group split over two blocks, which add
// their dK and dV into dkv_accum (attention_backward_dkv_convert writes them out).
template <class T, int D, int BM, bool Causal, bool Stagger, bool TmaDQ, bool TmaLoads, int HeadDim = D,
          int GroupSplit = 1>
__device__ __forceinline__ void attention_backward_wgmma_kv_async_maps(const AttentionBackwardTmaParams& tp) {
  attention_backward_wgmma_kv_async_body<T, D, BM, Causal, Stagger, TmaDQ, HeadDim, TmaLoads, GroupSplit>(
      tp.a, &tp.dq_map, &tp.q_map, &tp.do_map);
}

// Hopper key-major backward above 128 columns (sm_90a wgmma): D = 192 or 256, where one
// warpgroup's dK and dV accumulators over every column would not fit in registers.
//
// Grid (ceil(n_k / 64), heads_kv, batch), two warpgroups sharing the block's 64 keys, and the
// query-tile walk of attention_backward_wgmma_kv. Per query tile of BM = 64 rows:
//   warpgroup wg takes the queries [32·wg, +32):
//     Sᵀ = K·Q_wgᵀ and dPᵀ = V·dO_wgᵀ   wgmma m64n32k16, both operands K-major, two groups (the
//                                        exponentials of Pᵀ run while dPᵀ is in flight);
//     Pᵀ = exp2(Sᵀ·scale_log2 − lse2), masked; dSᵀ = Pᵀ∘(dPᵀ − delta), both rounded to 16 bits
//     into the columns [32·wg, +32) of the shared 64 × 64 tiles Pᵀ and dSᵀ; a block barrier;
//   warpgroup wg takes half of the columns: at D = 256 [128·wg, +128), at D = 192 [64·wg, +64)
//   and [128 + 32·wg, +32) (each piece inside one 64-column block of the swizzled tiles):
//     with AtomicDQ: dQ = dS·K            m64nNk16 per piece, A = dS (the dSᵀ tile read M-major),
//                                        B = K MN-major; added with red_add2 while dV, dK run;
//     dV += Pᵀ·dO and dK += dSᵀ·Q        m64nNk16 per piece, A = Pᵀ or dSᵀ K-major, B = dO or Q
//                                        MN-major.
// Each of the five head-dim products runs once per tile (the column splits of backward_fa2.cuh
// run Sᵀ and dPᵀ once per split).
// Epilogue: dK = scale·Σ dSᵀ·Q and dV, each warpgroup its columns.
//
// Shared memory (the base rounded up to 1024 bytes): K, V (Sw128<64, D>), two stages of Q and
// dO (Sw128<BM, D>), Pᵀ and dSᵀ (Sw128<64, BM>, rows = keys), two stages of lse2 and delta.
// Masking, requirements and padded head dims: as attention_backward_wgmma_kv (HeadDim a
// multiple of 8 in (D − 64, D]).
// dQ by TMA (TmaDQ, the entry attention_backward_wgmma_kv_cols_tma; `dq_map` the dq_map of
// AttentionBackwardTmaParams): each warpgroup writes its dQ pieces into the staging tile's
// 32-column boxes (reduce_tile_dq's swizzled places) and its first thread issues one TMA
// reduce-add per box, in place of red_add2 per element pair.
// HeadDimV: v's, o's and dO's head dim when it is below q's and k's (MLA, docs/kernels/mla.md),
// a multiple of 8: V and dO tiles are loaded with HeadDimV columns (zero-filled to 16; their
// tiles keep D's layout), dPᵀ reduces over HeadDimV rounded up to 16, and dV is stored over
// HeadDimV columns; a piece wholly past HeadDimV runs no dV product at D = 192 (piece B when
// HeadDimV <= 128), while at D = 256 the second warpgroup's piece still runs it on columns
// that are never stored.
template <class T, int D, int BM, bool Causal, bool AtomicDQ, int HeadDim, int HeadDimV, bool TmaDQ>
__device__ __forceinline__ void attention_backward_wgmma_kv_cols_body(const AttentionBackwardParams& p,
                                                                      const void* dq_map) {
  static_assert(D == 192 || D == 256, "D must be 192 or 256");
  static_assert(BM == 64, "64-row query tiles");
  static_assert(!TmaDQ || (AtomicDQ && attention_bwd::wgmma_cols_tma_dq(D)), "dQ by TMA at the 192- and 256-column tiles");
  static_assert(HeadDimV % 8 == 0 && HeadDimV > 0 && HeadDimV <= HeadDim, "HeadDimV must be a multiple of 8 up to HeadDim");
  bwd_detail::check_wgmma_backward_args<T, D, BM, HeadDim>();
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int BN = 64;
  constexpr int kThreads = attention_bwd::kWgmmaColsThreads;
  using KVTile = wgmma::Sw128<BN, D>;
  using QTile = wgmma::Sw128<BM, D>;
  using PTile = wgmma::Sw128<BN, BM>;  // Pᵀ and dSᵀ: rows = keys, columns = queries
  constexpr int kPOffset = 2 * KVTile::kBytes + 4 * QTile::kBytes;
  // TmaDQ at 256 columns: dQ's boxes in the finished stage's Q and dO tiles, whose next loads
  // wait for the reduce-adds' reads and so start after the next tile's Pᵀ/dSᵀ barrier.
  constexpr bool kInPlace = TmaDQ && attention_bwd::wgmma_cols_dq_in_place(D);
  constexpr int kDqOffset = kPOffset + 2 * PTile::kBytes;  // TmaDQ: the staging boxes (1024-aligned)
  constexpr int kStatsOffset = kDqOffset + (TmaDQ && !kInPlace ? BM * D * 4 : 0);
  static_assert(1024 + kStatsOffset + 4 * BM * 4 == attention_bwd::wgmma_cols_smem_bytes(D, BM, TmaDQ),
                "shared memory layout must match wgmma_cols_smem_bytes");
  constexpr int kRows = BM / 2;        // query rows of Sᵀ / dPᵀ per warpgroup
  // dK, dV and dQ columns of warpgroup wg: piece A, kColsA from wg·kColsA; at D = 192 also
  // piece B, 32 from 128 + 32·wg (both warpgroups 96 columns, each piece inside one 64-column
  // block of the swizzled tiles).
  constexpr int kColsA = D == 256 ? 128 : 64;
  constexpr int kColsB = D == 192 ? 32 : 0;
  constexpr int kAccB = kColsB ? kColsB / 2 : 1;
  constexpr bool kDvB = kColsB > 0 && HeadDimV > 128;  // piece B holds columns of dV

  const int tid = threadIdx.x;
  const auto [wg, warp, lane, g, t] = wgmma::Lane::of(tid);

  const auto [n0, kv_head, batch, n_q, n_k, diag] = bwd_detail::KeyBlock::of<Causal>(p, BN);
  const float scale_log2 = p.scale_log2;
  const bwd_detail::QueryTileWalk<BM, Causal> walk(n0, n_q, n_k, p.head_group);
  const int total = walk.total;
  const auto sm = bwd_detail::wgmma_key_major_smem<KVTile::kBytes, QTile::kBytes, BM>(kStatsOffset);
  const unsigned p_tile = sm.k + kPOffset, ds_tile = p_tile + PTile::kBytes;
  const bwd_detail::DqStaging staging{sm.k + kDqOffset};

  fa2_detail::load_tile_async<T, BN, D, kThreads, KVTile, HeadDim>(sm.k, bwd_detail::head_ptr<const T>(p.k, batch, kv_head),
                                                                   p.k.stride_n, n0, n_k, tid);
  fa2_detail::load_tile_async<T, BN, D, kThreads, KVTile, HeadDimV>(sm.v(), bwd_detail::head_ptr<const T>(p.v, batch, kv_head),
                                                                    p.v.stride_n, n0, n_k, tid);
  if (total > 0)
    bwd_detail::load_query_tile_async<T, BM, D, kThreads, QTile, HeadDim, HeadDimV>(p, walk, sm, kv_head, batch, 0, 0, tid);
  cp_async_commit();

  // This warpgroup's columns, and the descriptors that do not move with the stage: K and V rows
  // as K-major A (Sᵀ, dPᵀ), Pᵀ and dSᵀ as K-major A (dV, dK), dSᵀ as M-major A and K from
  // column col0 as MN-major B (dQ).
  const int col_a = wg * kColsA, col_b = 128 + 32 * wg;
  const unsigned long long k_a = wgmma::desc_sw128(sm.k, 16, 1024);
  const unsigned long long v_a = wgmma::desc_sw128(sm.v(), 16, 1024);
  const unsigned long long p_a = wgmma::desc_sw128(p_tile, 16, 1024);
  const unsigned long long ds_a = wgmma::desc_sw128(ds_tile, 16, 1024);
  const unsigned long long ds_m = wgmma::desc_sw128(ds_tile, PTile::kBlockBytes, 1024);
  const unsigned long long k_ba = bwd_detail::mn_major_cols<KVTile::kBlockBytes>(sm.k, col_a);
  const unsigned long long k_bb = bwd_detail::mn_major_cols<KVTile::kBlockBytes>(sm.k, col_b);

  float dk[kColsA / 2], dv[kColsA / 2], dk_b[kAccB], dv_b[kAccB];
#pragma unroll
  for (int i = 0; i < kColsA / 2; ++i) dk[i] = dv[i] = 0.f;
#pragma unroll
  for (int i = 0; i < kAccB; ++i) dk_b[i] = dv_b[i] = 0.f;
  const int key0 = n0 + warp * 16;  // first key of this warp's rows (both warpgroups: all 64 keys)

  for (int it = 0; it < total; ++it) {
    const int stage = it & 1;
    const int head = walk.head(kv_head, it);
    const int m0 = walk.m0(it);
    if constexpr (kInPlace) {  // tile it's loads and every warpgroup done with tile it − 1
      cp_async_wait<0>();
      wgmma::fence_proxy_async();
      __syncthreads();
    } else {
      bwd_detail::next_query_tile<T, BM, D, kThreads, QTile, HeadDim, HeadDimV>(p, walk, sm, kv_head, batch, it, total,
                                                                                stage, tid);
    }
    const float* st = sm.stats(stage);

    // ---- Sᵀ = K·Q_wgᵀ, dPᵀ = V·dO_wgᵀ (this warpgroup's 32 queries), two groups ----
    float s[kRows / 2], dp[kRows / 2];
    {
      const unsigned long long q_b = wgmma::desc_sw128(sm.q(stage) + wg * kRows * 128, 16, 1024);
      const unsigned long long do_b = wgmma::desc_sw128(sm.d_o(stage) + wg * kRows * 128, 16, 1024);
      bwd_detail::issue_sdp<T, kRows, HeadDim, KVTile::kBlockBytes, QTile::kBlockBytes, true, HeadDimV>(s, dp, k_a, v_a,
                                                                                                       q_b, do_b);
    }

    // ---- Pᵀ = exp2(Sᵀ·scale_log2 − lse2), masked (while dPᵀ runs); dSᵀ = Pᵀ∘(dPᵀ − delta) ----
    wgmma::wait<1>();
    wgmma::fence_operand(s);
    const bool needs_mask = n0 + BN > n_k || (Causal && n0 + BN - 1 > m0 + diag);
    // This warpgroup's queries [wg·kRows, +kRows): their statistics and first query.
    bwd_detail::key_major_p<Causal, kRows>(s, st + wg * kRows, scale_log2, needs_mask, key0, n_k, m0 + wg * kRows,
                                           diag, g, t);
    wgmma::wait<0>();
    wgmma::fence_operand(dp);
    bwd_detail::key_major_ds<kRows>(dp, s, st + BM + wg * kRows, t);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = warp * 16 + g + 8 * h;
#pragma unroll
      for (int j = 0; j < kRows / 8; ++j) {
        const int off = PTile::offset(row, wg * (kRows / 8) + j) + 4 * t;
        st_shared_4(p_tile + off, pack2<T>(s[4 * j + 2 * h], s[4 * j + 2 * h + 1]));
        st_shared_4(ds_tile + off, pack2<T>(dp[4 * j + 2 * h], dp[4 * j + 2 * h + 1]));
      }
    }
    wgmma::fence_proxy_async();
    // In place: tile it − 1's reduce-adds have read their boxes in the other stage.
    if (kInPlace && warp == 0 && lane == 0) tma::store_wait_read();
    named_barrier<1, kThreads>();  // every row of Pᵀ and dSᵀ written
    if constexpr (kInPlace) {  // tile it + 1 into the other stage
      if (it + 1 < total)
        bwd_detail::load_query_tile_async<T, BM, D, kThreads, QTile, HeadDim, HeadDimV>(p, walk, sm, kv_head, batch,
                                                                                        it + 1, stage ^ 1, tid);
      cp_async_commit();
    }

    // ---- dQ = dS·K (this warpgroup's columns), then dV += Pᵀ·dO and dK += dSᵀ·Q ----
    float dq[AtomicDQ ? kColsA / 2 : 1], dq_b[AtomicDQ ? kAccB : 1];
    wgmma::fence_operand(dv);
    wgmma::fence_operand(dk);
    wgmma::fence_operand(dv_b);
    wgmma::fence_operand(dk_b);
    wgmma::fence();
    if constexpr (AtomicDQ) {
      bwd_detail::wgmma_cols_dq<T, kColsA, BN>(dq, ds_m, k_ba);
      if constexpr (kColsB > 0) bwd_detail::wgmma_cols_dq<T, kColsB, BN>(dq_b, ds_m, k_bb);
      wgmma::commit();
    }
    bwd_detail::wgmma_cols_dkdv<T, kColsA, BM>(dv, dk, p_a, ds_a, bwd_detail::mn_major_cols<QTile::kBlockBytes>(sm.d_o(stage), col_a),
                                               bwd_detail::mn_major_cols<QTile::kBlockBytes>(sm.q(stage), col_a));
    if constexpr (kColsB > 0)
      bwd_detail::wgmma_cols_dkdv<T, kColsB, BM, kAccB, kDvB>(dv_b, dk_b, p_a, ds_a,
                                                 bwd_detail::mn_major_cols<QTile::kBlockBytes>(sm.d_o(stage), col_b),
                                                 bwd_detail::mn_major_cols<QTile::kBlockBytes>(sm.q(stage), col_b));
    wgmma::commit();

    if constexpr (kInPlace) {  // dV and dK done with this warpgroup's Q and dO columns first
      wgmma::wait<0>();
      wgmma::fence_operand(dq);
      bwd_detail::reduce_cols_dq_in_place(dq_map, sm.q(stage), sm.d_o(stage), dq, batch * p.heads_q + head, m0, col_a,
                                          warp, lane, g, t, 2 + wg);
    } else if constexpr (AtomicDQ) {
      wgmma::wait<1>();
      wgmma::fence_operand(dq);
      wgmma::fence_operand(dq_b);
      if constexpr (TmaDQ) {
        bwd_detail::reduce_cols_dq<kColsA, kColsB>(dq_map, staging, dq, dq_b, batch * p.heads_q + head, m0, col_a,
                                                   col_b, warp, lane, g, t, 2 + wg);
      } else {
        float* acc_base = p.dq_accum + bwd_detail::stat_row(p, batch, head, 0) * HeadDim;
        bwd_detail::add_dq_rows<kColsA, D, HeadDim>(acc_base, dq, m0 + warp * 16, n_q, col_a, kColsA, g, t);
        if constexpr (kColsB > 0)
          bwd_detail::add_dq_rows<kColsB, D, HeadDim>(acc_base, dq_b, m0 + warp * 16, n_q, col_b, kColsB, g, t);
      }
    }
    bwd_detail::end_query_tile(dv, dk);
    wgmma::fence_operand(dv_b);
    wgmma::fence_operand(dk_b);
  }

  // ---- epilogue: dK = s·Σ dSᵀ·Q, dV (this warpgroup's columns) ----
  bwd_detail::store_dkdv<T, kColsA>(p, batch, kv_head, col_a, key0, dk, dv, HeadDim - col_a, HeadDimV - col_a);
  if constexpr (kColsB > 0)
    bwd_detail::store_dkdv<T, kColsB>(p, batch, kv_head, col_b, key0, dk_b, dv_b, HeadDim - col_b,
                                      kDvB ? HeadDimV - col_b : 0);
  if (TmaDQ && warp == 0 && lane == 0) tma::store_wait_read();  // the staging boxes read before the block exits
#endif
}

// The column-share kernel with dQ by red_add2 (AtomicDQ) or without dQ (the deterministic mode).
template <class T, int D, int BM, bool Causal, bool AtomicDQ, int HeadDim = D, int HeadDimV = HeadDim>
__device__ __forceinline__ void attention_backward_wgmma_kv_cols(const AttentionBackwardParams& p) {
  attention_backward_wgmma_kv_cols_body<T, D, BM, Causal, AtomicDQ, HeadDim, HeadDimV, false>(p, nullptr);
}

// The column-share kernel with dQ by TMA reduce-adds (the 192-column tile's atomic mode).
template <class T, int D, int BM, bool Causal, int HeadDim = D, int HeadDimV = HeadDim>
__device__ __forceinline__ void attention_backward_wgmma_kv_cols_tma(const AttentionBackwardTmaParams& tp) {
  attention_backward_wgmma_kv_cols_body<T, D, BM, Causal, true, HeadDim, HeadDimV, true>(tp.a, &tp.dq_map);
}

}  // namespace kgen
