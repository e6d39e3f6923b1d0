// Kernel parameters of the attention backward and double backward. Included by device templates
// and host code alike, so it uses only built-in types: the layout is identical on both sides.
#pragma once

#include "kgen_device/attention/params.h"  // TensorMapBytes

namespace kgen {

// One strided (batch, heads, n, d) tensor; strides in elements, the last dimension contiguous.
// data == nullptr marks an absent optional tensor (a double-backward cotangent).
struct AttentionTensorArg {
  void* data;
  long long stride_b, stride_h, stride_n;
};

// Shapes as in the forward: q, o, d_o, dq (batch, heads_q, n_q, d); k, v, dk, dv (batch,
// heads_kv, n_k, d); lse (batch, heads_q, n_q) fp32 with unit stride along n_q.
//
// Workspace rows (fp32, contiguous, row index (b·heads_q + h)·n_q + i):
//   lse2[row]  = lse·log2(e), or +inf for a fully masked row (lse = −inf), so that
//                P = exp2(s·scale_log2 − lse2) is 0 there;
//   delta[row] = D_i = Σ_c dO_ic·O_ic;
//   r[row], c[row] (double backward): the row sums of docs/attention.md §4 (zeroed by preprocess);
//   dq_accum[row·d + c] (backward with atomics): unscaled Σ_j dS_ij·K_jc, fp32.
struct AttentionBackwardParams {
  AttentionTensorArg q, k, v, o, d_o;
  AttentionTensorArg dq, dk, dv;                      // backward outputs
  AttentionTensorArg gq, gk, gv;                      // double backward cotangents (optional)
  AttentionTensorArg q_bar, k_bar, v_bar, do_bar;     // double backward outputs
  const float* lse;
  long long lse_stride_b, lse_stride_h;
  float* lse2;
  float* delta;
  float* row_r;
  float* row_c;
  float* dq_accum;
  int batch, heads_q, heads_kv, n_q, n_k;
  int head_dim;      // runtime d; equals the template's D on the tensor-core path
  int head_group;    // heads_q / heads_kv
  float scale;       // softmax scale s
  float scale_log2;  // s · log2(e)
  int stats_splits;  // double backward: key ranges the r/c pass splits each query tile into
                     // (its partial sums add into zeroed rows); 0 or 1 = no split
  float* dkv_accum;  // backward with a K/V head's query heads split over blocks (":g2"): fp32
                     // rows (b·heads_kv + h)·n_k + j of scale·dK, then as many of dV (zeroed by
                     // preprocess, converted by dkv_convert); nullptr otherwise
};

// Parameters of the Hopper backward kernels that use tensor maps (backward_wgmma.cuh: TmaDQ,
// TmaLoads, Pair), passed as a __grid_constant__ so the device can take the maps' addresses.
// dq_map views dq_accum as 3-d (head_dim, n_q, batch·heads_q), innermost first, fp32, in boxes of
// 32 columns by 64 rows (32 with Pair) under the 128-byte swizzle. Maps a kernel does not use are
// left unset.
struct AttentionBackwardTmaParams {
  AttentionBackwardParams a;
  TensorMapBytes dq_map;
  TensorMapBytes q_map, do_map;  // with Q/dO loads by TMA (":l"): 4-d (d, n, heads, batch), boxes of 64 × 64
};

}  // namespace kgen
