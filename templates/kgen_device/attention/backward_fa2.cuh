// FA2-class attention backward for sm_80+ (mma.sync m16n8k16, ldmatrix, cp.async).
//
// Inputs besides q, k, v, d_o: the workspace rows lse2 and delta written by
// attention_backward_preprocess (backward_rows.cuh). With P = exp2(s·scale_log2 − lse2)
// (docs/attention.md §3, the log2 domain of the forward):
//   dV = Pᵀ·dO,  dP = dO·Vᵀ,  dS = P∘(dP − delta),  dK = s·dSᵀ·Q,  dQ = s·dS·K.
//
// attention_backward_fa2_kv: grid (ceil(n_k / BN), heads_kv, batch), Warps warps. The block owns
// keys [n0, n0 + BN); warp w owns kKT·16 of them. It walks every query tile of BM rows of every
// query head of its kv group (GQA: dK, dV sum over the group in registers), skipping causal
// tiles that see none of its keys. Per query tile, each warp forms Sᵀ = K_w·Qᵀ and
// dPᵀ = V_w·dOᵀ (keys as rows, queries as columns), then dV_w += Pᵀ·dO and dK_w += dSᵀ·Q with
// the probabilities kept in registers (C fragments repacked as A fragments). With AtomicDQ the
// block writes dSᵀ (16-bit) to shared memory and adds dS·K to an fp32 accumulator with
// red_add2 (scaled and converted by attention_backward_dq_convert); otherwise dQ comes from
// attention_backward_fa2_dq, which is deterministic.
//
// attention_backward_fa2_dq: grid (ceil(n_q / BM), heads_q, batch); the forward's work split
// (warp w owns kMT·16 query rows, K/V tiles of BN keys double-buffered) computing S, dP, dS per
// tile and dQ += dS·K in registers.
//
// Shared tiles are the forward's: rows of D 16-bit elements, 16-byte chunks XOR-swizzled
// (Swizzle16B<D/8>); dSᵀ rows of BM elements use Swizzle16B<BM/8>.
// Fragment layouts (g = lane / 4, t = lane % 4), see forward_fa2.cuh and mma_sm80.cuh:
//   A from a row-major tile (rows = m): ldmatrix.x4 of rows lane%16, chunk 2kk + lane/16.
//   B from a tile stored [n][k] (Kᵀ-style operand): ldmatrix.x4 of rows lane%8 + 8(lane/16),
//     chunk 2kk + (lane/8)%2.
//   B from a tile stored [k][n] (V-style operand): ldmatrix.x4.trans of rows
//     lane%8 + 8((lane/8)%2), chunk 2dd + lane/16.
//   A from a tile stored [k][m] (dSᵀ read as dS): ldmatrix.x4.trans of rows
//     lane%8 + 8(lane/16), chunk 2mt + (lane/8)%2.
//
// Masking: P_ij = 0 where key j ≥ n_k or (Causal) j > i + (n_k − n_q). Query rows ≥ n_q are
// zero-filled and get lse2 = +inf, so their P is 0 as well.
//
// Head dims: as the forward, D is the tile's (shared-memory rows, a multiple of 32) and HeadDim
// the tensors' (p.head_dim, a multiple of 8 in (D − 32, D]). The mma cover HeadDim rounded up
// to 16 (DC), the loads zero-fill [HeadDim, DC), and nothing past HeadDim is stored or added to
// the dQ accumulator (rows of HeadDim floats).
//
// Requirements (checked by the host): as the forward: 16-byte aligned base pointers and row
// strides of q, k, v, d_o, dq, dk, dv; p.head_dim == HeadDim.
#pragma once

#include "kgen_device/attention/backward_config.h"
#include "kgen_device/attention/backward_rows.cuh"
#include "kgen_device/attention/forward_fa2.cuh"
#include "kgen_device/attention/variant.cuh"
#include "kgen_device/core/atomic.cuh"

namespace kgen {
namespace bwd_detail {

template <int D, int BM, int BN, bool AtomicDQ>
constexpr int kKvSmemBytes = attention_bwd::fa2_kv_smem_bytes(D, BM, BN, AtomicDQ);
template <int D, int BM, int BN>
constexpr int kQSmemBytes = attention_bwd::fa2_q_smem_bytes(D, BM, BN);

// acc[MT][NTiles] += A·Bᵀ over the first DC columns of rows of D: A rows from a row-major tile
// (a_lane = A-pattern address of m-tile 0), B rows (n) from a tile stored [n][k] (b_lane =
// B-pattern address of n-tile pair 0).
template <class T, int MT, int NTiles, int D, int DC = D>
__device__ __forceinline__ void mma_abt(float (&acc)[MT][NTiles][4], unsigned a_lane, unsigned b_lane) {
  using Swz = Swizzle16B<D / 8>;
  constexpr int kRowBytes = D * 2;
#pragma unroll
  for (int kk = 0; kk < DC / 16; ++kk) {
    unsigned a[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) ldmatrix_x4(a[mt], Swz::advance(a_lane, 2 * kk) + mt * 16 * kRowBytes);
#pragma unroll
    for (int nn = 0; nn < NTiles / 2; ++nn) {
      unsigned b[4];
      ldmatrix_x4(b, Swz::advance(b_lane, 2 * kk) + nn * 16 * kRowBytes);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        mma_16x8x16<T>(acc[mt][2 * nn], a[mt], b[0], b[1]);
        mma_16x8x16<T>(acc[mt][2 * nn + 1], a[mt], b[2], b[3]);
      }
    }
  }
}

// acc[MT][DC/8] += X·B where X (MT·16 × KTiles·8) is held as C fragments in registers and B
// (KTiles·8 × DC) is the first DC columns of a tile stored [k][n] with rows of D (b_lane =
// V-pattern address).
// Only the column pairs dd < dd_end are computed (a warp-uniform bound; the rest keep their values).
template <class T, int MT, int KTiles, int D, int DC = D>
__device__ __forceinline__ void mma_xb(float (&acc)[MT][DC / 8][4], const float (&x)[MT][KTiles][4],
                                       unsigned b_lane, int dd_end = DC / 16) {
  using Swz = Swizzle16B<D / 8>;
  constexpr int kRowBytes = D * 2;
#pragma unroll
  for (int kk = 0; kk < KTiles / 2; ++kk) {
    unsigned a[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      a[mt][0] = pack2<T>(x[mt][2 * kk][0], x[mt][2 * kk][1]);
      a[mt][1] = pack2<T>(x[mt][2 * kk][2], x[mt][2 * kk][3]);
      a[mt][2] = pack2<T>(x[mt][2 * kk + 1][0], x[mt][2 * kk + 1][1]);
      a[mt][3] = pack2<T>(x[mt][2 * kk + 1][2], x[mt][2 * kk + 1][3]);
    }
#pragma unroll
    for (int dd = 0; dd < DC / 16; ++dd) {
      if (dd >= dd_end) break;
      unsigned b[4];
      ldmatrix_x4_trans(b, Swz::advance(b_lane, 2 * dd) + kk * 16 * kRowBytes);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        mma_16x8x16<T>(acc[mt][2 * dd], a[mt], b[0], b[1]);
        mma_16x8x16<T>(acc[mt][2 * dd + 1], a[mt], b[2], b[3]);
      }
    }
  }
}

// The query tiles a key-major block (keys from n0) walks: tile `it` is query tile
// tile_begin + it % tiles_per_head of query head kv_head·group + it / tiles_per_head (GQA), and
// causal blocks skip the tiles whose rows see none of their keys (rows i >= n0 − diag).
template <int BM, bool Causal>
struct QueryTileWalk {
  int group, tile_begin, tiles_per_head, total;
  VariantFullSpan full;  // the query tiles every head of the group sees in full (variants with a mask)
  // A variant's mask narrows the tiles to those some head of the group may see (keys [k0, k1]),
  // and finds the span of them that every head sees in full.
  template <class V>
  __device__ __forceinline__ void narrow(const VariantArgs* a, VariantAt at, int kv_head, int k0, int k1) {
    if constexpr (V::kMask) {
      int lo = tile_begin + tiles_per_head, hi = tile_begin;
      for (int hg = 0; hg < group; ++hg) {
        at.head = kv_head * group + hg;
        int first = tile_begin, end = tile_begin + tiles_per_head;
        variant_query_tiles<V, BM, true>(*a, at, k0, k1, first, end);
        if (first < end) lo = imin(lo, first), hi = imax(hi, end);
      }
      tile_begin = lo;
      tiles_per_head = imax(hi - lo, 0);
      total = group * tiles_per_head;
      // One head: its range is the union; several: each head's own tiles again.
      for (int hg = 0; hg < group; ++hg) {
        at.head = kv_head * group + hg;
        const VariantFullSpan f =
            variant_full_query_tiles<V, BM>(*a, at, k0, k1, tile_begin, tile_begin + tiles_per_head, group == 1);
        full = hg == 0 ? f : VariantFullSpan{imax(full.lo, f.lo), imin(full.hi, f.hi)};
      }
    }
  }
  __device__ __forceinline__ QueryTileWalk(int n0, int n_q, int n_k, int head_group) : group(head_group) {
    const int q_tiles = (n_q + BM - 1) / BM;
    tile_begin = Causal ? imin(q_tiles, imax(0, n0 - (n_k - n_q)) / BM) : 0;
    tiles_per_head = q_tiles - tile_begin;
    total = group * tiles_per_head;
  }
  __device__ __forceinline__ int head(int kv_head, int it) const { return kv_head * group + it / tiles_per_head; }
  __device__ __forceinline__ int tile(int it) const { return tile_begin + it % tiles_per_head; }
  __device__ __forceinline__ int m0(int it) const { return tile(it) * BM; }
};

// Shared-memory regions of the key-major kernels from `k` (the K tile): K and V tiles of
// KVBytes, two stages of Q and dO tiles of QBytes, the dSᵀ tile, and at `stats_base` (a generic
// pointer) two stages of BM lse2 and BM delta values.
template <int KVBytes, int QBytes, int BM>
struct KeyMajorSmem {
  unsigned k;
  float* stats_base;
  __device__ __forceinline__ unsigned v() const { return k + KVBytes; }
  __device__ __forceinline__ unsigned q(int stage) const { return k + 2 * KVBytes + stage * 2 * QBytes; }
  __device__ __forceinline__ unsigned d_o(int stage) const { return q(stage) + QBytes; }
  __device__ __forceinline__ unsigned ds() const { return k + 2 * KVBytes + 4 * QBytes; }
  __device__ __forceinline__ float* stats(int stage) const { return stats_base + stage * 2 * BM; }
};

// The key-major kernels' block coordinates (key block, kv head, batch): (blockIdx.x, y, z),
// except in causal grids of at most kHeavyFirstBlocks blocks. There the blocks are taken in the
// order the device starts them (x fastest) and given out heaviest first: key block 0 of every kv
// head and sequence, then key block 1, ... A causal key block of a GQA group walks group × (query
// tiles from its diagonal on); with x fastest, the heaviest blocks of the last heads of a small
// grid started only after a first wave of mixed blocks and finished long after the rest (H200,
// b = 1, 64/8 heads, 4k, wgmma kernel: 2.94 → 2.11 ms). Larger grids keep x fastest, whose
// concurrent blocks share their heads' Q and dO in L2.
constexpr unsigned kHeavyFirstBlocks = 1024;
struct GridPlace {
  int x, y, z;
};
template <bool Causal>
__device__ __forceinline__ GridPlace key_major_block() {
  int x = blockIdx.x, y = blockIdx.y, z = blockIdx.z;
  if (Causal && gridDim.x * gridDim.y * gridDim.z <= kHeavyFirstBlocks) {
    const int lanes = gridDim.y * gridDim.z;  // (kv head, batch) pairs per key block
    const int linear = x + gridDim.x * (y + gridDim.y * z);
    x = linear / lanes;
    y = linear % lanes % gridDim.y;
    z = linear % lanes / gridDim.y;
  }
  return {x, y, z};
}

template <int MT, int NT>
__device__ __forceinline__ void zero(float (&acc)[MT][NT][4]) {
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;
}

// Stores the first Cols columns of an (MT·16 × D) C-fragment tile times `mul` to rows row0 + …
// of `dst` (rows ≥ row_end skipped), two elements (4 bytes) per store.
// `cols` (≤ Cols, a multiple of 8) narrows the columns at run time.
template <class T, int MT, int D, int Cols = D>
__device__ __forceinline__ void store_rows(T* dst, long long stride_n, int row0, int row_end,
                                           const float (&acc)[MT][D / 8][4], float mul, int cols = Cols) {
  static_assert(Cols % 8 == 0 && Cols <= D, "Cols must be a multiple of 8 up to D");
  const int lane = threadIdx.x % 32;
  const int g = lane / 4;
  const int t = lane % 4;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = row0 + mt * 16 + g + 8 * h;
      if (row >= row_end) continue;
      T* r = dst + row * stride_n;
#pragma unroll
      for (int dt = 0; dt < Cols / 8; ++dt)
        if (dt * 8 < cols)
          *reinterpret_cast<unsigned*>(r + dt * 8 + 2 * t) =
            pack2<T>(acc[mt][dt][2 * h] * mul, acc[mt][dt][2 * h + 1] * mul);
    }
}

}  // namespace bwd_detail

// Key-major backward: dK, dV (and dQ by atomics when AtomicDQ).
//   T: half_t or bfloat16_t. D: the tile's head dim (a multiple of 32), HeadDim the tensors'.
//   BM: query rows per tile (multiple of 32). BN: keys per block; Warps warps own BN / Warps =
//   16 or 32 keys each.
//   Splits: 1, or 2 for head dims above 128, whose dK and dV accumulators would not fit in
//   registers: then two blocks own the same keys (blockIdx.x = key block · 2 + split), both
//   compute Sᵀ and dPᵀ over the whole head dim, and split s computes the columns
//   [128·s, 128·s + 128) of dK, dV (and of dQ). Work: 7 head-dim-long products per tile
//   instead of 5.
//   Variant: the score step's modification and mask (variant.cuh), with its inputs `va`.
//   HeadDimV: v's, o's and dO's head dim when it is below q's and k's (MLA, docs/kernels/mla.md),
//   a multiple of 8: V and dO tiles are loaded with HeadDimV columns (zero-filled to 16), dPᵀ =
//   V·dOᵀ reduces over HeadDimV rounded up to 16, and dV is computed and stored with HeadDimV
//   columns (with two splits, the second owns none of them when HeadDimV <= 128).
template <class T, int D, int BM, int BN, int Warps, bool Causal, bool AtomicDQ, int HeadDim = D, int Splits = 1,
          class Variant = NoVariant, int HeadDimV = HeadDim>
__device__ __forceinline__ void attention_backward_fa2_kv(const AttentionBackwardParams& p,
                                                          const VariantArgs* va = nullptr) {
  static_assert(is_same<T, half_t>::value || is_same<T, bfloat16_t>::value,
                "the FA2 backward takes half_t or bfloat16_t");
  static_assert(D % 32 == 0 && D >= 32 && D <= 256, "D must be a multiple of 32 up to 256");
  static_assert(HeadDim % 8 == 0 && HeadDim > D - 32 && HeadDim <= D, "HeadDim must pad to D");
  static_assert(HeadDimV % 8 == 0 && HeadDimV > 0 && HeadDimV <= HeadDim, "HeadDimV must be a multiple of 8 up to HeadDim");
  constexpr int kDC = (HeadDim + 15) / 16 * 16;  // head-dim columns the mma cover
  constexpr int kDCV = (HeadDimV + 15) / 16 * 16;  // v's columns the mma cover
  static_assert(BM % 32 == 0 && BM >= 32 && BM <= 128, "BM must be 32, 64, 96 or 128");
  constexpr int kThreads = Warps * 32;
  constexpr int kKeysPerWarp = BN / Warps;
  constexpr int kKT = kKeysPerWarp / 16;  // 16-key m-tiles per warp
  static_assert(kKT * 16 * Warps == BN && (kKT == 1 || kKT == 2), "16 or 32 keys per warp");
  static_assert(Splits == 1 ? kDC <= 256 : Splits == 2 && kDC > 128, "two splits above 128 columns");
  constexpr int kSplitCols = Splits == 1 ? kDC : 128;  // dK, dV columns of one block
  constexpr int kQT = BM / 8;           // 8-query n-tiles of Sᵀ
  constexpr int kDT = kSplitCols / 8;   // 8-column n-tiles of dK, dV
  using SwzD = Swizzle16B<D / 8>;
  using SwzS = Swizzle16B<BM / 8>;
  constexpr int kRowBytes = D * 2;
  constexpr int kKVBytes = BN * kRowBytes;
  constexpr int kQBytes = BM * kRowBytes;
  constexpr int kDsBytes = AtomicDQ ? BN * BM * 2 : 0;
  constexpr int kStatsOffset = 2 * kKVBytes + 4 * kQBytes + kDsBytes;
  static_assert(kStatsOffset + 4 * BM * 4 == bwd_detail::kKvSmemBytes<D, BM, BN, AtomicDQ>,
                "shared memory layout must match fa2_kv_smem_bytes");

  const int tid = threadIdx.x;
  const int warp = tid / 32;
  const int lane = tid % 32;
  const int g = lane / 4;
  const int t = lane % 4;

  // x = key block · Splits + split; both splits of a key block weigh the same.
  const bwd_detail::GridPlace place = bwd_detail::key_major_block<Causal>();
  const int x = place.x, kv_head = place.y, batch = place.z;
  const int n0 = (Splits == 1 ? x : x / Splits) * BN;
  const int col0 = Splits == 1 ? 0 : (x % Splits) * kSplitCols;  // first dK, dV column
  const int split_end = imin(kDC, col0 + kSplitCols);  // past the last column the mma cover
  // Packed batches: the sequence's rows (workspace rows and pointers at its first rows).
  const SequenceRows seq = sequence_rows<Variant>(va, batch, p.n_q, p.n_k);
  const int n_q = seq.n_q;
  const int n_k = seq.n_k;
  if constexpr (Variant::kPacked)
    if (n0 >= n_k) return;  // past this sequence's keys
  const int diag = n_k - n_q;
  const float scale_log2 = p.scale_log2;
  bwd_detail::QueryTileWalk<BM, Causal> walk(n0, n_q, n_k, p.head_group);
  VariantAt at{};
  if constexpr (kVariantScores<Variant>) {
    at = {batch, 0, n_q, n_k, p.scale, 1.f / p.scale};
    walk.template narrow<Variant>(va, at, kv_head, n0, imin(n0 + BN, n_k) - 1);
  }
  const int total = walk.total;

  unsigned char* smem = dynamic_smem();
  const bwd_detail::KeyMajorSmem<kKVBytes, kQBytes, BM> sm{smem_u32(smem), reinterpret_cast<float*>(smem + kStatsOffset)};

  const T* k_ptr = bwd_detail::rows_ptr<const T, Variant::kPacked>(p.k, batch, kv_head, seq.k0);
  const T* v_ptr = bwd_detail::rows_ptr<const T, Variant::kPacked>(p.v, batch, kv_head, seq.k0);

  // Issues the loads of query tile `it` (head, rows) into `stage`: Q and dO by cp.async, the
  // rows' lse2 and delta by plain loads and shared stores.
  auto load_query_tile = [&](int it, int stage) {
    const int head = walk.head(kv_head, it);
    const int m0 = walk.m0(it);
    fa2_detail::load_tile_async<T, BM, D, kThreads, SwzD, HeadDim>(
        sm.q(stage), bwd_detail::rows_ptr<const T, Variant::kPacked>(p.q, batch, head, seq.q0), p.q.stride_n, m0, n_q, tid);
    fa2_detail::load_tile_async<T, BM, D, kThreads, SwzD, HeadDimV>(
        sm.d_o(stage), bwd_detail::rows_ptr<const T, Variant::kPacked>(p.d_o, batch, head, seq.q0), p.d_o.stride_n, m0, n_q, tid);
    float* st = sm.stats(stage);
    for (int i = tid; i < BM; i += kThreads) {
      const int row = m0 + i;
      float l2 = infinity_f32(), dl = 0.f;
      if (row < n_q) {
        const long long idx = bwd_detail::stat_row(p, seq.slot, head, seq.q0 + row);
        l2 = p.lse2[idx];
        dl = p.delta[idx];
      }
      st[i] = l2;
      st[BM + i] = dl;
    }
  };

  fa2_detail::load_tile_async<T, BN, D, kThreads, SwzD, HeadDim>(sm.k, k_ptr, p.k.stride_n, n0, n_k, tid);
  fa2_detail::load_tile_async<T, BN, D, kThreads, SwzD, HeadDimV>(sm.v(), v_ptr, p.v.stride_n, n0, n_k, tid);
  if (total > 0) load_query_tile(0, 0);
  cp_async_commit();

  const int key_local0 = warp * kKeysPerWarp;
  const unsigned a_lane = SwzD::offset(key_local0 + lane % 16, lane / 16);  // A pattern
  const unsigned b_lane = SwzD::offset(lane % 8 + 8 * (lane / 16), (lane / 8) % 2);
  const unsigned v_lane = SwzD::offset(lane % 8 + 8 * ((lane / 8) % 2), lane / 16);
  // The V-pattern address at this block's first column: col0 is 0 or 128 (16 chunks, whole
  // swizzle groups), so the move is a plain add and later advances stay valid.
  const unsigned v_lane_split = Splits == 1 ? v_lane : SwzD::advance(v_lane, 16 * (col0 / 128));
  const int dd_end = (split_end - col0) / 16;  // 16-column pairs of dK, dV this block computes
  // dV's pairs: fewer when v's head dim is below q's.
  const int dd_end_v = HeadDimV == HeadDim ? dd_end : imax(imin(split_end, kDCV) - col0, 0) / 16;

  float dk[kKT][kDT][4];
  float dv[kKT][kDT][4];
  bwd_detail::zero(dk);
  bwd_detail::zero(dv);

  for (int it = 0; it < total; ++it) {
    const int stage = it & 1;
    const int head = walk.head(kv_head, it);
    const int m0 = walk.m0(it);
    cp_async_wait<0>();
    __syncthreads();  // tile `it` landed; every warp is done with tile it − 1 (and with dSᵀ)
    if (it + 1 < total) load_query_tile(it + 1, stage ^ 1);
    cp_async_commit();

    const float* st = sm.stats(stage);
    // ---- Sᵀ = K_w·Qᵀ, Pᵀ = exp2(Sᵀ·scale_log2 − lse2) ----
    float s[kKT][kQT][4];
    bwd_detail::zero(s);
    bwd_detail::mma_abt<T, kKT, kQT, D, kDC>(s, sm.k + a_lane, sm.q(stage) + b_lane);
    const bool needs_mask = n0 + BN > n_k || (Causal && n0 + BN - 1 > m0 + diag);
    float ds[kKT][kQT][4];
    if constexpr (kVariantScores<Variant>) {
      // ---- a variant: dPᵀ = V_w·dOᵀ first, then per element P and dS = P∘(dP − delta)∘f' ----
      at.head = head;
      const bool masked = needs_mask || variant_partial<Variant>(walk.full, walk.tile(it));
      bwd_detail::zero(ds);
      bwd_detail::mma_abt<T, kKT, kQT, D, kDCV>(ds, sm.v() + a_lane, sm.d_o(stage) + b_lane);
#pragma unroll
      for (int kt = 0; kt < kKT; ++kt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int key = n0 + key_local0 + kt * 16 + g + 8 * h;
#pragma unroll
          for (int nt = 0; nt < kQT; ++nt)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const int local = nt * 8 + 2 * t + e;
              float pe;
              ds[kt][nt][2 * h + e] = variant_backward<Variant, Causal>(*va, at, s[kt][nt][2 * h + e], st[local],
                                                                        st[BM + local], ds[kt][nt][2 * h + e],
                                                                        m0 + local, key, masked, scale_log2, pe,
                                                                        col0 == 0);
              s[kt][nt][2 * h + e] = pe;
            }
        }
      // ---- dV += Pᵀ·dO, dK += dSᵀ·Q ----
      bwd_detail::mma_xb<T, kKT, kQT, D, kSplitCols>(dv, s, sm.d_o(stage) + v_lane_split, dd_end_v);
      bwd_detail::mma_xb<T, kKT, kQT, D, kSplitCols>(dk, ds, sm.q(stage) + v_lane_split, dd_end);
    } else {
#pragma unroll
    for (int nt = 0; nt < kQT; ++nt) {
      const float l0 = st[nt * 8 + 2 * t];
      const float l1 = st[nt * 8 + 2 * t + 1];
#pragma unroll
      for (int kt = 0; kt < kKT; ++kt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          s[kt][nt][2 * h] = exp2_approx(fmaf(s[kt][nt][2 * h], scale_log2, -l0));
          s[kt][nt][2 * h + 1] = exp2_approx(fmaf(s[kt][nt][2 * h + 1], scale_log2, -l1));
        }
    }
    if (needs_mask) {
#pragma unroll
      for (int kt = 0; kt < kKT; ++kt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int key = n0 + key_local0 + kt * 16 + g + 8 * h;
#pragma unroll
          for (int nt = 0; nt < kQT; ++nt)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const int query = m0 + nt * 8 + 2 * t + e;
              if (key >= n_k || (Causal && key > query + diag)) s[kt][nt][2 * h + e] = 0.f;
            }
        }
    }

    // ---- dV += Pᵀ·dO ----
    bwd_detail::mma_xb<T, kKT, kQT, D, kSplitCols>(dv, s, sm.d_o(stage) + v_lane_split, dd_end_v);

    // ---- dPᵀ = V_w·dOᵀ, dSᵀ = Pᵀ∘(dPᵀ − delta) ----
    bwd_detail::zero(ds);
    bwd_detail::mma_abt<T, kKT, kQT, D, kDCV>(ds, sm.v() + a_lane, sm.d_o(stage) + b_lane);
#pragma unroll
    for (int nt = 0; nt < kQT; ++nt) {
      const float d0 = st[BM + nt * 8 + 2 * t];
      const float d1 = st[BM + nt * 8 + 2 * t + 1];
#pragma unroll
      for (int kt = 0; kt < kKT; ++kt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          ds[kt][nt][2 * h] = s[kt][nt][2 * h] * (ds[kt][nt][2 * h] - d0);
          ds[kt][nt][2 * h + 1] = s[kt][nt][2 * h + 1] * (ds[kt][nt][2 * h + 1] - d1);
        }
    }

    // ---- dK += dSᵀ·Q ----
    bwd_detail::mma_xb<T, kKT, kQT, D, kSplitCols>(dk, ds, sm.q(stage) + v_lane_split, dd_end);
    }

    if constexpr (AtomicDQ) {
      // ---- dQ += dS·K through shared dSᵀ and fp32 atomics ----
#pragma unroll
      for (int kt = 0; kt < kKT; ++kt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int row = key_local0 + kt * 16 + g + 8 * h;
#pragma unroll
          for (int nt = 0; nt < kQT; ++nt)
            st_shared_4(sm.ds() + SwzS::offset(row, nt) + 4 * t,
                        pack2<T>(ds[kt][nt][2 * h], ds[kt][nt][2 * h + 1]));
        }
      __syncthreads();  // dSᵀ complete
      constexpr int kColChunks = (kSplitCols + 31) / 32;  // 32 head-dim columns per work item
      constexpr int kItems = (BM / 16) * kColChunks;  // (16 query rows, 32 columns) items
      const unsigned ds_lane = sm.ds() + SwzS::offset(lane % 8 + 8 * (lane / 16), (lane / 8) % 2);
      float* acc_base = p.dq_accum + bwd_detail::stat_row(p, seq.slot, head, seq.q0) * HeadDim;
#pragma unroll 1
      for (int item = warp; item < kItems; item += Warps) {
        const int mt = item / kColChunks;
        const int cc = item % kColChunks;
        float acc[1][4][4];
        bwd_detail::zero(acc);
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk) {
          unsigned a[4];
          ldmatrix_x4_trans(a, SwzS::advance(ds_lane, 2 * mt) + kk * 16 * BM * 2);
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            if ((Splits > 1 || kDC % 32 != 0) && col0 + cc * 32 + half * 16 >= split_end) continue;
            unsigned b[4];
            ldmatrix_x4_trans(b, SwzD::advance(sm.k + v_lane_split, 4 * cc + 2 * half) + kk * 16 * kRowBytes);
            mma_16x8x16<T>(acc[0][2 * half], a, b[0], b[1]);
            mma_16x8x16<T>(acc[0][2 * half + 1], a, b[2], b[3]);
          }
        }
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int row = m0 + mt * 16 + g + 8 * h;
          if (row >= n_q) continue;
          float* acc_row = acc_base + static_cast<long long>(row) * HeadDim + col0 + cc * 32 + 2 * t;
#pragma unroll
          for (int dt = 0; dt < 4; ++dt)
            if ((Splits == 1 && HeadDim % 32 == 0) || col0 + cc * 32 + dt * 8 < imin(HeadDim, split_end))
              red_add2(acc_row + dt * 8, acc[0][dt][2 * h], acc[0][dt][2 * h + 1]);
        }
      }
    }
  }

  // ---- epilogue: dK = s·Σ dSᵀ·Q, dV ----
  cp_async_wait<0>();
  const int key_row0 = n0 + key_local0;
  constexpr int kStoreCols = Splits == 1 ? HeadDim : kSplitCols;
  const int cols = Splits == 1 ? kStoreCols : imin(HeadDim - col0, kSplitCols);
  constexpr int kStoreColsV = Splits == 1 ? HeadDimV : kSplitCols;
  const int cols_v = HeadDimV == HeadDim ? cols : Splits == 1 ? kStoreColsV : imax(imin(HeadDimV - col0, kSplitCols), 0);
  bwd_detail::store_rows<T, kKT, kSplitCols, kStoreCols>(bwd_detail::rows_ptr<T, Variant::kPacked>(p.dk, batch, kv_head, seq.k0) + col0,
                                                         p.dk.stride_n, key_row0, n_k, dk, p.scale, cols);
  bwd_detail::store_rows<T, kKT, kSplitCols, kStoreColsV>(bwd_detail::rows_ptr<T, Variant::kPacked>(p.dv, batch, kv_head, seq.k0) + col0,
                                                          p.dv.stride_n, key_row0, n_k, dv, 1.f, cols_v);
}

// Query-major dQ (deterministic mode): dQ = s·Σ_tiles dS·K, no atomics.
//   BM: query rows per block, Warps warps own BM / Warps = 16 or 32 rows each; BN: keys per tile.
//   Variant: the score step's modification and mask (variant.cuh), with its inputs `va`.
//   HeadDimV: v's and dO's head dim when it is below q's (as the key-major kernel's).
template <class T, int D, int BM, int BN, int Warps, bool Causal, int HeadDim = D, class Variant = NoVariant,
          int HeadDimV = HeadDim>
__device__ __forceinline__ void attention_backward_fa2_dq(const AttentionBackwardParams& p,
                                                          const VariantArgs* va = nullptr) {
  static_assert(is_same<T, half_t>::value || is_same<T, bfloat16_t>::value,
                "the FA2 backward takes half_t or bfloat16_t");
  static_assert(D % 32 == 0 && D >= 32 && D <= 256, "D must be a multiple of 32 up to 256");
  static_assert(HeadDim % 8 == 0 && HeadDim > D - 32 && HeadDim <= D, "HeadDim must pad to D");
  constexpr int kDC = (HeadDim + 15) / 16 * 16;  // head-dim columns the mma cover
  static_assert(HeadDimV % 8 == 0 && HeadDimV > 0 && HeadDimV <= HeadDim, "HeadDimV must be a multiple of 8 up to HeadDim");
  constexpr int kDCV = (HeadDimV + 15) / 16 * 16;  // v's columns the mma cover
  static_assert(BN % 16 == 0 && BN >= 16, "BN must be a multiple of 16");
  constexpr int kThreads = Warps * 32;
  constexpr int kRowsPerWarp = BM / Warps;
  constexpr int kMT = kRowsPerWarp / 16;
  static_assert(kMT * 16 * Warps == BM && (kMT == 1 || kMT == 2), "16 or 32 rows per warp");
  constexpr int kNT = BN / 8;
  constexpr int kDT = kDC / 8;
  using SwzD = Swizzle16B<D / 8>;
  constexpr int kRowBytes = D * 2;
  constexpr int kQBytes = BM * kRowBytes;
  constexpr int kKVBytes = BN * kRowBytes;
  static_assert(2 * kQBytes + 4 * kKVBytes == bwd_detail::kQSmemBytes<D, BM, BN>,
                "shared memory layout must match fa2_q_smem_bytes");

  const int tid = threadIdx.x;
  const int warp = tid / 32;
  const int lane = tid % 32;
  const int g = lane / 4;
  const int t = lane % 4;
  const int m0 = blockIdx.x * BM;
  const int head = blockIdx.y;
  const int batch = blockIdx.z;
  const int kv_head = head / p.head_group;
  const SequenceRows seq = sequence_rows<Variant>(va, batch, p.n_q, p.n_k);
  const int n_q = seq.n_q;
  const int n_k = seq.n_k;
  if constexpr (Variant::kPacked)
    if (m0 >= n_q) return;  // past this sequence's rows
  const int diag = n_k - n_q;
  const float scale_log2 = p.scale_log2;

  int n_end = n_k;
  if constexpr (Causal) n_end = imin(n_k, imin(m0 + BM, n_q) + diag);
  int num_tiles = n_end > 0 ? (n_end + BN - 1) / BN : 0;
  int tile0 = 0;  // the first key tile (a variant's mask may skip leading tiles)
  VariantAt at{};
  VariantFullSpan full;  // the key tiles the block's rows see in full (variants with a mask)
  if constexpr (kVariantScores<Variant>) {
    at = {batch, head, n_q, n_k, p.scale, 1.f / p.scale};
    variant_key_tiles<Variant, BN, true>(*va, at, m0, imin(m0 + BM, n_q) - 1, tile0, num_tiles);
    full = variant_full_key_tiles<Variant, BN>(*va, at, m0, imin(m0 + BM, n_q) - 1, tile0, num_tiles, true);
    num_tiles = imax(num_tiles - tile0, 0);
  }

  const unsigned smem_q = smem_u32(dynamic_smem());
  const unsigned smem_do = smem_q + kQBytes;
  auto smem_k = [&](int stage) { return smem_q + 2 * kQBytes + stage * 2 * kKVBytes; };
  auto smem_v = [&](int stage) { return smem_k(stage) + kKVBytes; };
  const T* k_ptr = bwd_detail::rows_ptr<const T, Variant::kPacked>(p.k, batch, kv_head, seq.k0);
  const T* v_ptr = bwd_detail::rows_ptr<const T, Variant::kPacked>(p.v, batch, kv_head, seq.k0);
  auto load_kv = [&](int tile, int stage) {
    fa2_detail::load_tile_async<T, BN, D, kThreads, SwzD, HeadDim>(smem_k(stage), k_ptr, p.k.stride_n, tile * BN,
                                                                   n_k, tid);
    fa2_detail::load_tile_async<T, BN, D, kThreads, SwzD, HeadDimV>(smem_v(stage), v_ptr, p.v.stride_n, tile * BN,
                                                                    n_k, tid);
  };

  fa2_detail::load_tile_async<T, BM, D, kThreads, SwzD, HeadDim>(
      smem_q, bwd_detail::rows_ptr<const T, Variant::kPacked>(p.q, batch, head, seq.q0), p.q.stride_n, m0, n_q, tid);
  fa2_detail::load_tile_async<T, BM, D, kThreads, SwzD, HeadDimV>(
      smem_do, bwd_detail::rows_ptr<const T, Variant::kPacked>(p.d_o, batch, head, seq.q0), p.d_o.stride_n, m0, n_q, tid);
  if (num_tiles > 0) load_kv(tile0, 0);
  cp_async_commit();

  const int row_local0 = warp * kRowsPerWarp;
  float lse2[kMT][2], delta[kMT][2];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = m0 + row_local0 + mt * 16 + g + 8 * h;
      lse2[mt][h] = infinity_f32();
      delta[mt][h] = 0.f;
      if (row < n_q) {
        const long long idx = bwd_detail::stat_row(p, seq.slot, head, seq.q0 + row);
        lse2[mt][h] = p.lse2[idx];
        delta[mt][h] = p.delta[idx];
      }
    }

  const unsigned a_lane = SwzD::offset(row_local0 + lane % 16, lane / 16);
  const unsigned b_lane = SwzD::offset(lane % 8 + 8 * (lane / 16), (lane / 8) % 2);
  const unsigned v_lane = SwzD::offset(lane % 8 + 8 * ((lane / 8) % 2), lane / 16);

  float dq[kMT][kDT][4];
  bwd_detail::zero(dq);

  for (int tile = 0; tile < num_tiles; ++tile) {
    const int n0 = (tile0 + tile) * BN;
    const int stage = tile & 1;
    cp_async_wait<0>();
    __syncthreads();
    if (tile + 1 < num_tiles) load_kv(tile0 + tile + 1, stage ^ 1);
    cp_async_commit();

    float s[kMT][kNT][4];
    bwd_detail::zero(s);
    bwd_detail::mma_abt<T, kMT, kNT, D, kDC>(s, smem_q + a_lane, smem_k(stage) + b_lane);
    float ds[kMT][kNT][4];
    bwd_detail::zero(ds);
    bwd_detail::mma_abt<T, kMT, kNT, D, kDCV>(ds, smem_do + a_lane, smem_v(stage) + b_lane);
    const bool needs_mask = n0 + BN > n_k || (Causal && n0 + BN - 1 > m0 + diag);
    if constexpr (kVariantScores<Variant>) {
      const bool masked = needs_mask || variant_partial<Variant>(full, tile0 + tile);
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              float pe;
              ds[mt][nt][2 * h + e] = variant_backward<Variant, Causal>(
                  *va, at, s[mt][nt][2 * h + e], lse2[mt][h], delta[mt][h], ds[mt][nt][2 * h + e],
                  m0 + row_local0 + mt * 16 + g + 8 * h, n0 + nt * 8 + 2 * t + e, masked, scale_log2, pe, false);
            }
    } else
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = m0 + row_local0 + mt * 16 + g + 8 * h;
        int limit = n_k;
        if constexpr (Causal) limit = imin(n_k, row + diag + 1);
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            float pe = exp2_approx(fmaf(s[mt][nt][2 * h + e], scale_log2, -lse2[mt][h]));
            if (needs_mask && n0 + nt * 8 + 2 * t + e >= limit) pe = 0.f;
            ds[mt][nt][2 * h + e] = pe * (ds[mt][nt][2 * h + e] - delta[mt][h]);
          }
      }
    bwd_detail::mma_xb<T, kMT, kNT, D, kDC>(dq, ds, smem_k(stage) + v_lane);
  }
  cp_async_wait<0>();
  bwd_detail::store_rows<T, kMT, kDC, HeadDim>(bwd_detail::rows_ptr<T, Variant::kPacked>(p.dq, batch, head, seq.q0), p.dq.stride_n,
                                    m0 + row_local0, n_q, dq, p.scale);
}

}  // namespace kgen
