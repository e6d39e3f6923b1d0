// Warp-specialised Hopper attention backward (sm_90a wgmma, configs "wg:bm64:bn128:a1:t:l:w",
// "wg:bm128:bn128:a2:l:w" and "wg:bm128:bn128:a2:t:l:w"): the decoupled key-major kernel of
// backward_wgmma.cuh (attention_backward_wgmma_kv_async_body with TmaLoads and TmaDQ) with its
// copies moved off the warpgroups that run the tensor cores.
//
// 384 threads. Warpgroup 0 is the producer and gives its registers to the consumers (setmaxnreg
// 24, the consumers 240):
//   warp 0 loads: per query tile j of the walk, once both consumers released the stage j uses
//     (empty), lane 0 issues the Q and dO boxes by TMA on full[stage] and every lane the rows'
//     lse2 and delta by 4-byte cp.async (4 values a lane; rows >= n_q zero-filled), arriving on
//     full[stage] as they land;
//   warp 1 adds dQ (with TmaDQ): per tile and consumer, once the consumer wrote its staging boxes
//     (dq_full[wg]), lane 0 issues their TMA reduce-adds into dq_accum and, once the previous
//     consumer's boxes have been read, releases them (dq_empty of that consumer);
//   the other warps exit.
// Warpgroups 1 and 2 are the consumers: warpgroup 1 + wg owns the keys [n0 + 64·wg, +64) and runs
// the per-tile steps of the decoupled kernel (Sᵀ and dPᵀ, Pᵀ and dSᵀ in registers, dV and dK
// issued, dSᵀ into its ring), then, once dV and dK are done, the dQ of the tile before over the
// columns [wg·D/2, +D/2), which it writes into its staging boxes (after dq_empty[wg]) before
// arriving on dq_full[wg]; with 128-row tiles the dQ of the rows [64·wg, +64) over every column,
// into the boxes the same way with TmaDQ (a two-stage ring), else added with red_add2. They never
// wait for a copy they issued, and hold no load addresses.
// (The decoupled kernel keeps dQ's wgmma in flight under dV and dK's; within 240 registers that
// overlap spills and serialises the wgmma, so here the other consumer fills the gap.)
//
// Shared memory: AsyncKvSmem, with TmaDQ and DqWriter (dq_full and dq_empty per consumer).
// Barrier counts: full 33 (lane 0's expect_tx, then the 32 lanes' cp.async arrivals), empty,
// ds_full and ds_empty 256 (every consumer thread), dq_full 128 (the consumer's threads), dq_empty
// 1 (the writer's lane 0). Masking, requirements and padded head dims: as
// attention_backward_wgmma_kv; GroupSplit as attention_backward_wgmma_kv_async_maps.
//
// attention_backward_wgmma_kv_ws_persistent (":p") runs the same blocks on a persistent grid.
#pragma once

#include "kgen_device/attention/backward_wgmma.cuh"
#include "kgen_device/attention/packed_grid.cuh"
#include "kgen_device/core/wgmma_cols.cuh"

namespace kgen {
namespace bwd_detail {

constexpr int kWsConsumerThreads = attention_bwd::kWgmmaWsThreads - 128;
constexpr int kWsProducerRegisters = 24;
constexpr int kWsConsumerRegisters = 240;

// The producer's load warp: the query tiles of `walk` into the ring of `sm`, each stage once both
// consumers released it. ring0: the ring's uses before this walk (persistent blocks); drain: wait
// for the statistics' copies at the end.
// Packed batches (Variant::kPacked): `batch` is the sequence, its rows start at its first query
// row of the tensors (one physical batch); the rows of a tile past the sequence are the next
// sequence's (or zeros past the tensors), and the consumers mask them.
template <class QTile, int BM, int D, class Variant = NoVariant, class Walk, class Smem>
__device__ __forceinline__ void ws_load_tiles(const AttentionBackwardParams& p, const void* q_map, const void* do_map,
                                              const Walk& walk, const Smem& sm, int kv_y, int batch, int lane,
                                              int ring0 = 0, bool drain = true, const VariantArgs* va = nullptr) {
  constexpr int kStages = Smem::kStages;
  const int slot = Variant::kPacked ? 0 : batch;  // the tensors' batch
  for (int j = 0; j < walk.total; ++j) {
    const int use = ring0 + j;  // the ring's use count (persistent blocks: over all key blocks)
    const int stage = use % kStages;
    if (use >= kStages) tma::wait(sm.empty(stage), (use / kStages - 1) & 1);
    const int head = walk.head(kv_y, j);
    const int m0 = sequence_row0<Variant>(va, batch) + walk.m0(j);  // the tile's first row in the tensors
    if (lane == 0) {
      tma::arrive_expect_tx(sm.full(stage), 2 * QTile::kBytes);
#pragma unroll
      for (int b = 0; b < D / 64; ++b) {
        tma::load_4d(sm.q(stage) + b * QTile::kBlockBytes, q_map, 64 * b, m0, head, slot, sm.full(stage));
        tma::load_4d(sm.d_o(stage) + b * QTile::kBlockBytes, do_map, 64 * b, m0, head, slot, sm.full(stage));
      }
    }
    warp_load_tile_stats<BM>(p, sm.stats(stage), stat_row(p, slot, head, 0), m0, lane);
    tma::cp_async_arrive(sm.full(stage));
  }
  if (drain) cp_async_wait<0>();
}

// The producer's dQ warp (lane 0): per query tile and consumer, the consumer's staging boxes
// reduce-added into dq_accum by TMA; each consumer's boxes released once read, one reduce-add
// group late (ring0 and drain as ws_load_tiles'). 64-row tiles: consumer wg's boxes hold the dQ
// columns [wg·D/2, +D/2) of the tile's rows; 128-row tiles: every column of the rows [64·wg, +64).
// Packed batches: as ws_load_tiles (the rows past the sequence get zeros added).
template <int D, int BM, class Variant = NoVariant, class Walk, class Smem>
__device__ __forceinline__ void ws_add_dq(const AttentionBackwardParams& p, const void* dq_map, const Walk& walk,
                                          const Smem& sm, int kv_y, int batch, int ring0 = 0, bool drain = true,
                                          const VariantArgs* va = nullptr) {
  constexpr int kBoxes = D * BM / 4096;  // 64-row × 32-column boxes per consumer
  for (int j = 0; j < walk.total; ++j) {
    const int use = ring0 + j;  // the tiles' count (persistent blocks: over all key blocks)
    const int row_base = (Variant::kPacked ? 0 : batch) * p.heads_q + walk.head(kv_y, j);
    const int m0 = sequence_row0<Variant>(va, batch) + walk.m0(j);
#pragma unroll
    for (int wg = 0; wg < 2; ++wg) {
      tma::wait(sm.dq_full(wg), use & 1);
#pragma unroll
      for (int b = 0; b < kBoxes; ++b) {
        const int box = wg * kBoxes + b;
        if constexpr (BM == 64)
          tma::reduce_add_3d(dq_map, sm.dq_box(box), 32 * box, m0, row_base);
        else
          tma::reduce_add_3d(dq_map, sm.dq_box(box), 32 * b, m0 + 64 * wg, row_base);
      }
      tma::store_commit();
      if (use > 0 || wg > 0) {
        tma::store_wait_read<1>();
        tma::arrive(sm.dq_empty(wg ^ 1));
      }
    }
  }
  if (drain) tma::store_wait_read();  // the boxes read before the block exits
}

// A variant's score step (variant.cuh) on this thread's part of a warpgroup's 64 keys × BM
// queries (key0: the warp's first key; m0: the tile's first query; st: the tile's BM lse2, then BM
// delta values): Pᵀ into s and dSᵀ = Pᵀ∘(dPᵀ − delta)∘f' into dp, the learnable tensors'
// gradients added (this kernel visits each score once). `masked`: the mask and the bounds apply
// per element (rows past the sequence included).
template <class Variant, bool Causal, int BM>
__device__ __forceinline__ void key_major_variant_p_ds(const VariantArgs& a, const VariantAt& at, float (&s)[BM / 2],
                                                       float (&dp)[BM / 2], const float* st, float scale_log2,
                                                       bool masked, int key0, int m0, int g, int t) {
#pragma unroll
  for (int j = 0; j < BM / 8; ++j)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int col = 8 * j + 2 * t + e;
      const float l2 = st[col], dl = st[BM + col];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int i = 4 * j + 2 * h + e;
        float pe;
        dp[i] = variant_backward<Variant, Causal>(a, at, s[i], l2, dl, dp[i], m0 + col, key0 + g + 8 * h, masked,
                                                  scale_log2, pe, true);
        s[i] = pe;
      }
    }
}

// The key blocks of a persistent block: rounds of a grid of gridDim.x blocks over every
// (key block, kv lane, batch), kv lane = kv head · GroupSplit + part.
// Without a mask round r takes item r·gridDim.x + blockIdx.x, key blocks fastest (the blocks at
// work at one time share a few heads' Q and dO in L2). With one, key blocks x and
// key_blocks − 1 − x of one lane form a pair of about the same number of query tiles together
// (x from the diagonal on has the most): the block takes pair (r / 2)·gridDim.x + blockIdx.x,
// the heavier key block in round r and the lighter in round r + 1, so every block gets about
// the same work (the middle key block of an odd count has no partner). Where the grid holds
// every key block at once, each block takes one, as without a mask.
template <bool Causal, int GroupSplit>
struct KeyBlockRounds {
  int round = 0;
  // Sets kb to the block's next key block; false when there is none.
  __device__ __forceinline__ bool next(const AttentionBackwardParams& p, int bn, KeyBlock& kb) {
    const int grid = static_cast<int>(gridDim.x), b = static_cast<int>(blockIdx.x);
    const int key_blocks = (p.n_k + bn - 1) / bn, lanes = p.heads_kv * GroupSplit;
    int x, lane;
    if (Causal && key_blocks * lanes * p.batch > grid) {
      const int pairs = (key_blocks + 1) / 2;
      for (;; ++round) {
        const int pair = (round >> 1) * grid + b;
        if (pair >= pairs * lanes * p.batch) return false;
        const int heavier = pair % pairs;
        x = round & 1 ? key_blocks - 1 - heavier : heavier;
        if ((round & 1) && x == heavier) continue;  // the middle key block has no partner
        lane = pair / pairs;
        break;
      }
    } else {
      const int w = round * grid + b;
      if (w >= key_blocks * lanes * p.batch) return false;
      x = w % key_blocks, lane = w / key_blocks;
    }
    ++round;
    kb = {x * bn, lane % lanes, lane / lanes, p.n_q, p.n_k, p.n_k - p.n_q};
    return true;
  }
};

}  // namespace bwd_detail

// T: half_t or bfloat16_t. D: 64 or 128. BM: query rows per tile, 64 or (on the 64-column tile)
// 128. Causal: bottom-right mask. Stagger: the second consumer
// starts once the first formed its first Pᵀ and dSᵀ (a2). GroupSplit: as
// attention_backward_wgmma_kv_async_maps. TmaDQ: dQ through the staging boxes and the producer's
// dQ warp (always with 64-row tiles; with 128-row tiles the form :t, on a two-stage ring).
// Variant: the score step's modification and mask (variant.cuh) with its inputs `va`; query
// tiles that no query head of the block's group sees are skipped. Packed batches: blockIdx.z is
// the sequence, its keys past the block's return at once, and every index is the sequence's.
template <class T, int D, int BM, bool Causal, bool Stagger, int HeadDim = D, int GroupSplit = 1,
          bool TmaDQ = BM == 64, class Variant = NoVariant>
__device__ __forceinline__ void attention_backward_wgmma_kv_ws(const AttentionBackwardTmaParams& tp,
                                                               const VariantArgs* va = nullptr) {
  static_assert(D == 64 || D == 128, "D must be 64 or 128");
  static_assert(GroupSplit == 1 || GroupSplit == 2 || GroupSplit == 4 || GroupSplit == 8,
                "a K/V head's query heads in 1, 2, 4 or 8 blocks");
  static_assert(!Variant::kPacked || GroupSplit == 1, "packed batches store dK and dV unsplit");
  static_assert(!Variant::kPaged, "the backward takes dense or packed K/V");
  // The score step of a variant, and of a packed batch (whose tiles' rows past the sequence
  // belong to the next one).
  constexpr bool kScoreStep = kVariantScores<Variant> || Variant::kPacked;
  static_assert(!kScoreStep || TmaDQ, "variants add dQ by TMA");
  bwd_detail::check_wgmma_backward_args<T, D, BM, HeadDim>();
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int BN = 128;
  constexpr int kThreads = bwd_detail::kWsConsumerThreads;
  // 64-row tiles: dQ through the staging boxes and the producer's dQ warp, each consumer over
  // half the columns; 128-row tiles: each consumer the dQ of its 64 rows over every column,
  // through the boxes with TmaDQ, else added with red_add2 as the decoupled kernel's 128-row form.
  static_assert(TmaDQ || BM == 128, "64-row tiles add dQ by TMA");
  using Smem = bwd_detail::AsyncKvSmem<D, BM, BN, TmaDQ, TmaDQ>;
  using KVTile = typename Smem::KVTile;
  using QTile = typename Smem::QTile;
  using DsTile = typename Smem::DsTile;
  constexpr int kStages = Smem::kStages, kDsBufs = Smem::kDsBufs;
  static_assert(Smem::kBytes == attention_bwd::wgmma_kv_async_smem_bytes(D, BM, TmaDQ, TmaDQ),
                "shared memory layout must match");
  constexpr int kDqCols = BM == 64 ? D / 2 : D;  // columns of a consumer's dQ (rows: 64)
  constexpr int kKvCols = wgmma::head_dim_width(HeadDim);  // dV's and dK's columns
  const AttentionBackwardParams& p = tp.a;

  // A packed batch: the compact grid's key block (packed_tile; each warp finds the same one). Its
  // x is ⌊rows / BN⌋ + sequences, n_k the tensors' rows.
  bwd_detail::KeyBlock block;
  if constexpr (Variant::kPacked) {
    const PackedTile pt = packed_tile<BN>(va->cu_seqlens_k, static_cast<int>(gridDim.x) - p.n_k / BN, p.heads_kv,
                                          packed_block());
    if (pt.seq < 0) return;
    block = {pt.tile * BN, pt.lane, pt.seq, p.n_q, p.n_k, 0};
  } else {
    block = bwd_detail::KeyBlock::of<Causal>(p, BN);
  }
  const auto [n0, kv_y, batch, rows_q, rows_k, rows_diag] = block;
  const SequenceRows seq = sequence_rows<Variant>(va, batch, rows_q, rows_k);
  const int n_q = seq.n_q, n_k = seq.n_k, diag = Variant::kPacked ? n_k - n_q : rows_diag;
  if constexpr (Variant::kPacked)
    if (n0 >= n_k) return;  // past this sequence's keys
  const int kv_head = kv_y / GroupSplit;
  bwd_detail::QueryTileWalk<BM, Causal> walk(n0, n_q, n_k, p.head_group / GroupSplit);
  VariantAt at{};
  if constexpr (kScoreStep) {
    at = {batch, 0, n_q, n_k, p.scale, 1.f / p.scale};
    walk.template narrow<Variant>(va, at, kv_y, n0, imin(n0 + BN, n_k) - 1);
  }
  const int total = walk.total;
  const Smem sm = Smem::at(dynamic_smem());

  if (threadIdx.x == 0) {
    for (int i = 0; i < kStages; ++i) {
      tma::barrier_init(sm.full(i), 33);
      tma::barrier_init(sm.empty(i), kThreads);
    }
    for (int i = 0; i < kDsBufs; ++i) {
      tma::barrier_init(sm.ds_full(i), kThreads);
      tma::barrier_init(sm.ds_empty(i), kThreads);
    }
    if constexpr (TmaDQ)
      for (int i = 0; i < 2; ++i) {
        tma::barrier_init(sm.dq_full(i), 128);
        tma::barrier_init(sm.dq_empty(i), 1);
      }
    tma::fence_barrier_init();
  }
  if (threadIdx.x >= 128) {  // K and V by the consumers
    const int ctid = threadIdx.x - 128;
    fa2_detail::load_tile_async<T, BN, D, kThreads, KVTile, HeadDim>(
        sm.k(), bwd_detail::rows_ptr<const T, Variant::kPacked>(p.k, batch, kv_head, seq.k0), p.k.stride_n, n0, n_k,
        ctid);
    fa2_detail::load_tile_async<T, BN, D, kThreads, KVTile, HeadDim>(
        sm.v(), bwd_detail::rows_ptr<const T, Variant::kPacked>(p.v, batch, kv_head, seq.k0), p.v.stride_n, n0, n_k,
        ctid);
    cp_async_commit();
  }
  __syncthreads();  // the barriers initialised

  if (threadIdx.x < 128) {
    // ---- producer ----
    tma::release_registers<bwd_detail::kWsProducerRegisters>();
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (warp == 0)
      bwd_detail::ws_load_tiles<QTile, BM, D, Variant>(p, &tp.q_map, &tp.do_map, walk, sm, kv_y, batch, lane, 0, true, va);
    else if (TmaDQ && warp == 1 && lane == 0)
      bwd_detail::ws_add_dq<D, BM, Variant>(p, &tp.dq_map, walk, sm, kv_y, batch, 0, true, va);
    return;
  }

  // ---- consumers ----
  tma::claim_registers<bwd_detail::kWsConsumerRegisters>();
  // The warpgroup index through a shuffle, which ptxas knows to be warp-uniform: the wgmma
  // descriptors derived from it then stay in uniform registers, instead of being formed per
  // thread and moved over (R2UR) before every wgmma. With the Pᵀ/dSᵀ step in two copies (with
  // and without the mask) and, in the persistent kernel, the ring stage counted on, the backward
  // runs 1–12 % faster (H200, BENCHMARKS.md "Uniform wgmma descriptors in the backward").
  const auto [wg_t, warp, lane, g, t] = wgmma::Lane::of(threadIdx.x - 128);
  const int wg = shfl32(wg_t, 0);
  cp_async_wait<0>();  // K and V
  wgmma::fence_proxy_async();
  named_barrier<1, kThreads>();

  const float scale_log2 = p.scale_log2;
  const unsigned wg_rows = wg * 64 * 128;
  const unsigned long long k_a = wgmma::desc_sw128(sm.k() + wg_rows, 16, 1024);
  const unsigned long long v_a = wgmma::desc_sw128(sm.v() + wg_rows, 16, 1024);
  float dk[kKvCols / 2], dv[kKvCols / 2];
#pragma unroll
  for (int i = 0; i < kKvCols / 2; ++i) dk[i] = dv[i] = 0.f;
  const int key0 = n0 + wg * 64 + warp * 16;
  const int col0 = BM == 64 ? wg * kDqCols : 0;
  const int row0 = BM == 64 ? 0 : 64 * wg;
  // 128-row tiles: this consumer's first staging box. (64-row tiles pass col0 / 32 at the call,
  // the same box: ptxas schedules the 64-row kernels differently when it is hoisted here.)
  const int box0 = wg * kDqCols / 32;

  for (int it = 0; it < total; ++it) {
    // The decoupled kernel's first steps, in this kernel's own copy: its register allocation is
    // pinned by the replay table's machine code, which any folding must keep.
    const int stage = it % kStages;
    const int m0 = walk.m0(it);
    tma::wait(sm.full(stage), (it / kStages) & 1);
    if (Stagger && it == 0 && wg == 1) tma::barrier_sync(2, kThreads);

    // ---- Sᵀ = K_wg·Qᵀ, dPᵀ = V_wg·dOᵀ; Pᵀ, dSᵀ ----
    float s[BM / 2], dp[BM / 2];
    bwd_detail::issue_sdp<T, BM, HeadDim, KVTile::kBlockBytes, QTile::kBlockBytes, false>(
        s, dp, k_a, v_a, wgmma::desc_sw128(sm.q(stage), 16, 1024), wgmma::desc_sw128(sm.d_o(stage), 16, 1024));
    wgmma::wait<0>();
    wgmma::fence_operand(s);
    wgmma::fence_operand(dp);
    // Two copies of the step, one without the mask's per-element select (a run-time flag would
    // keep it in every tile). Written out here and in the persistent kernel, each with its own
    // machine code in the replay table.
    const bool needs_mask = n0 + BN > n_k || (Causal && n0 + BN - 1 > m0 + diag);
    if constexpr (kScoreStep) {
      // Rows past n_q are masked too: their Q and dO are zeros (or the next sequence's) and
      // their lse2 is 0, which a modification would turn into P ≠ 0.
      at.head = walk.head(kv_y, it);
      const bool masked = needs_mask || m0 + BM > n_q ||
                          variant_partial<Variant>(walk.full, walk.tile(it));
      if (masked)
        bwd_detail::key_major_variant_p_ds<Variant, Causal, BM>(*va, at, s, dp, sm.stats(stage), scale_log2, true,
                                                                key0, m0, g, t);
      else
        bwd_detail::key_major_variant_p_ds<Variant, Causal, BM>(*va, at, s, dp, sm.stats(stage), scale_log2, false,
                                                                key0, m0, g, t);
    } else if (needs_mask) {
      bwd_detail::key_major_p_ds<Causal, BM>(s, dp, sm.stats(stage), scale_log2, true, key0, n_k, m0, diag, g, t);
    } else {
      bwd_detail::key_major_p_ds<Causal, BM>(s, dp, sm.stats(stage), scale_log2, false, key0, n_k, m0, diag, g, t);
    }
    if (Stagger && it == 0 && wg == 0) tma::barrier_arrive(2, kThreads);

    // ---- dV += Pᵀ·dO, dK += dSᵀ·Q ----
    bwd_detail::issue_dv_dk<T, kKvCols, BM, QTile>(dv, dk, s, dp, sm.q(stage), sm.d_o(stage));

    // ---- dSᵀ(it) into its ring slot ----
    const int buf = it % kDsBufs;
    if (it >= kDsBufs) tma::wait(sm.ds_empty(buf), (it / kDsBufs - 1) & 1);
    bwd_detail::store_ds_rows<T, BM, DsTile>(sm.ds(buf), dp, wg, warp, g, t);
    tma::arrive(sm.ds_full(buf));


    // ---- dV and dK done, the stage released; dQ(it − 1), its slot released, dQ to the writer ----
    float dq[kDqCols / 2];
    bwd_detail::end_query_tile(dv, dk);
    tma::arrive(sm.empty(stage));
    if (it > 0) {
      bwd_detail::issue_ring_dq<T, kDqCols, BN, KVTile, DsTile>(dq, sm, it - 1, row0, col0);
      wgmma::wait<0>();
      wgmma::fence_operand(dq);
      tma::arrive(sm.ds_empty((it - 1) % kDsBufs));
      if constexpr (TmaDQ) {  // into the staging boxes once the dQ warp read the last ones
        if (it > 1) tma::wait(sm.dq_empty(wg), (it - 2) & 1);
        bwd_detail::write_dq_boxes<kDqCols>(sm, dq, BM == 64 ? col0 / 32 : box0, warp, g, t);
        tma::fence_proxy_async();
        tma::arrive(sm.dq_full(wg));
      } else {
        bwd_detail::add_tile_dq<kDqCols, D, HeadDim>(p, walk, dq, kv_y, batch, it - 1, row0, col0, warp, g, t);
      }
    }
  }
  if (total > 0) {
    float dq[kDqCols / 2];
    bwd_detail::issue_ring_dq<T, kDqCols, BN, KVTile, DsTile>(dq, sm, total - 1, row0, col0);
    wgmma::wait<0>();
    wgmma::fence_operand(dq);
    if constexpr (TmaDQ) {
      if (total > 1) tma::wait(sm.dq_empty(wg), (total - 2) & 1);
      bwd_detail::write_dq_boxes<kDqCols>(sm, dq, BM == 64 ? col0 / 32 : box0, warp, g, t);
      tma::fence_proxy_async();
      tma::arrive(sm.dq_full(wg));
    } else {
      bwd_detail::add_tile_dq<kDqCols, D, HeadDim>(p, walk, dq, kv_y, batch, total - 1, row0, col0, warp, g, t);
    }
  }

  // ---- epilogue: dK = s·Σ dSᵀ·Q, dV ----
  if constexpr (GroupSplit > 1) {
    bwd_detail::add_dkdv_rows<kKvCols, HeadDim>(p, batch, kv_head, key0, dk, dv, g, t);
  } else if constexpr (Variant::kPacked) {
    const int k0 = sequence_row0<Variant, true>(va, batch);
    bwd_detail::store_pair<T, kKvCols, HeadDim>(p, p.dk, p.dv, batch, kv_head, 0, k0 + key0, k0 + n_k, dk, dv);
  } else {
    bwd_detail::store_dkdv<T, kKvCols, HeadDim>(p, batch, kv_head, 0, key0, dk, dv);
  }
#endif
}

// The kernel above on a persistent grid (":p", "wg:bm64:bn128:a2:t:l:w:p"): at most one block per
// SM walks the key blocks of KeyBlockRounds, the same template arguments. The rings' use counts
// (Q/dO stages, dSᵀ slots, dQ boxes) run on from one key block to the next, so their barrier
// phases do too. Once both consumers' last dQ wgmma has read K, they load the next key block's K
// and V (cp.async) and then store this one's dK and dV, while the load warp already fills the ring
// with the next key block's first Q and dO tiles. A separate function, so that the kernel above
// keeps its machine code: written as one with a persistent switch, the one-block-per-key-block
// kernels ran 0.7–1.4 % slower (H200, d = 64), and with the per-tile steps in a helper that both
// call, both kernels' machine code changed (replay table); so those steps are written out in
// each. The consumers keep the key block's coordinates in shared memory: held in registers
// through the main loop, they spilled at d = 128 with a mask.
template <class T, int D, int BM, bool Causal, bool Stagger, int HeadDim = D, int GroupSplit = 1,
          bool TmaDQ = BM == 64>
__device__ __forceinline__ void attention_backward_wgmma_kv_ws_persistent(const AttentionBackwardTmaParams& tp) {
  static_assert(D == 64 || D == 128, "D must be 64 or 128");
  static_assert(GroupSplit == 1 || GroupSplit == 2 || GroupSplit == 4 || GroupSplit == 8,
                "a K/V head's query heads in 1, 2, 4 or 8 blocks");
  bwd_detail::check_wgmma_backward_args<T, D, BM, HeadDim>();
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int BN = 128;
  constexpr int kThreads = bwd_detail::kWsConsumerThreads;
  // 64-row tiles: dQ through the staging boxes and the producer's dQ warp, each consumer over
  // half the columns; 128-row tiles: each consumer the dQ of its 64 rows over every column,
  // through the boxes with TmaDQ, else added with red_add2 as the decoupled kernel's 128-row form.
  static_assert(TmaDQ || BM == 128, "64-row tiles add dQ by TMA");
  using Smem = bwd_detail::AsyncKvSmem<D, BM, BN, TmaDQ, TmaDQ>;
  using KVTile = typename Smem::KVTile;
  using QTile = typename Smem::QTile;
  using DsTile = typename Smem::DsTile;
  constexpr int kStages = Smem::kStages, kDsBufs = Smem::kDsBufs;
  static_assert(Smem::kBytes == attention_bwd::wgmma_kv_async_smem_bytes(D, BM, TmaDQ, TmaDQ),
                "shared memory layout must match");
  constexpr int kDqCols = BM == 64 ? D / 2 : D;  // columns of a consumer's dQ (rows: 64)
  constexpr int kKvCols = wgmma::head_dim_width(HeadDim);  // dV's and dK's columns
  const AttentionBackwardParams& p = tp.a;
  const Smem sm = Smem::at(dynamic_smem());
  bwd_detail::KeyBlockRounds<Causal, GroupSplit> rounds;
  bwd_detail::KeyBlock kb;
  bool more = rounds.next(p, BN, kb);
  // K and V of key block kb by the consumers (ctid: 0 .. kThreads − 1).
  auto load_kv = [&](const bwd_detail::KeyBlock& b, int ctid) {
    const int kv_head = b.kv_head / GroupSplit;
    fa2_detail::load_tile_async<T, BN, D, kThreads, KVTile, HeadDim>(
        sm.k(), bwd_detail::head_ptr<const T>(p.k, b.batch, kv_head), p.k.stride_n, b.n0, b.n_k, ctid);
    fa2_detail::load_tile_async<T, BN, D, kThreads, KVTile, HeadDim>(
        sm.v(), bwd_detail::head_ptr<const T>(p.v, b.batch, kv_head), p.v.stride_n, b.n0, b.n_k, ctid);
    cp_async_commit();
  };
  auto walk_of = [&](const bwd_detail::KeyBlock& b) {
    return bwd_detail::QueryTileWalk<BM, Causal>(b.n0, b.n_q, b.n_k, p.head_group / GroupSplit);
  };

  if (threadIdx.x == 0) {
    for (int i = 0; i < kStages; ++i) {
      tma::barrier_init(sm.full(i), 33);
      tma::barrier_init(sm.empty(i), kThreads);
    }
    for (int i = 0; i < kDsBufs; ++i) {
      tma::barrier_init(sm.ds_full(i), kThreads);
      tma::barrier_init(sm.ds_empty(i), kThreads);
    }
    if constexpr (TmaDQ)
      for (int i = 0; i < 2; ++i) {
        tma::barrier_init(sm.dq_full(i), 128);
        tma::barrier_init(sm.dq_empty(i), 1);
      }
    tma::fence_barrier_init();
  }
  if (threadIdx.x >= 128 && more) load_kv(kb, threadIdx.x - 128);  // K and V by the consumers
  __syncthreads();  // the barriers initialised

  if (threadIdx.x < 128) {
    // ---- producer ----
    tma::release_registers<bwd_detail::kWsProducerRegisters>();
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (warp == 0) {
      for (int ring = 0; more; more = rounds.next(p, BN, kb)) {
        const auto walk = walk_of(kb);
        bwd_detail::ws_load_tiles<QTile, BM, D>(p, &tp.q_map, &tp.do_map, walk, sm, kb.kv_head, kb.batch, lane, ring, false);
        ring += walk.total;
      }
      cp_async_wait<0>();
    } else if (TmaDQ && warp == 1 && lane == 0) {
      for (int ring = 0; more; more = rounds.next(p, BN, kb)) {
        const auto walk = walk_of(kb);
        bwd_detail::ws_add_dq<D, BM>(p, &tp.dq_map, walk, sm, kb.kv_head, kb.batch, ring, false);
        ring += walk.total;
      }
      tma::store_wait_read();  // the boxes read before the block exits
    }
    return;
  }

  // ---- consumers ----
  tma::claim_registers<bwd_detail::kWsConsumerRegisters>();
  const auto [wg_t, warp, lane, g, t] = wgmma::Lane::of(threadIdx.x - 128);
  const int wg = shfl32(wg_t, 0);  // warp-uniform to ptxas (the kernel above says why)
  const int ctid = threadIdx.x - 128;
  // The consumers' key block (kv lane and batch; without a mask also the next block's n0, written
  // before it is read) and round in shared memory, written by the first consumer thread (in the
  // main loop with a mask the registers are at their limit: kept there, they spilled).
  __shared__ int slots[3], slot_round;
  if (ctid == 0) {  // read after the first barrier below
    slots[1] = kb.kv_head, slots[2] = kb.batch;
    slot_round = rounds.round;
  }
  const float scale_log2 = p.scale_log2;
  const unsigned wg_rows = wg * 64 * 128;
  const unsigned long long k_a = wgmma::desc_sw128(sm.k() + wg_rows, 16, 1024);
  const unsigned long long v_a = wgmma::desc_sw128(sm.v() + wg_rows, 16, 1024);
  const int col0 = BM == 64 ? wg * kDqCols : 0;
  const int row0 = BM == 64 ? 0 : 64 * wg;
  // 128-row tiles: this consumer's first staging box. (64-row tiles pass col0 / 32 at the call,
  // the same box: ptxas schedules the 64-row kernels differently when it is hoisted here.)
  const int box0 = wg * kDqCols / 32;

  // The Q/dO ring's stage and its barriers' phase, counted on from tile to tile instead of formed
  // from the use count (a division by three per tile). The key block's coordinates come out of
  // shared memory through a shuffle, warp-uniform like the warpgroup index.
  int stage = 0, stage_phase = 0;
  for (int ring = 0; more;) {
    const int n0 = kb.n0, n_k = p.n_k, diag = p.n_k - p.n_q;
    int kv_y = kb.kv_head, batch = kb.batch;
    const int kv_head = kv_y / GroupSplit;
    const auto walk = walk_of(kb);
    const int total = walk.total;
    cp_async_wait<0>();  // K and V
    wgmma::fence_proxy_async();
    named_barrier<1, kThreads>();

    float dk[kKvCols / 2], dv[kKvCols / 2];
#pragma unroll
    for (int i = 0; i < kKvCols / 2; ++i) dk[i] = dv[i] = 0.f;
    const int key0 = n0 + wg * 64 + warp * 16;

    const int m_begin = walk.tile_begin * BM, m_end = (walk.tile_begin + walk.tiles_per_head) * BM;
    int m0 = m_begin;  // walk.m0(it), counted on
    for (int it = 0; it < total; ++it) {
      // The decoupled kernel's first steps, written out again here (as above).
      const int use = ring + it;  // the rings' use count
      tma::wait(sm.full(stage), stage_phase);
      if (Stagger && use == 0 && wg == 1) tma::barrier_sync(2, kThreads);

      // ---- Sᵀ = K_wg·Qᵀ, dPᵀ = V_wg·dOᵀ; Pᵀ, dSᵀ ----
      float s[BM / 2], dp[BM / 2];
      bwd_detail::issue_sdp<T, BM, HeadDim, KVTile::kBlockBytes, QTile::kBlockBytes, false>(
          s, dp, k_a, v_a, wgmma::desc_sw128(sm.q(stage), 16, 1024), wgmma::desc_sw128(sm.d_o(stage), 16, 1024));
      wgmma::wait<0>();
      wgmma::fence_operand(s);
      wgmma::fence_operand(dp);
      const bool needs_mask = n0 + BN > n_k || (Causal && n0 + BN - 1 > m0 + diag);
      if (needs_mask)
        bwd_detail::key_major_p_ds<Causal, BM>(s, dp, sm.stats(stage), scale_log2, true, key0, n_k, m0, diag, g, t);
      else
        bwd_detail::key_major_p_ds<Causal, BM>(s, dp, sm.stats(stage), scale_log2, false, key0, n_k, m0, diag, g, t);
      if (Stagger && use == 0 && wg == 0) tma::barrier_arrive(2, kThreads);

      // ---- dV += Pᵀ·dO, dK += dSᵀ·Q ----
      bwd_detail::issue_dv_dk<T, kKvCols, BM, QTile>(dv, dk, s, dp, sm.q(stage), sm.d_o(stage));

      // ---- dSᵀ(it) into its ring slot ----
      const int buf = use % kDsBufs;
      if (use >= kDsBufs) tma::wait(sm.ds_empty(buf), (use / kDsBufs - 1) & 1);
      bwd_detail::store_ds_rows<T, BM, DsTile>(sm.ds(buf), dp, wg, warp, g, t);
      tma::arrive(sm.ds_full(buf));


      // ---- dV and dK done, the stage released; dQ(it − 1), its slot released, dQ to the writer ----
      float dq[kDqCols / 2];
      bwd_detail::end_query_tile(dv, dk);
      tma::arrive(sm.empty(stage));
      if (it > 0) {
        bwd_detail::issue_ring_dq<T, kDqCols, BN, KVTile, DsTile>(dq, sm, use - 1, row0, col0);
        wgmma::wait<0>();
        wgmma::fence_operand(dq);
        tma::arrive(sm.ds_empty((use - 1) % kDsBufs));
        if constexpr (TmaDQ) {  // into the staging boxes once the dQ warp read the last ones
          if (use > 1) tma::wait(sm.dq_empty(wg), (use - 2) & 1);
          bwd_detail::write_dq_boxes<kDqCols>(sm, dq, BM == 64 ? col0 / 32 : box0, warp, g, t);
          tma::fence_proxy_async();
          tma::arrive(sm.dq_full(wg));
        } else {
          bwd_detail::add_tile_dq<kDqCols, D, HeadDim>(p, walk, dq, kv_y, batch, it - 1, row0, col0, warp, g, t);
        }
      }
      if (++stage == kStages) stage = 0, stage_phase ^= 1;
      m0 = m0 + BM == m_end ? m_begin : m0 + BM;
    }
    ring += total;
    if (total > 0) {
      float dq[kDqCols / 2];
      bwd_detail::issue_ring_dq<T, kDqCols, BN, KVTile, DsTile>(dq, sm, ring - 1, row0, col0);
      wgmma::wait<0>();
      wgmma::fence_operand(dq);
      tma::arrive(sm.ds_empty((ring - 1) % kDsBufs));  // the ring runs on
      if constexpr (TmaDQ) {
        if (ring > 1) tma::wait(sm.dq_empty(wg), (ring - 2) & 1);
        bwd_detail::write_dq_boxes<kDqCols>(sm, dq, BM == 64 ? col0 / 32 : box0, warp, g, t);
        tma::fence_proxy_async();
        tma::arrive(sm.dq_full(wg));
      } else {
        bwd_detail::add_tile_dq<kDqCols, D, HeadDim>(p, walk, dq, kv_y, batch, total - 1, row0, col0, warp, g, t);
      }
    }
    // ---- both consumers' last wgmma read K and V: the next key block's ----
    const volatile int* slot = slots;
    kv_y = slot[1], batch = slot[2];  // this key block's, for the epilogue
    if constexpr (Causal) {
      // Every consumer thread computes the next key block from the round (the same answer in
      // all; the shuffles make it warp-uniform to ptxas, and the wgmma descriptors of the main
      // loop stay on the uniform datapath), and thread 0 writes it back once all have read
      // this one's.
      bwd_detail::KeyBlockRounds<Causal, GroupSplit> r{shfl32(*static_cast<const volatile int*>(&slot_round), 0)};
      bwd_detail::KeyBlock next{};
      more = shfl32(static_cast<int>(r.next(p, BN, next)), 0) != 0;
      kb = {shfl32(next.n0, 0), shfl32(next.kv_head, 0), shfl32(next.batch, 0), p.n_q, p.n_k, p.n_k - p.n_q};
      named_barrier<1, kThreads>();
      if (ctid == 0) slots[1] = kb.kv_head, slots[2] = kb.batch, slot_round = r.round;
    } else {
      // Without a mask the key blocks come in order, and thread 0 alone computing the next one
      // ran faster.
      named_barrier<1, kThreads>();
      if (ctid == 0) {
        bwd_detail::KeyBlockRounds<Causal, GroupSplit> r{slot_round};
        bwd_detail::KeyBlock next;
        slots[0] = r.next(p, BN, next) ? next.n0 : -1;
        slots[1] = next.kv_head, slots[2] = next.batch;
        slot_round = r.round;
      }
      named_barrier<1, kThreads>();
      kb = {shfl32(slot[0], 0), shfl32(slot[1], 0), shfl32(slot[2], 0), p.n_q, p.n_k, p.n_k - p.n_q};
      more = kb.n0 >= 0;
    }
    if (more) load_kv(kb, ctid);

    // ---- epilogue: dK = s·Σ dSᵀ·Q, dV ----
    if constexpr (GroupSplit > 1)
      bwd_detail::add_dkdv_rows<kKvCols, HeadDim>(p, batch, kv_head, key0, dk, dv, g, t);
    else
      bwd_detail::store_dkdv<T, kKvCols, HeadDim>(p, batch, kv_head, 0, key0, dk, dv);
  }
#endif
}

}  // namespace kgen
