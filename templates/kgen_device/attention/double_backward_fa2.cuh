// FA2-class attention double backward for sm_80+ (docs/attention.md §4), O(n·d) memory.
//
// With P = exp2(s·scale_log2 − lse2), dP = dO·Vᵀ, dS = P∘(dP − delta) (the backward's) and the
// cotangents gQ, gK, gV of dQ, dK, dV (any may be absent = 0, their loads and mma skipped):
//   G  = s·(gQ·Kᵀ + Q·gKᵀ)            r = rowsum(P∘G)
//   Z  = dO·gVᵀ                        c = rowsum(P∘Z + dS∘G) − r∘delta
//   H  = P∘(G − r)                     P̄ = Z + G∘(dP − delta) − r∘dP
//   S̄  = P∘(P̄ − c)
//   Q̄ = s·(dS·gK + S̄·K)   dŌ = P·gV + H·V   K̄ = s·(dSᵀ·gQ + S̄ᵀ·Q)   V̄ = Hᵀ·dO
// (c uses Σ_j P_ij·dP_ij = delta_i.)
//
// attention_double_backward_fa2_q: grid (ceil(n_q / BM), heads_q, batch); warp w owns 16 query
//   rows. Pass 1 over the K/V tiles forms r and c (written to the workspace rows); pass 2
//   recomputes the tiles and accumulates Q̄ and dŌ in registers (deterministic). The r/c pass
//   alone (Pass::stats) may split each query tile's key tiles over p.stats_splits consecutive
//   blocks, which add their partial sums into the zeroed rows (fp32 atomics; the order of two
//   or four additions may vary between runs).
// attention_double_backward_fa2_kv: grid (ceil(n_k / BN), heads_kv, batch); warp w owns 16
//   keys, walking the query tiles (BM rows) of every head of its group, with the transposed
//   tiles (keys as rows) and per-query statistics from shared memory; K̄, V̄ in registers.
//
// Variant (variant.cuh), with its inputs `va`: P from the modified, masked score and the chain
// rule through f' and f'' (variant_double, second_order's variant form; docs/attention.md §8); a
// mask narrows the key tiles of a query tile and the query tiles of a key tile to those it may
// show, and is applied per element on every tile walked.
//
// Packed batches (Variant::kPacked; docs/attention.md §9): a block's tiles are its sequence's
// (sequence_rows: blockIdx.z is the sequence), its tensor and workspace rows start at the
// sequence's first rows, causal is bottom-right per sequence, and blocks past the sequence's
// rows (keys) idle. The fused grid then holds the two parts in equal halves (fused_query_blocks).
// The dense kernels' code is unchanged by this (the replay table); a lambda for the Q, dO, gQ
// loads reordered that of the dense variant kernels, so they are three calls.
//
// HeadDimV: v's, gV's, dO's, V̄'s and dŌ's head dim when it is below q's (MLA, docs/kernels/mla.md),
// a multiple of 8, as backward_fa2.cuh's: those tiles are loaded with HeadDimV columns (zero-filled
// to 16), dP and Z reduce over HeadDimV rounded up to 16, and dŌ and V̄ are accumulated and stored
// over HeadDimV columns (with two column splits, the second owns none of them when HeadDimV <= 128).
//
// Operand layouts are those of backward_fa2.cuh (mma_abt: A·Bᵀ from two row-major tiles;
// mma_xb: register C fragments times a [k][n] tile).
#pragma once

#include "kgen_device/attention/backward_fa2.cuh"
#include "kgen_device/core/atomic.cuh"

namespace kgen {
namespace dbl_detail {

template <int D, int BM, int BN>
constexpr int kQSmemBytes = attention_bwd::fa2_dbl_q_smem_bytes(D, BM, BN);
template <int D, int BM, int BN>
constexpr int kKvSmemBytes = attention_bwd::fa2_dbl_kv_smem_bytes(D, BM, BN);

// End of the r/c pass for a thread's rows row0 + g + 8h below n_q (g, t: its place in the quad layout;
// a packed sequence's rows and n_q counted from the tensors' first row):
// the quad sums of its partials, c = rowsum(P∘Z + dS∘G) − r·delta, written by the lane with
// t == 0 to the workspace rows, or added there (fp32 atomics) when `splits` blocks share the
// keys (c's r·delta term is linear too).
__device__ __forceinline__ void finish_row_stats(const AttentionBackwardParams& p, int batch, int head, int row0,
                                                 int n_q, int g, int t, float (&r)[2], float (&c)[2],
                                                 const float (&delta)[2], int splits) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    r[h] = quad_sum(r[h]);
    c[h] = quad_sum(c[h]) - r[h] * delta[h];
    const int row = row0 + g + 8 * h;
    if (t == 0 && row < n_q) {
      const long long idx = bwd_detail::stat_row(p, batch, head, row);
      if (splits > 1) {
        red_add(p.row_r + idx, r[h]);
        red_add(p.row_c + idx, c[h]);
      } else {
        p.row_r[idx] = r[h];
        p.row_c[idx] = c[h];
      }
    }
  }
}

// The fused grids' query part: its first blocks. Dense batches: ceil(n_q / rows) · splits. Packed
// batches: the grid's first half; the host gives both parts the blocks of the
// longest sequence's queries or keys, whichever are more, and the blocks past a sequence's rows
// idle.
template <class Variant>
__device__ __forceinline__ int fused_query_blocks(int n_q, int rows, int splits) {
  if constexpr (Variant::kPacked) return static_cast<int>(gridDim.x) / 2;
  else return (n_q + rows - 1) / rows * splits;
}

}  // namespace dbl_detail

// Passes of the query-major kernel.
enum class DoubleBackwardRowPass { both, stats, apply };

// Query-major double backward on query tile `block` (blockIdx.x unless fused): Pass::both runs
// both passes; stats only writes r and c; apply reads r and c from the workspace and runs pass 1.
// D is the tile's head dim, HeadDim the tensors' (as in backward_fa2.cuh: the mma cover HeadDim
// rounded up to 16, zero-filled past HeadDim, and nothing past HeadDim is stored).
// Splits: 1, or 2 above 128 columns (as backward_fa2.cuh's key-major kernel): the apply pass's
// block index is tile · 2 + split, both splits form the score-shaped tiles over the whole head
// dim and split s accumulates the columns [128·s, 128·s + 128) of Q̄ and dŌ. The stats pass
// keeps no row accumulators and is never split.
template <class T, int D, int BM, int BN, int Warps, bool Causal,
          DoubleBackwardRowPass Pass = DoubleBackwardRowPass::both, int HeadDim = D, int Splits = 1,
          class Variant = NoVariant, int HeadDimV = HeadDim>
__device__ __forceinline__ void attention_double_backward_fa2_q(const AttentionBackwardParams& p,
                                                                const VariantArgs* va = nullptr,
                                                                int block = blockIdx.x) {
  static_assert(is_same<T, half_t>::value || is_same<T, bfloat16_t>::value,
                "the FA2 double backward takes half_t or bfloat16_t");
  static_assert(D % 32 == 0 && D >= 32 && D <= 256, "D must be a multiple of 32 up to 256");
  static_assert(HeadDim % 8 == 0 && HeadDim > D - 32 && HeadDim <= D, "HeadDim must pad to D");
  static_assert(HeadDimV % 8 == 0 && HeadDimV > 0 && HeadDimV <= HeadDim, "HeadDimV must be a multiple of 8 up to HeadDim");
  constexpr int kDC = (HeadDim + 15) / 16 * 16;  // head-dim columns the mma cover
  constexpr int kDCV = (HeadDimV + 15) / 16 * 16;  // v's columns the mma cover
  // The stats pass keeps no Q̄/dŌ rows: never split.
  static_assert(Splits == 1 ? kDC <= 128 || Pass == DoubleBackwardRowPass::stats : Splits == 2 && kDC > 128,
                "two column splits above 128");
  constexpr int kSplitCols = Splits == 1 ? kDC : 128;  // Q̄/dŌ columns of one block
  constexpr int kThreads = Warps * 32;
  static_assert(BM == 16 * Warps, "16 query rows per warp");
  static_assert(BN % 16 == 0, "BN must be a multiple of 16");
  constexpr int kNT = BN / 8;
  constexpr int kDT = kSplitCols / 8;
  using SwzD = Swizzle16B<D / 8>;
  constexpr int kQBytes = BM * D * 2;
  constexpr int kKVBytes = BN * D * 2;
  static_assert(3 * kQBytes + 8 * kKVBytes == dbl_detail::kQSmemBytes<D, BM, BN>,
                "shared memory layout must match fa2_dbl_q_smem_bytes");

  const int tid = threadIdx.x;
  const int warp = tid / 32;
  const int lane = tid % 32;
  const int g = lane / 4;
  const int t = lane % 4;
  // The r/c pass may split the key tiles of a query tile over stats_splits blocks.
  int split = 0, splits = 1;
  if constexpr (Pass == DoubleBackwardRowPass::stats) {
    splits = p.stats_splits > 1 ? p.stats_splits : 1;
    split = block % splits;
    block /= splits;
  }
  int col0 = 0;  // first Q̄, dŌ column of this block
  if constexpr (Splits > 1 && Pass != DoubleBackwardRowPass::stats) {
    col0 = (block % Splits) * kSplitCols;
    block /= Splits;
  }
  const int m0 = block * BM;
  const int head = blockIdx.y;
  const int batch = blockIdx.z;
  const int kv_head = head / p.head_group;
  // Packed batches: the sequence's rows (tensor and workspace rows from its first ones).
  const SequenceRows seq = sequence_rows<Variant>(va, batch, p.n_q, p.n_k);
  const int n_q = seq.n_q;
  const int n_k = seq.n_k;
  if constexpr (Variant::kPacked)
    if (m0 >= n_q) return;  // past this sequence's rows
  const int diag = n_k - n_q;
  const float scale = p.scale;
  const float scale_log2 = p.scale_log2;
  const bool has_gq = p.gq.data != nullptr;
  const bool has_gk = p.gk.data != nullptr;
  const bool has_gv = p.gv.data != nullptr;

  int n_end = n_k;
  if constexpr (Causal) n_end = imin(n_k, imin(m0 + BM, n_q) + diag);
  int all_tiles = n_end > 0 ? (n_end + BN - 1) / BN : 0;
  int tile0 = 0;  // the first key tile (a variant's mask may skip leading tiles)
  VariantAt at{};
  if constexpr (kVariantScores<Variant>) {
    at = {batch, head, n_q, n_k, scale, 1.f / scale};
    if constexpr (Variant::kMask) {
      variant_key_tiles<Variant, BN, true>(*va, at, m0, imin(m0 + BM, n_q) - 1, tile0, all_tiles);
      all_tiles = imax(all_tiles - tile0, 0);
    }
  }
  const int tile_lo = tile0 + split * all_tiles / splits;  // this block's key tiles [tile_lo, +num_tiles)
  const int num_tiles = tile0 + (split + 1) * all_tiles / splits - tile_lo;

  const unsigned smem_q = smem_u32(dynamic_smem());
  const unsigned smem_do = smem_q + kQBytes;
  const unsigned smem_gq = smem_q + 2 * kQBytes;
  // Stage s: [K][V][gK][gV].
  auto smem_kv = [&](int stage, int which) { return smem_q + 3 * kQBytes + (stage * 4 + which) * kKVBytes; };
  // `v_cols`: a tile of v's head dim (V, gV).
  auto load_one = [&](const AttentionTensorArg& a, unsigned dst, int tile, bool v_cols) {
    const T* rows = bwd_detail::rows_ptr<const T, Variant::kPacked>(a, batch, kv_head, seq.k0);
    if (v_cols) fa2_detail::load_tile_async<T, BN, D, kThreads, SwzD, HeadDimV>(dst, rows, a.stride_n, tile * BN, n_k, tid);
    else fa2_detail::load_tile_async<T, BN, D, kThreads, SwzD, HeadDim>(dst, rows, a.stride_n, tile * BN, n_k, tid);
  };
  auto load_kv = [&](int tile, int stage) {
    load_one(p.k, smem_kv(stage, 0), tile, false);
    load_one(p.v, smem_kv(stage, 1), tile, true);
    if (has_gk) load_one(p.gk, smem_kv(stage, 2), tile, false);
    if (has_gv) load_one(p.gv, smem_kv(stage, 3), tile, true);
  };

  fa2_detail::load_tile_async<T, BM, D, kThreads, SwzD, HeadDim>(
      smem_q, bwd_detail::rows_ptr<const T, Variant::kPacked>(p.q, batch, head, seq.q0), p.q.stride_n, m0, n_q, tid);
  fa2_detail::load_tile_async<T, BM, D, kThreads, SwzD, HeadDimV>(
      smem_do, bwd_detail::rows_ptr<const T, Variant::kPacked>(p.d_o, batch, head, seq.q0), p.d_o.stride_n, m0, n_q, tid);
  if (has_gq)
    fa2_detail::load_tile_async<T, BM, D, kThreads, SwzD, HeadDim>(
        smem_gq, bwd_detail::rows_ptr<const T, Variant::kPacked>(p.gq, batch, head, seq.q0), p.gq.stride_n, m0, n_q, tid);
  if (num_tiles > 0) load_kv(tile_lo, 0);
  cp_async_commit();

  const int row_local0 = warp * 16;
  float lse2[2], delta[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = m0 + row_local0 + g + 8 * h;
    lse2[h] = infinity_f32();
    delta[h] = 0.f;
    if (row < n_q) {
      const long long idx = bwd_detail::stat_row(p, seq.slot, head, seq.q0 + row);
      lse2[h] = p.lse2[idx];
      delta[h] = p.delta[idx];
    }
  }
  const unsigned a_lane = SwzD::offset(row_local0 + lane % 16, lane / 16);
  const unsigned b_lane = SwzD::offset(lane % 8 + 8 * (lane / 16), (lane / 8) % 2);
  const unsigned v_lane = SwzD::offset(lane % 8 + 8 * ((lane / 8) % 2), lane / 16);
  // col0 is 0 or 128 (whole swizzle groups): a plain move of the V-pattern address.
  const unsigned v_lane_split = Splits == 1 ? v_lane : SwzD::advance(v_lane, 16 * (col0 / 128));
  const int dd_end = (imin(kDC, col0 + kSplitCols) - col0) / 16;
  // dŌ's pairs: fewer when v's head dim is below q's.
  const int dd_end_v = HeadDimV == HeadDim ? dd_end : imax(imin(col0 + kSplitCols, kDCV) - col0, 0) / 16;

  // Forms P (masked), dP, unscaled G and Z of K/V tile `tile` (already in `stage`); with a
  // variant s keeps the raw scores, which the passes turn into P element by element
  // (variant_double, with f' and f'' used at once).
  auto tiles = [&](int tile, int stage, float (&s)[1][kNT][4], float (&dp)[1][kNT][4], float (&gg)[1][kNT][4],
                   float (&z)[1][kNT][4]) {
    bwd_detail::zero(s);
    bwd_detail::zero(dp);
    bwd_detail::zero(gg);
    bwd_detail::zero(z);
    bwd_detail::mma_abt<T, 1, kNT, D, kDC>(s, smem_q + a_lane, smem_kv(stage, 0) + b_lane);
    bwd_detail::mma_abt<T, 1, kNT, D, kDCV>(dp, smem_do + a_lane, smem_kv(stage, 1) + b_lane);
    if (has_gq) bwd_detail::mma_abt<T, 1, kNT, D, kDC>(gg, smem_gq + a_lane, smem_kv(stage, 0) + b_lane);
    if (has_gk) bwd_detail::mma_abt<T, 1, kNT, D, kDC>(gg, smem_q + a_lane, smem_kv(stage, 2) + b_lane);
    if (has_gv) bwd_detail::mma_abt<T, 1, kNT, D, kDCV>(z, smem_do + a_lane, smem_kv(stage, 3) + b_lane);
    const int n0 = tile * BN;
    const bool needs_mask = n0 + BN > n_k || (Causal && n0 + BN - 1 > m0 + diag);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = m0 + row_local0 + g + 8 * h;
      int limit = n_k;
      if constexpr (Causal) limit = imin(n_k, row + diag + 1);
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          if constexpr (!kVariantScores<Variant>) {
            float pe = exp2_approx(fmaf(s[0][nt][2 * h + e], scale_log2, -lse2[h]));
            if (needs_mask && n0 + nt * 8 + 2 * t + e >= limit) pe = 0.f;
            s[0][nt][2 * h + e] = pe;
          }
        }
    }
  };
  // Pass 0: r = rowsum(P∘G), c = rowsum(P∘Z + dS∘G) − r·delta (partials per thread, then the
  // quad sums). Pass 1: Q̄ = s·(dS·gK + S̄·K), dŌ = P·gV + H·V. K/V tiles double-buffered.
  float r[2] = {0.f, 0.f}, c[2] = {0.f, 0.f};
  float qbar[1][kDT][4], dobar[1][kDT][4];
  bwd_detail::zero(qbar);
  bwd_detail::zero(dobar);
  if constexpr (Pass == DoubleBackwardRowPass::apply) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = m0 + row_local0 + g + 8 * h;
      if (row < n_q) {
        const long long idx = bwd_detail::stat_row(p, seq.slot, head, seq.q0 + row);
        r[h] = p.row_r[idx];
        c[h] = p.row_c[idx];
      }
    }
  }
  // Quad sums of the pass-0 partials; c = rowsum(P∘Z + dS∘G) − r·delta; written to the workspace.
  auto finish_stats = [&]() {
    dbl_detail::finish_row_stats(p, seq.slot, head, seq.q0 + m0 + row_local0, seq.q0 + n_q, g, t, r, c, delta, splits);
  };
  constexpr int kFirstPass = Pass == DoubleBackwardRowPass::apply ? 1 : 0;
  constexpr int kEndPass = Pass == DoubleBackwardRowPass::stats ? 1 : 2;
#pragma unroll 1
  for (int pass = kFirstPass; pass < kEndPass; ++pass) {
    if (Pass == DoubleBackwardRowPass::both && pass == 1) {
      finish_stats();
      __syncthreads();  // every warp is done with the last tile of pass 0 before stage 0 refills
      if (num_tiles > 0) load_kv(tile_lo, 0);
      cp_async_commit();
    }
    for (int it = 0; it < num_tiles; ++it) {
      const int tile = tile_lo + it;
      const int stage = it & 1;
      cp_async_wait<0>();
      __syncthreads();
      if (it + 1 < num_tiles) load_kv(tile + 1, stage ^ 1);
      cp_async_commit();
      float s[1][kNT][4], dp[1][kNT][4], gg[1][kNT][4], z[1][kNT][4];
      tiles(tile, stage, s, dp, gg, z);
      // A variant's P, f' and f'' of element (h, nt, i) (variant_double).
      const bool check = tile * BN + BN > n_k || (Causal && tile * BN + BN - 1 > m0 + diag) || Variant::kMask;
      auto variant_p = [&](int h, int nt, int i, float& f1, float& f2) {
        s[0][nt][i] = variant_double<Variant, Causal>(*va, at, s[0][nt][i], lse2[h], m0 + row_local0 + g + 8 * h,
                                                      tile * BN + nt * 8 + 2 * t + i % 2, check, scale_log2, f1, f2);
      };
      if (pass == 0) {
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const int i = 2 * h + e;
              if constexpr (kVariantScores<Variant>) {
                float f1, f2;
                variant_p(h, nt, i, f1, f2);
                bwd_detail::second_order_stats(s[0][nt][i], dp[0][nt][i], gg[0][nt][i], z[0][nt][i], scale, delta[h],
                                               f1, r[h], c[h]);
              } else {
                const float gs = gg[0][nt][i] * scale;
                const float pe = s[0][nt][i];
                r[h] = fmaf(pe, gs, r[h]);
                c[h] = fmaf(pe, z[0][nt][i] + (dp[0][nt][i] - delta[h]) * gs, c[h]);
              }
            }
      } else {
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const int i = 2 * h + e;
              if constexpr (kVariantScores<Variant>) {
                float f1, f2;
                variant_p(h, nt, i, f1, f2);
                bwd_detail::second_order(s[0][nt][i], dp[0][nt][i], gg[0][nt][i], z[0][nt][i], scale, delta[h], r[h],
                                         c[h], f1, f2);
              } else
                bwd_detail::second_order(s[0][nt][i], dp[0][nt][i], gg[0][nt][i], z[0][nt][i], scale, delta[h], r[h],
                                         c[h]);
            }
        if (has_gk) bwd_detail::mma_xb<T, 1, kNT, D, kSplitCols>(qbar, dp, smem_kv(stage, 2) + v_lane_split, dd_end);
        bwd_detail::mma_xb<T, 1, kNT, D, kSplitCols>(qbar, z, smem_kv(stage, 0) + v_lane_split, dd_end);
        if (has_gv) bwd_detail::mma_xb<T, 1, kNT, D, kSplitCols>(dobar, s, smem_kv(stage, 3) + v_lane_split, dd_end_v);
        bwd_detail::mma_xb<T, 1, kNT, D, kSplitCols>(dobar, gg, smem_kv(stage, 1) + v_lane_split, dd_end_v);
      }
    }
  }
  cp_async_wait<0>();
  if constexpr (Pass == DoubleBackwardRowPass::stats) {
    finish_stats();
    return;
  }
  constexpr int kStoreCols = Splits == 1 ? HeadDim : kSplitCols;
  const int cols = Splits == 1 ? kStoreCols : imin(HeadDim - col0, kSplitCols);
  constexpr int kStoreColsV = Splits == 1 ? HeadDimV : kSplitCols;
  const int cols_v = HeadDimV == HeadDim ? cols : Splits == 1 ? kStoreColsV : imax(imin(HeadDimV - col0, kSplitCols), 0);
  bwd_detail::store_rows<T, 1, kSplitCols, kStoreCols>(
      bwd_detail::rows_ptr<T, Variant::kPacked>(p.q_bar, batch, head, seq.q0) + col0, p.q_bar.stride_n, m0 + row_local0,
      n_q, qbar, scale, cols);
  bwd_detail::store_rows<T, 1, kSplitCols, kStoreColsV>(
      bwd_detail::rows_ptr<T, Variant::kPacked>(p.do_bar, batch, head, seq.q0) + col0, p.do_bar.stride_n,
      m0 + row_local0, n_q, dobar, 1.f, cols_v);
}

template <class T, int D, int BM, int BN, int Warps, bool Causal, int HeadDim = D, int Splits = 1,
          class Variant = NoVariant, int HeadDimV = HeadDim>
__device__ __forceinline__ void attention_double_backward_fa2_kv(const AttentionBackwardParams& p,
                                                                 const VariantArgs* va = nullptr,
                                                                 int block = blockIdx.x) {
  static_assert(is_same<T, half_t>::value || is_same<T, bfloat16_t>::value,
                "the FA2 double backward takes half_t or bfloat16_t");
  static_assert(D % 32 == 0 && D >= 32 && D <= 256, "D must be a multiple of 32 up to 256");
  static_assert(HeadDim % 8 == 0 && HeadDim > D - 32 && HeadDim <= D, "HeadDim must pad to D");
  static_assert(HeadDimV % 8 == 0 && HeadDimV > 0 && HeadDimV <= HeadDim, "HeadDimV must be a multiple of 8 up to HeadDim");
  constexpr int kDC = (HeadDim + 15) / 16 * 16;  // head-dim columns the mma cover
  constexpr int kDCV = (HeadDimV + 15) / 16 * 16;  // v's columns the mma cover
  static_assert(Splits == 1 ? kDC <= 128 : Splits == 2 && kDC > 128, "two column splits above 128");
  constexpr int kSplitCols = Splits == 1 ? kDC : 128;  // Q̄/dŌ (K̄/V̄) columns of one block
  constexpr int kThreads = Warps * 32;
  static_assert(BN == 16 * Warps, "16 keys per warp");
  static_assert(BM % 16 == 0, "BM must be a multiple of 16");
  constexpr int kQT = BM / 8;
  constexpr int kDT = kSplitCols / 8;
  using SwzD = Swizzle16B<D / 8>;
  constexpr int kQBytes = BM * D * 2;
  constexpr int kKVBytes = BN * D * 2;
  constexpr int kStatsOffset = 4 * kKVBytes + 6 * kQBytes;
  static_assert(kStatsOffset + 2 * 4 * BM * 4 == dbl_detail::kKvSmemBytes<D, BM, BN>,
                "shared memory layout must match fa2_dbl_kv_smem_bytes");

  const int tid = threadIdx.x;
  const int warp = tid / 32;
  const int lane = tid % 32;
  const int g = lane / 4;
  const int t = lane % 4;
  const int col0 = Splits == 1 ? 0 : (block % Splits) * kSplitCols;  // first K̄, V̄ column
  const int n0 = (Splits == 1 ? block : block / Splits) * BN;
  const int kv_head = blockIdx.y;
  const int batch = blockIdx.z;
  const SequenceRows seq = sequence_rows<Variant>(va, batch, p.n_q, p.n_k);
  const int n_q = seq.n_q;
  const int n_k = seq.n_k;
  if constexpr (Variant::kPacked)
    if (n0 >= n_k) return;  // past this sequence's keys
  const int diag = n_k - n_q;
  const int group = p.head_group;
  const float scale = p.scale;
  const float scale_log2 = p.scale_log2;
  const bool has_gq = p.gq.data != nullptr;
  const bool has_gk = p.gk.data != nullptr;
  const bool has_gv = p.gv.data != nullptr;

  const int q_tiles = (n_q + BM - 1) / BM;
  int tile_begin = Causal ? imin(q_tiles, imax(0, n0 - diag) / BM) : 0;
  int tiles_per_head = q_tiles - tile_begin;
  int total = group * tiles_per_head;
  if constexpr (Variant::kMask) {  // the query tiles some head of the group may see
    bwd_detail::QueryTileWalk<BM, Causal> walk(n0, n_q, n_k, group);
    walk.template narrow<Variant>(va, VariantAt{batch, 0, n_q, n_k, scale, 1.f / scale}, kv_head, n0,
                                  imin(n0 + BN, n_k) - 1);
    tile_begin = walk.tile_begin, tiles_per_head = walk.tiles_per_head, total = walk.total;
  }

  unsigned char* smem = dynamic_smem();
  const unsigned smem_base = smem_u32(smem);
  // [K][V][gK][gV], then stage s: [Q][dO][gQ], then stage s: stats [lse2][delta][r][c].
  auto smem_kv = [&](int which) { return smem_base + which * kKVBytes; };
  auto smem_qt = [&](int stage, int which) { return smem_base + 4 * kKVBytes + (stage * 3 + which) * kQBytes; };
  auto stats = [&](int stage) { return reinterpret_cast<float*>(smem + kStatsOffset) + stage * 4 * BM; };

  // `v_cols`: a tile of v's head dim (V, gV; dO below).
  auto load_key_tile = [&](const AttentionTensorArg& a, unsigned dst, bool v_cols) {
    const T* rows = bwd_detail::rows_ptr<const T, Variant::kPacked>(a, batch, kv_head, seq.k0);
    if (v_cols) fa2_detail::load_tile_async<T, BN, D, kThreads, SwzD, HeadDimV>(dst, rows, a.stride_n, n0, n_k, tid);
    else fa2_detail::load_tile_async<T, BN, D, kThreads, SwzD, HeadDim>(dst, rows, a.stride_n, n0, n_k, tid);
  };
  load_key_tile(p.k, smem_kv(0), false);
  load_key_tile(p.v, smem_kv(1), true);
  if (has_gk) load_key_tile(p.gk, smem_kv(2), false);
  if (has_gv) load_key_tile(p.gv, smem_kv(3), true);
  auto load_query_tile = [&](int it, int stage) {
    const int head = kv_head * group + it / tiles_per_head;
    const int m0 = (tile_begin + it % tiles_per_head) * BM;
    auto load_one = [&](const AttentionTensorArg& a, unsigned dst, bool v_cols) {
      const T* rows = bwd_detail::rows_ptr<const T, Variant::kPacked>(a, batch, head, seq.q0);
      if (v_cols) fa2_detail::load_tile_async<T, BM, D, kThreads, SwzD, HeadDimV>(dst, rows, a.stride_n, m0, n_q, tid);
      else fa2_detail::load_tile_async<T, BM, D, kThreads, SwzD, HeadDim>(dst, rows, a.stride_n, m0, n_q, tid);
    };
    load_one(p.q, smem_qt(stage, 0), false);
    load_one(p.d_o, smem_qt(stage, 1), true);
    if (has_gq) load_one(p.gq, smem_qt(stage, 2), false);
    float* st = stats(stage);
    for (int i = tid; i < BM; i += kThreads) {
      const int row = m0 + i;
      float v[4] = {infinity_f32(), 0.f, 0.f, 0.f};
      if (row < n_q) {
        const long long idx = bwd_detail::stat_row(p, seq.slot, head, seq.q0 + row);
        v[0] = p.lse2[idx], v[1] = p.delta[idx], v[2] = p.row_r[idx], v[3] = p.row_c[idx];
      }
#pragma unroll
      for (int w = 0; w < 4; ++w) st[w * BM + i] = v[w];
    }
  };
  if (total > 0) load_query_tile(0, 0);
  cp_async_commit();

  const int key_local0 = warp * 16;
  const unsigned a_lane = SwzD::offset(key_local0 + lane % 16, lane / 16);
  const unsigned b_lane = SwzD::offset(lane % 8 + 8 * (lane / 16), (lane / 8) % 2);
  const unsigned v_lane = SwzD::offset(lane % 8 + 8 * ((lane / 8) % 2), lane / 16);
  const unsigned v_lane_split = Splits == 1 ? v_lane : SwzD::advance(v_lane, 16 * (col0 / 128));
  const int dd_end = (imin(kDC, col0 + kSplitCols) - col0) / 16;
  // V̄'s pairs: fewer when v's head dim is below q's.
  const int dd_end_v = HeadDimV == HeadDim ? dd_end : imax(imin(col0 + kSplitCols, kDCV) - col0, 0) / 16;

  float kbar[1][kDT][4], vbar[1][kDT][4];
  bwd_detail::zero(kbar);
  bwd_detail::zero(vbar);

  for (int it = 0; it < total; ++it) {
    const int stage = it & 1;
    const int m0 = (tile_begin + it % tiles_per_head) * BM;
    cp_async_wait<0>();
    __syncthreads();
    if (it + 1 < total) load_query_tile(it + 1, stage ^ 1);
    cp_async_commit();

    const float* st = stats(stage);
    float s[1][kQT][4], dp[1][kQT][4], gg[1][kQT][4], z[1][kQT][4];
    bwd_detail::zero(s);
    bwd_detail::zero(dp);
    bwd_detail::zero(gg);
    bwd_detail::zero(z);
    bwd_detail::mma_abt<T, 1, kQT, D, kDC>(s, smem_kv(0) + a_lane, smem_qt(stage, 0) + b_lane);
    bwd_detail::mma_abt<T, 1, kQT, D, kDCV>(dp, smem_kv(1) + a_lane, smem_qt(stage, 1) + b_lane);
    if (has_gq) bwd_detail::mma_abt<T, 1, kQT, D, kDC>(gg, smem_kv(0) + a_lane, smem_qt(stage, 2) + b_lane);
    if (has_gk) bwd_detail::mma_abt<T, 1, kQT, D, kDC>(gg, smem_kv(2) + a_lane, smem_qt(stage, 0) + b_lane);
    if (has_gv) bwd_detail::mma_abt<T, 1, kQT, D, kDCV>(z, smem_kv(3) + a_lane, smem_qt(stage, 1) + b_lane);
    const bool needs_mask = n0 + BN > n_k || (Causal && n0 + BN - 1 > m0 + diag);
#pragma unroll
    for (int nt = 0; nt < kQT; ++nt)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int col = nt * 8 + 2 * t + e;
        const float l2 = st[col], dl = st[BM + col], rr = st[2 * BM + col], cc = st[3 * BM + col];
        const int query = m0 + col;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int i = 2 * h + e;
          const int key = n0 + key_local0 + g + 8 * h;
          if constexpr (kVariantScores<Variant>) {
            const VariantAt at{batch, kv_head * group + it / tiles_per_head, n_q, n_k, scale, 1.f / scale};
            float f1, f2;
            // Rows past n_q take the mask too: their zero Q and statistics would give a
            // modification's P there.
            s[0][nt][i] = variant_double<Variant, Causal>(*va, at, s[0][nt][i], l2, query, key,
                                                          needs_mask || Variant::kMask || m0 + BM > n_q, scale_log2,
                                                          f1, f2);
            bwd_detail::second_order(s[0][nt][i], dp[0][nt][i], gg[0][nt][i], z[0][nt][i], scale, dl, rr, cc, f1, f2);
          } else {
            float pe = exp2_approx(fmaf(s[0][nt][i], scale_log2, -l2));
            if (needs_mask && (key >= n_k || (Causal && key > query + diag))) pe = 0.f;
            s[0][nt][i] = pe;
            bwd_detail::second_order(s[0][nt][i], dp[0][nt][i], gg[0][nt][i], z[0][nt][i], scale, dl, rr, cc);
          }
        }
      }
    // K̄ += dSᵀ·gQ + S̄ᵀ·Q (× s at the end); V̄ += Hᵀ·dO.
    if (has_gq) bwd_detail::mma_xb<T, 1, kQT, D, kSplitCols>(kbar, dp, smem_qt(stage, 2) + v_lane_split, dd_end);
    bwd_detail::mma_xb<T, 1, kQT, D, kSplitCols>(kbar, z, smem_qt(stage, 0) + v_lane_split, dd_end);
    bwd_detail::mma_xb<T, 1, kQT, D, kSplitCols>(vbar, gg, smem_qt(stage, 1) + v_lane_split, dd_end_v);
  }
  cp_async_wait<0>();
  const int key_row0 = n0 + key_local0;
  constexpr int kStoreCols = Splits == 1 ? HeadDim : kSplitCols;
  const int cols = Splits == 1 ? kStoreCols : imin(HeadDim - col0, kSplitCols);
  constexpr int kStoreColsV = Splits == 1 ? HeadDimV : kSplitCols;
  const int cols_v = HeadDimV == HeadDim ? cols : Splits == 1 ? kStoreColsV : imax(imin(HeadDimV - col0, kSplitCols), 0);
  bwd_detail::store_rows<T, 1, kSplitCols, kStoreCols>(
      bwd_detail::rows_ptr<T, Variant::kPacked>(p.k_bar, batch, kv_head, seq.k0) + col0, p.k_bar.stride_n, key_row0,
      n_k, kbar, scale, cols);
  bwd_detail::store_rows<T, 1, kSplitCols, kStoreColsV>(
      bwd_detail::rows_ptr<T, Variant::kPacked>(p.v_bar, batch, kv_head, seq.k0) + col0, p.v_bar.stride_n, key_row0,
      n_k, vbar, 1.f, cols_v);
}

// The second stage of the split double backward: query tiles [0, ceil(n_q / BM)) run the apply
// pass of the query-major kernel (r, c from the workspace; BN-key tiles), the following
// ceil(n_k / BM) blocks run the key-major kernel on BM-key blocks against KvBM-row query tiles
// (blockIdx.y < heads_kv), so that the two, which do not depend on each other, share the machine
// (two blocks per SM) when b·h is small.
// With Splits = 2 each part has twice the blocks (two column splits of every tile). Packed
// batches: the grid's two halves (dbl_detail::fused_query_blocks).
template <class T, int D, int BM, int BN, int KvBM, int Warps, bool Causal, int HeadDim = D, int Splits = 1,
          class Variant = NoVariant, int HeadDimV = HeadDim>
__device__ __forceinline__ void attention_double_backward_fa2_fused(const AttentionBackwardParams& p,
                                                                    const VariantArgs* va = nullptr) {
  const int q_blocks = dbl_detail::fused_query_blocks<Variant>(p.n_q, BM, Splits);
  if (static_cast<int>(blockIdx.x) < q_blocks) {
    attention_double_backward_fa2_q<T, D, BM, BN, Warps, Causal, DoubleBackwardRowPass::apply, HeadDim, Splits,
                                    Variant, HeadDimV>(p, va, blockIdx.x);
  } else if (static_cast<int>(blockIdx.y) < p.heads_kv) {
    attention_double_backward_fa2_kv<T, D, KvBM, BM, Warps, Causal, HeadDim, Splits, Variant, HeadDimV>(
        p, va, blockIdx.x - q_blocks);
  }
}

}  // namespace kgen
