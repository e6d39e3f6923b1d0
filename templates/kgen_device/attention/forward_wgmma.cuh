// Hopper attention forward (sm_90a): warpgroup MMA (wgmma) from shared-memory Q and K, P from
// registers against shared-memory V.
//
// Work split. Grid (ceil(n_q / BM), heads_q, batch) with BM = 64 · WGs; WGs warpgroups of 128
// threads, warpgroup wg owns query rows [64·wg, 64·wg + 64) of the tile and warp w of it the 16
// rows [64·wg + 16w, +16). Causal grids walk the query tiles from the last (most keys) to the
// first, so the longest blocks start first and the short ones fill the tail.
//
// Shared memory (dynamic; the base is rounded up to 1024 bytes for the 128-byte swizzle):
//   [Q: BM x D][K_0: BN x D][V_0: BN x D] ... [K_{Stages-1}][V_{Stages-1}], each a wgmma::Sw128
//   tile (64-column blocks of 128-byte rows, 16-byte chunks XOR-swizzled by row % 8).
// All threads copy tiles with cp.async; tile j+1 loads while tile j is computed (Stages = 2).
// Stages = 3 pipelines each warpgroup: Q·Kᵀ of tile j+1 and P·V of tile j are issued together,
// the softmax of tile j+1 runs while P·V is on the tensor cores, and O is rescaled after it;
// tile j+2 loads meanwhile.
//
// Per K/V tile and warpgroup:
//   S (64 x BN, fp32, BN/2 registers per thread) = Q·Kᵀ: D/16 wgmma m64nBNk16, A = Q and B = K
//     both K-major by descriptor;
//   mask, online softmax in the exp2 domain (as the FA2 kernel: running max of the raw scores,
//     one FMA per exponent, a row that has seen only −inf uses 0 as reference);
//   O (64 x D, fp32, D/2 registers) += P·V: BN/16 wgmma m64nDk16, A = P packed to 16 bits in
//     registers (the accumulator layout of S is the A layout, see wgmma.cuh), B = V MN-major.
// The warpgroups are not synchronised with each other inside a tile, so one warpgroup's softmax
// overlaps another's tensor-core work.
//
// Epilogue: O /= l, staged through this warpgroup's own Q rows, 16-byte coalesced stores; LSE in
// the natural log, −inf (and O = 0) for rows that saw no key.
//
// Paged K/V (Variant::kPaged, the one variant this kernel serves; docs/attention.md §10): each
// thread's 16-byte copies read their key's row of its page, so pages of any size gather into one
// tile; the batch's keys are its seqused_k. A tile's page ids come from the block table a tile
// ahead: the copies of tile i bring those of tile i + 1 (cp.async, into one of two slots after
// the K/V stages), so no copy waits on a table read; the first tiles read the table directly.
//
// SplitKeys (Params = AttentionForwardSplitParams): the grid has tp.splits blocks per query tile,
// block x walking the x % splits-th of ceil(num_tiles / splits) consecutive key tiles; its
// epilogue writes O / l (fp32) and lse2 to the workspace, and attention_forward_combine
// (forward_combine.cuh) merges the ranges, as for the warp-specialised kernel.
//
// Requirements (checked by the host): as forward_fa2.cuh (16-byte aligned pointers and strides,
// contiguous last dimension, p.head_dim == HeadDim), D a multiple of 64.
#pragma once

#include "kgen_device/attention/forward_config.h"
#include "kgen_device/attention/forward_fa2.cuh"
#include "kgen_device/attention/paged_tile.h"
#include "kgen_device/attention/params.h"
#include "kgen_device/attention/variant.cuh"
#include "kgen_device/core/block.cuh"
#include "kgen_device/core/cp_async.cuh"
#include "kgen_device/core/grid_dependency.cuh"
#include "kgen_device/core/math.cuh"
#include "kgen_device/core/memory.cuh"
#include "kgen_device/core/types.cuh"
#include "kgen_device/core/warp.cuh"
#include "kgen_device/core/wgmma.cuh"

namespace kgen {
namespace wgmma_fwd_detail {

template <int D, int WGs, int BN, int Stages>
constexpr int kSmemBytes = attention_fwd::wgmma_smem_bytes(D, WGs, BN, Stages);

// The maximum of x[0 .. N) by halves (depth ⌈log2 N⌉ instead of a chain of N − 1 dependent
// maxima); x is overwritten. The maximum is exact, so the order does not change the result.
// (One level per instantiation: W values left in x[0 .. W).)
template <int W, int N>
__device__ __forceinline__ float tree_max(float (&x)[N]) {
  if constexpr (W > 1) {
#pragma unroll
    for (int i = 0; i < W / 2; ++i) x[i] = fmaxf(x[i], x[i + (W + 1) / 2]);
    return tree_max<(W + 1) / 2>(x);
  } else {
    return x[0];
  }
}

// With StaleMax, how far (log2 units) a row's maximum may grow past the reference its
// exponentials are taken from before the reference moves: until then P ≤ 2^8 (within E4M3's 448)
// and O is not rescaled, which after the first tiles of a row is nearly always.
constexpr float kStaleMaxLog2 = 8.f;

// Masks one 64 x BN score tile of a warpgroup (keys >= n_k, causal) and folds it into the online
// softmax: s becomes P (exp2 domain), row_max/row_sum are updated, alpha[h] is the factor the
// O rows of this thread must be scaled by. StaleMax (the FP8 forward, whose score step is its
// critical path): both rows' maxima first, each a tree, so the exponentials start after a short
// dependent chain; a row keeps its reference (row_max, alpha = 1) while its maximum stays
// within kStaleMaxLog2 of it, so that scale_rows<true> mostly has nothing to do; and each row's
// sum in four partial sums (a chain a quarter as long). Without it
// (16-bit inputs, where neither was faster on an H200) one row after the other, the maximum a chain.
template <int BN, bool Causal, bool StaleMax = false>
__device__ __forceinline__ void mask_softmax(float (&s)[BN / 2], float (&row_max)[2], float (&row_sum)[2],
                                             float (&alpha)[2], int n0, int n_k, int row0, int diag, int t,
                                             float scale_log2, bool needs_mask) {
  if (needs_mask) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = row0 + 8 * h;
      int limit = n_k;
      if constexpr (Causal) limit = imin(n_k, row + diag + 1);
      const int local_limit = limit - n0 - 2 * t;
#pragma unroll
      for (int j = 0; j < BN / 8; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e)
          if (j * 8 + e >= local_limit) s[4 * j + 2 * h + e] = -infinity_f32();
    }
  }
  if constexpr (StaleMax) {
    float mx[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float pairs[BN / 8];
#pragma unroll
      for (int j = 0; j < BN / 8; ++j) pairs[j] = fmaxf(s[4 * j + 2 * h], s[4 * j + 2 * h + 1]);
      mx[h] = fmaxf(row_max[h], tree_max<BN / 8>(pairs));
    }
    float ref[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      mx[h] = quad_max(mx[h]);
      const float old_ref = row_max[h] * scale_log2;
      ref[h] = mx[h] == -infinity_f32() ? 0.f : mx[h] * scale_log2;
      if (row_max[h] != -infinity_f32() && ref[h] - old_ref <= kStaleMaxLog2) {
        ref[h] = old_ref;
        alpha[h] = 1.f;
      } else {
        alpha[h] = exp2_approx(old_ref - ref[h]);
        row_max[h] = mx[h];
      }
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float part[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
      for (int j = 0; j < BN / 8; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float pe = exp2_approx(fmaf(s[4 * j + 2 * h + e], scale_log2, -ref[h]));
          s[4 * j + 2 * h + e] = pe;
          part[(2 * j + e) % 4] += pe;
        }
      row_sum[h] = row_sum[h] * alpha[h] + ((part[0] + part[1]) + (part[2] + part[3]));
    }
  } else {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float mx = row_max[h];
#pragma unroll
      for (int j = 0; j < BN / 8; ++j) mx = fmaxf(mx, fmaxf(s[4 * j + 2 * h], s[4 * j + 2 * h + 1]));
      mx = quad_max(mx);
      const float ref = mx == -infinity_f32() ? 0.f : mx * scale_log2;
      alpha[h] = exp2_approx(row_max[h] * scale_log2 - ref);
      row_max[h] = mx;
      float sum = 0.f;
#pragma unroll
      for (int j = 0; j < BN / 8; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float pe = exp2_approx(fmaf(s[4 * j + 2 * h + e], scale_log2, -ref));
          s[4 * j + 2 * h + e] = pe;
          sum += pe;
        }
      row_sum[h] = row_sum[h] * alpha[h] + sum;
    }
  }
}

// Scales the accumulator rows of this thread (fragment rows g and g + 8) by alpha[0] and alpha[1];
// MaybeSkip (after mask_softmax<..., true>): not at all where no row of the warp moved its
// reference.
template <bool MaybeSkip = false, int N>
__device__ __forceinline__ void scale_rows(float (&acc)[N], const float (&alpha)[2]) {
  if constexpr (MaybeSkip)
    if (ballot32(alpha[0] != 1.f || alpha[1] != 1.f) == 0u) return;
#pragma unroll
  for (int j = 0; j < N / 4; ++j) {
    acc[4 * j] *= alpha[0];
    acc[4 * j + 1] *= alpha[0];
    acc[4 * j + 2] *= alpha[1];
    acc[4 * j + 3] *= alpha[1];
  }
}

// The query tile of this block and the key tiles it visits. Causal grids walk the query tiles
// from the last (most keys) to the first, so the longest blocks start first.
struct QueryBlock {
  int m0, head, batch, n_q, n_k;
  int diag;       // causal: row i sees keys j <= i + diag
  int num_tiles;  // key tiles of BN keys holding a key visible to some row of the block
  // `splits`: key ranges per query tile (a split-keys grid has splits blocks per query tile,
  // block x taking query tile x / splits).
  // Sectioned (causal warp-specialised grids): grid x holds 2^p.sections_log2 heads per query
  // tile, heads fastest (forward_ws_config.h, ws_causal_sections_log2).
  template <int BM, int BN, bool Causal, bool Sectioned = false>
  __device__ __forceinline__ static QueryBlock of(const AttentionForwardParams& p, int splits = 1) {
    if constexpr (Causal && Sectioned) {
      const int s = p.sections_log2, x = static_cast<int>(blockIdx.x);
      const int lane = x & ((1 << s) - 1);
      return at<BM, BN, Causal>(p, (static_cast<int>(gridDim.x) >> s) - 1 - (x >> s),
                                (static_cast<int>(blockIdx.y) << s) | lane, blockIdx.z);
    }
    const int x = blockIdx.x / splits;
    return at<BM, BN, Causal>(p, Causal ? gridDim.x / splits - 1 - x : x, blockIdx.y, blockIdx.z);
  }
  // Query tile `x` (rows [x·BM, x·BM + BM)) of head `head`, batch `batch`.
  template <int BM, int BN, bool Causal>
  __device__ __forceinline__ static QueryBlock at(const AttentionForwardParams& p, int x, int head, int batch) {
    QueryBlock b;
    b.m0 = x * BM;
    b.head = head, b.batch = batch;
    b.n_q = p.n_q, b.n_k = p.n_k;
    b.diag = b.n_k - b.n_q;
    int n_end = b.n_k;
    if constexpr (Causal) n_end = imax(0, imin(b.n_k, imin(b.m0 + BM, b.n_q) + b.diag));
    b.num_tiles = (n_end + BN - 1) / BN;
    return b;
  }
  // A packed batch's sequence: its lengths n_q, n_k, and the diagonal and key tiles that follow
  // from them (as `at` sets them from the call's).
  template <int BM, int BN, bool Causal>
  __device__ __forceinline__ void set_lengths(int rows, int keys) {
    n_q = rows, n_k = keys;
    diag = n_k - n_q;
    int n_end = n_k;
    if constexpr (Causal) n_end = imax(0, imin(n_k, imin(m0 + BM, n_q) + diag));
    num_tiles = (n_end + BN - 1) / BN;
  }
};

// S = Q·Kᵀ into acc (64 x BN) for the HeadDim columns rounded up to 16, issued and not
// committed: A = this warpgroup's Q rows by descriptor `q_desc`, B = the K tile at `smem_k`, both
// K-major. A k-step of 16 elements moves 32 bytes inside a 64-column block, 64 columns one block.
template <class T, class QTile, class KVTile, int HeadDim, int N>
__device__ __forceinline__ void issue_qk(float (&acc)[N], unsigned long long q_desc, unsigned smem_k) {
  const unsigned long long k_desc = wgmma::desc_sw128(smem_k, 16, 1024);
  auto k_step = [](int kk, int block_bytes) { return (kk / 4) * block_bytes + (kk % 4) * 32; };
#pragma unroll
  for (int kk = 0; kk < (HeadDim + 15) / 16; ++kk)
    wgmma::Mma<2 * N>::template ss<T, 0, 0>(acc, q_desc + (k_step(kk, QTile::kBlockBytes) >> 4),
                                            k_desc + (k_step(kk, KVTile::kBlockBytes) >> 4), kk > 0);
}

// O += P·V as one committed group: A = P packed in registers (BN / 16 k-steps), B = the V tile
// at `smem_v`, MN-major.
template <class T, class KVTile, int N, int KSteps>
__device__ __forceinline__ void issue_pv(float (&o)[N], const unsigned (&pa)[KSteps][4], unsigned smem_v) {
  const unsigned long long v_desc = wgmma::desc_sw128(smem_v, KVTile::kBlockBytes, 1024);
  wgmma::fence_operand(o);
  wgmma::fence();
#pragma unroll
  for (int kk = 0; kk < KSteps; ++kk) wgmma::Mma<2 * N>::template rs<T, 1>(o, pa[kk], v_desc + ((kk * 16 * 128) >> 4), 1);
  wgmma::commit();
}

// The epilogue's first half: this thread's O rows (tile rows `local_row0` and + 8) divided by
// their softmax sums, packed to 16 bits into the Q tile at `smem_q`, and their LSE (natural log,
// −inf for a row that saw no key) stored when `lse_ptr` is set and the row is below n_q.
// With a variant that has sinks, `va` and `head` give each row's sink (variant_finish_row).
template <class T, class QTile, int N, class Variant = NoVariant>
__device__ __forceinline__ void stage_output(unsigned smem_q, const float (&o)[N], const float (&row_sum)[2],
                                             const float (&row_max)[2], int local_row0, int t, int m0, int n_q,
                                             float scale_log2, float* lse_ptr, const VariantArgs* va = nullptr,
                                             int head = 0) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float l = quad_sum(row_sum[h]);
    float inv_l = l > 0.f ? 1.f / l : 0.f;
    float sink_lse = 0.f;
    if constexpr (Variant::kSinks) variant_finish_row<Variant>(va, head, row_max[h], l, scale_log2, inv_l, sink_lse);
    const int local_row = local_row0 + 8 * h;
#pragma unroll
    for (int j = 0; j < N / 4; ++j)
      st_shared_4(smem_q + QTile::offset(local_row, j) + 4 * t,
                  pack2<T>(o[4 * j + 2 * h] * inv_l, o[4 * j + 2 * h + 1] * inv_l));
    const int row = m0 + local_row;
    if (lse_ptr != nullptr && t == 0 && row < n_q)
      lse_ptr[row] = Variant::kSinks ? sink_lse
                     : l > 0.f ? (row_max[h] * scale_log2 + log2_approx(l)) * kLn2
                               : -infinity_f32();
  }
}

// One warp's 16 staged O rows [local_row0, local_row0 + 16) of the tile (rows m0 + local_row) from
// shared memory to o_ptr, 16 bytes per lane and step, rows below n_q and the HeadDim columns only.
template <class T, class QTile, int D, int HeadDim>
__device__ __forceinline__ void store_warp_rows(unsigned smem_q, T* o_ptr, long long stride_n, int local_row0, int m0,
                                                int n_q, int lane) {
  constexpr int kChunks = D / 8;
#pragma unroll
  for (int it = 0; it < 16 * kChunks / 32; ++it) {
    const int idx = it * 32 + lane;
    const int local_row = local_row0 + idx / kChunks;
    const int c = idx % kChunks;
    const int row = m0 + local_row;
    if (row < n_q && (HeadDim == D || c < HeadDim / 8))
      st_global_16(o_ptr + static_cast<long long>(row) * stride_n + c * 8, ld_shared_16(smem_q + QTile::offset(local_row, c)));
  }
}

// The attention parameters of a launch: the params themselves, or a split launch's.
__device__ __forceinline__ const AttentionForwardParams& forward_params(const AttentionForwardParams& p) { return p; }
__device__ __forceinline__ const AttentionForwardParams& forward_params(const AttentionForwardSplitParams& p) { return p.a; }

// The K and V rows [key0, key0 + Rows) of a paged cache into the tiles at smem_k and smem_v
// (Layout), keys >= n_k zero-filled (0 <= key0 < n_k): key j is row j % 2^shift of page
// page_of(j), whose rows start at k_head + page · k_page + row · k_row (and likewise for V).
// key0 is a multiple of Rows. A tile inside one page (pages of Rows keys or more) is one strided
// tile: the dense copy. Else each thread reads the pages of all its rows first, then issues its
// copies, K and V from each row's page and offset: the reads' latencies overlap, and no copy
// waits on a read behind the copy before it.
template <class T, int Rows, int D, int Threads, class Layout, int Cols, class PageOf>
__device__ __forceinline__ void load_paged_kv_async(unsigned smem_k, unsigned smem_v, const T* k_head, const T* v_head,
                                                    long long k_page, long long k_row, long long v_page,
                                                    long long v_row, PageOf&& page_of, int shift, int key0, int n_k,
                                                    int tid) {
  constexpr int kChunks = (Cols + 15) / 16 * 2 < D / 8 ? (Cols + 15) / 16 * 2 : D / 8;
  constexpr int kRowsPerPass = Threads / kChunks;
  constexpr int kPasses = (Rows + kRowsPerPass - 1) / kRowsPerPass;
  static_assert(kRowsPerPass > 0, "a row needs more chunks than the block has threads");
  const int last = n_k - 1, row_mask = (1 << shift) - 1;
  if ((1 << shift) >= Rows) {  // one page: rows (key0 & row_mask) + r of it
    const int page = page_of(key0);
    const long long row0 = key0 & row_mask;
    fa2_detail::load_tile_async<T, Rows, D, Threads, Layout, Cols, true>(smem_k, k_head + page * k_page + row0 * k_row,
                                                                       k_row, 0, n_k - key0, tid);
    fa2_detail::load_tile_async<T, Rows, D, Threads, Layout, Cols, true>(smem_v, v_head + page * v_page + row0 * v_row,
                                                                       v_row, 0, n_k - key0, tid);
    return;
  }
  if (tid >= kRowsPerPass * kChunks) return;
  const int r0 = tid / kChunks, c = tid % kChunks;
  int page[kPasses];
#pragma unroll
  for (int pass = 0; pass < kPasses; ++pass) page[pass] = page_of(imin(key0 + r0 + pass * kRowsPerPass, last));
#pragma unroll
  for (int pass = 0; pass < kPasses; ++pass) {
    const int r = r0 + pass * kRowsPerPass;
    if (Rows % kRowsPerPass == 0 || r < Rows) {
      const int key = key0 + r;
      const bool valid = key < n_k && (Cols == D || c < Cols / 8);
      const int row = imin(key, last) & row_mask;
      cp_async_16(smem_k + Layout::offset(r, c), k_head + page[pass] * k_page + row * k_row + c * 8, valid);
      cp_async_16(smem_v + Layout::offset(r, c), v_head + page[pass] * v_page + row * v_row + c * 8, valid);
    }
  }
}

// A split-keys block's epilogue: this thread's O rows (row0 and row0 + 8) divided by their softmax
// sums, in fp32, and their lse2 (log2 domain, −inf for a row that saw no key of the range) to
// slot `split` of the workspace, rows below n_q only (forward_combine.cuh merges the slots).
template <int HeadDim, int N>
__device__ __forceinline__ void store_split_rows(const AttentionForwardSplitParams& tp, const float (&o)[N],
                                                 const float (&row_sum)[2], const float (&row_max)[2], int split,
                                                 int batch, int head, int row0, int n_q, int t, float scale_log2) {
  const AttentionForwardParams& p = tp.a;
  const long long rows = static_cast<long long>(p.batch) * p.heads_q * n_q;
  const long long row_base =
      static_cast<long long>(split) * rows + (static_cast<long long>(batch) * p.heads_q + head) * n_q;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float l = quad_sum(row_sum[h]);
    const float inv_l = l > 0.f ? 1.f / l : 0.f;
    const int row = row0 + 8 * h;
    if (row >= n_q) continue;
    float* out = tp.o_partial + (row_base + row) * HeadDim;
#pragma unroll
    for (int j = 0; j < N / 4; ++j)
      if (8 * j < HeadDim) {
        const float2 v = make_float2(o[4 * j + 2 * h] * inv_l, o[4 * j + 2 * h + 1] * inv_l);
        *reinterpret_cast<float2*>(out + 8 * j + 2 * t) = v;
      }
    if (t == 0)
      tp.lse_partial[row_base + row] = l > 0.f ? row_max[h] * scale_log2 + log2_approx(l) : -infinity_f32();
  }
}

}  // namespace wgmma_fwd_detail

// T: half_t or bfloat16_t. D: the tile's head dim, 64 or 128. BN: keys per tile (64, 128, 192).
// WGs: warpgroups per block (BM = 64·WGs). Stages: K/V buffers (2). Causal: bottom-right mask.
// HeadDim: the tensors' head dim p.head_dim, a multiple of 8 in (D − 64, D] (D when left out).
// Q·Kᵀ runs HeadDim rounded up to 16 (the wgmma k) of the D columns, zero-filled past HeadDim;
// P·V runs all D columns of V (wgmma's N), and the columns past that rounding, never loaded,
// give O columns that are never stored. SplitKeys: one key range per block, partial results to
// the workspace (Params = AttentionForwardSplitParams). Variant: paged K/V or none.
template <class T, int D, int BN, int WGs, int Stages, bool Causal, int HeadDim = D, bool SplitKeys = false,
          class Variant = NoVariant, class Params>
__device__ __forceinline__ void attention_forward_wgmma(const Params& tp, const VariantArgs* va = nullptr) {
  static_assert(is_same<T, half_t>::value || is_same<T, bfloat16_t>::value,
                "the wgmma kernel takes half_t or bfloat16_t");
  static_assert(D % 64 == 0 && D <= 256, "D must be a multiple of 64");
  static_assert(HeadDim % 8 == 0 && HeadDim > D - 64 && HeadDim <= D, "HeadDim must pad to D");
  static_assert(BN % 64 == 0 && BN <= 256, "BN must be 64, 128, 192 or 256");
  static_assert(Stages == 2 || Stages == 3, "the wgmma kernel keeps 2 or 3 K/V stages");
  static_assert(!kVariantScores<Variant> && !Variant::kSinks && !Variant::kPacked,
                "the wgmma kernel serves paged K/V, no other variant");
  static_assert(is_same<Params, AttentionForwardSplitParams>::value == SplitKeys,
                "a split-keys kernel takes AttentionForwardSplitParams, any other AttentionForwardParams");
  static_assert(BN / 16 <= attention_fwd::kPagedTileIds, "a tile's page ids must fit their slot");
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int BM = 64 * WGs;
  constexpr int kThreads = 128 * WGs;
  using QTile = wgmma::Sw128<BM, D>;
  using KVTile = wgmma::Sw128<BN, D>;
  static_assert(1024 + QTile::kBytes + Stages * 2 * KVTile::kBytes ==
                    wgmma_fwd_detail::kSmemBytes<D, WGs, BN, Stages>,
                "shared memory layout must match wgmma_smem_bytes");
  constexpr int kSRegs = BN / 2;
  constexpr int kORegs = D / 2;

  const AttentionForwardParams& p = wgmma_fwd_detail::forward_params(tp);
  const int tid = threadIdx.x;
  const auto [wg, warp, lane, g, t] = wgmma::Lane::of(tid);
  int splits = 1;
  if constexpr (SplitKeys) {
    splits = tp.splits;
    allow_dependent_grid();  // the combine kernel may be scheduled (it waits for this grid)
  }
  auto qb = wgmma_fwd_detail::QueryBlock::of<BM, BN, Causal>(p, splits);
  if constexpr (Variant::kPaged) qb.set_lengths<BM, BN, Causal>(p.n_q, sequence_rows<Variant>(va, qb.batch, p.n_q, p.n_k).n_k);
  const int m0 = qb.m0, head = qb.head, batch = qb.batch, n_q = qb.n_q, n_k = qb.n_k, diag = qb.diag;
  // The block's key tiles [first_tile, first_tile + num_tiles): all, or its split's range.
  int first_tile = 0, num_tiles = qb.num_tiles;
  int split = 0;
  if constexpr (SplitKeys) {
    split = blockIdx.x % splits;
    const int per_split = (num_tiles + splits - 1) / splits;
    first_tile = imin(split * per_split, num_tiles);
    num_tiles = imin(per_split, num_tiles - first_tile);
  }
  const float scale_log2 = p.scale_log2;

  const unsigned smem_raw = smem_u32(dynamic_smem());
  const unsigned smem_q = (smem_raw + 1023u) & ~1023u;
  auto smem_k = [&](int stage) { return smem_q + QTile::kBytes + stage * 2 * KVTile::kBytes; };
  auto smem_v = [&](int stage) { return smem_k(stage) + KVTile::kBytes; };

  const T* k_ptr = static_cast<const T*>(p.k) + batch * p.k_stride_b + (head / p.head_group) * p.k_stride_h;
  const T* v_ptr = static_cast<const T*>(p.v) + batch * p.v_stride_b + (head / p.head_group) * p.v_stride_h;
  // Paged: the page ids of the block's key tile i (i from 0) in slot i % 2 after the K/V stages
  // (attention_fwd::kPagedTileIdBytes), copied by the first BN / 16 threads with the copies of
  // tile i − 1. Keys past the last take its page (as paged_row), so every id read is in the table.
  const unsigned smem_ids = smem_k(Stages);
  auto id_slot = [&](int i) { return smem_ids + (i & 1) * attention_fwd::kPagedTileIds * 4; };
  auto fetch_ids = [&](int i) {
    if constexpr (Variant::kPaged) {
      if (tid < BN / 16) {
        const int key = imin((first_tile + i) * BN + (tid << va->page_shift), imax(n_k - 1, 0));
        cp_async_4(id_slot(i) + 4 * tid, va->block_table + batch * va->table_stride + (key >> va->page_shift), true);
      }
    }
  };
  // The K and V tiles of the block's key tile i into `stage`. K/V tiles below n_k take the copy
  // without per-row tests (docs/kernels/measurements.md, "In-bounds K/V copies"). Paged: key j's
  // row of its page (the batch stride steps pages, the n stride rows), the page from the table
  // (`direct`: the first tiles) or from the ids fetched with the previous tile; the ids of tile
  // i + 1 join this tile's copies.
  auto load_kv = [&](int i, int stage, bool direct) {
    const int key0 = (first_tile + i) * BN;
    if constexpr (Variant::kPaged) {
      const int shift = va->page_shift;
      const int first_page = key0 >> shift;
      const int* ids = reinterpret_cast<const int*>(dynamic_smem() + (id_slot(i) - smem_raw));
      const int* table = va->block_table + batch * va->table_stride;
      const int kv_head = head / p.head_group;
      wgmma_fwd_detail::load_paged_kv_async<T, BN, D, kThreads, KVTile, HeadDim>(
          smem_k(stage), smem_v(stage), static_cast<const T*>(p.k) + kv_head * p.k_stride_h,
          static_cast<const T*>(p.v) + kv_head * p.v_stride_h, p.k_stride_b, p.k_stride_n, p.v_stride_b, p.v_stride_n,
          [&](int key) { return direct ? table[key >> shift] : ids[(key >> shift) - first_page]; }, shift, key0, n_k,
          tid);
      if (i + 1 < num_tiles) fetch_ids(i + 1);
    } else {
      fa2_detail::load_tile_async<T, BN, D, kThreads, KVTile, HeadDim, true>(smem_k(stage), k_ptr, p.k_stride_n, key0,
                                                                           n_k, tid);
      fa2_detail::load_tile_async<T, BN, D, kThreads, KVTile, HeadDim, true>(smem_v(stage), v_ptr, p.v_stride_n, key0,
                                                                           n_k, tid);
    }
  };

  {
    const T* q_ptr = static_cast<const T*>(p.q) + batch * p.q_stride_b + head * p.q_stride_h;
    fa2_detail::load_tile_async<T, BM, D, kThreads, QTile, HeadDim>(smem_q, q_ptr, p.q_stride_n, m0, n_q, tid);
    if (num_tiles > 0) load_kv(0, 0, true);
    cp_async_commit();
  }

  // Descriptor of this warpgroup's Q rows (K-major).
  const unsigned long long q_desc = wgmma::desc_sw128(smem_q + wg * 64 * 128, 16, 1024);

  float o[kORegs];
#pragma unroll
  for (int i = 0; i < kORegs; ++i) o[i] = 0.f;
  float row_max[2] = {-infinity_f32(), -infinity_f32()};
  float row_sum[2] = {0.f, 0.f};
  const int wg_row0 = m0 + wg * 64;  // first query row of this warpgroup
  const int row0 = wg_row0 + warp * 16 + g;  // this thread's first fragment row (the other: + 8)

  // Both schedules' pieces: S = Q·Kᵀ (issued, not committed) and O += P·V (one committed group)
  // of the tile in `stage`.
  auto issue_s = [&](float (&acc)[kSRegs], int stage) {
    wgmma_fwd_detail::issue_qk<T, QTile, KVTile, HeadDim>(acc, q_desc, smem_k(stage));
  };
  auto issue_pv = [&](const unsigned (&pa)[BN / 16][4], int stage) {
    wgmma_fwd_detail::issue_pv<T, KVTile>(o, pa, smem_v(stage));
  };
  // Keys >= n_k, or above the causal diagonal, in the tile starting at key n0.
  auto needs_mask = [&](int n0) { return n0 + BN > n_k || (Causal && n0 + BN - 1 > wg_row0 + diag); };
  // The first key of the block's key tile i.
  auto key_of = [&](int i) { return (first_tile + i) * BN; };

  if constexpr (Stages == 3) {
    // Pipelined: Q·Kᵀ of tile j+1 and P·V of tile j run on the tensor cores while this
    // warpgroup computes the softmax of tile j+1; O is rescaled once P·V of tile j is done.
    // Three K/V stages: tile j+2 loads while tiles j and j+1 are in use.
    unsigned pa[BN / 16][4];
    if (num_tiles > 0) {
      if (num_tiles > 1) load_kv(1, 1, true);
      cp_async_commit();
      cp_async_wait<1>();  // Q and tile 0
      wgmma::fence_proxy_async();
      __syncthreads();
      float s[kSRegs];
      wgmma::fence();
      issue_s(s, 0);
      wgmma::commit();
      wgmma::wait<0>();
      wgmma::fence_operand(s);
      float alpha[2];
      wgmma_fwd_detail::mask_softmax<BN, Causal>(s, row_max, row_sum, alpha, key_of(0), n_k, row0, diag, t, scale_log2,
                                                 needs_mask(key_of(0)));
#pragma unroll
      for (int kk = 0; kk < BN / 16; ++kk) wgmma::pack_a<T>(pa[kk], s, kk);
    }
    // Every iteration but the last issues Q·Kᵀ of the next tile (no branch around the wgmma
    // groups, so the compiler can keep them in flight across the softmax).
    for (int tile = 0; tile + 1 < num_tiles; ++tile) {
      cp_async_wait<0>();  // tile + 1 landed
      wgmma::fence_proxy_async();
      __syncthreads();  // every warpgroup is done with tile − 1: its stage takes tile + 2
      if (tile + 2 < num_tiles) load_kv(tile + 2, (tile + 2) % Stages, false);
      cp_async_commit();
      float s[kSRegs];
      wgmma::fence();
      issue_s(s, (tile + 1) % Stages);
      wgmma::commit();
      issue_pv(pa, tile % Stages);
      wgmma::wait<1>();  // Q·Kᵀ of tile + 1 done; P·V of tile may still run
      wgmma::fence_operand(s);
      float alpha[2];
      const int n0 = key_of(tile + 1);
      wgmma_fwd_detail::mask_softmax<BN, Causal>(s, row_max, row_sum, alpha, n0, n_k, row0, diag, t, scale_log2,
                                                 needs_mask(n0));
      wgmma::wait<0>();
      wgmma::fence_operand(o);
      wgmma_fwd_detail::scale_rows(o, alpha);
#pragma unroll
      for (int kk = 0; kk < BN / 16; ++kk) wgmma::pack_a<T>(pa[kk], s, kk);
    }
    if (num_tiles > 0) {  // P·V of the last tile (landed at the previous wait)
      issue_pv(pa, (num_tiles - 1) % Stages);
      wgmma::wait<0>();
      wgmma::fence_operand(o);
    }
  } else
  for (int tile = 0; tile < num_tiles; ++tile) {
    const int n0 = key_of(tile);
    const int stage = tile % Stages;
    cp_async_wait<0>();
    wgmma::fence_proxy_async();
    __syncthreads();  // tile `tile` landed for all; every warpgroup finished tile − 1
    if (tile + 1 < num_tiles) load_kv(tile + 1, (tile + 1) % Stages, false);
    cp_async_commit();

    float s[kSRegs];
    wgmma::fence();
    issue_s(s, stage);
    wgmma::commit();
    wgmma::wait<0>();
    wgmma::fence_operand(s);

    float alpha[2];
    wgmma_fwd_detail::mask_softmax<BN, Causal>(s, row_max, row_sum, alpha, n0, n_k, row0, diag, t, scale_log2,
                                               needs_mask(n0));
    wgmma_fwd_detail::scale_rows(o, alpha);

    unsigned a[BN / 16][4];
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) wgmma::pack_a<T>(a[kk], s, kk);
    issue_pv(a, stage);
    wgmma::wait<0>();
    wgmma::fence_operand(o);
  }

  cp_async_wait<0>();
  if constexpr (SplitKeys) {
    // ---- split epilogue: this range's O / l and lse2 of the rows below n_q, fp32 ----
    wgmma_fwd_detail::store_split_rows<HeadDim>(tp, o, row_sum, row_max, split, batch, head, row0, n_q, t, scale_log2);
    return;
  }
  // ---- epilogue: stage O / l through this warpgroup's Q rows, 16-byte stores; LSE ----
  __syncthreads();  // no copy may still target Q (num_tiles == 0), no warpgroup still reads it
  T* o_ptr = static_cast<T*>(p.o) + batch * p.o_stride_b + head * p.o_stride_h;
  float* lse_ptr = p.lse == nullptr ? nullptr : p.lse + batch * p.lse_stride_b + head * p.lse_stride_h;
  wgmma_fwd_detail::stage_output<T, QTile>(smem_q, o, row_sum, row_max, wg * 64 + warp * 16 + g, t, m0, n_q, scale_log2,
                                          lse_ptr);
  __syncwarp();
  constexpr int kChunks = D / 8;
#pragma unroll
  for (int it = 0; it < 16 * kChunks / 32; ++it) {
    const int idx = it * 32 + lane;
    const int local_row = wg * 64 + warp * 16 + idx / kChunks;
    const int c = idx % kChunks;
    const int row = m0 + local_row;
    if (row < n_q && (HeadDim == D || c < HeadDim / 8))
      st_global_16(o_ptr + static_cast<long long>(row) * p.o_stride_n + c * 8,
                   ld_shared_16(smem_q + QTile::offset(local_row, c)));
  }
#endif
}

}  // namespace kgen
