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

#include "kgen_device/attention/backward_config.h"
#include "kgen_device/attention/backward_fa2.cuh"
#include "kgen_device/core/atomic.cuh"
#include "kgen_device/core/block.cuh"
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

}  // namespace bwd_detail

// T: half_t or bfloat16_t. D: 64 or 128. BM: query rows per tile (64). WGs: warpgroups (64 keys
// each). Causal: bottom-right mask. AtomicDQ: also add dQ (else attention_backward_fa2_dq does).
template <class T, int D, int BM, int WGs, bool Causal, bool AtomicDQ, int HeadDim = D>
__device__ __forceinline__ void attention_backward_wgmma_kv(const AttentionBackwardParams& p) {
  static_assert(is_same<T, half_t>::value || is_same<T, bfloat16_t>::value,
                "the wgmma backward takes half_t or bfloat16_t");
  static_assert(D == 64 || D == 128, "D must be 64 or 128");
  static_assert(HeadDim % 8 == 0 && HeadDim > D - 64 && HeadDim <= D, "HeadDim must pad to D");
  static_assert(BM == 64, "query tiles are one wgmma M of 64 rows");
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

  const int n0 = blockIdx.x * BN;
  const int kv_head = blockIdx.y;
  const int batch = blockIdx.z;
  const int n_q = p.n_q, n_k = p.n_k;
  const int diag = n_k - n_q;
  const float scale_log2 = p.scale_log2;
  const bwd_detail::QueryTileWalk<BM, Causal> walk(n0, n_q, n_k, p.head_group);
  const int total = walk.total;

  unsigned char* smem_raw = dynamic_smem();
  const unsigned raw = smem_u32(smem_raw);
  const unsigned base = (raw + 1023u) & ~1023u;  // the 128-byte swizzle repeats every 1024 bytes
  const bwd_detail::KeyMajorSmem<KVTile::kBytes, QTile::kBytes, BM> sm{
      base, reinterpret_cast<float*>(smem_raw + (base - raw) + kStatsOffset)};

  auto load_query_tile = [&](int it, int stage) {
    const int head = walk.head(kv_head, it);
    const int m0 = walk.m0(it);
    fa2_detail::load_tile_async<T, BM, D, kThreads, QTile, HeadDim>(sm.q(stage), bwd_detail::head_ptr<const T>(p.q, batch, head),
                                                           p.q.stride_n, m0, n_q, tid);
    fa2_detail::load_tile_async<T, BM, D, kThreads, QTile, HeadDim>(sm.d_o(stage), bwd_detail::head_ptr<const T>(p.d_o, batch, head),
                                                           p.d_o.stride_n, m0, n_q, tid);
    // lse2 and delta of the tile's rows by 4-byte cp.async (a plain load would stall the
    // warpgroup's next wgmma on its latency). Rows >= n_q are zero-filled: those rows have zero
    // Q and dO, so P = 1 there multiplies zeros (dV, dK) and dS = 0.
    static_assert(2 * BM <= kThreads, "one thread per statistic");
    if (tid < 2 * BM) {
      const int which = tid / BM;  // 0: lse2, 1: delta
      const int row = m0 + tid % BM;
      const float* src = (which == 0 ? p.lse2 : p.delta) + bwd_detail::stat_row(p, batch, head, 0);
      cp_async_4(smem_u32(sm.stats(stage) + tid), row < n_q ? src + row : src, row < n_q);
    }
  };

  fa2_detail::load_tile_async<T, BN, D, kThreads, KVTile, HeadDim>(sm.k, bwd_detail::head_ptr<const T>(p.k, batch, kv_head),
                                                          p.k.stride_n, n0, n_k, tid);
  fa2_detail::load_tile_async<T, BN, D, kThreads, KVTile, HeadDim>(sm.v(), bwd_detail::head_ptr<const T>(p.v, batch, kv_head),
                                                          p.v.stride_n, n0, n_k, tid);
  if (total > 0) load_query_tile(0, 0);
  cp_async_commit();

  // Descriptors (wgmma.cuh): this warpgroup's K and V rows as K-major A; Q, dO as K-major B
  // (Sᵀ, dPᵀ) or MN-major B (dK, dV); dSᵀ rows as M-major A and K rows as MN-major B (dQ).
  const unsigned wg_rows = wg * 64 * 128;
  const unsigned long long k_a = wgmma::desc_sw128(sm.k + wg_rows, 16, 1024);
  const unsigned long long v_a = wgmma::desc_sw128(sm.v() + wg_rows, 16, 1024);
  const unsigned long long ds_a = wgmma::desc_sw128(sm.ds(), DsTile::kBlockBytes, 1024);

  float dk[kDRegs], dv[kDRegs];
#pragma unroll
  for (int i = 0; i < kDRegs; ++i) dk[i] = dv[i] = 0.f;
  const int key0 = n0 + wg * 64 + warp * 16;  // first key of this warp

  for (int it = 0; it < total; ++it) {
    const int stage = it & 1;
    const int head = walk.head(kv_head, it);
    const int m0 = walk.m0(it);
    cp_async_wait<0>();
    wgmma::fence_proxy_async();
    __syncthreads();  // tile `it` landed; every warpgroup is done with tile it − 1
    if (it + 1 < total) load_query_tile(it + 1, stage ^ 1);
    cp_async_commit();
    const float* st = sm.stats(stage);

    // ---- Sᵀ = K_wg·Qᵀ, dPᵀ = V_wg·dOᵀ ----
    float s[kSRegs], dp[kSRegs];
    {
      const unsigned long long q_b = wgmma::desc_sw128(sm.q(stage), 16, 1024);
      const unsigned long long do_b = wgmma::desc_sw128(sm.d_o(stage), 16, 1024);
      wgmma::fence();
#pragma unroll
      for (int kk = 0; kk < (HeadDim + 15) / 16; ++kk)
        wgmma::Mma<BM>::template ss<T, 0, 0>(s, k_a + (bwd_detail::k_major_step(kk, KVTile::kBlockBytes) >> 4),
                                              q_b + (bwd_detail::k_major_step(kk, QTile::kBlockBytes) >> 4), kk > 0);
#pragma unroll
      for (int kk = 0; kk < (HeadDim + 15) / 16; ++kk)
        wgmma::Mma<BM>::template ss<T, 0, 0>(dp, v_a + (bwd_detail::k_major_step(kk, KVTile::kBlockBytes) >> 4),
                                              do_b + (bwd_detail::k_major_step(kk, QTile::kBlockBytes) >> 4), kk > 0);
      wgmma::commit();
      wgmma::wait<0>();
      wgmma::fence_operand(s);
      wgmma::fence_operand(dp);
    }

    // ---- Pᵀ = exp2(Sᵀ·scale_log2 − lse2), masked; dSᵀ = Pᵀ∘(dPᵀ − delta) ----
    const bool needs_mask = n0 + BN > n_k || (Causal && n0 + BN - 1 > m0 + diag);
#pragma unroll
    for (int j = 0; j < BM / 8; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int col = 8 * j + 2 * t + e;
        const float l2 = st[col], dl = st[BM + col];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          float pe = exp2_approx(fmaf(s[4 * j + 2 * h + e], scale_log2, -l2));
          if (needs_mask) {
            const int key = key0 + g + 8 * h;
            if (key >= n_k || (Causal && key > m0 + col + diag)) pe = 0.f;
          }
          s[4 * j + 2 * h + e] = pe;
          dp[4 * j + 2 * h + e] = pe * (dp[4 * j + 2 * h + e] - dl);
        }
      }

    // ---- dV += Pᵀ·dO, dK += dSᵀ·Q ----
    {
      unsigned pa[BM / 16][4], da[BM / 16][4];
#pragma unroll
      for (int kk = 0; kk < BM / 16; ++kk) {
        wgmma::pack_a<T>(pa[kk], s, kk);
        wgmma::pack_a<T>(da[kk], dp, kk);
      }
      const unsigned long long do_b = wgmma::desc_sw128(sm.d_o(stage), QTile::kBlockBytes, 1024);
      const unsigned long long q_b = wgmma::desc_sw128(sm.q(stage), QTile::kBlockBytes, 1024);
      wgmma::fence_operand(dv);
      wgmma::fence_operand(dk);
      wgmma::fence();
#pragma unroll
      for (int kk = 0; kk < BM / 16; ++kk) wgmma::Mma<D>::template rs<T, 1>(dv, pa[kk], do_b + ((kk * 16 * 128) >> 4), 1);
#pragma unroll
      for (int kk = 0; kk < BM / 16; ++kk) wgmma::Mma<D>::template rs<T, 1>(dk, da[kk], q_b + ((kk * 16 * 128) >> 4), 1);
      wgmma::commit();
    }

    if constexpr (AtomicDQ) {
      // ---- dQ += dS·K through shared dSᵀ and fp32 atomics; warpgroup wg computes the columns
      // [wg·D/WGs, +D/WGs) over all BN keys, in passes of kDqCols ----
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = wg * 64 + warp * 16 + g + 8 * h;
#pragma unroll
        for (int j = 0; j < BM / 8; ++j)
          st_shared_4(sm.ds() + DsTile::offset(row, j) + 4 * t, pack2<T>(dp[4 * j + 2 * h], dp[4 * j + 2 * h + 1]));
      }
      wgmma::fence_proxy_async();
      named_barrier<1, kThreads>();  // all dSᵀ rows written
      float* acc_base = p.dq_accum + bwd_detail::stat_row(p, batch, head, 0) * HeadDim;
#pragma unroll
      for (int pass = 0; pass < kDqPasses; ++pass) {
        const int col0 = wg * (D / WGs) + pass * kDqCols;
        float dq[kDqCols / 2];
        // K rows as MN-major B from column col0: a 64-column block, then 2 bytes per column
        // inside its 128-byte rows (the swizzle applies to the resulting addresses).
        const unsigned long long k_b = wgmma::desc_sw128(sm.k + (col0 / 64) * KVTile::kBlockBytes + (col0 % 64) * 2,
                                                         KVTile::kBlockBytes, 1024);
        wgmma::fence();
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk)
          wgmma::Mma<kDqCols>::template ss<T, 1, 1>(dq, ds_a + ((kk * 16 * 128) >> 4), k_b + ((kk * 16 * 128) >> 4), kk > 0);
        wgmma::commit();
        wgmma::wait<0>();
        wgmma::fence_operand(dq);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int row = m0 + warp * 16 + g + 8 * h;
          if (row >= n_q) continue;
          float* acc_row = acc_base + static_cast<long long>(row) * HeadDim + col0 + 2 * t;
#pragma unroll
          for (int j = 0; j < kDqCols / 8; ++j)
            if (HeadDim == D || col0 + 8 * j < HeadDim)
              red_add2(acc_row + 8 * j, dq[4 * j + 2 * h], dq[4 * j + 2 * h + 1]);
        }
      }
    }
    wgmma::wait<0>();
    wgmma::fence_operand(dv);
    wgmma::fence_operand(dk);
  }

  // ---- epilogue: dK = s·Σ dSᵀ·Q, dV ----
  cp_async_wait<0>();
  using Acc = const float(&)[1][D / 8][4];
  bwd_detail::store_rows<T, 1, D, HeadDim>(bwd_detail::head_ptr<T>(p.dk, batch, kv_head), p.dk.stride_n, key0,
                                           n_k, reinterpret_cast<Acc>(dk), p.scale);
  bwd_detail::store_rows<T, 1, D, HeadDim>(bwd_detail::head_ptr<T>(p.dv, batch, kv_head), p.dv.stride_n, key0,
                                           n_k, reinterpret_cast<Acc>(dv), 1.f);
#endif
}

}  // namespace kgen
