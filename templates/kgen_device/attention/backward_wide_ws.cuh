// Warp-specialised Hopper backward for wide head dims (sm_90a wgmma, configs
// "wg:bm64:bn96:a1:t:l:w" at the 192-column tile and "wg:bm64:bn48:a1:t:l:w" at the 256-column
// one): the wide kernel's key blocks with dKᵀ and dVᵀ accumulated transposed (backward_wide.cuh)
// and its copies moved off the warpgroups that run the tensor cores, so that two consumers of 240
// registers hold every dKᵀ and dVᵀ row of their keys. Below, for the 192-column tile: BN = 96
// keys, 48 per consumer; at 256 columns BN = 48, 24 per consumer (wgmma m64n24k16), dQ's pieces
// two of 64 columns, [128·w, +64) and [128·w + 64, +64), and eight staging boxes.
//
// Grid (ceil(n_k / BN), heads_kv, batch), 384 threads, the query-tile walk of the other key-major
// kernels. Warpgroup 0 is the producer (setmaxnreg 24; the consumers 240):
//   warp 0 loads: per query tile j, once both consumers released the stages it uses, lane 0
//     issues Q's boxes by TMA on q_full[j % 2] (every lane the rows' lse2 and delta by cp.async,
//     arriving as they land) and dO's on do_full[j % kDoStages];
//   warp 1 adds dQ (backward_ws.cuh's ws_add_dq): each consumer's staging boxes reduce-added into
//     dq_accum by TMA, the boxes released one reduce-add group late.
// Warpgroups 1 and 2 are the consumers; consumer w owns the keys [n0 + 48·w, +48). Per tile:
//   S = Q·K_wᵀ, dP = dO·V_wᵀ           wgmma m64n48k16 (queries as M), both operands K-major;
//                                      S issued once Q has landed, dP once dO has;
//   P = exp2(S·scale_log2 − lse2), masked; Pᵀ written (stmatrix .trans) into the rows
//     [48·w, +48) of the Pᵀ tile (only this consumer reads them);
//   dVᵀ += dOᵀ·P                       m64n48k16 on every 64-row block of v's head dim (A = dO
//                                      read M-major, B = its Pᵀ rows K-major), in flight while
//   dS = P∘(dP − delta) is formed; once both consumers' dQ of the tile before has read the dSᵀ
//     tile, dSᵀ into its rows [48·w, +48); dVᵀ done, the dO stage released (the next tile's dO
//     loads under this tile's dQ and dKᵀ); once both consumers wrote their dSᵀ rows:
//   dQ = dS·K over all 96 keys         on its 96 columns, as an n32 piece [64 + 32·w, +32) and an
//                                      n64 piece [128·w, +64) (an MN-major B stays inside one
//                                      64-column block of the K tile), A = dS read M-major from
//                                      the dSᵀ tile, B = K MN-major; then
//   dKᵀ += Qᵀ·dS                       m64n48k16 on every 64-row block of the 192 columns;
//   once dQ is done it is written into its staging boxes (columns [96·w, +96): boxes 3·w .. 3·w + 2;
//   once the dQ warp read its last ones) while dKᵀ runs, then handed over; the Q stage is released
//   once dKᵀ is done.
// Epilogue: once both consumers' last products are done, scale·dKᵀ and dVᵀ written transposed
// (stmatrix .trans) into the K and V tiles, then to dK and dV with 16-byte stores.
//
// Shared memory (from a base rounded up to 1024 bytes; attention_bwd::wide_ws_smem_bytes): K
// (Sw128<BN, D>), V (Sw128<BN, DV>, DV = v's head dim rounded up to 64), two stages of Q
// (Sw128<64, D>), kDoStages of dO (Sw128<64, DV>: two up to 128 columns, else one), Pᵀ and dSᵀ
// (Sw128<BN, 64>), dQ's staging (D / 32 boxes of 64 rows × 32 fp32 columns, the dq_map's
// swizzle), two stages of the rows' lse2 and delta, the mbarriers.
// Masking and requirements: as the wide kernel (rows >= n_q zero-filled by TMA with zero
// statistics, keys >= n_k zero-filled and masked; HeadDim a multiple of 8 in (D − 64, D], HeadDimV
// a multiple of 8 up to HeadDim). The atomic mode only: its deterministic mode is the wide
// kernel's.
#pragma once

#include "kgen_device/attention/backward_wide.cuh"
#include "kgen_device/attention/backward_ws.cuh"

namespace kgen {
namespace bwd_wide {

// The regions of dynamic shared memory (see the top comment), from a base rounded up to 1024
// bytes; q(stage), dq_box(box), dq_full(wg) and dq_empty(wg) as bwd_detail::ws_add_dq expects.
template <int Tile, int HeadDimV>
struct WsSmem {
  static constexpr int BN = attention_bwd::wide_ws_keys(Tile), BM = attention_bwd::kWideQueryRows;
  static constexpr int D = Tile, DV = attention_bwd::wide_ws_v_cols(HeadDimV);
  static constexpr int kDoStages = attention_bwd::wide_ws_do_stages(HeadDimV);
  static constexpr int kDsBufs = attention_bwd::wide_ws_ds_bufs(HeadDimV);
  using KTile = wgmma::Sw128<BN, D>;
  using VTile = wgmma::Sw128<BN, DV>;
  using QTile = wgmma::Sw128<BM, D>;
  using DoTile = wgmma::Sw128<BM, DV>;
  using PTile = wgmma::Sw128<BN, BM>;  // Pᵀ and dSᵀ: rows = keys, columns = queries
  static constexpr int kDqBoxBytes = 64 * 128;  // 64 rows of 32 fp32 columns
  static constexpr int kVOffset = KTile::kBytes;
  static constexpr int kQOffset = kVOffset + VTile::kBytes;
  static constexpr int kDoOffset = kQOffset + 2 * QTile::kBytes;
  static constexpr int kPOffset = kDoOffset + kDoStages * DoTile::kBytes;
  static constexpr int kDqOffset = kPOffset + (1 + kDsBufs) * PTile::kBytes;
  static constexpr int kStatsOffset = kDqOffset + BM * D * 4;
  static constexpr int kBarrierOffset = kStatsOffset + 2 * 2 * BM * 4;
  static constexpr int kBytes = 1024 + kBarrierOffset + (8 + 2 * kDoStages) * 8;
  unsigned base;  // shared-memory address, 1024-byte aligned
  float* stats_base;
  __device__ __forceinline__ static WsSmem at() {
    unsigned char* raw = dynamic_smem();
    const unsigned raw_addr = smem_u32(raw);
    const unsigned base = (raw_addr + 1023u) & ~1023u;
    return {base, reinterpret_cast<float*>(raw + (base - raw_addr) + kStatsOffset)};
  }
  __device__ __forceinline__ unsigned k() const { return base; }
  __device__ __forceinline__ unsigned v() const { return base + kVOffset; }
  __device__ __forceinline__ unsigned q(int stage) const { return base + kQOffset + stage * QTile::kBytes; }
  __device__ __forceinline__ unsigned d_o(int stage) const { return base + kDoOffset + stage * DoTile::kBytes; }
  __device__ __forceinline__ unsigned p() const { return base + kPOffset; }
  __device__ __forceinline__ unsigned ds(int buf) const { return base + kPOffset + (1 + buf) * PTile::kBytes; }
  // The staging box of the dQ columns [32·box, +32).
  __device__ __forceinline__ unsigned dq_box(int box) const { return base + kDqOffset + box * kDqBoxBytes; }
  __device__ __forceinline__ float* stats(int stage) const { return stats_base + stage * 2 * BM; }
  __device__ __forceinline__ unsigned barrier(int i) const { return base + kBarrierOffset + 8 * i; }
  __device__ __forceinline__ unsigned q_full(int stage) const { return barrier(stage); }
  __device__ __forceinline__ unsigned q_empty(int stage) const { return barrier(2 + stage); }
  __device__ __forceinline__ unsigned dq_full(int wg) const { return barrier(4 + wg); }
  __device__ __forceinline__ unsigned dq_empty(int wg) const { return barrier(6 + wg); }
  __device__ __forceinline__ unsigned do_full(int stage) const { return barrier(8 + stage); }
  __device__ __forceinline__ unsigned do_empty(int stage) const { return barrier(8 + kDoStages + stage); }
};

// The producer's load warp: the query tiles of `walk` (Q with the rows' lse2 and delta on a ring
// of two stages, dO on one of Smem::kDoStages), each stage once both consumers released it.
template <class Smem, class Walk>
__device__ __forceinline__ void ws_load_tiles(const AttentionBackwardParams& p, const void* q_map, const void* do_map,
                                              const Walk& walk, const Smem& sm, int kv_head, int batch, int lane) {
  constexpr int BM = Smem::BM, kDoStages = Smem::kDoStages;
  for (int j = 0; j < walk.total; ++j) {
    const int head = walk.head(kv_head, j), m0 = walk.m0(j);
    const int qs = j & 1, ds = j % kDoStages;
    if (j >= 2) tma::wait(sm.q_empty(qs), ((j >> 1) - 1) & 1);
    if (lane == 0) {
      tma::arrive_expect_tx(sm.q_full(qs), Smem::QTile::kBytes);
#pragma unroll
      for (int b = 0; b < Smem::D / 64; ++b)
        tma::load_4d(sm.q(qs) + b * Smem::QTile::kBlockBytes, q_map, 64 * b, m0, head, batch, sm.q_full(qs));
    }
    bwd_detail::warp_load_tile_stats<BM>(p, sm.stats(qs), bwd_detail::stat_row(p, batch, head, 0), m0, lane);
    tma::cp_async_arrive(sm.q_full(qs));
    if (j >= kDoStages) tma::wait(sm.do_empty(ds), (j / kDoStages - 1) & 1);
    if (lane == 0) {
      tma::arrive_expect_tx(sm.do_full(ds), Smem::DoTile::kBytes);
#pragma unroll
      for (int b = 0; b < Smem::DV / 64; ++b)
        tma::load_4d(sm.d_o(ds) + b * Smem::DoTile::kBlockBytes, do_map, 64 * b, m0, head, batch, sm.do_full(ds));
    }
  }
  cp_async_wait<0>();
}

// acc (Blocks accumulators of 64 head-dim rows × Keys keys, one per 64-column block of a Q or dO
// tile from `a_tile`) += Aᵀ·B over a tile's 64 queries: block i reads the tile's columns
// [64·i, +64) M-major, B (`b`) this consumer's Keys rows of the Pᵀ or dSᵀ tile. The caller fences
// and commits.
template <class T, int Blocks, int BlockBytes, int Keys>
__device__ __forceinline__ void wgmma_rows_t(float (&acc)[Blocks * Keys / 2], unsigned a_tile, unsigned long long b) {
#pragma unroll
  for (int i = 0; i < Blocks; ++i)
    wgmma_keys_t<T, Keys>(reinterpret_cast<float(&)[Keys / 2]>(acc[Keys / 2 * i]),
                          bwd_detail::mn_major_cols<BlockBytes>(a_tile, 64 * i), b);
}

// Writes Blocks accumulators of wgmma_rows_t (times `mul`) transposed into the rows [key0, +Keys)
// of a key-block Sw128 tile: block i's rows (head-dim columns 64·i + the warp's 16) become columns.
template <class T, class Tile, int Blocks, int Keys>
__device__ __forceinline__ void store_rows_t(unsigned tile, const float (&acc)[Blocks * Keys / 2], float mul, int key0,
                                             int warp, int lane) {
#pragma unroll
  for (int i = 0; i < Blocks; ++i)
    store_transposed<T, Tile, Keys / 8>(tile, reinterpret_cast<const float(&)[Keys / 2]>(acc[Keys / 2 * i]), mul, key0,
                                        64 * i + 16 * warp, lane);
}

}  // namespace bwd_wide

// T: half_t or bfloat16_t; D: 192 or 256 (the tile); BM: 64; HeadDim, HeadDimV: q's and v's head
// dims.
template <class T, int D, int BM, bool Causal, int HeadDim, int HeadDimV = HeadDim>
__device__ __forceinline__ void attention_backward_wgmma_kv_wide_ws(const AttentionBackwardTmaParams& tp) {
  static_assert(attention_bwd::wide_ws_tile(D), "the 192- or 256-column tile");
  static_assert(BM == attention_bwd::kWideQueryRows, "64-row query tiles");
  static_assert(HeadDimV % 8 == 0 && HeadDimV > 0 && HeadDimV <= HeadDim, "HeadDimV must be a multiple of 8 up to HeadDim");
  bwd_detail::check_wgmma_backward_args<T, D, BM, HeadDim>();
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Sm = bwd_wide::WsSmem<D, HeadDimV>;
  static_assert(Sm::kBytes == attention_bwd::wide_ws_smem_bytes(HeadDimV, D), "shared memory layout must match");
  constexpr int BN = Sm::BN;
  constexpr int kThreads = bwd_detail::kWsConsumerThreads;
  constexpr int kKeys = BN / 2;             // a consumer's keys
  constexpr int kAcc = kKeys / 2;           // registers of a 64-row × kKeys accumulator
  constexpr int kDBlocks = D / 64;          // dKᵀ's 64-row blocks
  constexpr int kVBlocks = Sm::DV / 64;     // dVᵀ's 64-row blocks
  constexpr int kDoStages = Sm::kDoStages;
  const AttentionBackwardParams& p = tp.a;

  const auto [n0, kv_head, batch, n_q, n_k, diag] = bwd_detail::KeyBlock::of<Causal>(p, BN);
  const bwd_detail::QueryTileWalk<BM, Causal> walk(n0, n_q, n_k, p.head_group);
  const int total = walk.total;
  const Sm sm = Sm::at();

  if (threadIdx.x == 0) {
    for (int i = 0; i < 2; ++i) {
      tma::barrier_init(sm.q_full(i), 33);
      tma::barrier_init(sm.q_empty(i), kThreads);
      tma::barrier_init(sm.dq_full(i), 128);
      tma::barrier_init(sm.dq_empty(i), 1);
    }
    for (int i = 0; i < kDoStages; ++i) {
      tma::barrier_init(sm.do_full(i), 1);
      tma::barrier_init(sm.do_empty(i), kThreads);
    }
    tma::fence_barrier_init();
  }
  if (threadIdx.x >= 128) {  // K and V by the consumers
    const int ctid = threadIdx.x - 128;
    fa2_detail::load_tile_async<T, BN, D, kThreads, typename Sm::KTile, HeadDim>(
        sm.k(), bwd_detail::head_ptr<const T>(p.k, batch, kv_head), p.k.stride_n, n0, n_k, ctid);
    fa2_detail::load_tile_async<T, BN, Sm::DV, kThreads, typename Sm::VTile, HeadDimV>(
        sm.v(), bwd_detail::head_ptr<const T>(p.v, batch, kv_head), p.v.stride_n, n0, n_k, ctid);
    cp_async_commit();
  }
  __syncthreads();  // the barriers initialised

  if (threadIdx.x < 128) {
    // ---- producer ----
    tma::release_registers<bwd_detail::kWsProducerRegisters>();
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (warp == 0)
      bwd_wide::ws_load_tiles(p, &tp.q_map, &tp.do_map, walk, sm, kv_head, batch, lane);
    else if (warp == 1 && lane == 0)
      bwd_detail::ws_add_dq<D, BM>(p, &tp.dq_map, walk, sm, kv_head, batch);
    return;
  }

  // ---- consumers ----
  tma::claim_registers<bwd_detail::kWsConsumerRegisters>();
  const auto [wg_t, warp, lane, g, t] = wgmma::Lane::of(threadIdx.x - 128);
  const int wg = shfl32(wg_t, 0);  // warp-uniform to ptxas (backward_ws.cuh says why)
  cp_async_wait<0>();  // K and V
  wgmma::fence_proxy_async();
  named_barrier<1, kThreads>();

  const float scale_log2 = p.scale_log2;
  const int key_wg = kKeys * wg;
  const unsigned long long k_b = wgmma::desc_sw128(sm.k() + key_wg * 128, 16, 1024);
  const unsigned long long v_b = wgmma::desc_sw128(sm.v() + key_wg * 128, 16, 1024);
  const unsigned long long p_b = wgmma::desc_sw128(sm.p() + key_wg * 128, 16, 1024);
  const unsigned long long ds_b0 = wgmma::desc_sw128(sm.ds(0) + key_wg * 128, 16, 1024);
  const unsigned long long ds_m0 = wgmma::desc_sw128(sm.ds(0), Sm::PTile::kBlockBytes, 1024);
  // dQ's pieces, each inside one 64-column block of the consumer's columns [D/2·wg, +D/2): at 192
  // columns [128·wg, +64) and [64 + 32·wg, +32), at 256 [128·wg, +64) and [128·wg + 64, +64).
  constexpr int kColsB = D / 2 - 64;
  static_assert(kColsB == 32 || kColsB == 64, "a consumer's dQ columns: a 64-column piece and a 32- or 64-column one");
  const int col_a = 128 * wg, col_b = D == 256 ? 128 * wg + 64 : 64 + 32 * wg;
  const unsigned long long k_cols_a = bwd_detail::mn_major_cols<Sm::KTile::kBlockBytes>(sm.k(), col_a);
  const unsigned long long k_cols_b = bwd_detail::mn_major_cols<Sm::KTile::kBlockBytes>(sm.k(), col_b);

  float dkt[kDBlocks * kAcc], dvt[kVBlocks * kAcc];
#pragma unroll
  for (int i = 0; i < kDBlocks * kAcc; ++i) dkt[i] = 0.f;
#pragma unroll
  for (int i = 0; i < kVBlocks * kAcc; ++i) dvt[i] = 0.f;

  for (int it = 0; it < total; ++it) {
    const int qs = it & 1, ds = it % kDoStages, buf = it % Sm::kDsBufs;
    // This tile's dSᵀ tile: the descriptors moved by its offset (address bits 4 and up).
    const unsigned long long ds_b = ds_b0 + ((buf * Sm::PTile::kBytes) >> 4);
    const unsigned long long ds_m = ds_m0 + ((buf * Sm::PTile::kBytes) >> 4);
    const int m0 = walk.m0(it);
    tma::wait(sm.q_full(qs), (it >> 1) & 1);
    const float* st = sm.stats(qs);

    // ---- S = Q·K_wᵀ, then, once the dO stage has landed, dP = dO·V_wᵀ (64 queries × this
    // consumer's keys), two groups ----
    float s[kAcc], dp[kAcc];
    wgmma::fence();
    bwd_detail::wgmma_abt<T, kKeys, HeadDim, Sm::QTile::kBlockBytes, Sm::KTile::kBlockBytes>(
        s, wgmma::desc_sw128(sm.q(qs), 16, 1024), k_b, 0);
    wgmma::commit();
    tma::wait(sm.do_full(ds), (it / kDoStages) & 1);
    bwd_detail::wgmma_abt<T, kKeys, HeadDimV, Sm::DoTile::kBlockBytes, Sm::KTile::kBlockBytes>(
        dp, wgmma::desc_sw128(sm.d_o(ds), 16, 1024), v_b, 0);
    wgmma::commit();

    // ---- P (while dP runs) into this consumer's Pᵀ rows; dVᵀ += dOᵀ·P ----
    wgmma::wait<1>();
    wgmma::fence_operand(s);
    const bool needs_mask = n0 + BN > n_k || (Causal && n0 + BN - 1 > m0 + diag);
    if (needs_mask)
      bwd_wide::p_rows<Causal>(s, st, scale_log2, true, warp * 16, m0, n0 + key_wg, n_k, diag, g, t);
    else
      bwd_wide::p_rows<Causal>(s, st, scale_log2, false, warp * 16, m0, n0 + key_wg, n_k, diag, g, t);
    bwd_wide::store_transposed<T, typename Sm::PTile, kKeys / 8>(sm.p(), s, 1.f, key_wg, warp * 16, lane);
    wgmma::fence_proxy_async();
    tma::barrier_sync(4 + wg, 128);  // every warp's Pᵀ rows written
    wgmma::fence_operand(dvt);
    wgmma::fence();
    bwd_wide::wgmma_rows_t<T, kVBlocks, Sm::DoTile::kBlockBytes, kKeys>(dvt, sm.d_o(ds), p_b);
    wgmma::commit();

    // ---- dS; once both consumers' dQ of the tile before read the dSᵀ tile, into its rows ----
    wgmma::wait<1>();
    wgmma::fence_operand(dp);
    bwd_wide::ds_rows(dp, s, st + BM, warp * 16, g);
    // One dSᵀ tile: both consumers' dQ of the tile before must have read it. Two: the tile before
    // that one's dQ, which each consumer finished before the last tile's barrier below.
    if (Sm::kDsBufs == 1 && it > 0) named_barrier<2, kThreads>();
    bwd_wide::store_transposed<T, typename Sm::PTile, kKeys / 8>(sm.ds(buf), dp, 1.f, key_wg, warp * 16, lane);
    wgmma::fence_proxy_async();
    // dVᵀ done (issued before dS was formed): the dO stage is released, so that the next tile's
    // dO loads under this tile's dQ and dKᵀ.
    wgmma::wait<0>();
    wgmma::fence_operand(dvt);
    tma::arrive(sm.do_empty(ds));

    // ---- once both consumers' dSᵀ rows are written: dQ = dS·K on this consumer's columns, then
    // dKᵀ += Qᵀ·dS, under which dQ goes to the staging boxes ----
    named_barrier<3, kThreads>();
    float dq_b[kColsB / 2], dq_a[32];
    wgmma::fence();
    bwd_detail::wgmma_cols_dq<T, kColsB, BN>(dq_b, ds_m, k_cols_b);
    bwd_detail::wgmma_cols_dq<T, 64, BN>(dq_a, ds_m, k_cols_a);
    wgmma::commit();
    wgmma::fence_operand(dkt);
    bwd_wide::wgmma_rows_t<T, kDBlocks, Sm::QTile::kBlockBytes, kKeys>(dkt, sm.q(qs), ds_b);
    wgmma::commit();

    // ---- dQ done: into the staging boxes; dKᵀ done: the Q stage released ----
    wgmma::wait<1>();
    wgmma::fence_operand(dq_b);
    wgmma::fence_operand(dq_a);
    if (it > 0) tma::wait(sm.dq_empty(wg), (it - 1) & 1);
    bwd_detail::write_dq_boxes<kColsB>(sm, dq_b, col_b / 32, warp, g, t);
    bwd_detail::write_dq_boxes<64>(sm, dq_a, col_a / 32, warp, g, t);
    tma::fence_proxy_async();
    tma::arrive(sm.dq_full(wg));
    wgmma::wait<0>();
    wgmma::fence_operand(dkt);
    tma::arrive(sm.q_empty(qs));
  }

  // ---- epilogue: dK = scale·dKᵀᵀ and dV through the K and V tiles (both consumers' products
  // done), then to global memory ----
  named_barrier<1, kThreads>();
  bwd_wide::store_rows_t<T, typename Sm::KTile, kDBlocks, kKeys>(sm.k(), dkt, p.scale, key_wg, warp, lane);
  bwd_wide::store_rows_t<T, typename Sm::VTile, kVBlocks, kKeys>(sm.v(), dvt, 1.f, key_wg, warp, lane);
  named_barrier<1, kThreads>();
  const int ctid = threadIdx.x - 128;
  const int keys = imin(n_k - n0, BN);
  bwd_wide::copy_out<T, typename Sm::KTile, BN, HeadDim, kThreads>(
      bwd_detail::head_ptr<T>(p.dk, batch, kv_head) + n0 * p.dk.stride_n, p.dk.stride_n, sm.k(), keys, ctid);
  bwd_wide::copy_out<T, typename Sm::VTile, BN, HeadDimV, kThreads>(
      bwd_detail::head_ptr<T>(p.dv, batch, kv_head) + n0 * p.dv.stride_n, p.dv.stride_n, sm.v(), keys, ctid);
#endif
}

}  // namespace kgen
