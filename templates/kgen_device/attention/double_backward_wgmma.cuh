// Hopper attention double backward (sm_90a): the passes of double_backward_fa2.cuh on warpgroup
// MMA, O(n·d) memory. Same math and names (P, dP, dS, G, Z, H, S̄, r, c; see that file's top):
//   G = s·(gQ·Kᵀ + Q·gKᵀ), Z = dO·gVᵀ, r = rowsum(P∘G), c = rowsum(P∘Z + dS∘G) − r∘delta,
//   Q̄ = s·(dS·gK + S̄·K), dŌ = P·gV + H·V, K̄ = s·(dSᵀ·gQ + S̄ᵀ·Q), V̄ = Hᵀ·dO.
//
// Blocks of WGs warpgroups (128 threads each), 64 rows per warpgroup; Tile is the width of the
// score-shaped tiles walked (keys in the query-major kernel, queries in the key-major one).
//
// attention_double_backward_wgmma_q: grid (ceil(n_q / 64·WGs) [· stats splits], heads_q, batch).
//   Warpgroup wg owns query rows [m0 + 64·wg, +64); Q, dO and gQ stay in shared memory, K, V, gK
//   and gV tiles of Tile keys are double-buffered by cp.async. Per key tile, wgmma m64nTile k16
//   with both operands K-major: S = Q·Kᵀ (one commit group: its exponentials run while the rest
//   is in flight), dP = dO·Vᵀ, G = gQ·Kᵀ + Q·gKᵀ, Z = dO·gVᵀ (an absent cotangent's tiles are
//   zero-filled once, and its products add zeros).
//   Pass stats sums r and c; pass apply reads them, forms dS, S̄, H in registers and runs
//   Q̄ += dS·gK + S̄·K and dŌ += P·gV + H·V as wgmma m64nDk16 with A in registers (the score
//   accumulators rounded to 16 bits) and B the key tiles read MN-major.
// attention_double_backward_wgmma_kv: grid (ceil(n_k / 64·WGs), heads_kv, batch). Warpgroup wg
//   owns keys [n0 + 64·wg, +64); K, V, gK and gV stay, and the block walks the Tile-row query
//   tiles of every head of its GQA group (causal: from the first that sees its keys), with the
//   transposed products Sᵀ = K·Qᵀ, dPᵀ = V·dOᵀ, Gᵀ, Zᵀ, then K̄ += dSᵀ·gQ + S̄ᵀ·Q and V̄ += Hᵀ·dO.
// attention_double_backward_wgmma_fused: the apply pass and the key-major kernel in one grid (as
//   attention_double_backward_fa2_fused).
//
// Registers per thread: the two row accumulators (D) and the four score tiles (2·Tile), so
// Tile = 32 at D = 128. Above 128 columns (Splits = 2, the 256-column tile): both warpgroups of
// a block own the same 64 rows (keys), each forms the whole score tiles and keeps half of the
// row accumulators' columns (the r/c pass has none and runs one warpgroup on the 256 tile).
// Rows >= n_q and keys >= n_k are zero-filled (their lse2 = +inf in the query-major kernel; zero
// statistics in the key-major one, where the zero Q, dO and gQ rows make every product zero).
// Variant (variant.cuh), with its inputs `va`, as in double_backward_fa2.cuh: a mask narrows
// the walked tiles; the score step turns the raw scores into P, f' and f'' element by element
// after the other products have landed (variant_double; the apply pass rounds P to 16 bits there,
// as the plain pass does), and the chain rule takes second_order's variant form. Query tiles with
// rows past n_q take the mask in the key-major kernel (their zero Q and statistics would give a
// modification's P there).
// Packed batches (Variant::kPacked) as in double_backward_fa2.cuh: a block's tiles are its
// sequence's, its rows start at the sequence's first rows, and blocks past them idle. Dense
// batches read what they read before, in the same order (the lengths from p, each pointer before
// its packed move, which `if constexpr` keeps out of their code): the lengths read through the
// sequence's struct, or a lambda that names it, reordered the code of ten dense variant kernels
// (the replay table).
// Padded head dims as backward_wgmma.cuh: HeadDim a multiple of 8 in (D − 64, D], or (128, 256]
// on the 256 tile; the score products reduce over HeadDim rounded up to 16, the row products run
// all their columns and only those below HeadDim are stored.
#pragma once

#include "kgen_device/attention/backward_config.h"
#include "kgen_device/attention/backward_wgmma.cuh"
#include "kgen_device/attention/double_backward_fa2.cuh"
#include "kgen_device/core/block.cuh"
#include "kgen_device/core/memory.cuh"

namespace kgen {
namespace dbl_detail {

// Dynamic shared memory declared 1024-byte aligned (dynamic_smem_1024, core/block.cuh): these
// kernels have no static shared memory, and two blocks of 113 KiB fit an SM (a rounded-up base
// would need 1 KiB more).
__device__ __forceinline__ unsigned aligned_smem_base() { return smem_u32(dynamic_smem_1024()); }
// Stops the kernel if the region is not 1024-byte aligned after all (every swizzled operand
// would be read wrong): a loud failure instead of wrong numbers.
__device__ __forceinline__ void require_aligned_smem() {
  if (aligned_smem_base() & 1023u) __trap();
}

// Generic pointer `offset` bytes past the aligned base.
__device__ __forceinline__ float* smem_floats(int offset) { return reinterpret_cast<float*>(dynamic_smem_1024() + offset); }

// A block's shape and a warpgroup's place in it: WGs warpgroups of 128 threads over kRows rows
// (queries or keys); with Splits = 2 both warpgroups own the same 64 rows and warpgroup wg keeps
// the row accumulators' columns [wg·kCols, +kCols).
template <int D, int WGs, int Splits>
struct WgPlace {
  static constexpr int kRows = 64 * WGs / Splits;
  static constexpr int kThreads = 128 * WGs;
  static constexpr int kCols = D / Splits;
  int row_wg;  // the warpgroup's 64 rows of the block
  int col0;    // its first accumulator column
  // One warpgroup: a compile-time 0, so that every address and descriptor derived from it is
  // block-uniform (uniform registers instead of per-thread ones).
  __device__ __forceinline__ static WgPlace of(int wg) {
    if constexpr (WGs == 1) return {0, 0};
    return {Splits == 1 ? wg : 0, Splits == 1 ? 0 : wg * kCols};
  }
};

// The four score-shaped tiles of one (rows × Tile) step.
template <int Tile>
struct ScoreTiles {
  float s[Tile / 2], dp[Tile / 2], g[Tile / 2], z[Tile / 2];
};

// bwd_detail::wgmma_abt, with the 64-column blocks walked by a loop (each block's four k-steps
// unrolled) from 12 k-steps (HeadDim > 176). Fully unrolled there, the score products' k-step
// descriptors are hoisted out of the tile loop, overflow the uniform registers into the vector
// ones, and the 256-column kernels spilled 8-316 bytes; rolled, they take 250 registers and run
// 2-5 % faster at d = 224-256, 2 % slower at d = 192 (H100), and up to 176 no faster.
template <class T, int N, int HeadDim, int ABlockBytes, int BBlockBytes>
__device__ __forceinline__ void wgmma_abt_rolled(float (&acc)[N / 2], unsigned long long a, unsigned long long b,
                                                 int accumulate) {
  constexpr int kSteps = (HeadDim + 15) / 16;
  if constexpr (kSteps <= 11) {
    bwd_detail::wgmma_abt<T, N, HeadDim, ABlockBytes, BBlockBytes>(acc, a, b, accumulate);
  } else {
#pragma unroll 1
    for (int blk = 0; blk < kSteps / 4; ++blk) {
#pragma unroll
      for (int kk = 0; kk < 4; ++kk)
        wgmma::Mma<N>::template ss<T, 0, 0>(acc, a + ((blk * ABlockBytes + kk * 32) >> 4),
                                             b + ((blk * BBlockBytes + kk * 32) >> 4), accumulate | blk | kk);
    }
#pragma unroll
    for (int kk = kSteps / 4 * 4; kk < kSteps; ++kk)
      wgmma::Mma<N>::template ss<T, 0, 0>(acc, a + (bwd_detail::k_major_step(kk, ABlockBytes) >> 4),
                                           b + (bwd_detail::k_major_step(kk, BBlockBytes) >> 4), 1);
  }
}

// Issues S (own group) and dP, G = G1 + G2, Z (a second group): A operands (rows of this
// warpgroup) from the row tiles, B operands from the tiles walked, all K-major; ABytes / BBytes
// their column block bytes. Every product is issued (an absent cotangent's tile is zero-filled
// instead): a wgmma skipped at run time inside a group makes ptxas serialise the group (C7515).
template <class T, int Tile, int HeadDim, int ABytes, int BBytes>
__device__ __forceinline__ void issue_scores(ScoreTiles<Tile>& x, unsigned long long a_s, unsigned long long b_s,
                                             unsigned long long a_dp, unsigned long long b_dp, unsigned long long a_g1,
                                             unsigned long long b_g1, unsigned long long a_g2, unsigned long long b_g2,
                                             unsigned long long a_z, unsigned long long b_z) {
  // Pins the tiles' registers before the fence: nothing may define them inside the group.
  wgmma::fence_operand(x.s);
  wgmma::fence_operand(x.dp);
  wgmma::fence_operand(x.g);
  wgmma::fence_operand(x.z);
  wgmma::fence();
  wgmma_abt_rolled<T, Tile, HeadDim, ABytes, BBytes>(x.s, a_s, b_s, 0);
  wgmma::commit();
  wgmma_abt_rolled<T, Tile, HeadDim, ABytes, BBytes>(x.dp, a_dp, b_dp, 0);
  wgmma_abt_rolled<T, Tile, HeadDim, ABytes, BBytes>(x.g, a_g1, b_g1, 0);
  wgmma_abt_rolled<T, Tile, HeadDim, ABytes, BBytes>(x.g, a_g2, b_g2, 1);
  wgmma_abt_rolled<T, Tile, HeadDim, ABytes, BBytes>(x.z, a_z, b_z, 0);
  wgmma::commit();
}

// Waits for the second group of issue_scores: dP, G and Z readable.
template <int Tile>
__device__ __forceinline__ void wait_rest(ScoreTiles<Tile>& x) {
  wgmma::wait<0>();
  wgmma::fence_operand(x.dp);
  wgmma::fence_operand(x.g);
  wgmma::fence_operand(x.z);
}

// Zero-fills `bytes` (a multiple of 16) of shared memory from `addr` with Threads threads: the
// tile of an absent cotangent, whose products then add zeros.
template <int Threads>
__device__ __forceinline__ void zero_tile(unsigned addr, int bytes, int tid) {
  for (int i = tid * 16; i < bytes; i += Threads * 16) st_shared_16(addr + i, u32x4{0u, 0u, 0u, 0u});
}

// Packs a score tile (64 × K accumulators) into the A fragments of its K / 16 k-steps.
template <class T, int K>
__device__ __forceinline__ void pack_tile(unsigned (&a)[K / 16][4], const float (&x)[K / 2]) {
#pragma unroll
  for (int kk = 0; kk < K / 16; ++kk) wgmma::pack_a<T>(a[kk], x, kk);
}

// The row products of one step, after the elementwise step left dS in x.dp, S̄ in x.z and H in
// x.g: a1 += dS·B_ds + S̄·B_sbar and a2 += [P·B_p +] H·B_h, with A the tiles rounded to 16 bits
// in registers (P already packed in pp when WithP) and B MN-major descriptors; one commit group,
// waited for before returning (the next step's loads overwrite the operands).
template <class T, int D, int Tile, bool WithP, int PK>
__device__ __forceinline__ void row_products(float (&a1)[D / 2], float (&a2)[D / 2], const ScoreTiles<Tile>& x,
                                             const unsigned (&pp)[PK][4], unsigned long long b_ds,
                                             unsigned long long b_sbar, unsigned long long b_p, unsigned long long b_h) {
  unsigned ds[Tile / 16][4], sbar[Tile / 16][4], hh[Tile / 16][4];
  pack_tile<T, Tile>(ds, x.dp);
  pack_tile<T, Tile>(sbar, x.z);
  pack_tile<T, Tile>(hh, x.g);
  wgmma::fence_operand(a1);
  wgmma::fence_operand(a2);
  wgmma::fence();
  bwd_detail::wgmma_xb<T, D, Tile>(a1, ds, b_ds);
  bwd_detail::wgmma_xb<T, D, Tile>(a1, sbar, b_sbar);
  if constexpr (WithP) bwd_detail::wgmma_xb<T, D, Tile>(a2, pp, b_p);
  bwd_detail::wgmma_xb<T, D, Tile>(a2, hh, b_h);
  wgmma::commit();
  bwd_detail::end_query_tile(a1, a2);
}

}  // namespace dbl_detail

// Query-major pass: Pass::stats writes r and c (split over p.stats_splits blocks per query tile
// as attention_double_backward_fa2_q), Pass::apply reads them and stores Q̄ and dŌ.
template <class T, int D, int Tile, int WGs, bool Causal, DoubleBackwardRowPass Pass, int HeadDim = D, int Splits = 1,
          class Variant = NoVariant>
__device__ __forceinline__ void attention_double_backward_wgmma_q(const AttentionBackwardParams& p,
                                                                  const VariantArgs* va = nullptr,
                                                                  int block = blockIdx.x) {
  static_assert(is_same<T, half_t>::value || is_same<T, bfloat16_t>::value,
                "the wgmma double backward takes half_t or bfloat16_t");
  static_assert(Splits == 1 ? D == 64 || D == 128 || (D == 256 && Pass == DoubleBackwardRowPass::stats)
                            : Splits == 2 && D == 256 && WGs == 2 && Pass == DoubleBackwardRowPass::apply,
                "D 64 or 128; 256 in the r/c pass, or with two warpgroups splitting the columns");
  static_assert(HeadDim % 8 == 0 && HeadDim > (D == 256 ? 128 : D - 64) && HeadDim <= D, "HeadDim must pad to D");
  static_assert(Tile == 32 || Tile == 64, "key tiles of 32 or 64");
  static_assert(Pass != DoubleBackwardRowPass::both, "the wgmma kernels run the passes as two launches");
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr bool kApply = Pass == DoubleBackwardRowPass::apply;
  using Place = dbl_detail::WgPlace<D, WGs, Splits>;
  constexpr int BM = Place::kRows, kThreads = Place::kThreads, kCols = Place::kCols;
  using RowTile = wgmma::Sw128<BM, D>;
  using KeyTile = wgmma::Sw128<Tile, D>;
  constexpr int kStatsOffset = 3 * RowTile::kBytes + 8 * KeyTile::kBytes;
  static_assert(kStatsOffset + 4 * BM * 4 == attention_bwd::wgmma_dbl_q_smem_bytes(D, WGs / Splits, Tile),
                "shared memory layout must match wgmma_dbl_q_smem_bytes");
  constexpr int kAcc = kApply ? kCols / 2 : 1;

  const int tid = threadIdx.x;
  const auto [wg, warp, lane, g, t] = wgmma::Lane::of(tid);
  const Place place = Place::of(wg);
  const int row_wg = place.row_wg, col0 = place.col0;  // its 64 query rows, its first Q̄, dŌ column
  int split = 0, splits = 1;
  if constexpr (!kApply) {
    splits = p.stats_splits > 1 ? p.stats_splits : 1;
    split = block % splits;
    block /= splits;
  }
  const int m0 = block * BM;
  const int head = blockIdx.y;
  const int batch = blockIdx.z;
  const int kv_head = head / p.head_group;
  // Packed batches: the sequence's rows (tensor and workspace rows from its first ones).
  const SequenceRows seq = sequence_rows<Variant>(va, batch, p.n_q, p.n_k);
  const int n_q = Variant::kPacked ? seq.n_q : p.n_q, n_k = Variant::kPacked ? seq.n_k : p.n_k, diag = n_k - n_q;
  int slot = batch, q0 = 0;  // the tensors' batch and the sequence's first row there
  if constexpr (Variant::kPacked) {
    if (m0 >= n_q) return;  // past this sequence's rows
    slot = 0, q0 = seq.q0;
  }
  const float scale = p.scale, scale_log2 = p.scale_log2;
  const bool has_gq = p.gq.data != nullptr, has_gk = p.gk.data != nullptr, has_gv = p.gv.data != nullptr;

  int n_end = n_k;
  if constexpr (Causal) n_end = imin(n_k, imin(m0 + BM, n_q) + diag);
  int all_tiles = n_end > 0 ? (n_end + Tile - 1) / Tile : 0;
  int tile0 = 0;  // the first key tile (a variant's mask may skip leading tiles)
  VariantAt at{};
  if constexpr (kVariantScores<Variant>) {
    at = {batch, head, n_q, n_k, scale, 1.f / scale};
    if constexpr (Variant::kMask) {
      variant_key_tiles<Variant, Tile, true>(*va, at, m0, imin(m0 + BM, n_q) - 1, tile0, all_tiles);
      all_tiles = imax(all_tiles - tile0, 0);
    }
  }
  const int tile_lo = tile0 + split * all_tiles / splits;  // this block's key tiles [tile_lo, +num_tiles)
  const int num_tiles = tile0 + (split + 1) * all_tiles / splits - tile_lo;

  // [Q][dO][gQ], then stage s: [K][V][gK][gV], then the row statistics.
  dbl_detail::require_aligned_smem();
  const unsigned smem_q = dbl_detail::aligned_smem_base();
  const unsigned smem_do = smem_q + RowTile::kBytes, smem_gq = smem_q + 2 * RowTile::kBytes;
  auto smem_kv = [&](int stage, int which) { return smem_q + 3 * RowTile::kBytes + (stage * 4 + which) * KeyTile::kBytes; };
  auto load_rows = [&](const AttentionTensorArg& a, unsigned dst) {
    const T* rows = bwd_detail::head_ptr<const T>(a, batch, head);
    if constexpr (Variant::kPacked) rows = bwd_detail::rows_ptr<const T, true>(a, batch, head, seq.q0);
    fa2_detail::load_tile_async<T, BM, D, kThreads, RowTile, HeadDim>(dst, rows, a.stride_n, m0, n_q, tid);
  };
  auto load_kv = [&](int tile, int stage) {
    auto one = [&](const AttentionTensorArg& a, int which) {
      const unsigned dst = smem_kv(stage, which);
      const T* rows = bwd_detail::head_ptr<const T>(a, batch, kv_head);
      if constexpr (Variant::kPacked) rows = bwd_detail::rows_ptr<const T, true>(a, batch, kv_head, seq.k0);
      fa2_detail::load_tile_async<T, Tile, D, kThreads, KeyTile, HeadDim>(dst, rows, a.stride_n, tile * Tile, n_k, tid);
    };
    one(p.k, 0);
    one(p.v, 1);
    if (has_gk) one(p.gk, 2);
    if (has_gv) one(p.gv, 3);
  };
  load_rows(p.q, smem_q);
  load_rows(p.d_o, smem_do);
  if (has_gq) load_rows(p.gq, smem_gq);
  else dbl_detail::zero_tile<kThreads>(smem_gq, RowTile::kBytes, tid);
  for (int stage = 0; stage < 2; ++stage) {
    if (!has_gk) dbl_detail::zero_tile<kThreads>(smem_kv(stage, 2), KeyTile::kBytes, tid);
    if (!has_gv) dbl_detail::zero_tile<kThreads>(smem_kv(stage, 3), KeyTile::kBytes, tid);
  }
  if (num_tiles > 0) load_kv(tile_lo, 0);
  cp_async_commit();

  // The rows' lse2, delta (and in the apply pass r, c) in shared memory: [lse2][delta][r][c],
  // BM each (registers are the apply pass's limit at D = 128).
  float* const row_stats = dbl_detail::smem_floats(kStatsOffset);
  {
    const long long row_base = bwd_detail::stat_row(p, slot, head, q0);
    for (int i = tid; i < 4 * BM; i += kThreads) {
      const int which = i / BM;
      const int row = m0 + i % BM;
      float v = which == 0 ? infinity_f32() : 0.f;
      if (row < n_q && (kApply || which < 2))
        v = (which == 0 ? p.lse2 : which == 1 ? p.delta : which == 2 ? p.row_r : p.row_c)[row_base + row];
      row_stats[i] = v;
    }
  }
  __syncthreads();
  const int local0 = row_wg * 64 + warp * 16 + g;  // this thread's first row in the block (then + 8)
  const int row0 = m0 + row_wg * 64 + warp * 16;   // this warp's first query row
  auto stat = [&](int which, int h) { return row_stats[which * BM + local0 + 8 * h]; };
  float r[2] = {0.f, 0.f}, c[2] = {0.f, 0.f};  // the stats pass's sums

  // This warpgroup's rows of Q, dO and gQ as K-major A.
  const unsigned wg_rows = row_wg * 64 * 128;
  const unsigned long long q_a = wgmma::desc_sw128(smem_q + wg_rows, 16, 1024);
  const unsigned long long do_a = wgmma::desc_sw128(smem_do + wg_rows, 16, 1024);
  const unsigned long long gq_a = wgmma::desc_sw128(smem_gq + wg_rows, 16, 1024);
  float qbar[kAcc], dobar[kAcc];
#pragma unroll
  for (int i = 0; i < kAcc; ++i) qbar[i] = dobar[i] = 0.f;

  for (int it = 0; it < num_tiles; ++it) {
    const int tile = tile_lo + it;
    const int stage = it & 1;
    cp_async_wait<0>();
    wgmma::fence_proxy_async();
    __syncthreads();  // tile `it` landed; every warpgroup is done with tile it − 1
    if (it + 1 < num_tiles) load_kv(tile + 1, stage ^ 1);
    cp_async_commit();

    auto k_major = [&](int which) { return wgmma::desc_sw128(smem_kv(stage, which), 16, 1024); };
    dbl_detail::ScoreTiles<Tile> x;
    dbl_detail::issue_scores<T, Tile, HeadDim, RowTile::kBlockBytes, KeyTile::kBlockBytes>(
        x, q_a, k_major(0), do_a, k_major(1), gq_a, k_major(0), q_a, k_major(2), do_a, k_major(3));

    unsigned pp[kApply ? Tile / 16 : 1][4];
    if constexpr (kVariantScores<Variant>) {
      // A variant: P, f' and f'' of each element once every product has landed; the apply pass
      // rounds P to 16 bits a pair at a time (the P of dŌ += P·gV and of the elementwise step).
      dbl_detail::wait_rest(x);
      wgmma::fence_operand(x.s);
      const int n0 = tile * Tile;
      const bool check = n0 + Tile > n_k || (Causal && n0 + Tile - 1 > m0 + diag) || Variant::kMask;
#pragma unroll
      for (int j = 0; j < Tile / 8; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          float pr[2], f1[2], f2[2];
#pragma unroll
          for (int e = 0; e < 2; ++e)
            pr[e] = variant_double<Variant, Causal>(*va, at, x.s[4 * j + 2 * h + e], stat(0, h), row0 + g + 8 * h,
                                                    n0 + 8 * j + 2 * t + e, check, scale_log2, f1[e], f2[e]);
          if constexpr (kApply) {
            unsigned& w = pp[j / 2][(j % 2) * 2 + h];
            w = pack2<T>(pr[0], pr[1]);
            unpack2<T>(w, pr[0], pr[1]);
          }
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int i = 4 * j + 2 * h + e;
            if constexpr (kApply)
              bwd_detail::second_order(pr[e], x.dp[i], x.g[i], x.z[i], scale, stat(1, h), stat(2, h), stat(3, h),
                                       f1[e], f2[e]);
            else
              bwd_detail::second_order_stats(pr[e], x.dp[i], x.g[i], x.z[i], scale, stat(1, h), f1[e], r[h], c[h]);
          }
        }
    } else {
      // P = exp2(S·scale_log2 − lse2), masked, while dP, G and Z are in flight.
      wgmma::wait<1>();
      wgmma::fence_operand(x.s);
      const int n0 = tile * Tile;
      const bool needs_mask = n0 + Tile > n_k || (Causal && n0 + Tile - 1 > m0 + diag);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        // Columns 8j + e at or past `cut` are masked (cut >= Tile: none).
        int cut = Tile;
        if (needs_mask) {
          int limit = n_k;
          if constexpr (Causal) limit = imin(n_k, row0 + g + 8 * h + diag + 1);
          cut = limit - n0 - 2 * t;
        }
        const float l2 = stat(0, h);
#pragma unroll
        for (int j = 0; j < Tile / 8; ++j)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            float& v = x.s[4 * j + 2 * h + e];
            const float pe = exp2_approx(fmaf(v, scale_log2, -l2));
            v = 8 * j + e >= cut ? 0.f : pe;
          }
      }
      // The apply pass keeps P only rounded to 16 bits, as the A operand of dŌ += P·gV and the P of
      // the elementwise step: at D = 128 the fp32 tile beside the other three and the row
      // accumulators would spill (the products read P̃ = P rounded either way).
      if constexpr (kApply) dbl_detail::pack_tile<T, Tile>(pp, x.s);
      dbl_detail::wait_rest(x);
#pragma unroll
      for (int j = 0; j < Tile / 8; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          float pr[2];
          if constexpr (kApply) unpack2<T>(pp[j / 2][(j % 2) * 2 + h], pr[0], pr[1]);
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int i = 4 * j + 2 * h + e;
            if constexpr (kApply) {
              bwd_detail::second_order(pr[e], x.dp[i], x.g[i], x.z[i], scale, stat(1, h), stat(2, h), stat(3, h));
            } else {
              const float gs = x.g[i] * scale;
              r[h] = fmaf(x.s[i], gs, r[h]);
              c[h] = fmaf(x.s[i], x.z[i] + (x.dp[i] - stat(1, h)) * gs, c[h]);
            }
          }
        }
    }
    if constexpr (kApply) {
      // Q̄ += dS·gK + S̄·K, dŌ += P·gV + H·V (the key tiles read MN-major from column col0).
      auto mn_major = [&](int which) {
        return bwd_detail::mn_major_cols<KeyTile::kBlockBytes>(smem_kv(stage, which), col0);
      };
      dbl_detail::row_products<T, kCols, Tile, true>(qbar, dobar, x, pp, mn_major(2), mn_major(0), mn_major(3),
                                                     mn_major(1));
    }
  }

  if constexpr (kApply) {
    if constexpr (Splits == 1) {
      bwd_detail::store_pair<T, D, HeadDim>(p, p.q_bar, p.do_bar, slot, head, 0, q0 + row0, q0 + n_q, qbar, dobar);
    } else {
      bwd_detail::store_pair<T, kCols>(p, p.q_bar, p.do_bar, slot, head, col0, q0 + row0, q0 + n_q, qbar, dobar,
                                       imin(kCols, HeadDim - col0), imin(kCols, HeadDim - col0));
    }
  } else {
    cp_async_wait<0>();
    const float delta[2] = {stat(1, 0), stat(1, 1)};
    dbl_detail::finish_row_stats(p, slot, head, q0 + row0, q0 + n_q, g, t, r, c, delta, splits);
  }
#endif
}

// Key-major pass: K̄ and V̄ of the block's 64·WGs keys (Splits = 2: 64 keys, warpgroup wg keeping
// the columns [wg·D/2, +D/2)).
template <class T, int D, int Tile, int WGs, bool Causal, int HeadDim = D, int Splits = 1, class Variant = NoVariant>
__device__ __forceinline__ void attention_double_backward_wgmma_kv(const AttentionBackwardParams& p,
                                                                   const VariantArgs* va = nullptr,
                                                                   int block = blockIdx.x) {
  static_assert(is_same<T, half_t>::value || is_same<T, bfloat16_t>::value,
                "the wgmma double backward takes half_t or bfloat16_t");
  static_assert(Splits == 1 ? D == 64 || D == 128 : Splits == 2 && D == 256 && WGs == 2,
                "D 64 or 128, or 256 with two warpgroups splitting the columns");
  static_assert(HeadDim % 8 == 0 && HeadDim > (D == 256 ? 128 : D - 64) && HeadDim <= D, "HeadDim must pad to D");
  static_assert(Tile == 32 || Tile == 64, "query tiles of 32 or 64 rows");
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Place = dbl_detail::WgPlace<D, WGs, Splits>;
  constexpr int BN = Place::kRows, kThreads = Place::kThreads, kCols = Place::kCols;
  using KeyRows = wgmma::Sw128<BN, D>;
  using QTile = wgmma::Sw128<Tile, D>;
  constexpr int kStatsOffset = 4 * KeyRows::kBytes + 6 * QTile::kBytes;
  static_assert(kStatsOffset + 2 * 4 * Tile * 4 == attention_bwd::wgmma_dbl_kv_smem_bytes(D, WGs / Splits, Tile),
                "shared memory layout must match wgmma_dbl_kv_smem_bytes");

  const int tid = threadIdx.x;
  const auto [wg, warp, lane, g, t] = wgmma::Lane::of(tid);
  const Place place = Place::of(wg);
  const int row_wg = place.row_wg, col0 = place.col0;  // its 64 keys, its first K̄, V̄ column
  const int n0 = block * BN;
  const int kv_head = blockIdx.y;
  const int batch = blockIdx.z;
  const SequenceRows seq = sequence_rows<Variant>(va, batch, p.n_q, p.n_k);
  const int n_q = Variant::kPacked ? seq.n_q : p.n_q, n_k = Variant::kPacked ? seq.n_k : p.n_k, diag = n_k - n_q;
  int slot = batch, k0 = 0;  // the tensors' batch and the sequence's first key there
  if constexpr (Variant::kPacked) {
    if (n0 >= n_k) return;  // past this sequence's keys
    slot = 0, k0 = seq.k0;
  }
  const float scale = p.scale, scale_log2 = p.scale_log2;
  const bool has_gq = p.gq.data != nullptr, has_gk = p.gk.data != nullptr, has_gv = p.gv.data != nullptr;
  bwd_detail::QueryTileWalk<Tile, Causal> walk(n0, n_q, n_k, p.head_group);
  if constexpr (Variant::kMask)  // the query tiles some head of the group may see
    walk.template narrow<Variant>(va, VariantAt{batch, 0, n_q, n_k, scale, 1.f / scale}, kv_head, n0,
                                  imin(n0 + BN, n_k) - 1);
  const int total = walk.total;

  // [K][V][gK][gV], then stage s: [Q][dO][gQ], then stage s: [lse2][delta][r][c] (Tile each).
  dbl_detail::require_aligned_smem();
  const unsigned base = dbl_detail::aligned_smem_base();
  float* const stats_base = dbl_detail::smem_floats(kStatsOffset);
  auto smem_key = [&](int which) { return base + which * KeyRows::kBytes; };
  auto smem_qt = [&](int stage, int which) { return base + 4 * KeyRows::kBytes + (stage * 3 + which) * QTile::kBytes; };
  auto stats = [&](int stage) { return stats_base + stage * 4 * Tile; };

  auto load_keys = [&](const AttentionTensorArg& a, int which) {
    const unsigned dst = smem_key(which);
    const T* rows = bwd_detail::head_ptr<const T>(a, batch, kv_head);
    if constexpr (Variant::kPacked) rows = bwd_detail::rows_ptr<const T, true>(a, batch, kv_head, seq.k0);
    fa2_detail::load_tile_async<T, BN, D, kThreads, KeyRows, HeadDim>(dst, rows, a.stride_n, n0, n_k, tid);
  };
  load_keys(p.k, 0);
  load_keys(p.v, 1);
  if (has_gk) load_keys(p.gk, 2);
  else dbl_detail::zero_tile<kThreads>(smem_key(2), KeyRows::kBytes, tid);
  if (has_gv) load_keys(p.gv, 3);
  else dbl_detail::zero_tile<kThreads>(smem_key(3), KeyRows::kBytes, tid);
  if (!has_gq)
    for (int stage = 0; stage < 2; ++stage) dbl_detail::zero_tile<kThreads>(smem_qt(stage, 2), QTile::kBytes, tid);
  // Query tile `it` into `stage`: Q, dO, gQ rows and the rows' four statistics by cp.async
  // (rows >= n_q zero-filled).
  auto load_query_tile = [&](int it, int stage) {
    const int head = walk.head(kv_head, it);
    const int m0 = walk.m0(it);
    auto one = [&](const AttentionTensorArg& a, int which) {
      const unsigned dst = smem_qt(stage, which);
      const T* rows = bwd_detail::head_ptr<const T>(a, batch, head);
      if constexpr (Variant::kPacked) rows = bwd_detail::rows_ptr<const T, true>(a, batch, head, seq.q0);
      fa2_detail::load_tile_async<T, Tile, D, kThreads, QTile, HeadDim>(dst, rows, a.stride_n, m0, n_q, tid);
    };
    one(p.q, 0);
    one(p.d_o, 1);
    if (has_gq) one(p.gq, 2);
    long long row_base = bwd_detail::stat_row(p, batch, head, 0);
    if constexpr (Variant::kPacked) row_base = bwd_detail::stat_row(p, 0, head, seq.q0);
    for (int i = tid; i < 4 * Tile; i += kThreads) {
      const int which = i / Tile;
      const int row = m0 + i % Tile;
      const float* src = (which == 0 ? p.lse2 : which == 1 ? p.delta : which == 2 ? p.row_r : p.row_c) + row_base;
      cp_async_4(smem_u32(stats(stage) + i), row < n_q ? src + row : src, row < n_q);
    }
  };
  if (total > 0) load_query_tile(0, 0);
  cp_async_commit();

  // This warpgroup's key rows of K, V, gK and gV as K-major A.
  const unsigned wg_rows = row_wg * 64 * 128;
  auto key_a = [&](int which) { return wgmma::desc_sw128(smem_key(which) + wg_rows, 16, 1024); };
  const unsigned long long k_a = key_a(0), v_a = key_a(1), gk_a = key_a(2), gv_a = key_a(3);
  const int key0 = n0 + row_wg * 64 + warp * 16;  // this warp's first key
  float kbar[kCols / 2], vbar[kCols / 2];
#pragma unroll
  for (int i = 0; i < kCols / 2; ++i) kbar[i] = vbar[i] = 0.f;

  for (int it = 0; it < total; ++it) {
    const int stage = it & 1;
    const int m0 = walk.m0(it);
    cp_async_wait<0>();
    wgmma::fence_proxy_async();
    __syncthreads();  // tile `it` landed; every warpgroup is done with tile it − 1
    if (it + 1 < total) load_query_tile(it + 1, stage ^ 1);
    cp_async_commit();
    const float* st = stats(stage);

    auto k_major = [&](int which) { return wgmma::desc_sw128(smem_qt(stage, which), 16, 1024); };
    dbl_detail::ScoreTiles<Tile> x;  // transposed: keys as rows, queries as columns
    dbl_detail::issue_scores<T, Tile, HeadDim, KeyRows::kBlockBytes, QTile::kBlockBytes>(
        x, k_a, k_major(0), v_a, k_major(1), k_a, k_major(2), gk_a, k_major(0), gv_a, k_major(1));

    if constexpr (kVariantScores<Variant>) {
      dbl_detail::wait_rest(x);
      wgmma::fence_operand(x.s);
      const VariantAt at{batch, walk.head(kv_head, it), n_q, n_k, scale, 1.f / scale};
      const bool check =
          n0 + BN > n_k || (Causal && n0 + BN - 1 > m0 + diag) || Variant::kMask || m0 + Tile > n_q;
#pragma unroll
      for (int j = 0; j < Tile / 8; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int col = 8 * j + 2 * t + e;
          const float l2 = st[col], dl = st[Tile + col], rr = st[2 * Tile + col], cc = st[3 * Tile + col];
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int i = 4 * j + 2 * h + e;
            float f1, f2;
            x.s[i] = variant_double<Variant, Causal>(*va, at, x.s[i], l2, m0 + col, key0 + g + 8 * h, check,
                                                     scale_log2, f1, f2);
            bwd_detail::second_order(x.s[i], x.dp[i], x.g[i], x.z[i], scale, dl, rr, cc, f1, f2);
          }
        }
    } else {
      wgmma::wait<1>();
      wgmma::fence_operand(x.s);
      const bool needs_mask = n0 + BN > n_k || (Causal && n0 + BN - 1 > m0 + diag);
      // Key row h masks the query columns 8j + 2t + e below cut[h] (all past n_k; causal: the
      // queries before the key's diagonal).
      int cut[2] = {0, 0};
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int key = key0 + g + 8 * h;
        if (needs_mask) cut[h] = key >= n_k ? Tile : Causal ? key - m0 - diag - 2 * t : 0;
      }
#pragma unroll
      for (int j = 0; j < Tile / 8; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float l2 = st[8 * j + 2 * t + e];
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            float& v = x.s[4 * j + 2 * h + e];
            const float pe = exp2_approx(fmaf(v, scale_log2, -l2));
            v = 8 * j + e < cut[h] ? 0.f : pe;
          }
        }
      dbl_detail::wait_rest(x);
#pragma unroll
      for (int j = 0; j < Tile / 8; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int col = 8 * j + 2 * t + e;
          const float dl = st[Tile + col], rr = st[2 * Tile + col], cc = st[3 * Tile + col];
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int i = 4 * j + 2 * h + e;
            bwd_detail::second_order(x.s[i], x.dp[i], x.g[i], x.z[i], scale, dl, rr, cc);
          }
        }
    }

    // K̄ += dSᵀ·gQ + S̄ᵀ·Q, V̄ += Hᵀ·dO (the query tiles read MN-major from column col0).
    auto mn_major = [&](int which) { return bwd_detail::mn_major_cols<QTile::kBlockBytes>(smem_qt(stage, which), col0); };
    const unsigned no_p[1][4] = {};
    dbl_detail::row_products<T, kCols, Tile, false>(kbar, vbar, x, no_p, mn_major(2), mn_major(0), 0, mn_major(1));
  }

  if constexpr (Splits == 1) {
    bwd_detail::store_pair<T, D, HeadDim>(p, p.k_bar, p.v_bar, slot, kv_head, 0, k0 + key0, k0 + n_k, kbar, vbar);
  } else {
    bwd_detail::store_pair<T, kCols>(p, p.k_bar, p.v_bar, slot, kv_head, col0, k0 + key0, k0 + n_k, kbar, vbar,
                                     imin(kCols, HeadDim - col0), imin(kCols, HeadDim - col0));
  }
#endif
}

// The second stage: blocks [0, ceil(n_q / 64·WGs)) run the apply pass, the following
// ceil(n_k / 64·WGs) the key-major kernel (blockIdx.y < heads_kv), so that the two, which do
// not depend on each other, share the machine (packed batches: the grid's two halves,
// dbl_detail::fused_query_blocks).
template <class T, int D, int Tile, int WGs, bool Causal, int HeadDim = D, int Splits = 1, class Variant = NoVariant>
__device__ __forceinline__ void attention_double_backward_wgmma_fused(const AttentionBackwardParams& p,
                                                                      const VariantArgs* va = nullptr) {
  constexpr int kRows = dbl_detail::WgPlace<D, WGs, Splits>::kRows;
  const int q_blocks = dbl_detail::fused_query_blocks<Variant>(p.n_q, kRows, 1);
  if (static_cast<int>(blockIdx.x) < q_blocks) {
    attention_double_backward_wgmma_q<T, D, Tile, WGs, Causal, DoubleBackwardRowPass::apply, HeadDim, Splits,
                                      Variant>(p, va, blockIdx.x);
  } else if (static_cast<int>(blockIdx.y) < p.heads_kv) {
    attention_double_backward_wgmma_kv<T, D, Tile, WGs, Causal, HeadDim, Splits, Variant>(p, va,
                                                                                          blockIdx.x - q_blocks);
  }
}

}  // namespace kgen
