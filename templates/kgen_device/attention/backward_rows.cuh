// Row-wise helper kernels of the attention backward and double backward, any element type and
// head_dim: attention_bwd::row_lanes(head_dim) lanes per (batch, head, query row), 32 / that rows
// per warp. Grid (ceil(n_q / row_block_rows(Warps, head_dim)), heads_q, batch); the preprocess
// kernel's rows per block are preprocess_block_rows(Warps, head_dim) instead.
//
//   preprocess: delta = Σ_c dO·O and lse2 = lse·log2(e) (+inf where lse = −inf, so that
//               exp2(s·scale_log2 − lse2) = 0 on a fully masked row); zeroes the row of the
//               fp32 dQ accumulator when the backward adds dQ with atomics.
//   dq_convert: dq = scale · dq_accum, rounded to the output type.
//   dkv_convert (grid over the keys: (ceil(n_k / rows), heads_kv, batch)): dk and dv from the
//               fp32 rows of dkv_accum (":g2", whose blocks add scale·dK and dV there).
#pragma once

#include "kgen_device/attention/backward_config.h"
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

// Base of head h of a strided tensor argument at row `row0` of its n dimension when Packed (a
// packed sequence's first row); head_ptr otherwise.
template <class T, bool Packed>
__device__ __forceinline__ T* rows_ptr(const AttentionTensorArg& a, int b, int h, int row0) {
  if constexpr (Packed) return head_ptr<T>(a, b, h) + static_cast<long long>(row0) * a.stride_n;
  else return head_ptr<T>(a, b, h);
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

// The same under a score modification f (docs/attention.md §8, "Double backward"), with f1 =
// f'(s), f2 = f''(s) at the element's scaled score: dS = dZ·f' (dZ = P∘(dP − delta)), G reaches
// dZ as G·f', and f' depending on s adds G·dZ·f'' to S̄. r and c (second_order_stats) are the
// row sums taken with G·f'.
__device__ __forceinline__ void second_order(float& s, float& dp, float& g, float& z, float scale, float delta,
                                             float r, float c, float f1, float f2) {
  const float p = s;
  const float gs = g * scale, gm = gs * f1;
  const float pbar = z + gm * (dp - delta) - r * dp;
  const float dz = p * (dp - delta);
  dp = dz * f1;
  z = fmaf(p * (pbar - c), f1, gs * dz * f2);
  g = p * (gm - r);
}

// One element's share of the row sums r = Σ P·G·f' and c + r·delta = Σ P·(Z + (dP − delta)·G·f')
// (g unscaled, as second_order takes it).
__device__ __forceinline__ void second_order_stats(float p, float dp, float g, float z, float scale, float delta,
                                                   float f1, float& r, float& c) {
  const float gm = g * scale * f1;
  r = fmaf(p, gm, r);
  c = fmaf(p, z + (dp - delta) * gm, c);
}

// A row-wise helper thread's place: `lanes` = row_lanes(head_dim) lanes share a row, `sub` is the
// lane's index among them; rows past n_q keep their lanes for the shuffles but do nothing.
template <int Warps>
struct RowPlace {
  int lanes, sub, row;
  __device__ __forceinline__ static RowPlace of(int head_dim) {
    const int lanes = attention_bwd::row_lanes(head_dim);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    return {lanes, lane % lanes, (static_cast<int>(blockIdx.x) * Warps + warp) * (32 / lanes) + lane / lanes};
  }
};

// N consecutive elements, read or written as one access (at an N-element aligned address).
template <class T, int N>
struct alignas(N * sizeof(T)) Pack {
  T v[N];
};
template <class T>
using Four = Pack<T, 4>;

// Whether every row of the strided argument starts N-element aligned (N-element accesses).
template <class T, int N>
__device__ __forceinline__ bool rows_aligned(const AttentionTensorArg& a) {
  return reinterpret_cast<unsigned long long>(a.data) % (N * sizeof(T)) == 0 && a.stride_n % N == 0 &&
         a.stride_h % N == 0 && a.stride_b % N == 0;
}

// out = scale · acc over d columns, this lane's columns of a row (RowPlace), 4 at a time when the
// output rows are 4-element aligned (`four`; acc rows are whenever d % 4 == 0).
template <class T>
__device__ __forceinline__ void convert_row(const float* acc, T* out, int d, int sub, int lanes, float scale, bool four) {
  if (d % 4 == 0 && four) {
    for (int c = 4 * sub; c < d; c += 4 * lanes) {
      const auto a = *reinterpret_cast<const Four<float>*>(acc + c);
      Four<T> o;
#pragma unroll
      for (int e = 0; e < 4; ++e) o.v[e] = from_float<T>(scale * a.v[e]);
      *reinterpret_cast<Four<T>*>(out + c) = o;
    }
  } else {
    for (int c = sub; c < d; c += lanes) out[c] = from_float<T>(scale * acc[c]);
  }
}

// Zeroes this lane's columns of a row of d floats (16-byte aligned when d % 4 == 0).
__device__ __forceinline__ void zero_row(float* acc, int d, int sub, int lanes) {
  if (d % 4 == 0) {
    for (int c = 4 * sub; c < d; c += 4 * lanes) *reinterpret_cast<Four<float>*>(acc + c) = {};
  } else {
    for (int c = sub; c < d; c += lanes) acc[c] = 0.f;
  }
}

// Sum over the `lanes` lanes of a row (a power of 2, the group aligned in the warp).
__device__ __forceinline__ float row_sum(float x, int lanes) {
  for (int offset = lanes / 2; offset > 0; offset /= 2) x += shfl_xor32(x, offset);
  return x;
}

}  // namespace bwd_detail

// Lanes: preprocess_lanes(head_dim) per row (one per 8 columns); each lane takes
// kPreprocessRows rows, 32 / lanes apart, so that a warp covers kPreprocessRows · 32 / lanes
// consecutive rows and each of its steps reads whole rows. A lane issues the loads of all its
// rows before the first sum: the kernel is bound by the bytes in flight. H200, bf16, d = 128,
// b·h·n_q = 256k rows: 66 µs (cuDNN's dO·O kernel 69 µs), against 127 µs with one row per lane
// and 8-byte loads.
// HeadDimV: o's and dO's head dim when it is below q's (MLA, docs/kernels/mla.md): delta sums
// over those columns, while lanes and the dQ accumulator's rows follow q's p.head_dim; 0: the same.
template <class T, int Warps, int HeadDimV = 0>
__device__ __forceinline__ void attention_backward_preprocess(const AttentionBackwardParams& p) {
  constexpr int R = attention_bwd::kPreprocessRows;
  const int dq_cols = p.head_dim;
  const int d = HeadDimV > 0 ? HeadDimV : dq_cols;  // o's and dO's columns
  const int lanes = attention_bwd::preprocess_lanes(dq_cols);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int sub = lane % lanes, step = 32 / lanes;
  const int first = (static_cast<int>(blockIdx.x) * Warps + warp) * step * R + lane / lanes;
  const int head = blockIdx.y;
  const int batch = blockIdx.z;
  const T* o = bwd_detail::head_ptr<const T>(p.o, batch, head);
  const T* d_o = bwd_detail::head_ptr<const T>(p.d_o, batch, head);
  float sum[R];
#pragma unroll
  for (int j = 0; j < R; ++j) sum[j] = 0.f;
  if (d % 8 == 0 && bwd_detail::rows_aligned<T, 8>(p.o) && bwd_detail::rows_aligned<T, 8>(p.d_o)) {
    for (int c = 8 * sub; c < d; c += 8 * lanes) {
      bwd_detail::Pack<T, 8> x[R], y[R];
#pragma unroll
      for (int j = 0; j < R; ++j) {
        const int row = first + j * step;
        if (row < p.n_q) {
          x[j] = *reinterpret_cast<const bwd_detail::Pack<T, 8>*>(o + row * p.o.stride_n + c);
          y[j] = *reinterpret_cast<const bwd_detail::Pack<T, 8>*>(d_o + row * p.d_o.stride_n + c);
        }
      }
#pragma unroll
      for (int j = 0; j < R; ++j) {
        if (first + j * step < p.n_q) {
#pragma unroll
          for (int e = 0; e < 8; ++e) sum[j] = fmaf(to_float(x[j].v[e]), to_float(y[j].v[e]), sum[j]);
        }
      }
    }
  } else {
#pragma unroll
    for (int j = 0; j < R; ++j) {
      const int row = first + j * step;
      if (row >= p.n_q) continue;
      const T* orow = o + row * p.o.stride_n;
      const T* drow = d_o + row * p.d_o.stride_n;
      for (int c = sub; c < d; c += lanes) sum[j] = fmaf(to_float(orow[c]), to_float(drow[c]), sum[j]);
    }
  }
#pragma unroll
  for (int j = 0; j < R; ++j) sum[j] = bwd_detail::row_sum(sum[j], lanes);
#pragma unroll
  for (int j = 0; j < R; ++j) {
    const int row = first + j * step;
    if (row >= p.n_q) break;
    const long long idx = bwd_detail::stat_row(p, batch, head, row);
    if (sub == 0) {
      p.delta[idx] = sum[j];
      const float l = p.lse[batch * p.lse_stride_b + head * p.lse_stride_h + row];
      p.lse2[idx] = l == -infinity_f32() ? infinity_f32() : l * bwd_detail::kLog2e;
      if (p.row_r != nullptr) p.row_r[idx] = p.row_c[idx] = 0.f;  // r/c passes may add splits
    }
    if (p.dq_accum != nullptr) bwd_detail::zero_row(p.dq_accum + idx * dq_cols, dq_cols, sub, lanes);
    if (p.dkv_accum != nullptr) {
      // Its 2·b·heads_kv·n_k rows, strided by the query rows' count over the rows of this grid.
      const long long q_rows = static_cast<long long>(p.batch) * p.heads_q * p.n_q;
      const long long kv_rows = 2LL * p.batch * p.heads_kv * p.n_k;
      for (long long r = idx; r < kv_rows; r += q_rows) bwd_detail::zero_row(p.dkv_accum + r * dq_cols, dq_cols, sub, lanes);
    }
  }
}

template <class T, int Warps>
__device__ __forceinline__ void attention_backward_dq_convert(const AttentionBackwardParams& p) {
  const int d = p.head_dim;
  const auto [lanes, sub, row] = bwd_detail::RowPlace<Warps>::of(d);
  const int head = blockIdx.y;
  const int batch = blockIdx.z;
  if (row >= p.n_q) return;
  const float* acc = p.dq_accum + bwd_detail::stat_row(p, batch, head, row) * d;
  T* dq = bwd_detail::head_ptr<T>(p.dq, batch, head) + row * p.dq.stride_n;
  bwd_detail::convert_row<T>(acc, dq, d, sub, lanes, p.scale, bwd_detail::rows_aligned<T, 4>(p.dq));
}

template <class T, int Warps>
__device__ __forceinline__ void attention_backward_dkv_convert(const AttentionBackwardParams& p) {
  const int d = p.head_dim;
  const auto [lanes, sub, row] = bwd_detail::RowPlace<Warps>::of(d);
  const int kv_head = blockIdx.y;
  const int batch = blockIdx.z;
  if (row >= p.n_k) return;
  const long long kv_row = (static_cast<long long>(batch) * p.heads_kv + kv_head) * p.n_k + row;
  const long long dv_rows = static_cast<long long>(p.batch) * p.heads_kv * p.n_k;
  T* dk = bwd_detail::head_ptr<T>(p.dk, batch, kv_head) + row * p.dk.stride_n;
  T* dv = bwd_detail::head_ptr<T>(p.dv, batch, kv_head) + row * p.dv.stride_n;
  bwd_detail::convert_row<T>(p.dkv_accum + kv_row * d, dk, d, sub, lanes, 1.f, bwd_detail::rows_aligned<T, 4>(p.dk));
  bwd_detail::convert_row<T>(p.dkv_accum + (dv_rows + kv_row) * d, dv, d, sub, lanes, 1.f,
                             bwd_detail::rows_aligned<T, 4>(p.dv));
}

}  // namespace kgen
