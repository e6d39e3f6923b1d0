// Hopper key-major backward for wide head dims (sm_90a wgmma, config "wg:bm64:bn96:c3"): three
// warpgroups share a block of 96 keys at the 192-column tile, with dKᵀ and dVᵀ accumulated
// transposed (the head dim as wgmma M), so that a block holds more keys than the column-share
// kernel's 64 (backward_wgmma.cuh): dQ's reduce-adds, one 64 × d fp32 tile per key block and query
// tile, fall by a third per key.
//
// Grid (ceil(n_k / 96), heads_kv, batch), 384 threads, and the query-tile walk of the other
// key-major kernels (every query tile of every query head of the kv group that sees the block's
// keys). Per query tile of BM = 64 rows, warpgroup wg:
//   S = Q·K_wgᵀ and dP = dO·V_wgᵀ      wgmma m64n32k16 over its 32 keys [32·wg, +32) (queries as
//                                      M), both operands K-major, two groups (P's exponentials
//                                      run while dP is in flight);
//   P = exp2(S·scale_log2 − lse2), masked; dS = P∘(dP − delta), rounded to 16 bits and written
//     transposed (stmatrix .trans) into the rows [32·wg, +32) of the Pᵀ and dSᵀ tiles (96 keys ×
//     64 queries); a block barrier;
//   dQ = dS·K over all 96 keys         m64n64k16 on its columns [64·wg, +64), A = dS (the dSᵀ tile
//                                      read M-major), B = K MN-major; added by TMA reduce-adds
//                                      (staged as below) once the next two are done;
//   dVᵀ += dOᵀ·P and dKᵀ += Qᵀ·dS      m64n96k16 on its head-dim rows [64·wg, +64), A = dO or Q
//                                      read M-major (transposed by descriptor), B = the Pᵀ or dSᵀ
//                                      tile K-major; dVᵀ only where those rows hold v's columns.
// Epilogue: scale·dKᵀ and dVᵀ written transposed (stmatrix .trans) into the free Q/dO stages, then
// to dK and dV with 16-byte stores.
//
// Shared memory (the base rounded up to 1024 bytes; attention_bwd::kWideSmemBytes): K and V
// (Sw128<96, D>), two stages of Q and dO (Sw128<64, D>), Pᵀ and dSᵀ (Sw128<96, 64>), two stages
// of the rows' lse2 and delta. V and dO keep D's tiles when v's head dim is below q's (their
// columns past it are never read by a stored product).
// dQ's staging (a tile of its own would not fit): warpgroup wg's two fp32 boxes of 64 rows × 32
// columns (backward_wgmma.cuh's DqStaging, the dq_map's swizzle) are its Q and dO blocks wg of
// the tile's stage, the only parts of the stage its dKᵀ and dVᵀ read (every warpgroup's S and dP
// are done at the Pᵀ/dSᵀ barrier). It writes them once its products of the tile are done and
// issues the reduce-adds, which run under the next tile's S and dP; the loads of tile it + 1 into
// the other stage wait for the Pᵀ/dSᵀ barrier of tile it, before which each warpgroup's first
// thread waits until tile it − 1's reduce-adds have read their boxes.
// Masking and requirements: as the other key-major kernels (rows >= n_q zero-filled with zero
// statistics, so P = 1 multiplies zero rows and dS = 0; keys >= n_k zero-filled and masked;
// 16-byte aligned pointers and row strides). HeadDim: q's and k's head dim, a multiple of 8 in
// (128, 192]; HeadDimV: v's, o's and dO's, a multiple of 8 up to HeadDim (MLA: 192 / 128).
// Deterministic mode (AtomicDQ = false): no dQ (the fa2 query-major kernel computes it).
#pragma once

#include "kgen_device/attention/backward_wgmma.cuh"
#include "kgen_device/attention/backward_wide_config.h"
#include "kgen_device/core/wgmma_keys24.cuh"

namespace kgen {
namespace bwd_wide {

// The regions of dynamic shared memory (see the top comment), from a base rounded up to 1024
// bytes; q(stage), d_o(stage) and stats(stage) as bwd_detail's loads expect.
struct Smem {
  static constexpr int BN = attention_bwd::kWideKeys, BM = attention_bwd::kWideQueryRows;
  static constexpr int D = attention_bwd::kWideHeadDim;
  using KTile = wgmma::Sw128<BN, D>;  // K and V
  using QTile = wgmma::Sw128<BM, D>;  // Q and dO
  using PTile = wgmma::Sw128<BN, BM>;  // Pᵀ and dSᵀ: rows = keys, columns = queries
  static constexpr int kStageBytes = 2 * QTile::kBytes;
  static constexpr int kQOffset = 2 * KTile::kBytes;
  static constexpr int kPOffset = kQOffset + 2 * kStageBytes;
  static constexpr int kStatsOffset = kPOffset + 2 * PTile::kBytes;
  static constexpr int kBytes = 1024 + kStatsOffset + 4 * BM * 4;
  unsigned k;  // shared-memory address of the K tile, 1024-byte aligned
  float* stats_base;
  __device__ __forceinline__ static Smem at() {
    unsigned char* raw = dynamic_smem();
    const unsigned raw_addr = smem_u32(raw);
    const unsigned base = (raw_addr + 1023u) & ~1023u;
    return {base, reinterpret_cast<float*>(raw + (base - raw_addr) + kStatsOffset)};
  }
  __device__ __forceinline__ unsigned v() const { return k + KTile::kBytes; }
  __device__ __forceinline__ unsigned q(int stage) const { return k + kQOffset + stage * kStageBytes; }
  __device__ __forceinline__ unsigned d_o(int stage) const { return q(stage) + QTile::kBytes; }
  __device__ __forceinline__ unsigned p() const { return k + kPOffset; }
  __device__ __forceinline__ unsigned ds() const { return k + kPOffset + PTile::kBytes; }
  __device__ __forceinline__ float* stats(int stage) const { return stats_base + stage * 2 * BM; }
};

// P = exp2(S·scale_log2 − lse2), masked (keys >= n_k, and above the causal diagonal), in place in
// s: this thread's part of the 64 queries × N keys of a warpgroup (N = 2·Regs: 32 in the wide
// kernel, 48 in its warp-specialised form; row0: the warp's first query inside the tile, m0 the
// tile's first query, key0 the warpgroup's first key; st: the tile's 64 lse2 values).
template <bool Causal, int Regs>
__device__ __forceinline__ void p_rows(float (&s)[Regs], const float* st, float scale_log2, bool needs_mask, int row0,
                                       int m0, int key0, int n_k, int diag, int g, int t) {
  // Column c = 8j + e of this thread's keys (key0 + 2t + c) is past n_k from c >= keys_left, and
  // above row r's diagonal from c > m0 + r + diag − key0 − 2t.
  const int keys_left = n_k - key0 - 2 * t;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = row0 + g + 8 * h;
    const float l2 = st[row];
    const int diag_left = m0 + row + diag - key0 - 2 * t;
#pragma unroll
    for (int j = 0; j < Regs / 4; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int i = 4 * j + 2 * h + e, c = 8 * j + e;
        float pe = exp2_approx(fmaf(s[i], scale_log2, -l2));
        if (needs_mask && (c >= keys_left || (Causal && c > diag_left))) pe = 0.f;
        s[i] = pe;
      }
  }
}

// dS = P∘(dP − delta) in place in dp (delta: the tile's 64 delta values; rows as p_rows).
template <int Regs>
__device__ __forceinline__ void ds_rows(float (&dp)[Regs], const float (&p)[Regs], const float* delta, int row0, int g) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float dl = delta[row0 + g + 8 * h];
#pragma unroll
    for (int j = 0; j < Regs / 4; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) dp[4 * j + 2 * h + e] = p[4 * j + 2 * h + e] * (dp[4 * j + 2 * h + e] - dl);
  }
}

// Writes a warp's 16 rows × (8·Blocks) columns of a wgmma accumulator (times `mul`, rounded to
// 16 bits) transposed into a 128-byte-swizzled tile: accumulator column c goes to tile row
// row0 + c, accumulator row r (the warp's rows from col0, a multiple of 8) to tile column col0 + r.
// One stmatrix .x4 .trans per two 8-column blocks, an .x2 for an odd last one.
template <class T, class Tile, int Blocks, int N>
__device__ __forceinline__ void store_transposed(unsigned tile, const float (&acc)[N], float mul, int row0, int col0,
                                                 int lane) {
  static_assert(4 * Blocks <= N, "8-column blocks inside the accumulator");
  const int mi = lane / 8;  // the stored matrix this lane addresses: (h = mi % 2, block 2·jp + mi / 2)
  const int chunk = col0 / 8 + (mi & 1);
#pragma unroll
  for (int jp = 0; jp < Blocks / 2; ++jp) {
    const int j0 = 2 * jp;
    const unsigned addr = tile + Tile::offset(row0 + 8 * (j0 + (mi >> 1)) + lane % 8, chunk);
    wgmma::stmatrix_x4_trans(addr, pack2<T>(acc[4 * j0] * mul, acc[4 * j0 + 1] * mul),
                             pack2<T>(acc[4 * j0 + 2] * mul, acc[4 * j0 + 3] * mul),
                             pack2<T>(acc[4 * j0 + 4] * mul, acc[4 * j0 + 5] * mul),
                             pack2<T>(acc[4 * j0 + 6] * mul, acc[4 * j0 + 7] * mul));
  }
  if constexpr (Blocks % 2 == 1) {  // lanes 0-15 address the last block's two matrices (h = mi)
    constexpr int j = Blocks - 1;
    const unsigned addr = tile + Tile::offset(row0 + 8 * j + lane % 8, chunk);
    wgmma::stmatrix_x2_trans(addr, pack2<T>(acc[4 * j] * mul, acc[4 * j + 1] * mul),
                             pack2<T>(acc[4 * j + 2] * mul, acc[4 * j + 3] * mul));
  }
}

// acc += Aᵀ·B over the 64 queries of a tile: A (64 queries × 64 head-dim columns, read M-major
// from a Q or dO tile: `a_m` the descriptor of its first column), B N key rows of the Pᵀ or dSᵀ
// tile K-major (`b`: its first row). The caller fences and commits.
template <class T, int N>
__device__ __forceinline__ void wgmma_keys_t(float (&acc)[N / 2], unsigned long long a_m, unsigned long long b) {
#pragma unroll
  for (int kk = 0; kk < attention_bwd::kWideQueryRows / 16; ++kk)
    wgmma::Mma<N>::template ss<T, 1, 0>(acc, a_m + ((kk * 16 * 128) >> 4), b + ((kk * 32) >> 4), 1);
}

// A place in the query-tile walk (head, tile) stepped tile by tile, without the division of
// QueryTileWalk::head and m0 per tile.
struct WalkPlace {
  int head, tile;
  template <class Walk>
  __device__ __forceinline__ void next(const Walk& walk) {
    if (++tile == walk.tile_begin + walk.tiles_per_head) tile = walk.tile_begin, ++head;
  }
};

// Issues the cp.async loads of the query tile at `at` into `stage` of `sm`: Q, dO (HeadDimV
// columns) and the rows' lse2 and delta, as bwd_detail::load_query_tile_async.
template <class T, int HeadDim, int HeadDimV, class Smem>
__device__ __forceinline__ void load_query_tile(const AttentionBackwardParams& p, const Smem& sm, int batch,
                                                const WalkPlace& at, int stage, int tid) {
  constexpr int BM = attention_bwd::kWideQueryRows, D = attention_bwd::kWideHeadDim, kThreads = attention_bwd::kWideThreads;
  const int m0 = at.tile * BM;
  fa2_detail::load_tile_async<T, BM, D, kThreads, typename Smem::QTile, HeadDim>(
      sm.q(stage), bwd_detail::head_ptr<const T>(p.q, batch, at.head), p.q.stride_n, m0, p.n_q, tid);
  fa2_detail::load_tile_async<T, BM, D, kThreads, typename Smem::QTile, HeadDimV>(
      sm.d_o(stage), bwd_detail::head_ptr<const T>(p.d_o, batch, at.head), p.d_o.stride_n, m0, p.n_q, tid);
  bwd_detail::load_tile_stats<BM, kThreads>(p, sm, batch, at.head, m0, stage, tid);
}

// Copies Rows rows of Cols (a multiple of 8) columns from a 128-byte-swizzled tile to global rows
// of `stride_n` elements from dst (rows >= row_end skipped), 16 bytes per thread and step.
template <class T, class Tile, int Rows, int Cols, int Threads>
__device__ __forceinline__ void copy_out(T* dst, long long stride_n, unsigned tile, int row_end, int tid) {
  constexpr int kChunks = Cols / 8;
  for (int i = tid; i < Rows * kChunks; i += Threads) {
    const int r = i / kChunks, c = i % kChunks;
    if (r < row_end) st_global_16(dst + r * stride_n + 8 * c, ld_shared_16(tile + Tile::offset(r, c)));
  }
}

}  // namespace bwd_wide

template <class T, int D, int BM, bool Causal, bool AtomicDQ, int HeadDim, int HeadDimV>
__device__ __forceinline__ void attention_backward_wgmma_kv_wide_body(const AttentionBackwardParams& p,
                                                                      const void* dq_map) {
  static_assert(D == attention_bwd::kWideHeadDim, "the 192-column tile");
  static_assert(BM == attention_bwd::kWideQueryRows, "64-row query tiles");
  static_assert(HeadDimV % 8 == 0 && HeadDimV > 0 && HeadDimV <= HeadDim, "HeadDimV must be a multiple of 8 up to HeadDim");
  bwd_detail::check_wgmma_backward_args<T, D, BM, HeadDim>();
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int BN = attention_bwd::kWideKeys;
  constexpr int kThreads = attention_bwd::kWideThreads;
  using Sm = bwd_wide::Smem;
  static_assert(Sm::kBytes == attention_bwd::kWideSmemBytes, "shared memory layout must match kWideSmemBytes");
  constexpr int kKeysPerWg = BN / 3;

  const int tid = threadIdx.x;
  const auto [wg, warp, lane, g, t] = wgmma::Lane::of(tid);
  const auto [n0, kv_head, batch, n_q, n_k, diag] = bwd_detail::KeyBlock::of<Causal>(p, BN);
  const float scale_log2 = p.scale_log2;
  const bwd_detail::QueryTileWalk<BM, Causal> walk(n0, n_q, n_k, p.head_group);
  const int total = walk.total;
  const Sm sm = Sm::at();

  fa2_detail::load_tile_async<T, BN, D, kThreads, Sm::KTile, HeadDim>(
      sm.k, bwd_detail::head_ptr<const T>(p.k, batch, kv_head), p.k.stride_n, n0, n_k, tid);
  fa2_detail::load_tile_async<T, BN, D, kThreads, Sm::KTile, HeadDimV>(
      sm.v(), bwd_detail::head_ptr<const T>(p.v, batch, kv_head), p.v.stride_n, n0, n_k, tid);
  bwd_wide::WalkPlace next{kv_head * walk.group, walk.tile_begin};  // the next tile to load
  if (total > 0) bwd_wide::load_query_tile<T, HeadDim, HeadDimV>(p, sm, batch, next, 0, tid);
  cp_async_commit();

  // This warpgroup's keys (S, dP), head-dim rows of dKᵀ and dVᵀ and columns of dQ; the
  // descriptors that do not move with the stage.
  const int key_wg = kKeysPerWg * wg, col = 64 * wg;
  const unsigned long long k_b = wgmma::desc_sw128(sm.k + key_wg * 128, 16, 1024);
  const unsigned long long v_b = wgmma::desc_sw128(sm.v() + key_wg * 128, 16, 1024);
  const unsigned long long p_b = wgmma::desc_sw128(sm.p(), 16, 1024);
  const unsigned long long ds_b = wgmma::desc_sw128(sm.ds(), 16, 1024);
  const unsigned long long ds_m = wgmma::desc_sw128(sm.ds(), Sm::PTile::kBlockBytes, 1024);
  const unsigned long long k_cols = bwd_detail::mn_major_cols<Sm::KTile::kBlockBytes>(sm.k, col);
  const bool leader = warp == 0 && lane == 0;  // this warpgroup's first thread: dQ's reduce-adds

  float dkt[48], dvt[48];
#pragma unroll
  for (int i = 0; i < 48; ++i) dkt[i] = dvt[i] = 0.f;

  for (int it = 0; it < total; ++it) {
    const int stage = it & 1;
    const int head = next.head;
    const int m0 = next.tile * BM;
    next.next(walk);
    cp_async_wait<0>();
    wgmma::fence_proxy_async();
    __syncthreads();  // tile it landed; every warpgroup done with tile it − 1's products
    const float* st = sm.stats(stage);

    // ---- S = Q·K_wgᵀ, dP = dO·V_wgᵀ (64 queries × this warpgroup's 32 keys), two groups ----
    float s[16], dp[16];
    bwd_detail::issue_sdp<T, kKeysPerWg, HeadDim, Sm::QTile::kBlockBytes, Sm::KTile::kBlockBytes, true, HeadDimV>(
        s, dp, wgmma::desc_sw128(sm.q(stage), 16, 1024), wgmma::desc_sw128(sm.d_o(stage), 16, 1024), k_b, v_b);

    // ---- P (while dP runs), dS, then both transposed into the Pᵀ and dSᵀ tiles ----
    wgmma::wait<1>();
    wgmma::fence_operand(s);
    const bool needs_mask = n0 + BN > n_k || (Causal && n0 + BN - 1 > m0 + diag);
    bwd_wide::p_rows<Causal>(s, st, scale_log2, needs_mask, warp * 16, m0, n0 + key_wg, n_k, diag, g, t);
    wgmma::wait<0>();
    wgmma::fence_operand(dp);
    bwd_wide::ds_rows(dp, s, st + BM, warp * 16, g);
    bwd_wide::store_transposed<T, Sm::PTile, 4>(sm.p(), s, 1.f, key_wg, warp * 16, lane);
    bwd_wide::store_transposed<T, Sm::PTile, 4>(sm.ds(), dp, 1.f, key_wg, warp * 16, lane);
    if (AtomicDQ && leader) tma::store_wait_read();  // tile it − 1's boxes (the other stage) read
    wgmma::fence_proxy_async();
    named_barrier<1, kThreads>();  // every row of Pᵀ and dSᵀ written; every S and dP done

    // ---- tile it + 1 into the other stage ----
    if (it + 1 < total) {
      bwd_wide::load_query_tile<T, HeadDim, HeadDimV>(p, sm, batch, next, stage ^ 1, tid);
      cp_async_commit();
    }


    // ---- dVᵀ += dOᵀ·P, dKᵀ += Qᵀ·dS and dQ = dS·K (this warpgroup's columns, in two halves of 32
    // through its Q and dO blocks of the stage, added by TMA reduce-adds) ----
    float dq[AtomicDQ ? 16 : 1];
    wgmma::fence_operand(dvt);
    wgmma::fence_operand(dkt);
    wgmma::fence();
    // Every warpgroup runs dVᵀ, also on head-dim rows past v's (never stored): a branch around a
    // wgmma of one warpgroup makes the compiler serialise them all.
    bwd_wide::wgmma_keys_t<T, BN>(dvt, bwd_detail::mn_major_cols<Sm::QTile::kBlockBytes>(sm.d_o(stage), col), p_b);
    bwd_wide::wgmma_keys_t<T, BN>(dkt, bwd_detail::mn_major_cols<Sm::QTile::kBlockBytes>(sm.q(stage), col), ds_b);
    if constexpr (AtomicDQ) bwd_detail::wgmma_cols_dq<T, 32, BN>(dq, ds_m, k_cols);
    wgmma::commit();

    bwd_detail::end_query_tile(dvt, dkt);
    if constexpr (AtomicDQ) {
      const bwd_detail::DqStaging lo{sm.q(stage) + wg * Sm::QTile::kBlockBytes};
      const bwd_detail::DqStaging hi{sm.d_o(stage) + wg * Sm::QTile::kBlockBytes};
      wgmma::fence_operand(dq);
      tma::barrier_sync(2 + wg, 128);  // every warp of this warpgroup past its products
      bwd_detail::write_dq_boxes<32>(lo, dq, 0, warp, g, t);
      wgmma::fence();
      bwd_detail::wgmma_cols_dq<T, 32, BN>(dq, ds_m, k_cols + ((32 * 2) >> 4));
      wgmma::commit();
      wgmma::wait<0>();
      wgmma::fence_operand(dq);
      bwd_detail::write_dq_boxes<32>(hi, dq, 0, warp, g, t);
      tma::fence_proxy_async();
      tma::barrier_sync(2 + wg, 128);
      if (leader) {
        const int row_base = batch * p.heads_q + head;
        tma::reduce_add_3d(dq_map, lo.dq_box(0), col, m0, row_base);
        tma::reduce_add_3d(dq_map, hi.dq_box(0), col + 32, m0, row_base);
        tma::store_commit();
      }
    }
  }

  // ---- epilogue: dK = scale·dKᵀᵀ, dV, through the Q/dO stages (free once every load landed,
  // every warpgroup is done and dQ's last boxes are read) ----
  if (AtomicDQ && leader) tma::store_wait_read();
  cp_async_wait<0>();
  __syncthreads();
  const unsigned dk_tile = sm.q(0), dv_tile = sm.q(0) + Sm::KTile::kBytes;
  static_assert(2 * Sm::KTile::kBytes <= 2 * Sm::kStageBytes, "dK and dV fit in the stages");
  bwd_wide::store_transposed<T, Sm::KTile, 12>(dk_tile, dkt, p.scale, 0, col + warp * 16, lane);
  if (col < HeadDimV)  // this warpgroup's rows of dVᵀ hold v's columns
    bwd_wide::store_transposed<T, Sm::KTile, 12>(dv_tile, dvt, 1.f, 0, col + warp * 16, lane);
  __syncthreads();
  const int keys = imin(n_k - n0, BN);
  bwd_wide::copy_out<T, Sm::KTile, BN, HeadDim, kThreads>(bwd_detail::head_ptr<T>(p.dk, batch, kv_head) + n0 * p.dk.stride_n,
                                                          p.dk.stride_n, dk_tile, keys, tid);
  bwd_wide::copy_out<T, Sm::KTile, BN, HeadDimV, kThreads>(bwd_detail::head_ptr<T>(p.dv, batch, kv_head) + n0 * p.dv.stride_n,
                                                           p.dv.stride_n, dv_tile, keys, tid);
#endif
}

// The wide kernel without dQ (the deterministic mode).
template <class T, int D, int BM, bool Causal, int HeadDim, int HeadDimV = HeadDim>
__device__ __forceinline__ void attention_backward_wgmma_kv_wide(const AttentionBackwardParams& p) {
  attention_backward_wgmma_kv_wide_body<T, D, BM, Causal, false, HeadDim, HeadDimV>(p, nullptr);
}

// The wide kernel with dQ by TMA reduce-adds (the atomic mode).
template <class T, int D, int BM, bool Causal, int HeadDim, int HeadDimV = HeadDim>
__device__ __forceinline__ void attention_backward_wgmma_kv_wide_tma(const AttentionBackwardTmaParams& tp) {
  attention_backward_wgmma_kv_wide_body<T, D, BM, Causal, true, HeadDim, HeadDimV>(tp.a, &tp.dq_map);
}

}  // namespace kgen
