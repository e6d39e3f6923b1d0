// kgen C++ API: attention-family kernels, compiled at run time for the GPU they run on,
// cached on disk, launched on the caller's stream in the device's primary context.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "kgen/types.hpp"

namespace kgen {

// A strided view of device memory. Attention tensors use the logical layout
// (batch, heads, n, d) with any strides (elements) whose last dimension is contiguous:
// a (b, n, h, d) tensor is passed as its permuted view.
struct TensorView {
  void* data = nullptr;
  DType dtype = DType::bf16;
  int ndim = 0;
  std::int64_t shape[4] = {};
  std::int64_t strides[4] = {};
  int device = 0;  // CUDA device ordinal; -1 means host memory (rejected by kernels)
};

// Row-major contiguous strides for `shape`.
TensorView make_contiguous_view(void* data, DType dtype, int ndim, const std::int64_t* shape,
                                int device);

struct AttentionOptions {
  double scale = 0;      // softmax scale; <= 0 means 1/sqrt(d)
  bool causal = false;   // key j masked for j > i + (n_k - n_q): bottom-right aligned
  std::string config;    // force a config ("fa2:bm128:bn64:w4:s2"); empty = tuned/heuristic
};

// o = softmax(scale·q·kᵀ (+ mask))·v; lse = natural-log logsumexp of each row's scaled scores
// (fp32, (b, h_q, n_q), -inf where a row is fully masked and its o row is 0). q (b, h_q, n_q, d),
// k and v (b, h_kv, n_k, d) with h_q % h_kv == 0, o like q; fp16/bf16 (tensor cores, fp32
// accumulation) or fp32 (plain fp32 math, no tf32); any d <= 256 (32/64/96/128/256 on tensor
// cores). `lse` may be null. Asynchronous on `stream` (a CUstream, null = legacy default
// stream). Throws kgen::Error naming the offending argument.
void attention_forward(const TensorView& q, const TensorView& k, const TensorView& v,
                       const TensorView& o, const TensorView* lse, const AttentionOptions& options,
                       void* stream);

struct AttentionBackwardOptions {
  double scale = 0;            // softmax scale; <= 0 means 1/sqrt(d); must match the forward's
  bool causal = false;         // must match the forward's
  bool deterministic = false;  // same bits on every run (no floating-point atomics)
  std::string config;          // force a config; empty = tuned/heuristic
  // Scratch memory on q's device: at least attention_backward_workspace_bytes(...). Null means
  // kgen allocates it stream-ordered (cuMemAllocAsync/cuMemFreeAsync) on `stream`.
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;
};

// Bytes of scratch attention_backward needs for these shapes (q: (b, h_q, n_q, d)).
std::size_t attention_backward_workspace_bytes(const TensorView& q, const AttentionBackwardOptions& options);

// Gradients of attention_forward: given dO = ∂L/∂o, writes dq = ∂L/∂q, dk, dv (dk/dv summed over
// the query heads of each kv group for GQA). o and lse are the forward's outputs (lse natural
// log, fp32 (b, h_q, n_q), unit stride along n_q). d_o and dq are shaped like q, dk and dv like
// k. Same dtypes, layouts and limits as attention_forward. dq, dk and dv are overwritten.
void attention_backward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& o,
                        const TensorView& lse, const TensorView& d_o, const TensorView& dq,
                        const TensorView& dk, const TensorView& dv, const AttentionBackwardOptions& options,
                        void* stream);

// Bytes of scratch attention_double_backward needs for these shapes.
std::size_t attention_double_backward_workspace_bytes(const TensorView& q, const AttentionBackwardOptions& options);

// Second-order gradients (attention.md §4). With dq, dk, dv the outputs of attention_backward
// as functions of (q, k, v, d_o) and an outer loss ℒ(dq, dk, dv) whose cotangents are
// gq = ∂ℒ/∂dq (shaped like q), gk, gv (like k), any of them null (= zero, its work skipped),
// writes q_bar = ∂ℒ/∂q, k_bar, v_bar (like k, summed over each kv group) and do_bar = ∂ℒ/∂d_o
// (like q). o and lse are the forward's outputs. Nothing n×n is stored.
void attention_double_backward(const TensorView& q, const TensorView& k, const TensorView& v,
                               const TensorView& o, const TensorView& lse, const TensorView& d_o,
                               const TensorView* gq, const TensorView* gk, const TensorView* gv,
                               const TensorView& q_bar, const TensorView& k_bar, const TensorView& v_bar,
                               const TensorView& do_bar, const AttentionBackwardOptions& options, void* stream);

// kgen's version, e.g. "0.1.0".
const char* version();

}  // namespace kgen
