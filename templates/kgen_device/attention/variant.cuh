// The score step's variant hook (docs/attention.md §8), shared by every attention kernel family.
// A kernel takes `class Variant` (NoVariant, or the struct the generator renders from a variant's
// expressions) and a `const VariantArgs*` (its run-time inputs). With NoVariant every helper here
// is a no-op resolved at compile time, so a plain kernel's code is what it was without the hook.
//
// What a variant changes, in the order the score step applies it to one score element of query
// row q and key k (raw = q·k before the softmax scale):
//   1. the mask: the key is invisible (−inf) where Variant::mask is false;
//   2. the modification: score' = Variant::score(raw · scale) for visible keys; kernels keep raw
//      units, so they store score' / scale and their exp2(x · scale·log2 e) softmax is unchanged;
//   3. the sinks (when args.sinks is set): each row's softmax denominator gains exp(sinks[h]),
//      applied once in the epilogue (variant_finish_row).
// Key tiles: a block visits only tiles that its query rows may see (variant_key_tiles), and a
// tile that Variant::tile proves fully visible skips the mask (variant_full_key_tiles finds the
// span of them once per block; the tiles outside it take the mask, variant_partial).
//
// Packed batches (Variant::kPacked; docs/attention.md §9): the tensors hold the sequences one
// after another along n, batch b owning rows [cu_seqlens_q[b], cu_seqlens_q[b + 1]) of q and o
// and [cu_seqlens_k[b], cu_seqlens_k[b + 1]) of k and v. The host passes one physical batch
// (stride_b = 0; n_q, n_k the total rows) and a grid over the longest sequence; a kernel takes
// its sequence's rows from sequence_rows and leaves blocks past them idle. Indices q and k, the
// lengths n_q and n_k and the causal mask are the sequence's own.
//
// Paged K/V (Variant::kPaged; docs/attention.md §10): q, o and lse are dense; the keys of batch b
// are rows of pages of k and v (their batch dimension) named by its row of a block table, the
// first seqused_k[b] of them (paged_row).
#pragma once

#include "kgen_device/attention/variant_args.h"
#include "kgen_device/core/block.cuh"
#include "kgen_device/core/math.cuh"
#include "kgen_device/core/warp.cuh"

// How a variant kernel's entry declares its VariantArgs parameter (generator/entry_shim.cpp): a
// __grid_constant__ on NVIDIA, so the kernel reads it in place through a pointer.
#if KGEN_AMD
#define KGEN_VARIANT_ARGS const kgen::VariantArgs
#else
#define KGEN_VARIANT_ARGS const __grid_constant__ kgen::VariantArgs
#endif

namespace kgen {

// Plain attention: no modification, no mask, no sinks.
struct NoVariant {
  static constexpr bool kScoreMod = false, kMask = false, kUnitSlope = true, kTensorGrads = false, kMaskReads = false;
  static constexpr bool kKeyBounds = false;
  static constexpr bool kSinks = false, kPacked = false, kPaged = false;
  __device__ static float score(const VariantArgs&, float s, int, int, int, int, int, int) { return s; }
  __device__ static float dscore(const VariantArgs&, float, int, int, int, int, int, int) { return 1.f; }
  __device__ static float d2score(const VariantArgs&, float, int, int, int, int, int, int) { return 0.f; }
  __device__ static bool mask(const VariantArgs&, int, int, int, int, int, int) { return true; }
  __device__ static void keys(const VariantArgs&, int, int, int, int, int n_k, int& lo, int& hi) { lo = 0, hi = n_k - 1; }
  __device__ static int tile(const VariantArgs&, int, int, int, int, int, int, int, int) { return 2; }
  __device__ static void tensor_grads(const VariantArgs&, float, float, int, int, int, int, int, int) {}
};

// Whether the kernel must do anything for `V` in its score step.
template <class V>
constexpr bool kVariantScores = V::kScoreMod || V::kMask;

// A block's sequence: its physical batch `slot` (the batch for dense tensors, 0 when packed), the
// offsets of its first query and key rows in the tensors' n dimension, and its lengths. Dense
// batches: the call's batch and lengths, offsets 0 (all resolved at compile time).
struct SequenceRows {
  int slot, q0, k0, n_q, n_k;
};

template <class V>
__device__ __forceinline__ SequenceRows sequence_rows(const VariantArgs* a, int batch, int n_q, int n_k) {
  if constexpr (V::kPacked) {
    const int q0 = a->cu_seqlens_q[batch], k0 = a->cu_seqlens_k[batch];
    return {0, q0, k0, a->cu_seqlens_q[batch + 1] - q0, a->cu_seqlens_k[batch + 1] - k0};
  } else if constexpr (V::kPaged) {
    return {batch, 0, 0, n_q, a->seqused_k != nullptr ? a->seqused_k[batch] : n_k};
  } else {
    return {batch, 0, 0, n_q, n_k};
  }
}

// Paged K/V (V::kPaged): the page of key `key` of batch `batch` (keys past the sequence's last,
// `last`, take the last one's page, so a tile's tail never reads past its row of the table) and
// the key's row inside its page.
struct PagedRow {
  int page, row;
};
__device__ __forceinline__ PagedRow paged_row(const VariantArgs* a, int batch, int key, int last) {
  const int page = a->block_table[batch * a->table_stride + (imin(key, imax(last, 0)) >> a->page_shift)];
  return {page, key & ((1 << a->page_shift) - 1)};
}

// A block's sequence for kernels that read the call's lengths where they use them (as their plain
// form does, so its code stays as it was): a packed sequence's rows and lengths are read once from
// cu_seqlens; dense batches have offsets 0 and read params.n_q, params.n_k at each use.
template <class V, class Params>
struct BlockSequence {
  const Params& p;
  SequenceRows rows{};
  __device__ __forceinline__ BlockSequence(const Params& params, const VariantArgs* a, int batch) : p(params) {
    if constexpr (V::kPacked || V::kPaged) rows = sequence_rows<V>(a, batch, p.n_q, p.n_k);
  }
  __device__ __forceinline__ int n_q() const {
    if constexpr (V::kPacked) return rows.n_q;
    else return p.n_q;
  }
  __device__ __forceinline__ int n_k() const {
    if constexpr (V::kPacked || V::kPaged) return rows.n_k;
    else return p.n_k;
  }
};

// The first query (Keys = false) or key row of a packed sequence in the tensors (0 for dense
// batches), read afresh: after the compiler barrier it cannot reuse an earlier read, so a kernel
// keeps no register for the offset between its uses (the ws producer has 24 registers).
template <class V, bool Keys = false>
__device__ __forceinline__ int sequence_row0(const VariantArgs* a, int batch) {
  if constexpr (V::kPacked) {
    compiler_barrier();
    return (Keys ? a->cu_seqlens_k : a->cu_seqlens_q)[batch];
  } else {
    return 0;
  }
}

// The row and head context of a score step.
struct VariantAt {
  int batch, head, n_q, n_k;
  float scale, inv_scale;  // softmax scale and its reciprocal (raw ↔ scaled units)
};

// The units of a variant kernel's forward scores: with a score modification, scaled (raw · scale,
// the units the modification takes), so that the score step does not convert back to raw units
// per element; the softmax then takes log2 e where a plain kernel takes scale · log2 e. A kernel
// passes its plain factor and uses the result for its softmax, running max and LSE alike.
template <class V>
__device__ __forceinline__ float variant_softmax_log2(float scale_log2) {
  return V::kScoreMod ? kLog2e : scale_log2;
}

// One score of (row, col) after the variant: in scaled units when Scaled and the variant modifies
// scores (variant_softmax_log2), else in raw units. Check also applies the mask and the bounds
// (col < n_k, row < n_q, and the bottom-right causal mask when Causal). Rows past n_q evaluate the
// modification at row n_q − 1, so a tensor read never leaves its rows.
template <class V, bool Causal, bool Check, bool Scaled = false>
__device__ __forceinline__ float variant_score(const VariantArgs& a, const VariantAt& at, float raw, int row,
                                               int col) {
  if constexpr (Check) {
    bool visible = (col < at.n_k) & (row < at.n_q);
    if constexpr (Causal) visible = visible & (col <= row + (at.n_k - at.n_q));
    // A mask that is one interval of keys per row: two comparisons against the row's bounds
    // (computed once per row where the compiler sees the row repeat). A mask that reads tensors
    // takes indices inside them; the bounds decide for the others.
    if constexpr (V::kMask && V::kKeyBounds) {
      int lo, hi;
      V::keys(a, at.batch, at.head, row, at.n_q, at.n_k, lo, hi);
      visible = visible & (col >= lo) & (col <= hi);
    } else if constexpr (V::kMask && V::kMaskReads)
      visible = visible & V::mask(a, at.batch, at.head, imin(row, at.n_q - 1), imin(col, at.n_k - 1), at.n_q, at.n_k);
    else if constexpr (V::kMask)
      visible = visible & V::mask(a, at.batch, at.head, row, col, at.n_q, at.n_k);
    if constexpr (!V::kScoreMod) return visible ? raw : -infinity_f32();
    if (!visible) return -infinity_f32();  // the modification may read tensors only visible keys index
  }
  if constexpr (V::kScoreMod) {
    const int q = row < at.n_q ? row : at.n_q - 1;
    const float modified = V::score(a, raw * at.scale, at.batch, at.head, q, col, at.n_q, at.n_k);
    return Scaled ? modified : modified * at.inv_scale;
  }
  return raw;
}

// The same with the check chosen at run time (kernels that apply it per element anyway).
template <class V, bool Causal>
__device__ __forceinline__ float variant_score(const VariantArgs& a, const VariantAt& at, float raw, int row, int col,
                                               bool check) {
  return check ? variant_score<V, Causal, true>(a, at, raw, row, col) : variant_score<V, Causal, false>(a, at, raw, row, col);
}

// Check: the mask and the bounds too, else the modification only.
template <class V, bool Causal, bool Check, int Groups, class S>
__device__ __forceinline__ void variant_fragment_pass(const VariantArgs& a, const VariantAt& at, S& s, int row0, int n0,
                                                      int t) {
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int j = 0; j < Groups; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        float& x = s(j, 2 * h + e);
        x = variant_score<V, Causal, Check, true>(a, at, x, row0 + 8 * h, n0 + 2 * t + 8 * j + e);
      }
}

// The forward score step's hook on one 16-row accumulator fragment of the m16n8 layout shared by
// mma.sync and wgmma (element i of 8-key group j: row row0 + 8·(i / 2), key n0 + 2t + 8j + i % 2),
// read and written through `s(j, i)`, leaving scores in variant_softmax_log2's units. `masked`: the
// tile is not proven fully visible, so the mask and bounds apply per element; otherwise only the
// modification, and a mask alone does nothing. Each case is its own straight-line copy of the
// loop, so that no element carries a branch or a select on the tile's kind, the modification's
// latencies overlap across elements, and tiles proven visible pay nothing for the mask.
template <class V, bool Causal, int Groups, class S>
__device__ __forceinline__ void variant_fragment(const VariantArgs& a, const VariantAt& at, S&& s, int row0, int n0,
                                                 int t, bool masked) {
  if constexpr (kVariantScores<V>) {
    if (masked) variant_fragment_pass<V, Causal, true, Groups>(a, at, s, row0, n0, t);
    else if constexpr (V::kScoreMod) variant_fragment_pass<V, Causal, false, Groups>(a, at, s, row0, n0, t);
  }
}

// Narrows the tiles [first, end) to those from the first to the last that `empty(t0, t1)` (tiles
// t0..t1 − 1 all proven empty) does not rule out. One thread: the scans step over 64, then 8,
// then single tiles, so a window far from the start costs a few dozen empty() calls, not one per
// tile. Warp (every lane of a warp calls it together, with the same arguments): the lanes test
// 32 spans at once, a first round spans of ⌈(end − first) / 32⌉ tiles, the next the first span
// not proven empty split in 32, and so on down to single tiles (two rounds up to 1024 tiles),
// then the same from the end; the dependent empty() calls fall from dozens to a few.
template <bool Warp, class Empty>
__device__ __forceinline__ void variant_narrow(int& first, int& end, Empty&& empty) {
  if constexpr (Warp) {
    const int lane = static_cast<int>(threadIdx.x % 32);
    // The first tile not proven empty: [lo, hi) holds it, or lo == hi when there is none.
    int lo = first, hi = end;
#pragma unroll 1
    while (hi - lo > 0) {
      const int span = (hi - lo + 31) / 32, t0 = lo + lane * span, t1 = imin(t0 + span, hi);
      const unsigned open = ballot32(t0 < t1 && !empty(t0, t1));
      if (open == 0) {
        lo = hi;
        break;
      }
      lo += lowest_bit32(open) * span;
      if (span == 1) break;
      hi = imin(lo + span, hi);
    }
    first = lo;
    // The last tile not proven empty, in [first, end).
    lo = first, hi = end;
#pragma unroll 1
    while (hi - lo > 0) {
      const int span = (hi - lo + 31) / 32, t1 = hi - lane * span, t0 = imax(t1 - span, lo);
      const unsigned open = ballot32(t0 < t1 && !empty(t0, t1));
      if (open == 0) {
        hi = lo;
        break;
      }
      hi -= lowest_bit32(open) * span;
      if (span == 1) break;
      lo = imax(hi - span, lo);
    }
    end = hi;
  } else {
#pragma unroll 1
    for (int step = 64; step >= 1; step /= 8)
      while (first + step <= end && empty(first, first + step)) first += step;
#pragma unroll 1
    for (int step = 64; step >= 1; step /= 8)
      while (end - step >= first && empty(end - step, end)) end -= step;
  }
}

// The mask's verdict on tiles t0..t1 − 1 along one axis, the other held to [lo, hi] (V::tile: 0
// all empty, 1 partial, 2 all visible). Keys: key tiles of B keys for rows [lo, hi]; otherwise
// query tiles of B rows for keys [lo, hi] (the backward's key-major kernels).
template <class V, int B, bool Keys>
struct VariantTiles {
  const VariantArgs& a;
  const VariantAt& at;
  int lo, hi;
  __device__ __forceinline__ int operator()(int t0, int t1) const {
    if constexpr (Keys) return V::tile(a, at.batch, at.head, lo, hi, t0 * B, imin(t1 * B, at.n_k) - 1, at.n_q, at.n_k);
    else return V::tile(a, at.batch, at.head, t0 * B, imin(t1 * B, at.n_q) - 1, lo, hi, at.n_q, at.n_k);
  }
};

// The tiles [first, end) narrowed by the mask to those `tiles` does not prove empty (Warp: as
// variant_narrow says).
template <class V, bool Warp, class Tiles>
__device__ __forceinline__ void variant_visible_tiles(const Tiles& tiles, int& first, int& end) {
  if constexpr (V::kMask) variant_narrow<Warp>(first, end, [&](int t0, int t1) { return tiles(t0, t1) == 0; });
}

// The key tiles of BN keys [first, end) that rows [q0, q1] visit, narrowed by the mask.
template <class V, int BN, bool Warp = false>
__device__ __forceinline__ void variant_key_tiles(const VariantArgs& a, const VariantAt& at, int q0, int q1,
                                                  int& first, int& end) {
  variant_visible_tiles<V, Warp>(VariantTiles<V, BN, true>{a, at, q0, q1}, first, end);
}

// The query tiles of BM rows [first, end) that see some key of [k0, k1], narrowed by the mask.
template <class V, int BM, bool Warp = false>
__device__ __forceinline__ void variant_query_tiles(const VariantArgs& a, const VariantAt& at, int k0, int k1,
                                                    int& first, int& end) {
  variant_visible_tiles<V, Warp>(VariantTiles<V, BM, false>{a, at, k0, k1}, first, end);
}

// A span of tiles [lo, hi) that the mask proves fully visible as a whole (empty when lo == hi).
struct VariantFullSpan {
  int lo = 0, hi = 0;
  __device__ __forceinline__ bool contains(int tile) const { return tile >= lo && tile < hi; }
};

// The tiles of [first, end) proven fully visible as one span, once per block, by the 32 lanes of
// a warp together (every lane calls it, with the same arguments; `tiles` as VariantTiles). The
// caller's own visible tiles first, unless `narrowed` says [first, end) already is exactly them
// (a block's range may hold tiles that only its other rows or heads see), then from each end the
// first tile proven full (the lanes test 32 tiles at once: a window's edges, a document's first
// tile, the diagonal are partial), then the tiles between them as one span; where that is not
// proven (visible tiles with holes), the span is empty and every tile takes the mask
// (variant_partial).
template <class V, class Tiles>
__device__ __forceinline__ VariantFullSpan variant_full_span(const Tiles& tiles, int first, int end, bool narrowed) {
  VariantFullSpan span;
  if constexpr (V::kMask) {
    int lo = first, hi = end;
    if (!narrowed) variant_visible_tiles<V, true>(tiles, lo, hi);
    const int lane = static_cast<int>(threadIdx.x % 32);
    const unsigned left = ballot32(lo + lane < hi && tiles(lo + lane, lo + lane + 1) == 2);
    if (left == 0) return span;
    lo += lowest_bit32(left);
    const unsigned right = ballot32(hi - 1 - lane >= lo && tiles(hi - 1 - lane, hi - lane) == 2);
    if (right == 0) return span;  // no full tile among the last 32
    hi -= lowest_bit32(right);
    if (tiles(lo, hi) == 2) span.lo = lo, span.hi = hi;
  }
  return span;
}

// The full span of the key tiles [first, end) of BN keys that rows [q0, q1] visit.
template <class V, int BN>
__device__ __forceinline__ VariantFullSpan variant_full_key_tiles(const VariantArgs& a, const VariantAt& at, int q0,
                                                                  int q1, int first, int end, bool narrowed) {
  return variant_full_span<V>(VariantTiles<V, BN, true>{a, at, q0, q1}, first, end, narrowed);
}

// The full span of the query tiles [first, end) of BM rows that see keys [k0, k1].
template <class V, int BM>
__device__ __forceinline__ VariantFullSpan variant_full_query_tiles(const VariantArgs& a, const VariantAt& at, int k0,
                                                                    int k1, int first, int end, bool narrowed) {
  return variant_full_span<V>(VariantTiles<V, BM, false>{a, at, k0, k1}, first, end, narrowed);
}

// Whether key tile (or, key-major, query tile) `tile` of a block needs the per-element mask: it
// does unless it lies in the block's full span (plain kernels: never, for the variant's part).
// Tiles outside the span keep the mask even where tile() might prove them full one by one: the
// span holds the full tiles of windows, documents, prefixes and chunks, and the loop then keeps
// no classification state.
template <class V>
__device__ __forceinline__ bool variant_partial(VariantFullSpan span, int tile) {
  if constexpr (V::kMask) return !span.contains(tile);
  return false;
}

// P of one element (row, col) of raw score `raw` from its row's lse2, recomputed as the forward
// formed it: the modified score (masked: −inf, so P = 0; `check` as variant_score's) in the
// softmax's log2 units. The backward's and the double backward's score steps start here.
template <class V, bool Causal>
__device__ __forceinline__ float variant_probability(const VariantArgs& a, const VariantAt& at, float raw, float lse2,
                                                     int row, int col, bool check, float scale_log2) {
  const float modified = check ? variant_score<V, Causal, true, true>(a, at, raw, row, col)
                               : variant_score<V, Causal, false, true>(a, at, raw, row, col);
  return exp2_approx(fmaf(modified, variant_softmax_log2<V>(scale_log2), -lse2));
}

// The backward's score step for one element (row, col) of raw score `raw`: P (into p, 0 where
// masked) from the row's lse2, and the gradient with respect to the raw scaled score, dS =
// P·(dP − delta)·f'(score); with `grads` (exactly one kernel of a backward call, once per
// element) the learnable tensors' gradients P·(dP − delta)·∂f/∂t are added here.
template <class V, bool Causal>
__device__ __forceinline__ float variant_backward(const VariantArgs& a, const VariantAt& at, float raw, float lse2,
                                                  float delta, float dp, int row, int col, bool check,
                                                  float scale_log2, float& p, bool grads) {
  p = variant_probability<V, Causal>(a, at, raw, lse2, row, col, check, scale_log2);
  float g = p * (dp - delta);
  if (p != 0.f) {  // a visible row below n_q (masked keys and rows past n_q have P = 0)
    if constexpr (V::kTensorGrads)
      if (grads) V::tensor_grads(a, g, raw * at.scale, at.batch, at.head, row, col, at.n_q, at.n_k);
    if constexpr (!V::kUnitSlope) g *= V::dscore(a, raw * at.scale, at.batch, at.head, row, col, at.n_q, at.n_k);
  }
  return g;
}

// The double backward's score step for one element (row, col) of raw score `raw`: P (0 where
// masked, `check` as variant_score's) from the row's lse2, and the modification's derivatives at
// the scaled score, f1 = f'(s) and f2 = f''(s) (1 and 0 without a modification, and where P = 0).
template <class V, bool Causal>
__device__ __forceinline__ float variant_double(const VariantArgs& a, const VariantAt& at, float raw, float lse2,
                                                int row, int col, bool check, float scale_log2, float& f1,
                                                float& f2) {
  const float p = variant_probability<V, Causal>(a, at, raw, lse2, row, col, check, scale_log2);
  f1 = 1.f, f2 = 0.f;
  if constexpr (!V::kUnitSlope)
    if (p != 0.f) {  // a visible row below n_q
      f1 = V::dscore(a, raw * at.scale, at.batch, at.head, row, col, at.n_q, at.n_k);
      f2 = V::d2score(a, raw * at.scale, at.batch, at.head, row, col, at.n_q, at.n_k);
    }
  return p;
}

// The epilogue of one row: from its running max (raw units, −inf when no key was seen) and its
// softmax sum l, the factor that O is multiplied by (1/l, or 0 when the row saw nothing) and the
// natural-log LSE. With sinks, exp(sinks[head]) joins the denominator: a row that saw no key
// then has O = 0 and LSE = the sink's logit.
template <class V>
__device__ __forceinline__ void variant_finish_row(const VariantArgs* a, int head, float row_max, float l,
                                                   float scale_log2, float& inv_l, float& lse) {
  if constexpr (V::kSinks) {
    const float m = l > 0.f ? row_max * scale_log2 : -infinity_f32();
    const float s = a->sinks[head] * kLog2e;
    const float top = fmaxf(m, s);
    const float keep = exp2_approx(m - top);
    const float total = l * keep + exp2_approx(s - top);
    inv_l = keep / total;
    lse = (top + log2_approx(total)) * kLn2;
  } else {
    inv_l = l > 0.f ? 1.f / l : 0.f;
    lse = l > 0.f ? (row_max * scale_log2 + log2_approx(l)) * kLn2 : -infinity_f32();
  }
}

}  // namespace kgen
