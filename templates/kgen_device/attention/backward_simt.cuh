// General attention backward on CUDA cores: any element type (float, half_t, bfloat16_t), any
// runtime head_dim d <= DMax, plain fp32 math (no tf32), deterministic (no atomics).
//
// attention_backward_simt_dq: grid (ceil(n_q / Warps), heads_q, batch), one warp per query row
//   i, walking the keys it sees: s = q_i·k_j, dp = dO_i·v_j (warp sums), P = exp2(s·scale_log2 −
//   lse2_i), dS = P·(dp − delta_i), dq_i += dS·k_j; dq_i = s·Σ at the end.
// attention_backward_simt_dkdv: grid (ceil(n_k / Warps), heads_kv, batch), one warp per key j,
//   walking the query rows of every head of its kv group that see it: dv_j += P·dO_i,
//   dk_j += dS·q_i; dk_j = s·Σ.
// Lane l owns the head-dim columns c = 32·ci + l (ci < DMax / 32). lse2 and delta come from
// attention_backward_preprocess (backward_rows.cuh).
//
// Requirements: last dimension contiguous; element alignment only (scalar loads and stores).
#pragma once

#include "kgen_device/attention/backward_rows.cuh"
#include "kgen_device/attention/variant.cuh"

namespace kgen {
namespace bwd_detail {

// x[ci] = row[32·ci + lane] as float, 0 beyond d.
template <class T, int Cols>
__device__ __forceinline__ void load_row(float (&x)[Cols], const T* row, int d, int lane) {
#pragma unroll
  for (int ci = 0; ci < Cols; ++ci) {
    const int c = ci * 32 + lane;
    x[ci] = c < d ? to_float(row[c]) : 0.f;
  }
}

template <class T, int Cols>
__device__ __forceinline__ void store_row(T* row, const float (&x)[Cols], float mul, int d, int lane) {
#pragma unroll
  for (int ci = 0; ci < Cols; ++ci) {
    const int c = ci * 32 + lane;
    if (c < d) row[c] = from_float<T>(x[ci] * mul);
  }
}

template <int Cols>
__device__ __forceinline__ float dot(const float (&a)[Cols], const float (&b)[Cols]) {
  float s = 0.f;
#pragma unroll
  for (int ci = 0; ci < Cols; ++ci) s = fmaf(a[ci], b[ci], s);
  return warp32_sum(s);
}

template <int Cols>
__device__ __forceinline__ void axpy(float (&y)[Cols], float a, const float (&x)[Cols]) {
#pragma unroll
  for (int ci = 0; ci < Cols; ++ci) y[ci] = fmaf(a, x[ci], y[ci]);
}

}  // namespace bwd_detail

// Variant: the score step's modification and mask (variant.cuh), with its inputs `va`. HeadDimV:
// v's, o's and dO's head dim when it is below q's (MLA, docs/kernels/mla.md); 0: p.head_dim.
template <class T, int DMax, int Warps, bool Causal, class Variant = NoVariant, int HeadDimV = 0>
__device__ __forceinline__ void attention_backward_simt_dq(const AttentionBackwardParams& p,
                                                           const VariantArgs* va = nullptr) {
  static_assert(DMax % 32 == 0 && DMax > 0, "DMax must be a multiple of 32");
  constexpr int kCols = DMax / 32;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int row = blockIdx.x * Warps + warp;
  const int head = blockIdx.y;
  const int batch = blockIdx.z;
  // Packed batches: the sequence's rows (its row `row`, workspace row q0 + row).
  const BlockSequence<Variant, AttentionBackwardParams> sequence(p, va, batch);
  const SequenceRows& seq = sequence.rows;
  auto n_q = [&] { return sequence.n_q(); };
  auto n_k = [&] { return sequence.n_k(); };
  if (row >= n_q()) return;
  const int kv_head = head / p.head_group;
  const int d = p.head_dim;
  const int dv = HeadDimV > 0 ? HeadDimV : d;  // v's and dO's columns
  const int limit = Causal ? imin(n_k(), row + n_k() - n_q() + 1) : n_k();
  const int slot = Variant::kPacked ? 0 : batch;
  const long long idx = bwd_detail::stat_row(p, slot, head, seq.q0 + row);
  const float lse2 = p.lse2[idx];
  const float delta = p.delta[idx];

  float q[kCols], d_o[kCols], dq[kCols];
  bwd_detail::load_row<const T>(
      q, bwd_detail::rows_ptr<const T, Variant::kPacked>(p.q, batch, head, seq.q0) + row * p.q.stride_n, d, lane);
  bwd_detail::load_row<const T>(
      d_o, bwd_detail::rows_ptr<const T, Variant::kPacked>(p.d_o, batch, head, seq.q0) + row * p.d_o.stride_n, dv, lane);
#pragma unroll
  for (int ci = 0; ci < kCols; ++ci) dq[ci] = 0.f;
  const T* k_ptr = bwd_detail::rows_ptr<const T, Variant::kPacked>(p.k, batch, kv_head, seq.k0);
  const T* v_ptr = bwd_detail::rows_ptr<const T, Variant::kPacked>(p.v, batch, kv_head, seq.k0);
  for (int j = 0; j < limit; ++j) {
    float k[kCols], v[kCols];
    bwd_detail::load_row<const T>(k, k_ptr + j * p.k.stride_n, d, lane);
    bwd_detail::load_row<const T>(v, v_ptr + j * p.v.stride_n, dv, lane);
    if constexpr (kVariantScores<Variant>) {
      const VariantAt at{batch, head, n_q(), n_k(), p.scale, 1.f / p.scale};
      float pe;
      const float g = variant_backward<Variant, Causal>(*va, at, bwd_detail::dot(q, k), lse2, delta,
                                                        bwd_detail::dot(d_o, v), row, j, true, p.scale_log2, pe, false);
      bwd_detail::axpy(dq, g, k);
      continue;
    }
    const float pe = exp2_approx(fmaf(bwd_detail::dot(q, k), p.scale_log2, -lse2));
    bwd_detail::axpy(dq, pe * (bwd_detail::dot(d_o, v) - delta), k);
  }
  bwd_detail::store_row<T>(bwd_detail::rows_ptr<T, Variant::kPacked>(p.dq, batch, head, seq.q0) + row * p.dq.stride_n, dq,
                           p.scale, d, lane);
}

template <class T, int DMax, int Warps, bool Causal, class Variant = NoVariant, int HeadDimV = 0>
__device__ __forceinline__ void attention_backward_simt_dkdv(const AttentionBackwardParams& p,
                                                             const VariantArgs* va = nullptr) {
  static_assert(DMax % 32 == 0 && DMax > 0, "DMax must be a multiple of 32");
  constexpr int kCols = DMax / 32;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int key = blockIdx.x * Warps + warp;
  const int kv_head = blockIdx.y;
  const int batch = blockIdx.z;
  const BlockSequence<Variant, AttentionBackwardParams> sequence(p, va, batch);
  const SequenceRows& seq = sequence.rows;
  auto n_q = [&] { return sequence.n_q(); };
  auto n_k = [&] { return sequence.n_k(); };
  if (key >= n_k()) return;
  const int d = p.head_dim;
  const int dv_cols = HeadDimV > 0 ? HeadDimV : d;  // v's and dO's columns
  const int begin = Causal ? imax(0, key - (n_k() - n_q())) : 0;

  float k[kCols], v[kCols], dk[kCols], dv[kCols];
  bwd_detail::load_row<const T>(
      k, bwd_detail::rows_ptr<const T, Variant::kPacked>(p.k, batch, kv_head, seq.k0) + key * p.k.stride_n, d, lane);
  bwd_detail::load_row<const T>(
      v, bwd_detail::rows_ptr<const T, Variant::kPacked>(p.v, batch, kv_head, seq.k0) + key * p.v.stride_n, dv_cols, lane);
#pragma unroll
  for (int ci = 0; ci < kCols; ++ci) dk[ci] = dv[ci] = 0.f;
  const int slot = Variant::kPacked ? 0 : batch;
  for (int hg = 0; hg < p.head_group; ++hg) {
    const int head = kv_head * p.head_group + hg;
    const T* q_ptr = bwd_detail::rows_ptr<const T, Variant::kPacked>(p.q, batch, head, seq.q0);
    const T* do_ptr = bwd_detail::rows_ptr<const T, Variant::kPacked>(p.d_o, batch, head, seq.q0);
    for (int i = begin; i < n_q(); ++i) {
      const long long idx = bwd_detail::stat_row(p, slot, head, Variant::kPacked ? seq.q0 + i : i);
      float q[kCols], d_o[kCols];
      bwd_detail::load_row<const T>(q, q_ptr + i * p.q.stride_n, d, lane);
      bwd_detail::load_row<const T>(d_o, do_ptr + i * p.d_o.stride_n, dv_cols, lane);
      if constexpr (kVariantScores<Variant>) {
        const VariantAt at{batch, head, n_q(), n_k(), p.scale, 1.f / p.scale};
        float pe;
        const float g = variant_backward<Variant, Causal>(*va, at, bwd_detail::dot(q, k), p.lse2[idx], p.delta[idx],
                                                          bwd_detail::dot(d_o, v), i, key, true, p.scale_log2, pe,
                                                          lane == 0);
        bwd_detail::axpy(dv, pe, d_o);
        bwd_detail::axpy(dk, g, q);
        continue;
      }
      const float pe = exp2_approx(fmaf(bwd_detail::dot(q, k), p.scale_log2, -p.lse2[idx]));
      bwd_detail::axpy(dv, pe, d_o);
      bwd_detail::axpy(dk, pe * (bwd_detail::dot(d_o, v) - p.delta[idx]), q);
    }
  }
  bwd_detail::store_row<T>(bwd_detail::rows_ptr<T, Variant::kPacked>(p.dk, batch, kv_head, seq.k0) + key * p.dk.stride_n,
                           dk, p.scale, d, lane);
  bwd_detail::store_row<T>(bwd_detail::rows_ptr<T, Variant::kPacked>(p.dv, batch, kv_head, seq.k0) + key * p.dv.stride_n,
                           dv, 1.f, dv_cols, lane);
}

}  // namespace kgen
