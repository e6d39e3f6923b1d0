// Naive attention backward and double backward, the GPU references for shapes too large for the
// CPU (docs/attention.md §3, §4). Deliberately unlike the flash kernels: one block per row, every
// P_ij rebuilt from the scores in fp64 in every pass (exact max, sum, then P = exp(S − LSE)),
// the formulas taken by their definitions (D_i = dO_i·O_i with O recomputed here, r_i = Σ_j
// P_ij·G_ij, c_i = Σ_j P_ij·P̄_ij: not the closed forms a fused kernel uses), no tensor cores, no
// tiles, nothing n×n stored. Slow and simple on purpose; kDouble selects the double backward.
//
// Launch geometry, for each group (batch_index, kv_head_index) in stream order:
//   1. reference_bwd_rows<T, kDouble>: grid (head_group · n_q), block kReferenceBwdThreads. One
//      block per query row x = (h − kv_head_index·head_group)·n_q + i of the group: writes
//      LSE, D (and r, c) of the row to stats, and dq (double backward: q_bar and do_bar).
//   2. reference_bwd_keys<T, kDouble>: grid (n_k), same block. One block per key row j of the
//      kv head: dk and dv (double backward: k_bar and v_bar), summed over the head_group · n_q
//      query rows of the group with P_ij rebuilt from the LSE of (1). Must run after (1).
// Inside a block, each pair (row, key) gets its scalars from one warp (lanes split the head dim:
// coalesced reads), and each output column c = threadIdx.x < head_dim sums weight·row[c] over
// chunks of kChunk pairs staged in shared memory. All accumulation is fp64; outputs are fp32.
#pragma once

#include "kgen_device/core/math.cuh"
#include "kgen_device/core/types.cuh"
#include "kgen_device/core/warp.cuh"
#include "kgen_device/reference/attention_naive.cuh"  // reference_detail::block_reduce
#include "kgen_device/reference/params.h"

namespace kgen {
namespace reference_bwd {

constexpr int kChunk = kReferenceBwdThreads;  // pairs staged per chunk: one per thread
constexpr int kMaxWeights = 4;

// Rows of one tensor seen as a list: row x is at base + (x / per_head)·stride_h +
// (x % per_head)·stride_n. A null base is an absent tensor and reads as zeros.
template <class T>
struct Rows {
  const T* base;
  long long stride_h, stride_n;
  int per_head;
  __device__ const T* row(int x) const {
    return base + (x / per_head) * stride_h + static_cast<long long>(x % per_head) * stride_n;
  }
};

// The rows of heads head0, head0 + 1, ... of batch `batch` (per_head rows each).
template <class T>
__device__ Rows<T> rows_of(const void* base, long long stride_b, long long stride_h, long long stride_n, int batch,
                           int head0, int per_head) {
  if (base == nullptr) return Rows<T>{nullptr, 0, 0, per_head};
  return Rows<T>{static_cast<const T*>(base) + batch * stride_b + head0 * stride_h, stride_h, stride_n, per_head};
}

template <class T>
__device__ __forceinline__ double load(const T* p, int c) {
  return static_cast<double>(to_float(p[c]));
}

// Copies row x of `r` (zeros when absent) into the fp64 shared vector `out`; call from all threads.
template <class T>
__device__ void stage_row(const Rows<T>& r, int x, double* out, int d) {
  for (int c = threadIdx.x; c < d; c += blockDim.x) out[c] = r.base != nullptr ? load(r.row(x), c) : 0.0;
}

// Σ_c row_x[c]·vec[c] by the calling warp (every lane gets it); 0 for an absent tensor.
// Must be called by all 32 lanes of the warp with the same x.
template <class T>
__device__ double warp_dot(const Rows<T>& r, int x, const double* vec, int d) {
  if (r.base == nullptr) return 0.0;
  const T* p = r.row(x);
  double acc = 0.0;
  for (int c = threadIdx.x % 32; c < d; c += 32) acc += load(p, c) * vec[c];
  for (int w = 16; w >= 1; w /= 2) acc += shfl_xor32(acc, w);
  return acc;
}

struct SweepShared {
  double weight[kMaxWeights][kChunk];
  double scalar[kChunk];
};

// For every pair x < count, f(x, w) (run by one warp, the same x on every lane) returns a
// scalar and sets the weights w[0 .. kW). Returns the block-wide max (is_max) or sum of the
// scalars; adds Σ_x w[a]·src[a].row(x)[c] to acc[a] for this thread's column c = threadIdx.x
// (when c < d; absent sources add nothing). Contains __syncthreads(): call from all threads.
template <class T, int kW, class F>
__device__ double sweep(SweepShared& sh, int count, bool is_max, const Rows<T> (&src)[kW], double (&acc)[kW], int d,
                        F f) {
  static_assert(kW >= 1 && kW <= kMaxWeights, "weights per pair");
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  double partial = is_max ? -infinity_f64() : 0.0;
  for (int x0 = 0; x0 < count; x0 += kChunk) {
    const int n = imin(kChunk, count - x0);
    for (int xx = warp; xx < n; xx += warps) {
      double w[kW];
      const double s = f(x0 + xx, w);
      if (lane == 0) {
        for (int a = 0; a < kW; ++a) sh.weight[a][xx] = w[a];
        sh.scalar[xx] = s;
      }
    }
    __syncthreads();
    const int t = threadIdx.x;
    if (t < n) partial = is_max ? (sh.scalar[t] > partial ? sh.scalar[t] : partial) : partial + sh.scalar[t];
    if (t < d)
      for (int a = 0; a < kW; ++a) {
        if (src[a].base == nullptr) continue;
        for (int xx = 0; xx < n; ++xx) {
          const double wt = sh.weight[a][xx];
          if (wt != 0.0) acc[a] += wt * load(src[a].row(x0 + xx), t);
        }
      }
    __syncthreads();
  }
  return reference_detail::block_reduce(partial, is_max);
}

}  // namespace reference_bwd

// Kernel 1: one block per query row of the group (see the top of the file).
template <class T, bool kDouble>
__device__ void reference_bwd_rows(const ReferenceAttentionBwdParams& p) {
  using namespace reference_bwd;
  __shared__ double q_s[kReferenceBwdMaxHeadDim], do_s[kReferenceBwdMaxHeadDim], gq_s[kReferenceBwdMaxHeadDim];
  __shared__ SweepShared sh;
  const int x = blockIdx.x;
  if (x >= p.head_group * p.n_q) return;  // block-uniform
  const int d = p.head_dim, t = threadIdx.x, i = x % p.n_q;
  const int h = p.kv_head_index * p.head_group + x / p.n_q;
  const double s = p.scale;
  // This query row (row i of head h) and the keys of the group's kv head.
  const Rows<T> q = rows_of<T>(p.q, p.q_stride_b, p.q_stride_h, p.q_stride_n, p.batch_index, h, p.n_q);
  const Rows<T> d_o = rows_of<T>(p.d_o, p.do_stride_b, p.do_stride_h, p.do_stride_n, p.batch_index, h, p.n_q);
  const Rows<T> gq = rows_of<T>(kDouble ? p.gq : nullptr, p.gq_stride_b, p.gq_stride_h, p.gq_stride_n, p.batch_index, h, p.n_q);
  const int hk = p.kv_head_index, b = p.batch_index;
  const Rows<T> k = rows_of<T>(p.k, p.k_stride_b, p.k_stride_h, p.k_stride_n, b, hk, p.n_k);
  const Rows<T> v = rows_of<T>(p.v, p.v_stride_b, p.v_stride_h, p.v_stride_n, b, hk, p.n_k);
  const Rows<T> gk = rows_of<T>(kDouble ? p.gk : nullptr, p.gk_stride_b, p.gk_stride_h, p.gk_stride_n, b, hk, p.n_k);
  const Rows<T> gv = rows_of<T>(kDouble ? p.gv : nullptr, p.gv_stride_b, p.gv_stride_h, p.gv_stride_n, b, hk, p.n_k);
  stage_row(q, i, q_s, d);
  stage_row(d_o, i, do_s, d);
  stage_row(gq, i, gq_s, d);
  __syncthreads();

  const long long out = ((static_cast<long long>(b) * p.heads_q + h) * p.n_q + i) * d;
  double* stats = p.stats + 4LL * x;
  // Keys j < visible are unmasked (causal: bottom-right aligned).
  const int visible = p.causal != 0 ? imin(p.n_k, i + (p.n_k - p.n_q) + 1) : p.n_k;
  if (visible <= 0) {  // fully masked row: P row = 0, so every row output is 0
    for (int c = t; c < d; c += blockDim.x) {
      p.q_out[out + c] = 0.f;
      if (kDouble) p.do_out[out + c] = 0.f;
    }
    if (t == 0) stats[0] = -infinity_f64(), stats[1] = stats[2] = stats[3] = 0.0;
    return;
  }

  const Rows<T> none[1] = {Rows<T>{nullptr, 0, 0, 1}};
  double unused[1] = {0.0};
  auto score = [&](int j) { return s * warp_dot(k, j, q_s, d); };  // S_ij
  // Pass 1: m = max_j S_ij.
  const double m = sweep(sh, visible, true, none, unused, d, [&](int j, double* w) {
    w[0] = 0.0;
    return score(j);
  });
  // Pass 2: l = Σ_j exp(S_ij − m), O_i = Σ_j exp(S_ij − m)·v_j / l, LSE = m + ln l, D_i = dO_i·O_i.
  const Rows<T> src_v[1] = {v};
  double o[1] = {0.0};
  const double l = sweep(sh, visible, false, src_v, o, d, [&](int j, double* w) { return w[0] = exp(score(j) - m); });
  const double lse = m + log(l);
  const double dd = reference_detail::block_reduce(t < d ? do_s[t] * (o[0] / l) : 0.0, false);
  auto prob = [&](int j) { return exp(score(j) - lse); };  // P_ij
  auto dp = [&](int j) { return warp_dot(v, j, do_s, d); };  // dP_ij = dO_i·v_j

  if (!kDouble) {
    // Pass 3: dq_i = s·Σ_j dS_ij·k_j with dS_ij = P_ij·(dP_ij − D_i).
    const Rows<T> src_k[1] = {k};
    double dq[1] = {0.0};
    sweep(sh, visible, false, src_k, dq, d, [&](int j, double* w) {
      w[0] = prob(j) * (dp(j) - dd);
      return 0.0;
    });
    if (t < d) p.q_out[out + t] = static_cast<float>(s * dq[0]);
    if (t == 0) stats[0] = lse, stats[1] = dd, stats[2] = stats[3] = 0.0;
    return;
  }

  auto g = [&](int j) { return s * (warp_dot(k, j, gq_s, d) + warp_dot(gk, j, q_s, d)); };  // G_ij
  // Pass 3: r_i = Σ_j P_ij·G_ij.
  const double r = sweep(sh, visible, false, none, unused, d, [&](int j, double* w) {
    w[0] = 0.0;
    return prob(j) * g(j);
  });
  // P̄_ij = dO_i·gV_j + G_ij·(dP_ij − D_i) − r_i·dP_ij.
  auto pbar = [&](int j, double dp_j, double g_j) { return warp_dot(gv, j, do_s, d) + g_j * (dp_j - dd) - r * dp_j; };
  // Pass 4: c_i = Σ_j P_ij·P̄_ij.
  const double c = sweep(sh, visible, false, none, unused, d, [&](int j, double* w) {
    w[0] = 0.0;
    return prob(j) * pbar(j, dp(j), g(j));
  });
  // Pass 5: q_bar_i = s·Σ_j (dS_ij·gK_j + S̄_ij·k_j); do_bar_i = Σ_j (P_ij·gV_j + H_ij·v_j) with
  // S̄_ij = P_ij·(P̄_ij − c_i) and H_ij = P_ij·(G_ij − r_i).
  const Rows<T> src[4] = {gk, k, gv, v};
  double acc[4] = {0.0, 0.0, 0.0, 0.0};
  sweep(sh, visible, false, src, acc, d, [&](int j, double* w) {
    const double p_j = prob(j), dp_j = dp(j), g_j = g(j);
    w[0] = p_j * (dp_j - dd);
    w[1] = p_j * (pbar(j, dp_j, g_j) - c);
    w[2] = p_j;
    w[3] = p_j * (g_j - r);
    return 0.0;
  });
  if (t < d) {
    p.q_out[out + t] = static_cast<float>(s * (acc[0] + acc[1]));
    p.do_out[out + t] = static_cast<float>(acc[2] + acc[3]);
  }
  if (t == 0) stats[0] = lse, stats[1] = dd, stats[2] = r, stats[3] = c;
}

// Kernel 2: one block per key row of the group's kv head (see the top of the file).
template <class T, bool kDouble>
__device__ void reference_bwd_keys(const ReferenceAttentionBwdParams& p) {
  using namespace reference_bwd;
  __shared__ double k_s[kReferenceBwdMaxHeadDim], v_s[kReferenceBwdMaxHeadDim];
  __shared__ double gk_s[kReferenceBwdMaxHeadDim], gv_s[kReferenceBwdMaxHeadDim];
  __shared__ SweepShared sh;
  const int j = blockIdx.x;
  if (j >= p.n_k) return;  // block-uniform
  const int d = p.head_dim, t = threadIdx.x, b = p.batch_index, hk = p.kv_head_index;
  const int h0 = hk * p.head_group;
  const double s = p.scale;
  const Rows<T> k = rows_of<T>(p.k, p.k_stride_b, p.k_stride_h, p.k_stride_n, b, hk, p.n_k);
  const Rows<T> v = rows_of<T>(p.v, p.v_stride_b, p.v_stride_h, p.v_stride_n, b, hk, p.n_k);
  const Rows<T> gk = rows_of<T>(kDouble ? p.gk : nullptr, p.gk_stride_b, p.gk_stride_h, p.gk_stride_n, b, hk, p.n_k);
  const Rows<T> gv = rows_of<T>(kDouble ? p.gv : nullptr, p.gv_stride_b, p.gv_stride_h, p.gv_stride_n, b, hk, p.n_k);
  // The group's query rows x = (h − h0)·n_q + i, and their row terms from kernel 1.
  const Rows<T> q = rows_of<T>(p.q, p.q_stride_b, p.q_stride_h, p.q_stride_n, b, h0, p.n_q);
  const Rows<T> d_o = rows_of<T>(p.d_o, p.do_stride_b, p.do_stride_h, p.do_stride_n, b, h0, p.n_q);
  const Rows<T> gq = rows_of<T>(kDouble ? p.gq : nullptr, p.gq_stride_b, p.gq_stride_h, p.gq_stride_n, b, h0, p.n_q);
  const double* stats = p.stats;
  stage_row(k, j, k_s, d);
  stage_row(v, j, v_s, d);
  stage_row(gk, j, gk_s, d);
  stage_row(gv, j, gv_s, d);
  __syncthreads();

  const int count = p.head_group * p.n_q;
  // P_xj = exp(S_xj − LSE_x); 0 where key j is masked for row x or the row is fully masked.
  auto prob = [&](int x) {
    const int i = x % p.n_q;
    const double lse = stats[4LL * x];
    if ((p.causal != 0 && j > i + (p.n_k - p.n_q)) || lse == -infinity_f64()) return 0.0;
    return exp(s * warp_dot(q, x, k_s, d) - lse);
  };
  const long long out = ((static_cast<long long>(b) * p.heads_kv + hk) * p.n_k + j) * d;

  if (!kDouble) {
    // dk_j = s·Σ_x dS_xj·q_x with dS_xj = P_xj·(dP_xj − D_x); dv_j = Σ_x P_xj·dO_x.
    const Rows<T> src[2] = {q, d_o};
    double acc[2] = {0.0, 0.0};
    sweep(sh, count, false, src, acc, d, [&](int x, double* w) {
      const double p_x = prob(x);
      w[0] = p_x == 0.0 ? 0.0 : p_x * (warp_dot(d_o, x, v_s, d) - stats[4LL * x + 1]);
      w[1] = p_x;
      return 0.0;
    });
    if (t < d) {
      p.k_out[out + t] = static_cast<float>(s * acc[0]);
      p.v_out[out + t] = static_cast<float>(acc[1]);
    }
    return;
  }

  // k_bar_j = s·Σ_x (dS_xj·gQ_x + S̄_xj·q_x); v_bar_j = Σ_x H_xj·dO_x, with G, P̄, S̄, H as in
  // kernel 1 and the row terms D, r, c of kernel 1.
  const Rows<T> src[3] = {gq, q, d_o};
  double acc[3] = {0.0, 0.0, 0.0};
  sweep(sh, count, false, src, acc, d, [&](int x, double* w) {
    w[0] = w[1] = w[2] = 0.0;
    const double p_x = prob(x);
    if (p_x == 0.0) return 0.0;
    const double dd = stats[4LL * x + 1], r = stats[4LL * x + 2], c = stats[4LL * x + 3];
    const double dp_x = warp_dot(d_o, x, v_s, d);
    const double g_x = s * (warp_dot(gq, x, k_s, d) + warp_dot(q, x, gk_s, d));
    const double pbar = warp_dot(d_o, x, gv_s, d) + g_x * (dp_x - dd) - r * dp_x;
    w[0] = p_x * (dp_x - dd);
    w[1] = p_x * (pbar - c);
    w[2] = p_x * (g_x - r);
    return 0.0;
  });
  if (t < d) {
    p.k_out[out + t] = static_cast<float>(s * (acc[0] + acc[1]));
    p.v_out[out + t] = static_cast<float>(acc[2]);
  }
}

}  // namespace kgen
