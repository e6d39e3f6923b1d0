// Second kernel of a split-keys forward (forward_ws.cuh with SplitKeys): merges the key ranges'
// partial results into o and lse.
//
// Each range s wrote, per query row, O_s = (Σ_j∈s p_j·v_j) / l_s in fp32 and lse2_s = log2 of
// its scaled scores' sum of exponentials (−inf when the row saw none of its keys). With
// M = max_s lse2_s and L = Σ_s 2^(lse2_s − M):
//   o = Σ_s 2^(lse2_s − M) · O_s / L   and   lse = (M + log2 L) · ln 2,
// O = 0 and lse = −inf for a row that saw no key in any range (the forward's convention).
//
// Grid (ceil(n_q / 4), heads_q, batch), 128 threads: warp w merges row 4·blockIdx.x + w, each
// lane 4 adjacent columns per 128 (16-byte loads of the workspace, 8-byte stores of o; the head
// dim is a multiple of 8, o's rows 16-byte aligned). The weights are recomputed per column chunk
// from the broadcast lse2 loads, so any number of splits needs no shared memory.
//
// Launched after the split kernel as a programmatic dependent launch on sm_90 and later: its
// blocks may be scheduled while the split kernel runs and wait for it before reading.
#pragma once

#include "kgen_device/attention/forward_config.h"
#include "kgen_device/attention/params.h"
#include "kgen_device/core/grid_dependency.cuh"
#include "kgen_device/core/math.cuh"
#include "kgen_device/core/types.cuh"
#include "kgen_device/core/warp.cuh"

namespace kgen {

// T: o's element type (half_t or bfloat16_t).
template <class T>
__device__ __forceinline__ void attention_forward_combine(const AttentionForwardSplitParams& sp) {
  const AttentionForwardParams& p = sp.a;
  wait_for_prior_grid();  // the split kernel's partial results
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row = blockIdx.x * attention_fwd::kCombineRows + warp;
  const int head = blockIdx.y, batch = blockIdx.z;
  if (row >= p.n_q) return;
  const long long rows = static_cast<long long>(p.batch) * p.heads_q * p.n_q;
  const long long r = (static_cast<long long>(batch) * p.heads_q + head) * p.n_q + row;
  const int splits = sp.splits;

  const float* lse_s = sp.lse_partial + r;  // range s: lse_s[s · rows]
  float m = -infinity_f32();
  for (int s = lane; s < splits; s += 32) m = fmaxf(m, lse_s[s * rows]);
  m = warp32_max(m);
  float sum = 0.f;
  if (m != -infinity_f32())
    for (int s = lane; s < splits; s += 32) sum += exp2_approx(lse_s[s * rows] - m);
  sum = warp32_sum(sum);
  const float inv_sum = sum > 0.f ? 1.f / sum : 0.f;

  T* out = static_cast<T*>(p.o) + batch * p.o_stride_b + head * p.o_stride_h + row * p.o_stride_n;
  const long long o_step = rows * p.head_dim;  // from one range's row to the next
  for (int c = 4 * lane; c < p.head_dim; c += 128) {
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    const float* o_s = sp.o_partial + r * p.head_dim + c;
    for (int s = 0; s < splits; ++s, o_s += o_step) {
      const float l = lse_s[s * rows];
      if (l == -infinity_f32()) continue;  // the range saw none of this row's keys
      const float w = exp2_approx(l - m);
      const float4 v = *reinterpret_cast<const float4*>(o_s);
      acc.x += w * v.x, acc.y += w * v.y, acc.z += w * v.z, acc.w += w * v.w;
    }
    *reinterpret_cast<uint2*>(out + c) =
        make_uint2(pack2<T>(acc.x * inv_sum, acc.y * inv_sum), pack2<T>(acc.z * inv_sum, acc.w * inv_sum));
  }
  if (p.lse != nullptr && lane == 0)
    p.lse[batch * p.lse_stride_b + head * p.lse_stride_h + row] = sum > 0.f ? (m + log2_approx(sum)) * kLn2 : -infinity_f32();
}

}  // namespace kgen
