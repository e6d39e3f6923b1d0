// kgen C++ API: attention-family kernels, compiled at run time for the GPU they run on,
// cached on disk, launched on the caller's stream in the device's primary context.
#pragma once

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

// kgen's version, e.g. "0.1.0".
const char* version();

}  // namespace kgen
