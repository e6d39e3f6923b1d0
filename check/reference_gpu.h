// The naive GPU reference of attention forward (fp64 scores, fp64 softmax·V, fp32 out): the
// check for shapes too large for the CPU. Itself checked against the CPU reference in tests.
#pragma once

#include <utility>
#include <vector>

#include "kgen/kgen.hpp"

namespace kgen {

// Computes o (fp32, contiguous (b, h_q, n_q, d)) and lse (fp32, contiguous (b, h_q, n_q)) for the
// (batch, head) pairs in `heads` (all pairs if empty), on `stream` of q's device. Rows of other
// heads are left untouched. Synchronises the stream before returning.
void attention_forward_reference_gpu(const TensorView& q, const TensorView& k, const TensorView& v, float* o,
                                     float* lse, bool causal, double scale, void* stream,
                                     const std::vector<std::pair<int, int>>& heads = {});

// The naive GPU references of the backward and the double backward (docs/attention.md §3, §4;
// templates/kgen_device/reference/attention_bwd_naive.cuh): fp64 accumulation, every P_ij rebuilt from
// q and k (no o or lse input: the forward is recomputed), nothing n×n stored, head_dim ≤ 256.
// q, d_o (and gq) are (b, h_q, n_q, d), k, v (and gk, gv) (b, h_kv, n_k, d), all of one dtype
// (fp16/bf16/fp32), any strides with a contiguous last dim, on q's device. Outputs are fp32
// contiguous tensors of the same logical shapes. `groups` lists the (batch, kv head) pairs to
// compute (all if empty): only their rows are written, i.e. the query rows of the group's query
// heads and the key rows of its kv head. Runs on `stream` and synchronises it before returning.
// Checked against the fp64 CPU references in tests/gpu/attention_bwd_gpu_test.cpp.

// dq, dk, dv of the loss ⟨d_o, o⟩ (dk, dv summed over each kv group).
void attention_backward_reference_gpu(const TensorView& q, const TensorView& k, const TensorView& v,
                                      const TensorView& d_o, float* dq, float* dk, float* dv, bool causal,
                                      double scale, void* stream,
                                      const std::vector<std::pair<int, int>>& groups = {});

// q_bar, k_bar, v_bar, do_bar of ℒ = ⟨gq, dq⟩ + ⟨gk, dk⟩ + ⟨gv, dv⟩; a null cotangent is zero.
void attention_double_backward_reference_gpu(const TensorView& q, const TensorView& k, const TensorView& v,
                                             const TensorView& d_o, const TensorView* gq, const TensorView* gk,
                                             const TensorView* gv, float* q_bar, float* k_bar, float* v_bar,
                                             float* do_bar, bool causal, double scale, void* stream,
                                             const std::vector<std::pair<int, int>>& groups = {});

}  // namespace kgen
