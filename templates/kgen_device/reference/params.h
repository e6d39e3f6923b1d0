// Parameters of the naive (materialising) attention reference kernels. Included by device
// templates and host code alike, so it uses only built-in types.
#pragma once

namespace kgen {

// One launch pair handles one (batch_index, head_index) and query rows [row0, row0 + rows).
// Inputs use the same logical layouts and element strides as AttentionForwardParams.
struct ReferenceAttentionParams {
  const void* q;  // (batch, heads_q, n_q, head_dim), element type T
  const void* k;  // (batch, heads_kv, n_k, head_dim)
  const void* v;  // (batch, heads_kv, n_k, head_dim)
  double* scores; // scratch, fp64, (rows, n_k) row-major: S, then exp(S − m) in place
  float* o;       // (batch, heads_q, n_q, head_dim) contiguous fp32 output
  float* lse;     // (batch, heads_q, n_q) contiguous fp32 output, natural log
  long long q_stride_b, q_stride_h, q_stride_n;
  long long k_stride_b, k_stride_h, k_stride_n;
  long long v_stride_b, v_stride_h, v_stride_n;
  int batch, heads_q, heads_kv, n_q, n_k;
  int head_dim;
  int head_group;   // heads_q / heads_kv
  int causal;       // nonzero: key j masked for j > i + (n_k − n_q)
  int batch_index;  // the (batch, head) of this launch
  int head_index;
  int row0;         // first query row of this launch
  int rows;         // query rows in this launch (the scratch holds rows · n_k doubles)
  double scale;     // softmax scale
};

// The naive backward / double backward references (attention_bwd_naive.cuh). One launch pair
// handles one (batch_index, kv_head_index) group: the head_group query heads sharing that kv
// head. Inputs: element type T with the strides below (last dimension contiguous); gq, gk, gv
// are null when that cotangent is absent (= zero) and unused by the first-order backward.
struct ReferenceAttentionBwdParams {
  const void* q;    // (batch, heads_q, n_q, head_dim)
  const void* k;    // (batch, heads_kv, n_k, head_dim)
  const void* v;    // (batch, heads_kv, n_k, head_dim)
  const void* d_o;  // like q
  const void* gq;   // like q, or null
  const void* gk;   // like k, or null
  const void* gv;   // like k, or null
  // Contiguous fp32 outputs. Backward: q_out = dq, k_out = dk, v_out = dv (do_out unused).
  // Double backward: q_out = q_bar, k_out = k_bar, v_out = v_bar, do_out = do_bar.
  float* q_out;   // (batch, heads_q, n_q, head_dim)
  float* k_out;   // (batch, heads_kv, n_k, head_dim)
  float* v_out;   // (batch, heads_kv, n_k, head_dim)
  float* do_out;  // (batch, heads_q, n_q, head_dim)
  // Scratch of this group, fp64 (head_group · n_q, 4): LSE (natural log, −inf when fully
  // masked), D, r, c of each query row x = (head − first head of the group) · n_q + i.
  double* stats;
  long long q_stride_b, q_stride_h, q_stride_n;
  long long k_stride_b, k_stride_h, k_stride_n;
  long long v_stride_b, v_stride_h, v_stride_n;
  long long do_stride_b, do_stride_h, do_stride_n;
  long long gq_stride_b, gq_stride_h, gq_stride_n;
  long long gk_stride_b, gk_stride_h, gk_stride_n;
  long long gv_stride_b, gv_stride_h, gv_stride_n;
  int batch, heads_q, heads_kv, n_q, n_k;
  int head_dim;       // at most kReferenceBwdMaxHeadDim
  int head_group;     // heads_q / heads_kv
  int causal;         // nonzero: key j masked for j > i + (n_k − n_q)
  int batch_index;    // the group of this launch
  int kv_head_index;
  double scale;       // softmax scale
};

// Threads per block of both backward reference kernels, and the largest head_dim they take.
constexpr int kReferenceBwdThreads = 256;
constexpr int kReferenceBwdMaxHeadDim = 256;

}  // namespace kgen
