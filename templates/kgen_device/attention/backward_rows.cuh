// Row-wise helper kernels of the attention backward and double backward, any element type and
// head_dim: one warp per (batch, head, query row). Grid (ceil(n_q / Warps), heads_q, batch).
//
//   preprocess: delta = Σ_c dO·O and lse2 = lse·log2(e) (+inf where lse = −inf, so that
//               exp2(s·scale_log2 − lse2) = 0 on a fully masked row); zeroes the row of the
//               fp32 dQ accumulator when the backward adds dQ with atomics.
//   dq_convert: dq = scale · dq_accum, rounded to the output type.
#pragma once

#include "kgen_device/attention/backward_params.h"
#include "kgen_device/core/math.cuh"
#include "kgen_device/core/types.cuh"
#include "kgen_device/core/warp.cuh"

namespace kgen {
namespace bwd_detail {

constexpr float kLog2e = 1.44269504088896341f;

// Base of head (b, h) of a strided tensor argument.
template <class T>
__device__ __forceinline__ T* head_ptr(const AttentionTensorArg& a, int b, int h) {
  return static_cast<T*>(a.data) + b * a.stride_b + h * a.stride_h;
}

// Row index into the fp32 workspace rows (lse2, delta, r, c, dq_accum / head_dim).
__device__ __forceinline__ long long stat_row(const AttentionBackwardParams& p, int b, int h, int i) {
  return (static_cast<long long>(b) * p.heads_q + h) * p.n_q + i;
}

// Double backward (docs/attention.md §4), one element of the four score-shaped tiles:
// in: s = P (masked), dp = dP, g = unscaled gQ·Kᵀ + Q·gKᵀ, z = Z; out: s = P, dp = dS,
// g = H, z = S̄.
__device__ __forceinline__ void second_order(float& s, float& dp, float& g, float& z, float scale, float delta,
                                             float r, float c) {
  const float p = s;
  const float gs = g * scale;
  const float pbar = z + gs * (dp - delta) - r * dp;
  dp = p * (dp - delta);
  z = p * (pbar - c);
  g = p * (gs - r);
}

}  // namespace bwd_detail

template <class T, int Warps>
__device__ __forceinline__ void attention_backward_preprocess(const AttentionBackwardParams& p) {
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int row = blockIdx.x * Warps + warp;
  const int head = blockIdx.y;
  const int batch = blockIdx.z;
  if (row >= p.n_q) return;
  const int d = p.head_dim;
  const T* o = bwd_detail::head_ptr<const T>(p.o, batch, head) + row * p.o.stride_n;
  const T* d_o = bwd_detail::head_ptr<const T>(p.d_o, batch, head) + row * p.d_o.stride_n;
  float sum = 0.f;
  for (int c = lane; c < d; c += 32) sum = fmaf(to_float(o[c]), to_float(d_o[c]), sum);
  sum = warp32_sum(sum);
  const long long idx = bwd_detail::stat_row(p, batch, head, row);
  if (lane == 0) {
    p.delta[idx] = sum;
    const float l = p.lse[batch * p.lse_stride_b + head * p.lse_stride_h + row];
    p.lse2[idx] = l == -infinity_f32() ? infinity_f32() : l * bwd_detail::kLog2e;
  }
  if (p.row_r != nullptr && lane == 0) p.row_r[idx] = p.row_c[idx] = 0.f;  // r/c passes may add splits
  if (p.dq_accum != nullptr) {
    float* acc = p.dq_accum + idx * d;
    for (int c = lane; c < d; c += 32) acc[c] = 0.f;
  }
}

template <class T, int Warps>
__device__ __forceinline__ void attention_backward_dq_convert(const AttentionBackwardParams& p) {
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int row = blockIdx.x * Warps + warp;
  const int head = blockIdx.y;
  const int batch = blockIdx.z;
  if (row >= p.n_q) return;
  const int d = p.head_dim;
  const float* acc = p.dq_accum + bwd_detail::stat_row(p, batch, head, row) * d;
  T* dq = bwd_detail::head_ptr<T>(p.dq, batch, head) + row * p.dq.stride_n;
  for (int c = lane; c < d; c += 32) dq[c] = from_float<T>(p.scale * acc[c]);
}

}  // namespace kgen
