// FA2-class attention forward for sm_80+ (mma.sync m16n8k16, ldmatrix, cp.async).
//
// Work split. Grid (ceil(n_q / BM), heads_q, batch); fa2_threads(Warps) threads = Warps warps;
// warp w owns the kMTiles·16 query rows [w·kRowsPerWarp, (w+1)·kRowsPerWarp) of the tile
// (kMTiles = BM / (16·Warps), 1 or 2). The block loops over K/V tiles of BN keys.
//
// Shared memory (dynamic, 128-B aligned): [Q: BM x D][K_0: BN x D][V_0: BN x D] (Stages = 1)
// or [Q][K_0][V_0][K_1][V_1] (Stages = 2); rows of D 16-bit elements, 16-byte chunks XOR
// swizzled (Swizzle16B<D/8>). The Q region is reused to stage O for coalesced stores.
//
// Fragment layouts (g = lane / 4, t = lane % 4, mt = 16-row m-tile of the warp):
//   S tile (16 x BN, fp32):  s[mt][nt][e]   nt = 8-key n-tile, e = 0..3:
//       e=0,1 -> row g,   key nt·8 + 2t + e        e=2,3 -> row g+8, key nt·8 + 2t + (e-2)
//   O tile (16 x D, fp32):   o[mt][dt][e]   same with dt = 8-column tile of the head dim.
//   So thread (g, t) holds rows g and g+8 of its m-tile; row statistics m, l are per (mt, h)
//   with h = 0 for row g and h = 1 for row g+8, reduced over the quad (4 lanes sharing g).
//   Q A-fragment (per 16-wide k-step kk): ldmatrix.x4 of rows lane%16, chunk 2kk + lane/16.
//   K B-fragments: ldmatrix.x4 (non-trans) of keys nn·16 + lane%8 + 8·(lane/16), chunk
//     2kk + (lane/8)%2 -> {b0,b1} of n-tile 2nn, {b0,b1} of n-tile 2nn+1.
//   P A-fragment for keys [16kk, 16kk+16): the S C-fragments of n-tiles 2kk and 2kk+1 packed
//     to 16 bit: a = {s[2kk][0,1], s[2kk][2,3], s[2kk+1][0,1], s[2kk+1][2,3]} (no smem trip).
//   V B-fragments: ldmatrix.x4.trans of keys 16kk + lane%8 + 8·((lane/8)%2), chunk
//     2dd + lane/16 -> {b0,b1} of d-tile 2dd, {b0,b1} of d-tile 2dd+1.
//
// Softmax: m is the running max of the raw scores; exponents are exp2(s·scale_log2 − m·scale_log2)
// (the log2 domain, scale folded into one FMA). l is accumulated per thread and reduced over the
// quad once at the end. A row whose scores so far are all −inf uses 0 as the subtraction
// reference, so exp2(−inf − 0) = 0 and no NaN appears; such a row ends with l = 0 and writes
// O = 0, LSE = −inf. LSE is returned in the natural log: (m·scale_log2 + log2 l)·ln 2.
//
// Masking: key j is −inf if j ≥ n_k, or (Causal) j > i + (n_k − n_q) (bottom-right aligned).
// Causal blocks stop at the last K/V tile that any of their rows can see. Rows ≥ n_q and keys
// ≥ n_k are zero-filled by cp.async (src-size 0) so no garbage enters the mma; rows ≥ n_q are
// never stored.
//
// Requirements (checked by the host): q, k, v, o base pointers and their row strides
// (stride_n, stride_h, stride_b) 16-byte aligned, i.e. strides multiples of 8 elements; the
// last dimension contiguous; p.head_dim == HeadDim; scale > 0. Index math is 64-bit.
//
// Registers. The O and S accumulators take kMTiles·(D + BN)/2 registers per thread (192 of the
// 255 at D = 128 with 32 rows x 64 keys per warp), so nothing else is kept live across the K/V
// loop that can be recomputed per tile: thread and block indices are re-read at the top of each
// tile (reread in core/block.cuh), and the lane addresses, cp.async sources and 64-bit K/V
// pointers are rebuilt from them (a few dozen integer instructions per tile against the tile's
// kMTiles·D·BN/64 mma per warp).
#pragma once

#include "kgen_device/attention/forward_config.h"
#include "kgen_device/attention/params.h"
#include "kgen_device/attention/variant.cuh"
#include "kgen_device/core/block.cuh"
#include "kgen_device/core/cp_async.cuh"
#include "kgen_device/core/ldmatrix.cuh"
#include "kgen_device/core/math.cuh"
#include "kgen_device/core/memory.cuh"
#include "kgen_device/core/mma_sm80.cuh"
#include "kgen_device/core/swizzle.cuh"
#include "kgen_device/core/types.cuh"
#include "kgen_device/core/warp.cuh"

namespace kgen {
namespace fa2_detail {

// forward_config.h is plain host C++; nvcc refuses calls to its constexpr functions from device
// code (without --expt-relaxed-constexpr) but accepts namespace-scope constants computed by them.
template <int Warps>
constexpr int kBlockThreads = attention_fwd::fa2_threads(Warps);
template <int D, int BM, int BN, int Stages>
constexpr int kSmemBytes = attention_fwd::fa2_smem_bytes(D, BM, BN, Stages);

// Issues cp.async for a Rows x D tile whose row r comes from global row (row0 + r) of `src`;
// rows >= row_end are zero-filled (their source address is clamped to `src`). All Threads
// threads of the block take part. Pointers advance incrementally so that few 64-bit address
// registers stay live across the main loop. Layout::offset(row, chunk) places 16-byte chunks in
// shared memory (the ldmatrix swizzle by default; wgmma kernels pass their 128-byte swizzle).
// Cols ≤ D is the tensor's head dim (a multiple of 8) when the tile is padded to the kernel's
// width D: only the columns up to Cols rounded up to 16 (the mma's k) are written, [Cols, that)
// zero-filled like rows ≥ row_end, so they add nothing to any product; the rest is never read.
// InBoundsFastPath adds a second copy of the loop for a tile whose rows all lie below row_end
// (and Cols == D): no row test and no clamped address per 16-byte copy. It costs registers and
// code size, so only kernels that measured a gain ask for it.
template <class T, int Rows, int D, int Threads, class Layout = Swizzle16B<D / 8>, int Cols = D,
          bool InBoundsFastPath = false>
__device__ __forceinline__ void load_tile_async(unsigned smem, const T* src, long long row_stride,
                                                int row0, int row_end, int tid) {
  static_assert(Cols % 8 == 0 && Cols > 0 && Cols <= D, "Cols must be a multiple of 8 in (0, D]");
  using Swz = Layout;
  constexpr int kChunks = (Cols + 15) / 16 * 2 < D / 8 ? (Cols + 15) / 16 * 2 : D / 8;
  // Threads are grouped by whole rows: kActive threads copy kRowsPerPass rows per pass (for
  // D = 96, 12 chunks per row, a few threads of the block stay idle).
  constexpr int kRowsPerPass = Threads / kChunks;
  constexpr int kActive = kRowsPerPass * kChunks;
  constexpr int kPasses = (Rows + kRowsPerPass - 1) / kRowsPerPass;
  static_assert(kRowsPerPass > 0, "a row needs more chunks than the block has threads");
  if (kActive == Threads || tid < kActive) {
    const int r0 = tid / kChunks;
    const int c = tid % kChunks;
    const T* g = src + static_cast<long long>(row0 + r0) * row_stride + c * 8;
    const long long step = kRowsPerPass * row_stride;
    if constexpr (InBoundsFastPath && Cols == D) {
      if (row0 + Rows <= row_end) {
#pragma unroll
        for (int pass = 0; pass < kPasses; ++pass) {
          const int r = r0 + pass * kRowsPerPass;
          if (Rows % kRowsPerPass == 0 || r < Rows) cp_async_16(smem + Swz::offset(r, c), g, true);
          g += step;
        }
        return;
      }
    }
#pragma unroll
    for (int pass = 0; pass < kPasses; ++pass) {
      const int r = r0 + pass * kRowsPerPass;
      if (Rows % kRowsPerPass == 0 || r < Rows) {
        const bool valid = row0 + r < row_end && (Cols == D || c < Cols / 8);
        cp_async_16(smem + Swz::offset(r, c), valid ? g : src, valid);
      }
      g += step;
    }
  }
}

// load_tile_async for rows that are not evenly strided (paged K/V): row r of the tile comes from
// `row_ptr(row0 + r)`, a pointer to that global row; rows >= row_end are zero-filled.
template <class T, int Rows, int D, int Threads, class Layout = Swizzle16B<D / 8>, int Cols = D, class RowPtr>
__device__ __forceinline__ void load_rows_async(unsigned smem, RowPtr&& row_ptr, int row0, int row_end, int tid) {
  static_assert(Cols % 8 == 0 && Cols > 0 && Cols <= D, "Cols must be a multiple of 8 in (0, D]");
  constexpr int kChunks = (Cols + 15) / 16 * 2 < D / 8 ? (Cols + 15) / 16 * 2 : D / 8;
  constexpr int kRowsPerPass = Threads / kChunks;
  constexpr int kPasses = (Rows + kRowsPerPass - 1) / kRowsPerPass;
  static_assert(kRowsPerPass > 0, "a row needs more chunks than the block has threads");
  if (tid >= kRowsPerPass * kChunks) return;
  const int r0 = tid / kChunks, c = tid % kChunks;
#pragma unroll
  for (int pass = 0; pass < kPasses; ++pass) {
    const int r = r0 + pass * kRowsPerPass;
    if (Rows % kRowsPerPass == 0 || r < Rows) {
      const bool valid = row0 + r < row_end && (Cols == D || c < Cols / 8);
      const T* g = row_ptr(valid ? row0 + r : row0) + c * 8;
      cp_async_16(smem + Layout::offset(r, c), g, valid);
    }
  }
}

// Thread and block coordinates of the forward kernel, from fresh special-register reads.
template <int BM>
struct Fa2Coords {
  int tid, warp, lane, g, t;  // g = lane / 4, t = lane % 4 (see the fragment layouts)
  int m0, head, batch;        // first query row of the block, query head, batch
  __device__ __forceinline__ static Fa2Coords read() {
    Fa2Coords c;
    c.tid = reread<GridIndex::thread_x>();
    c.warp = c.tid / 32;
    c.lane = c.tid % 32;
    c.g = c.lane / 4;
    c.t = c.lane % 4;
    c.m0 = reread<GridIndex::block_x>() * BM;
    c.head = reread<GridIndex::block_y>();
    c.batch = reread<GridIndex::block_z>();
    return c;
  }
};

}  // namespace fa2_detail

// Flash-attention-2 forward on tensor cores.
//   T: half_t or bfloat16_t.  D: the tile's head dim, a multiple of 32 up to 256.
//   HeadDim: the tensors' head dim p.head_dim, a multiple of 8 in (D − 32, D] (D when left out).
//   D sets the shared-memory rows (the swizzle wants multiples of 64 bytes); the mma work covers
//   HeadDim rounded up to 16 (the k of m16n8k16). The columns [HeadDim, D) are zero-filled in Q,
//   K and V and never stored, so they change neither S nor the first HeadDim columns of O.
//   BM: query rows per block (64, 128); BN: keys per K/V tile (32, 64, 128).
//   Warps: warps per block; each owns BM / Warps (16 or 32) query rows.
//   Stages: 1 = one K and one V buffer (V load overlaps Q·Kᵀ, next K load overlaps softmax and
//   P·V); 2 = double-buffered K/V (tile j+1 loads while tile j is computed).
//   Causal: bottom-right aligned causal mask.
//   Variant: the score step's modification, mask and sinks (variant.cuh), with its inputs `va`.
//   HeadDimV: v's and o's head dim when it is below q's and k's (MLA, docs/kernels/mla.md), a
//   multiple of 8: V tiles are loaded with HeadDimV columns (zero-filled to 16), P·V and the O
//   accumulator cover HeadDimV rounded up to 16, and O is stored with HeadDimV columns.
template <class T, int D, int BM, int BN, int Warps, int Stages, bool Causal, int HeadDim = D,
          class Variant = NoVariant, int HeadDimV = HeadDim>
__device__ __forceinline__ void attention_forward_fa2(const AttentionForwardParams& p, const VariantArgs* va = nullptr) {
  static_assert(is_same<T, half_t>::value || is_same<T, bfloat16_t>::value,
                "the FA2 kernel takes half_t or bfloat16_t");
  static_assert(D % 32 == 0 && D >= 32 && D <= 256, "D must be a multiple of 32 up to 256");
  static_assert(HeadDim % 8 == 0 && HeadDim > D - 32 && HeadDim <= D, "HeadDim must pad to D");
  static_assert(HeadDimV % 8 == 0 && HeadDimV > 0 && HeadDimV <= HeadDim, "HeadDimV must be a multiple of 8 up to HeadDim");
  static_assert(BN % 16 == 0 && BN >= 16, "BN must be a multiple of 16");
  static_assert(Stages == 1 || Stages == 2, "Stages must be 1 or 2");

  constexpr int kThreads = fa2_detail::kBlockThreads<Warps>;
  constexpr int kWarps = kThreads / 32;
  constexpr int kRowsPerWarp = BM / kWarps;
  constexpr int kMTiles = kRowsPerWarp / 16;
  static_assert(kWarps * 32 == kThreads && kMTiles * 16 * kWarps == BM,
                "fa2_threads must give each warp a multiple of 16 query rows");
  constexpr int kNTiles = BN / 8;   // 8-key n-tiles of S
  constexpr int kDC = (HeadDim + 15) / 16 * 16;  // head-dim columns the mma cover
  constexpr int kDTiles = (HeadDimV + 15) / 16 * 2;  // 8-column n-tiles of O (v's head dim)
  constexpr int kKSteps = kDC / 16; // k-steps of Q·Kᵀ
  constexpr int kPSteps = BN / 16;  // k-steps of P·V
  // Q fragments stay in registers when they fit next to the O accumulator (D ≤ 128 per m-tile);
  // otherwise they are re-read from shared memory at each k-step.
  constexpr bool kQInRegs = kMTiles * kDC <= 128;
  // With 32 rows per warp, Q re-read and S and O accumulators of 192 registers or more (D = 128
  // with 64-key tiles), the Q·Kᵀ k-loop is not unrolled: unrolled, ptxas issues the ldmatrix of
  // later k-steps ahead of their mma and runs out of registers (spills); rolled, one k-step of
  // fragments (8 registers of Q, 2·kNTiles of K) is in flight. (16 rows per warp with D = 256
  // and 128-key tiles, also 192, spills more rolled than unrolled.)
  constexpr bool kRollQK = kMTiles == 2 && !kQInRegs && kMTiles * (kNTiles + kDTiles) * 4 >= 192;

  using Swz = Swizzle16B<D / 8>;
  constexpr int kRowBytes = D * 2;
  constexpr int kQBytes = BM * kRowBytes;
  constexpr int kKVBytes = BN * kRowBytes;
  static_assert(kQBytes + Stages * 2 * kKVBytes == fa2_detail::kSmemBytes<D, BM, BN, Stages>,
                "shared memory layout must match fa2_smem_bytes");

  using Coords = fa2_detail::Fa2Coords<BM>;
  // Packed batches: the sequence's rows (stride_b is 0, so c.batch * stride_b adds nothing).
  const SequenceRows seq = sequence_rows<Variant>(va, blockIdx.z, p.n_q, p.n_k);
  const int n_q = seq.n_q;
  const int n_k = seq.n_k;
  if constexpr (Variant::kPacked)
    if (static_cast<int>(blockIdx.x) * BM >= n_q) return;  // past this sequence's rows
  const int diag = n_k - n_q;  // causal: row i sees keys j <= i + diag
  const float scale_log2 = variant_softmax_log2<Variant>(p.scale_log2);  // the scores' units

  // This block's K and V (query head c.head reads kv head c.head / head_group).
  auto k_ptr = [&](const Coords& c) {
    return static_cast<const T*>(p.k) + c.batch * p.k_stride_b +
           (c.head / p.head_group) * p.k_stride_h + (Variant::kPacked ? static_cast<long long>(seq.k0) * p.k_stride_n : 0);
  };
  auto v_ptr = [&](const Coords& c) {
    return static_cast<const T*>(p.v) + c.batch * p.v_stride_b +
           (c.head / p.head_group) * p.v_stride_h + (Variant::kPacked ? static_cast<long long>(seq.k0) * p.v_stride_n : 0);
  };

  int num_tiles;
  int tile0 = 0;  // the first key tile the block visits (a variant's mask may skip leading tiles)
  VariantAt at{};
  VariantFullSpan full;  // the key tiles the block's rows see in full (variants with a mask)
  {
    const Coords c = Coords::read();
    // Keys [0, n_end) are visible to at least one row of this block.
    int n_end = n_k;
    if constexpr (Causal) n_end = imin(n_k, imin(c.m0 + BM, n_q) + diag);
    num_tiles = n_end > 0 ? (n_end + BN - 1) / BN : 0;
    if constexpr (kVariantScores<Variant> || Variant::kSinks) at = {c.batch, c.head, n_q, n_k, p.scale, 1.f / p.scale};
    if constexpr (Variant::kMask) {
      variant_key_tiles<Variant, BN, true>(*va, at, c.m0, imin(c.m0 + BM, n_q) - 1, tile0, num_tiles);
      full = variant_full_key_tiles<Variant, BN>(*va, at, c.m0, imin(c.m0 + BM, n_q) - 1, tile0, num_tiles, true);
      num_tiles = imax(num_tiles - tile0, 0);
    }
  }

  const unsigned smem_q = smem_u32(dynamic_smem());
  auto smem_k = [&](int stage) { return smem_q + kQBytes + stage * 2 * kKVBytes; };
  auto smem_v = [&](int stage) { return smem_q + kQBytes + stage * 2 * kKVBytes + kKVBytes; };

  // Paged K/V: key j's row of page paged_row(j) of k (keys) or v (the batch stride steps pages,
  // the n stride rows).
  auto load_paged = [&](unsigned dst, bool keys, const Coords& c, int tile) {
    const T* head = static_cast<const T*>(keys ? p.k : p.v) + (c.head / p.head_group) * (keys ? p.k_stride_h : p.v_stride_h);
    const long long page_stride = keys ? p.k_stride_b : p.v_stride_b, row_stride = keys ? p.k_stride_n : p.v_stride_n;
    fa2_detail::load_rows_async<T, BN, D, kThreads, Swz, HeadDim>(
        dst,
        [&](int key) {
          const PagedRow at = paged_row(va, c.batch, key, n_k - 1);
          return head + at.page * page_stride + at.row * row_stride;
        },
        tile * BN, n_k, c.tid);
  };
  auto load_k = [&](const Coords& c, int tile, int stage) {
    if constexpr (Variant::kPaged)
      load_paged(smem_k(stage), true, c, tile);
    else
      fa2_detail::load_tile_async<T, BN, D, kThreads, Swz, HeadDim>(smem_k(stage), k_ptr(c), p.k_stride_n,
                                                      tile * BN, n_k, c.tid);
  };
  auto load_v = [&](const Coords& c, int tile, int stage) {
    if constexpr (Variant::kPaged)
      load_paged(smem_v(stage), false, c, tile);
    else
      fa2_detail::load_tile_async<T, BN, D, kThreads, Swz, HeadDimV>(smem_v(stage), v_ptr(c), p.v_stride_n,
                                                      tile * BN, n_k, c.tid);
  };

  // Per-lane ldmatrix addresses of the first fragment (see the layout comment at the top);
  // later fragments are reached with Swz::advance (chunks) and immediate row offsets.
  auto q_lane = [&](const Coords& c) {
    return smem_q + Swz::offset(c.warp * kRowsPerWarp + c.lane % 16, c.lane / 16);
  };
  auto k_lane = [](const Coords& c) {
    return Swz::offset(c.lane % 8 + 8 * (c.lane / 16), (c.lane / 8) % 2);
  };
  auto v_lane = [](const Coords& c) {
    return Swz::offset(c.lane % 8 + 8 * ((c.lane / 8) % 2), c.lane / 16);
  };

  // ---- prologue: Q in its own group, then the first K/V tile ----
  unsigned qf[kQInRegs ? kMTiles : 1][kQInRegs ? kKSteps : 1][4];
  {
    const Coords c = Coords::read();
    const T* q_ptr = static_cast<const T*>(p.q) + c.batch * p.q_stride_b + c.head * p.q_stride_h +
                     (Variant::kPacked ? static_cast<long long>(seq.q0) * p.q_stride_n : 0);
    fa2_detail::load_tile_async<T, BM, D, kThreads, Swz, HeadDim>(smem_q, q_ptr, p.q_stride_n, c.m0, n_q, c.tid);
    cp_async_commit();
    if constexpr (Stages == 2) {
      if (num_tiles > 0) {
        load_k(c, tile0, 0);
        load_v(c, tile0, 0);
      }
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      if (num_tiles > 0) load_k(c, tile0, 0);
      cp_async_commit();
      if (num_tiles > 0) load_v(c, tile0, 0);
      cp_async_commit();
      cp_async_wait<2>();
    }
    __syncthreads();  // Q visible to all warps

    if constexpr (kQInRegs) {
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
        for (int kk = 0; kk < kKSteps; ++kk)
          ldmatrix_x4(qf[mt][kk], Swz::advance(q_lane(c), 2 * kk) + mt * 16 * kRowBytes);
    }
  }

  float o[kMTiles][kDTiles][4];
  float row_max[kMTiles][2];  // running max of raw scores (−inf until a key is seen)
  float row_sum[kMTiles][2];  // this thread's partial of l, in units of exp2(−row_max·scale_log2)
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int dt = 0; dt < kDTiles; ++dt)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[mt][dt][e] = 0.f;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      row_max[mt][h] = -infinity_f32();
      row_sum[mt][h] = 0.f;
    }
  }

  for (int tile = 0; tile < num_tiles; ++tile) {
    const int n0 = (tile0 + tile) * BN;
    const int stage = Stages == 2 ? (tile & 1) : 0;
    const Coords c = Coords::read();

    if constexpr (Stages == 2) {
      cp_async_wait<0>();
      __syncthreads();  // tile `tile` landed; every warp finished tile−1, so its buffer is free
      if (tile + 1 < num_tiles) {
        load_k(c, tile0 + tile + 1, stage ^ 1);
        load_v(c, tile0 + tile + 1, stage ^ 1);
      }
      cp_async_commit();
    } else {
      cp_async_wait<1>();
      __syncthreads();  // K of this tile landed (V may still be in flight)
    }

    // ---- S = Q·Kᵀ ----
    float s[kMTiles][kNTiles][4];
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[mt][nt][e] = 0.f;

    const unsigned q_base = q_lane(c);
    const unsigned k_base = smem_k(stage) + k_lane(c);
#pragma unroll(kRollQK ? 1 : kKSteps)
    for (int kk = 0; kk < kKSteps; ++kk) {
      unsigned a[kMTiles][4];
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
        if constexpr (kQInRegs) {
#pragma unroll
          for (int r = 0; r < 4; ++r) a[mt][r] = qf[mt][kk][r];
        } else {
          ldmatrix_x4(a[mt], Swz::advance(q_base, 2 * kk) + mt * 16 * kRowBytes);
        }
      }
#pragma unroll
      for (int nn = 0; nn < kNTiles / 2; ++nn) {
        unsigned b[4];
        ldmatrix_x4(b, Swz::advance(k_base, 2 * kk) + nn * 16 * kRowBytes);
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
          mma_16x8x16<T>(s[mt][2 * nn], a[mt], b[0], b[1]);
          mma_16x8x16<T>(s[mt][2 * nn + 1], a[mt], b[2], b[3]);
        }
      }
    }

    if constexpr (Stages == 1) {
      cp_async_wait<0>();
      __syncthreads();  // V landed; every warp finished reading K
      if (tile + 1 < num_tiles) load_k(c, tile0 + tile + 1, 0);
      cp_async_commit();
    }

    // ---- mask: keys ≥ n_k, and above the causal diagonal ----
    const bool needs_mask = n0 + BN > n_k || (Causal && n0 + BN - 1 > c.m0 + diag);
    if constexpr (kVariantScores<Variant>) {
      const bool masked =
          needs_mask || variant_partial<Variant>(full, tile0 + tile);
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt)
        variant_fragment<Variant, Causal, kNTiles>(
            *va, at, [&](int j, int i) -> float& { return s[mt][j][i]; },
            c.m0 + c.warp * kRowsPerWarp + mt * 16 + c.g, n0, c.t, masked);
    } else if (needs_mask) {
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int row = c.m0 + c.warp * kRowsPerWarp + mt * 16 + c.g + 8 * h;
          int limit = n_k;  // first masked key of this row
          if constexpr (Causal) limit = imin(n_k, row + diag + 1);
          const int local_limit = limit - n0 - 2 * c.t;
#pragma unroll
          for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
            for (int e = 0; e < 2; ++e)
              if (nt * 8 + e >= local_limit) s[mt][nt][2 * h + e] = -infinity_f32();
        }
      }
    }

    // ---- online softmax ----
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float mx = row_max[mt][h];
#pragma unroll
        for (int nt = 0; nt < kNTiles; ++nt)
          mx = fmaxf(mx, fmaxf(s[mt][nt][2 * h], s[mt][nt][2 * h + 1]));
        mx = quad_max(mx);
        // Reference for the exponent; 0 while the row has seen only −inf (avoids −inf − −inf).
        const float ref = mx == -infinity_f32() ? 0.f : mx * scale_log2;
        // exp2(−inf) = 0 when the previous max was −inf (O and l are still 0 then).
        const float alpha = exp2_approx(row_max[mt][h] * scale_log2 - ref);
        row_max[mt][h] = mx;
        float sum = 0.f;
#pragma unroll
        for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const float pe = exp2_approx(fmaf(s[mt][nt][2 * h + e], scale_log2, -ref));
            s[mt][nt][2 * h + e] = pe;
            sum += pe;
          }
        }
        row_sum[mt][h] = row_sum[mt][h] * alpha + sum;
#pragma unroll
        for (int dt = 0; dt < kDTiles; ++dt) {
          o[mt][dt][2 * h] *= alpha;
          o[mt][dt][2 * h + 1] *= alpha;
        }
      }
    }

    // ---- O += P·V ----
    const unsigned v_base = smem_v(stage) + v_lane(c);
#pragma unroll
    for (int kk = 0; kk < kPSteps; ++kk) {
      unsigned a[kMTiles][4];
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
        a[mt][0] = pack2<T>(s[mt][2 * kk][0], s[mt][2 * kk][1]);
        a[mt][1] = pack2<T>(s[mt][2 * kk][2], s[mt][2 * kk][3]);
        a[mt][2] = pack2<T>(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
        a[mt][3] = pack2<T>(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
      }
#pragma unroll
      for (int dd = 0; dd < kDTiles / 2; ++dd) {
        unsigned b[4];
        ldmatrix_x4_trans(b, Swz::advance(v_base, 2 * dd) + kk * 16 * kRowBytes);
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
          mma_16x8x16<T>(o[mt][2 * dd], a[mt], b[0], b[1]);
          mma_16x8x16<T>(o[mt][2 * dd + 1], a[mt], b[2], b[3]);
        }
      }
    }

    if constexpr (Stages == 1) {
      __syncthreads();  // every warp finished reading V
      if (tile + 1 < num_tiles) load_v(c, tile0 + tile + 1, 0);
      cp_async_commit();
    }
  }

  // ---- epilogue: O /= l, stage O through this warp's own Q rows, 16-byte stores; LSE ----
  cp_async_wait<0>();  // no copy may still target the Q region (e.g. when num_tiles == 0)
  __syncwarp();
  const Coords c = Coords::read();
  const int warp = c.warp, lane = c.lane, g = c.g, t = c.t, m0 = c.m0, head = c.head,
            batch = c.batch;
  T* o_ptr = static_cast<T*>(p.o) + batch * p.o_stride_b + head * p.o_stride_h +
             (Variant::kPacked ? static_cast<long long>(seq.q0) * p.o_stride_n : 0);
  float* lse_ptr =
      p.lse == nullptr ? nullptr : p.lse + batch * p.lse_stride_b + head * p.lse_stride_h + seq.q0;
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float l = quad_sum(row_sum[mt][h]);
      float inv_l = l > 0.f ? 1.f / l : 0.f;
      float sink_lse = 0.f;
      if constexpr (Variant::kSinks)
        variant_finish_row<Variant>(va, head, row_max[mt][h], l, scale_log2, inv_l, sink_lse);
      const int local_row = warp * kRowsPerWarp + mt * 16 + g + 8 * h;
#pragma unroll
      for (int dt = 0; dt < kDTiles; ++dt) {
        const unsigned packed =
            pack2<T>(o[mt][dt][2 * h] * inv_l, o[mt][dt][2 * h + 1] * inv_l);
        st_shared_4(smem_q + Swz::offset(local_row, dt) + 4 * t, packed);
      }
      const int row = m0 + local_row;
      if (lse_ptr != nullptr && t == 0 && row < n_q) {
        lse_ptr[row] = Variant::kSinks ? sink_lse
                       : l > 0.f ? (row_max[mt][h] * scale_log2 + log2_approx(l)) * kLn2
                                 : -infinity_f32();
      }
    }
  }
  __syncwarp();
  constexpr int kChunks = D / 8;
  constexpr int kWarpChunks = kRowsPerWarp * kChunks;
  static_assert(kWarpChunks % 32 == 0, "a warp's O rows must split evenly over its lanes");
#pragma unroll
  for (int it = 0; it < kWarpChunks / 32; ++it) {
    const int idx = it * 32 + lane;
    const int r = idx / kChunks;
    const int c = idx % kChunks;
    const int local_row = warp * kRowsPerWarp + r;
    const int row = m0 + local_row;
    if (row < n_q && (HeadDimV == D || c < HeadDimV / 8)) {
      const u32x4 v = ld_shared_16(smem_q + Swz::offset(local_row, c));
      st_global_16(o_ptr + static_cast<long long>(row) * p.o_stride_n + c * 8, v);
    }
  }
}

}  // namespace kgen
