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

}  // namespace kgen
