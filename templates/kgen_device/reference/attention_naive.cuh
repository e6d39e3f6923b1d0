// Naive attention forward used as the GPU reference for large shapes. Deliberately a different
// algorithm from the flash kernels: the full score rows are materialised in fp64 scratch, then
// an exact three-pass softmax (max, sum, weighted sum of V) runs per row. No online rescaling,
// no tensor cores, no shared tiles. Slow and simple on purpose.
//
// Launch geometry, for each (batch_index, head_index) and chunk [row0, row0 + rows):
//   1. reference_scores<T>:     grid (ceil(n_k / 128), rows), block 128 (any block size
//      works: one thread per (row, key), j = blockIdx.x·blockDim.x + threadIdx.x); rows ≤ 65535.
//   2. reference_softmax_pv<T>: grid (rows), block 256 (any multiple of 32 up to 1024; one
//      block per query row). Must run after (1) on the same scratch (stream order).
// scratch: rows · n_k doubles. Outputs: o (fp32, contiguous (b, h_q, n_q, d)), lse (fp32,
// contiguous (b, h_q, n_q), natural log). Fully masked rows: o = 0, lse = −inf.
#pragma once

#include "kgen_device/core/math.cuh"
#include "kgen_device/core/types.cuh"
#include "kgen_device/core/warp.cuh"
#include "kgen_device/reference/params.h"

namespace kgen {

// S[r, j] = scale · Σ_c q[row0 + r, c] · k[j, c] in fp64; −inf where masked.
template <class T>
__device__ void reference_scores(const ReferenceAttentionParams& p) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  const int r = blockIdx.y;
  const int i = p.row0 + r;
  if (j >= p.n_k || r >= p.rows || i >= p.n_q) return;
  double* out = p.scores + static_cast<long long>(r) * p.n_k + j;
  if (p.causal != 0 && j > i + (p.n_k - p.n_q)) {
    *out = -infinity_f64();
    return;
  }
  const int kv_head = p.head_index / p.head_group;
  const T* q = static_cast<const T*>(p.q) + p.batch_index * p.q_stride_b +
               p.head_index * p.q_stride_h + static_cast<long long>(i) * p.q_stride_n;
  const T* k = static_cast<const T*>(p.k) + p.batch_index * p.k_stride_b +
               kv_head * p.k_stride_h + static_cast<long long>(j) * p.k_stride_n;
  double acc = 0.0;
  for (int c = 0; c < p.head_dim; ++c) {
    acc += static_cast<double>(to_float(q[c])) * static_cast<double>(to_float(k[c]));
  }
  *out = p.scale * acc;
}

namespace reference_detail {

// Block-wide reductions in fp64 (blockDim.x a multiple of 32, at most 1024); every thread gets
// the result. Contains __syncthreads(): call from all threads.
__device__ __forceinline__ double block_reduce(double x, bool is_max) {
  __shared__ double partial[32];
  __shared__ double result;
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const int warps = blockDim.x / 32;
  for (int w = 16; w >= 1; w /= 2) {
    const double y = shfl_xor32(x, w);
    x = is_max ? (y > x ? y : x) : x + y;
  }
  if (lane == 0) partial[warp] = x;
  __syncthreads();
  if (threadIdx.x == 0) {
    double acc = partial[0];
    for (int w = 1; w < warps; ++w) acc = is_max ? (partial[w] > acc ? partial[w] : acc) : acc + partial[w];
    result = acc;
  }
  __syncthreads();
  const double out = result;
  __syncthreads();  // partial/result may be reused by the next call
  return out;
}

}  // namespace reference_detail

// For query row row0 + blockIdx.x: m = max_j S, P = exp(S − m) (written over S), l = Σ P,
// O[c] = Σ_j P_j · v[j, c] / l, LSE = m + ln l; all fp64, stored as fp32.
template <class T>
__device__ void reference_softmax_pv(const ReferenceAttentionParams& p) {
  const int r = blockIdx.x;
  const int i = p.row0 + r;
  if (r >= p.rows || i >= p.n_q) return;  // block-uniform
  double* s = p.scores + static_cast<long long>(r) * p.n_k;
  const long long out_row =
      (static_cast<long long>(p.batch_index) * p.heads_q + p.head_index) * p.n_q + i;

  double m = -infinity_f64();
  for (int j = threadIdx.x; j < p.n_k; j += blockDim.x) m = s[j] > m ? s[j] : m;
  m = reference_detail::block_reduce(m, true);

  float* o = p.o + out_row * p.head_dim;
  if (m == -infinity_f64()) {  // fully masked row (or n_k == 0)
    for (int c = threadIdx.x; c < p.head_dim; c += blockDim.x) o[c] = 0.f;
    if (threadIdx.x == 0) p.lse[out_row] = -infinity_f32();
    return;
  }

  double l = 0.0;
  for (int j = threadIdx.x; j < p.n_k; j += blockDim.x) {
    const double e = exp(s[j] - m);  // exp(−inf) = 0 for masked keys
    s[j] = e;
    l += e;
  }
  l = reference_detail::block_reduce(l, false);  // also orders the s[] writes before the reads

  const int kv_head = p.head_index / p.head_group;
  const T* v = static_cast<const T*>(p.v) + p.batch_index * p.v_stride_b + kv_head * p.v_stride_h;
  for (int c = threadIdx.x; c < p.head_dim; c += blockDim.x) {
    double acc = 0.0;
    for (int j = 0; j < p.n_k; ++j) {
      acc += s[j] * static_cast<double>(to_float(v[static_cast<long long>(j) * p.v_stride_n + c]));
    }
    o[c] = static_cast<float>(acc / l);
  }
  if (threadIdx.x == 0) p.lse[out_row] = static_cast<float>(m + log(l));
}

}  // namespace kgen
