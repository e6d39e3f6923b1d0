// General attention double backward on CUDA cores (docs/attention.md §4): any element type, any
// runtime head_dim d <= DMax, plain fp32 math, deterministic. The algebra and the names are
// those of double_backward_fa2.cuh; lanes own head-dim columns as in backward_simt.cuh.
//
// Variant (variant.cuh): as double_backward_fa2.cuh's, the mask applied per element on every key.
// Packed batches (Variant::kPacked): a warp's row or key is its sequence's (BlockSequence), its
// tensor rows and workspace rows start at the sequence's first row; the loops add that row under
// `if constexpr`, so that the dense kernels' loops stay as they were (the replay table).
//
// HeadDimV: v's, gV's, dO's, V̄'s and dŌ's head dim when it is below q's (MLA, docs/kernels/mla.md);
// 0: p.head_dim. Those rows are loaded with their columns (the rest zero) and stored with them.
//
// attention_double_backward_simt_q: one warp per query row: pass 1 over its keys forms r and c
//   (written to the workspace), pass 2 accumulates Q̄ and dŌ.
// attention_double_backward_simt_kv: one warp per key: K̄, V̄ over the query rows of every head
//   of its kv group that see it, with lse2, delta, r, c from the workspace.
#pragma once

#include "kgen_device/attention/backward_simt.cuh"

namespace kgen {
namespace bwd_detail {

// x = row of an optional tensor (zeros when absent).
template <class T, int Cols>
__device__ __forceinline__ void load_optional_row(float (&x)[Cols], const AttentionTensorArg& a, int b, int h, int row,
                                                  int d, int lane) {
  if (a.data != nullptr) {
    load_row<T>(x, head_ptr<const T>(a, b, h) + row * a.stride_n, d, lane);
  } else {
#pragma unroll
    for (int ci = 0; ci < Cols; ++ci) x[ci] = 0.f;
  }
}

}  // namespace bwd_detail

template <class T, int DMax, int Warps, bool Causal, class Variant = NoVariant, int HeadDimV = 0>
__device__ __forceinline__ void attention_double_backward_simt_q(const AttentionBackwardParams& p,
                                                                 const VariantArgs* va = nullptr) {
  static_assert(DMax % 32 == 0 && DMax > 0, "DMax must be a multiple of 32");
  constexpr int kCols = DMax / 32;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int row = blockIdx.x * Warps + warp;
  const int head = blockIdx.y;
  const int batch = blockIdx.z;
  // Packed batches: the sequence's rows (its row `row` is tensor row q0 + row).
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
  int q_row = row;  // the row in the tensors
  if constexpr (Variant::kPacked) q_row += seq.q0;
  const long long idx = bwd_detail::stat_row(p, slot, head, q_row);
  const float lse2 = p.lse2[idx];
  const float delta = p.delta[idx];
  const float scale = p.scale;

  float q[kCols], d_o[kCols], gq[kCols];
  bwd_detail::load_optional_row<T>(q, p.q, batch, head, q_row, d, lane);
  bwd_detail::load_optional_row<T>(d_o, p.d_o, batch, head, q_row, dv, lane);
  bwd_detail::load_optional_row<T>(gq, p.gq, batch, head, q_row, d, lane);

  VariantAt at{};
  if constexpr (kVariantScores<Variant>) at = {batch, head, n_q(), n_k(), scale, 1.f / scale};
  // P, dP, unscaled G and Z of key j, and a variant's f', f'' (variant_double); k and v rows are
  // returned for pass 2.
  auto scores = [&](int j, float (&k)[kCols], float (&v)[kCols], float (&gk)[kCols], float (&gv)[kCols], float& s,
                    float& dp, float& g, float& z, float& f1, float& f2) {
    int key_row = j;  // the key's row in the tensors
    if constexpr (Variant::kPacked) key_row += seq.k0;
    bwd_detail::load_optional_row<T>(k, p.k, batch, kv_head, key_row, d, lane);
    bwd_detail::load_optional_row<T>(v, p.v, batch, kv_head, key_row, dv, lane);
    bwd_detail::load_optional_row<T>(gk, p.gk, batch, kv_head, key_row, d, lane);
    bwd_detail::load_optional_row<T>(gv, p.gv, batch, kv_head, key_row, dv, lane);
    if constexpr (kVariantScores<Variant>)
      s = variant_double<Variant, Causal>(*va, at, bwd_detail::dot(q, k), lse2, row, j, true, p.scale_log2, f1, f2);
    else
      s = exp2_approx(fmaf(bwd_detail::dot(q, k), p.scale_log2, -lse2));
    dp = bwd_detail::dot(d_o, v);
    g = bwd_detail::dot(gq, k) + bwd_detail::dot(q, gk);
    z = bwd_detail::dot(d_o, gv);
  };

  float r = 0.f, c = 0.f;
  for (int j = 0; j < limit; ++j) {
    float k[kCols], v[kCols], gk[kCols], gv[kCols], s, dp, g, z, f1 = 1.f, f2 = 0.f;
    scores(j, k, v, gk, gv, s, dp, g, z, f1, f2);
    if constexpr (kVariantScores<Variant>) {
      bwd_detail::second_order_stats(s, dp, g, z, scale, delta, f1, r, c);
    } else {
      r = fmaf(s, g * scale, r);
      c = fmaf(s, z + (dp - delta) * g * scale, c);
    }
  }
  c -= r * delta;
  if (lane == 0) {
    p.row_r[idx] = r;
    p.row_c[idx] = c;
  }

  float qbar[kCols], dobar[kCols];
#pragma unroll
  for (int ci = 0; ci < kCols; ++ci) qbar[ci] = dobar[ci] = 0.f;
  for (int j = 0; j < limit; ++j) {
    float k[kCols], v[kCols], gk[kCols], gv[kCols], s, dp, g, z, f1 = 1.f, f2 = 0.f;
    scores(j, k, v, gk, gv, s, dp, g, z, f1, f2);
    if constexpr (kVariantScores<Variant>) bwd_detail::second_order(s, dp, g, z, scale, delta, r, c, f1, f2);
    else bwd_detail::second_order(s, dp, g, z, scale, delta, r, c);
    bwd_detail::axpy(qbar, dp, gk);
    bwd_detail::axpy(qbar, z, k);
    bwd_detail::axpy(dobar, s, gv);
    bwd_detail::axpy(dobar, g, v);
  }
  bwd_detail::store_row<T>(bwd_detail::head_ptr<T>(p.q_bar, batch, head) + q_row * p.q_bar.stride_n, qbar, scale, d, lane);
  bwd_detail::store_row<T>(bwd_detail::head_ptr<T>(p.do_bar, batch, head) + q_row * p.do_bar.stride_n, dobar, 1.f, dv, lane);
}

template <class T, int DMax, int Warps, bool Causal, class Variant = NoVariant, int HeadDimV = 0>
__device__ __forceinline__ void attention_double_backward_simt_kv(const AttentionBackwardParams& p,
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
  const int dv = HeadDimV > 0 ? HeadDimV : d;  // v's and dO's columns
  const int begin = Causal ? imax(0, key - (n_k() - n_q())) : 0;
  const float scale = p.scale;
  const int slot = Variant::kPacked ? 0 : batch;
  int k_row = key;  // the key's row in the tensors
  if constexpr (Variant::kPacked) k_row += seq.k0;

  float k[kCols], v[kCols], gk[kCols], gv[kCols], kbar[kCols], vbar[kCols];
  bwd_detail::load_optional_row<T>(k, p.k, batch, kv_head, k_row, d, lane);
  bwd_detail::load_optional_row<T>(v, p.v, batch, kv_head, k_row, dv, lane);
  bwd_detail::load_optional_row<T>(gk, p.gk, batch, kv_head, k_row, d, lane);
  bwd_detail::load_optional_row<T>(gv, p.gv, batch, kv_head, k_row, dv, lane);
#pragma unroll
  for (int ci = 0; ci < kCols; ++ci) kbar[ci] = vbar[ci] = 0.f;
  for (int hg = 0; hg < p.head_group; ++hg) {
    const int head = kv_head * p.head_group + hg;
    for (int i = begin; i < n_q(); ++i) {
      int query_row = i;  // the query's row in the tensors
      if constexpr (Variant::kPacked) query_row += seq.q0;
      const long long idx = bwd_detail::stat_row(p, slot, head, query_row);
      float q[kCols], d_o[kCols], gq[kCols];
      bwd_detail::load_optional_row<T>(q, p.q, batch, head, query_row, d, lane);
      bwd_detail::load_optional_row<T>(d_o, p.d_o, batch, head, query_row, dv, lane);
      bwd_detail::load_optional_row<T>(gq, p.gq, batch, head, query_row, d, lane);
      float s, f1 = 1.f, f2 = 0.f;
      if constexpr (kVariantScores<Variant>) {
        const VariantAt at{batch, head, n_q(), n_k(), scale, 1.f / scale};
        s = variant_double<Variant, Causal>(*va, at, bwd_detail::dot(q, k), p.lse2[idx], i, key, true, p.scale_log2,
                                            f1, f2);
      } else {
        s = exp2_approx(fmaf(bwd_detail::dot(q, k), p.scale_log2, -p.lse2[idx]));
      }
      float dp = bwd_detail::dot(d_o, v);
      float g = bwd_detail::dot(gq, k) + bwd_detail::dot(q, gk);
      float z = bwd_detail::dot(d_o, gv);
      if constexpr (kVariantScores<Variant>)
        bwd_detail::second_order(s, dp, g, z, scale, p.delta[idx], p.row_r[idx], p.row_c[idx], f1, f2);
      else
        bwd_detail::second_order(s, dp, g, z, scale, p.delta[idx], p.row_r[idx], p.row_c[idx]);
      bwd_detail::axpy(kbar, dp, gq);
      bwd_detail::axpy(kbar, z, q);
      bwd_detail::axpy(vbar, g, d_o);
    }
  }
  bwd_detail::store_row<T>(bwd_detail::head_ptr<T>(p.k_bar, batch, kv_head) + k_row * p.k_bar.stride_n, kbar, scale, d, lane);
  bwd_detail::store_row<T>(bwd_detail::head_ptr<T>(p.v_bar, batch, kv_head) + k_row * p.v_bar.stride_n, vbar, 1.f, dv, lane);
}

}  // namespace kgen
