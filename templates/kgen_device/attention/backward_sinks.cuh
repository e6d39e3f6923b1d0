// The attention sinks' gradient (docs/attention.md §8): with sink logit σ_h in every row's
// softmax denominator and no value, ∂L/∂σ_h = −Σ_{b,i} exp(σ_h − lse_{b,h,i}) · delta_{b,h,i},
// delta = rowsum(dO∘O) from attention_backward_preprocess (backward_rows.cuh), lse2 = lse·log2 e.
// Grid (ceil(n_q / (32·Warps)), heads_q, batch; a packed batch's longest sequence and sequence
// count): one row per thread, a warp sum, one atomic add
// per warp into va->sinks_grad[h] (which the host zeroes first).
#pragma once

#include "kgen_device/attention/backward_params.h"
#include "kgen_device/attention/variant.cuh"
#include "kgen_device/core/atomic.cuh"
#include "kgen_device/core/math.cuh"
#include "kgen_device/core/warp.cuh"

namespace kgen {

template <int Warps>
__device__ __forceinline__ void attention_backward_sinks(const AttentionBackwardParams& p, const VariantArgs* va) {
  constexpr float kLog2e = 1.44269504088896341f;
  const int row = static_cast<int>(blockIdx.x) * Warps * 32 + static_cast<int>(threadIdx.x);
  const int head = blockIdx.y, batch = blockIdx.z;
  // A packed batch (cu_seqlens set): the grid's batch is a sequence, its rows those of the
  // sequence at its offset in the one physical batch.
  int rows = p.n_q, slot = batch, row0 = 0;
  if (va->cu_seqlens_q != nullptr)
    row0 = va->cu_seqlens_q[batch], rows = va->cu_seqlens_q[batch + 1] - row0, slot = 0;
  float x = 0.f;
  if (row < rows) {
    const long long idx = (static_cast<long long>(slot) * p.heads_q + head) * p.n_q + row0 + row;
    x = -exp2_approx(va->sinks[head] * kLog2e - p.lse2[idx]) * p.delta[idx];
  }
  x = warp32_sum(x);
  if (threadIdx.x % 32 == 0) red_add(va->sinks_grad + head, x);
}

}  // namespace kgen
