// General attention forward on CUDA cores: any element type (float, half_t, bfloat16_t), any
// runtime head_dim d <= DMax, plain fp32 math (no tf32) with fp32 accumulation, online softmax.
//
// Work split. Grid (ceil(n_q / simt_block_m(Warps)), heads_q, batch); simt_threads(Warps)
// threads; warp w handles query row blockIdx.x·Warps + w. The block stages K and V tiles of BN
// keys in fp32 shared memory ([K: BN x DMax][V: BN x DMax], columns >= d and keys >= n_k zero)
// that all its warps read.
//
// Per warp: lane l owns the head-dim columns c = 32·ci + l (ci < DMax/32) of q and of the O
// accumulator. Scores of 32 keys are formed as per-lane partial dot products (one per key) that
// a butterfly reduce-scatter (31 shuffles) turns into full dot products, lane l ending with key
// l of the group. Softmax runs in the log2 domain with the scale folded in (m = running max of
// raw scores; 0 replaces an all −inf reference so no NaN appears). P·V broadcasts each key's
// probability from its lane and accumulates into the lane's O columns. O is divided by l at the
// end; fully masked rows write O = 0, LSE = −inf. LSE is in the natural log.
//
// Requirements: last dimension contiguous; element alignment only (scalar loads and stores).
#pragma once

#include "kgen_device/attention/forward_config.h"
#include "kgen_device/attention/params.h"
#include "kgen_device/attention/variant.cuh"
#include "kgen_device/core/block.cuh"
#include "kgen_device/core/math.cuh"
#include "kgen_device/core/types.cuh"
#include "kgen_device/core/warp.cuh"

namespace kgen {
namespace simt_detail {

// Namespace-scope constants: forward_config.h's constexpr functions are host-only for nvcc.
template <int Warps>
constexpr int kBlockThreads = attention_fwd::simt_threads(Warps);
template <int Warps>
constexpr int kBlockM = attention_fwd::simt_block_m(Warps);
template <int DMax, int BN>
constexpr int kSmemBytes = attention_fwd::simt_smem_bytes(DMax, BN);

// Stages keys [n0, n0 + BN) of one head into fp32 shared memory (BN x DMax, row-major); keys
// >= n_k and columns >= d become 0.
template <class T, int DMax, int BN, int Threads>
__device__ __forceinline__ void load_tile_f32(float* dst, const T* src, long long row_stride,
                                              int n0, int n_k, int d, int tid) {
  constexpr int kTotal = BN * DMax;
#pragma unroll 4
  for (int idx = tid; idx < kTotal; idx += Threads) {
    const int r = idx / DMax;
    const int c = idx % DMax;
    const int key = n0 + r;
    float x = 0.f;
    if (key < n_k && c < d) x = to_float(src[static_cast<long long>(key) * row_stride + c]);
    dst[idx] = x;
  }
}

// load_tile_f32 for keys that are not evenly strided (paged K/V): key j's row at row_ptr(j). (The
// strided form keeps its own loop: routed through this one, the plain kernel's code changes.)
template <class T, int DMax, int BN, int Threads, class RowPtr>
__device__ __forceinline__ void load_rows_f32(float* dst, RowPtr&& row_ptr, int n0, int n_k, int d, int tid) {
  constexpr int kTotal = BN * DMax;
#pragma unroll 4
  for (int idx = tid; idx < kTotal; idx += Threads) {
    const int r = idx / DMax;
    const int c = idx % DMax;
    const int key = n0 + r;
    float x = 0.f;
    if (key < n_k && c < d) x = to_float(row_ptr(key)[c]);
    dst[idx] = x;
  }
}

}  // namespace simt_detail

// General-path attention forward.
//   T: float, half_t or bfloat16_t.  DMax: compile-time bound of p.head_dim (32, 64, 128, 256;
//   any multiple of 32 works).  BN: keys per K/V tile (multiple of 32).  Warps: warps per block
//   = query rows per block.  Causal: bottom-right aligned causal mask.  Variant: the score
//   step's modification, mask and sinks (variant.cuh), with its inputs `va`.  HeadDimV: v's and
//   o's head dim when it is below q's (MLA, docs/kernels/mla.md); 0: p.head_dim, as q's.
template <class T, int DMax, int BN, int Warps, bool Causal, class Variant = NoVariant, int HeadDimV = 0>
__device__ __forceinline__ void attention_forward_simt(const AttentionForwardParams& p, const VariantArgs* va = nullptr) {
  static_assert(is_same<T, float>::value || is_same<T, half_t>::value ||
                    is_same<T, bfloat16_t>::value,
                "the SIMT kernel takes float, half_t or bfloat16_t");
  static_assert(DMax % 32 == 0 && DMax > 0, "DMax must be a multiple of 32");
  static_assert(BN % 32 == 0 && BN > 0, "BN must be a multiple of 32");
  constexpr int kThreads = simt_detail::kBlockThreads<Warps>;
  constexpr int kBlockM = simt_detail::kBlockM<Warps>;
  static_assert(kThreads == Warps * 32 && kBlockM == Warps, "one warp per query row");
  static_assert(2 * BN * DMax * 4 == simt_detail::kSmemBytes<DMax, BN>,
                "shared memory layout must match simt_smem_bytes");
  constexpr int kCols = DMax / 32;    // head-dim columns per lane
  constexpr int kGroups = BN / 32;    // 32-key groups per tile

  float* k_s = reinterpret_cast<float*>(dynamic_smem());
  float* v_s = k_s + BN * DMax;

  const int tid = threadIdx.x;
  const int warp = tid / 32;
  const int lane = tid % 32;
  const int m0 = blockIdx.x * kBlockM;
  const int row = m0 + warp;
  const int head = blockIdx.y;
  const int batch = blockIdx.z;
  const int kv_head = head / p.head_group;
  const SequenceRows seq = sequence_rows<Variant>(va, batch, p.n_q, p.n_k);
  const int n_q = seq.n_q;
  const int n_k = seq.n_k;
  if constexpr (Variant::kPacked)
    if (m0 >= n_q) return;  // past this sequence's rows (block-uniform)
  const int d = p.head_dim;
  const int dv = HeadDimV > 0 ? HeadDimV : d;  // v's and o's columns
  const int diag = n_k - n_q;
  const float scale_log2 = p.scale_log2;
  const bool row_valid = row < n_q;  // warp-uniform

  const T* q_ptr = static_cast<const T*>(p.q) + seq.slot * p.q_stride_b + head * p.q_stride_h +
                   static_cast<long long>(seq.q0) * p.q_stride_n;
  const T* k_ptr = static_cast<const T*>(p.k) + seq.slot * p.k_stride_b + kv_head * p.k_stride_h +
                   static_cast<long long>(seq.k0) * p.k_stride_n;
  const T* v_ptr = static_cast<const T*>(p.v) + seq.slot * p.v_stride_b + kv_head * p.v_stride_h +
                   static_cast<long long>(seq.k0) * p.v_stride_n;

  // Keys [0, n_end) are visible to some row of the block; [0, row_end) to this row.
  int n_end = n_k;
  int row_end = n_k;
  if constexpr (Causal) {
    n_end = imin(n_k, imin(m0 + kBlockM, n_q) + diag);
    row_end = imin(n_k, row + diag + 1);
  }
  const VariantAt at{batch, head, n_q, n_k, p.scale, 1.f / p.scale};
  int n_begin = 0;  // first key of the first tile the block visits
  if constexpr (Variant::kMask) {
    int first = 0, end = (n_end + BN - 1) / BN;
    variant_key_tiles<Variant, BN>(*va, at, m0, imin(m0 + kBlockM, n_q) - 1, first, end);
    n_begin = first * BN;
    n_end = imin(n_end, end * BN);
  }

  float q[kCols];
  float o[kCols];
#pragma unroll
  for (int ci = 0; ci < kCols; ++ci) {
    const int c = ci * 32 + lane;
    q[ci] = row_valid && c < d ? to_float(q_ptr[static_cast<long long>(row) * p.q_stride_n + c])
                               : 0.f;
    o[ci] = 0.f;
  }
  float row_max = -infinity_f32();  // running max of raw scores
  float row_sum = 0.f;              // this lane's partial of l

  for (int n0 = n_begin; n0 < n_end; n0 += BN) {
    __syncthreads();  // every warp finished the previous tile
    if constexpr (Variant::kPaged) {
      // Paged K/V: key j's row of page paged_row(j) (the batch stride steps pages).
      for (int tensor = 0; tensor < 2; ++tensor) {  // k, then v
        const bool keys = tensor == 0;
        const T* head = static_cast<const T*>(keys ? p.k : p.v) + kv_head * (keys ? p.k_stride_h : p.v_stride_h);
        const long long page_stride = keys ? p.k_stride_b : p.v_stride_b, row_stride = keys ? p.k_stride_n : p.v_stride_n;
        simt_detail::load_rows_f32<T, DMax, BN, kThreads>(keys ? k_s : v_s, [&](int key) {
          const PagedRow at = paged_row(va, batch, key, n_k - 1);
          return head + at.page * page_stride + at.row * row_stride;
        }, n0, n_k, d, tid);
      }
    } else {
      simt_detail::load_tile_f32<T, DMax, BN, kThreads>(k_s, k_ptr, p.k_stride_n, n0, n_k, d, tid);
      simt_detail::load_tile_f32<T, DMax, BN, kThreads>(v_s, v_ptr, p.v_stride_n, n0, n_k, dv, tid);
    }
    __syncthreads();
    if (!row_valid) continue;

    // Scores: lane l gets key n0 + 32·grp + l.
    float score[kGroups];
#pragma unroll
    for (int grp = 0; grp < kGroups; ++grp) {
      score[grp] = -infinity_f32();
      if (n0 + grp * 32 >= n_end) continue;  // block-uniform
      float part[32];
#pragma unroll
      for (int j = 0; j < 32; ++j) part[j] = 0.f;
#pragma unroll
      for (int ci = 0; ci < kCols; ++ci) {
        // No runtime `ci·32 < d` guard here: q and K are zero beyond d, and a guard stops the
        // full unroll at DMax >= 128 (part[] then lands in local memory).
        const float* k_col = k_s + grp * 32 * DMax + ci * 32 + lane;
#pragma unroll
        for (int j = 0; j < 32; ++j) part[j] = fmaf(q[ci], k_col[j * DMax], part[j]);
      }
      // Reduce-scatter: after the step of width w, part[j] (j < w) holds key j + (lane & ~(w−1))
      // summed over the lanes that differ in bit w.
#pragma unroll
      for (int level = 0; level < 5; ++level) {  // counted loop: fully unrolled, w constant
        const int w = 16 >> level;
        const bool upper = (lane & w) != 0;
#pragma unroll
        for (int j = 0; j < 16; ++j) {  // constant trip count; `j < w` folds after unrolling
          if (j < w) {
            const float send = pick(upper, part[j], part[j + w]);
            const float keep = pick(upper, part[j + w], part[j]);
            part[j] = keep + shfl_xor32(send, w);
          }
        }
      }
      const int key = n0 + grp * 32 + lane;
      if constexpr (kVariantScores<Variant>)
        score[grp] = variant_score<Variant, Causal>(*va, at, part[0], row, key, true);
      else
        score[grp] = key < row_end ? part[0] : -infinity_f32();
    }

    // Online softmax over this tile.
    float mx = row_max;
#pragma unroll
    for (int grp = 0; grp < kGroups; ++grp) mx = fmaxf(mx, score[grp]);
    mx = warp32_max(mx);
    const float ref = mx == -infinity_f32() ? 0.f : mx * scale_log2;
    const float alpha = exp2_approx(row_max * scale_log2 - ref);
    row_max = mx;
    row_sum *= alpha;
#pragma unroll
    for (int ci = 0; ci < kCols; ++ci) o[ci] *= alpha;
#pragma unroll
    for (int grp = 0; grp < kGroups; ++grp) {
      score[grp] = exp2_approx(fmaf(score[grp], scale_log2, -ref));
      row_sum += score[grp];
    }

    // O += P·V.
#pragma unroll
    for (int grp = 0; grp < kGroups; ++grp) {
      if (n0 + grp * 32 >= n_end) continue;
#pragma unroll 8
      for (int j = 0; j < 32; ++j) {
        const float pj = shfl32(score[grp], j);
        const float* v_row = v_s + (grp * 32 + j) * DMax + lane;
#pragma unroll
        for (int ci = 0; ci < kCols; ++ci) {
          if (ci * 32 < dv) o[ci] = fmaf(pj, v_row[ci * 32], o[ci]);
        }
      }
    }
  }

  if (!row_valid) return;
  const float l = warp32_sum(row_sum);
  float inv_l = l > 0.f ? 1.f / l : 0.f;
  float sink_lse = 0.f;
  if constexpr (Variant::kSinks) variant_finish_row<Variant>(va, head, row_max, l, scale_log2, inv_l, sink_lse);
  T* o_ptr = static_cast<T*>(p.o) + seq.slot * p.o_stride_b + head * p.o_stride_h +
             static_cast<long long>(seq.q0 + row) * p.o_stride_n;
#pragma unroll
  for (int ci = 0; ci < kCols; ++ci) {
    const int c = ci * 32 + lane;
    if (c < dv) o_ptr[c] = from_float<T>(o[ci] * inv_l);
  }
  if (p.lse != nullptr && lane == 0) {
    p.lse[seq.slot * p.lse_stride_b + head * p.lse_stride_h + seq.q0 + row] =
        Variant::kSinks ? sink_lse : l > 0.f ? (row_max * scale_log2 + log2_approx(l)) * kLn2 : -infinity_f32();
  }
}

}  // namespace kgen
