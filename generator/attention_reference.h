// Rendering of the naive GPU reference kernels of attention (templates/kgen_device/reference/):
// a materialising scores pass and a softmax·V pass, fp64 accumulation, any head_dim.
#pragma once

#include "generator/kernel_source.h"
#include "generator/target.h"

namespace kgen {

inline constexpr int kReferenceScoresThreads = 128;
inline constexpr int kReferenceSoftmaxThreads = 256;

// S = scale·q·kᵀ (+ causal mask) for one (batch, head) and a chunk of query rows.
KernelSource render_attention_reference_scores(DType dtype);
// Row softmax of S and O = P·v, LSE, for the same chunk.
KernelSource render_attention_reference_softmax_pv(DType dtype);

// The naive backward references (templates/kgen_device/reference/attention_bwd_naive.cuh): a query-row
// pass and a key-row pass per (batch, kv head) group, fp64 accumulation, nothing n×n stored,
// head_dim ≤ kReferenceBwdMaxHeadDim, kReferenceBwdThreads threads per block. `double_backward`
// selects the second-order gradients (q_bar, k_bar, v_bar, do_bar) instead of (dq, dk, dv).
KernelSource render_attention_reference_bwd_rows(DType dtype, bool double_backward);
KernelSource render_attention_reference_bwd_keys(DType dtype, bool double_backward);

}  // namespace kgen
