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

}  // namespace kgen
