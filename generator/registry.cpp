#include "generator/registry.h"

#include "generator/attention_backward.h"
#include "generator/attention_forward.h"
#include "generator/lrpe.h"

namespace kgen {

std::span<const OperatorInfo> operators() {
  static const OperatorInfo kOperators[] = {
      {"attention_fwd", "flash attention forward (O, LSE); fp16/bf16 tensor cores, fp32 general path",
       attention_forward_all_variants},
      {"attention_bwd", "flash attention backward (dQ, dK, dV); fp16/bf16 tensor cores, fp32 general path",
       attention_backward_all_variants},
      {"attention_double_bwd",
       "flash attention double backward (Q̄, K̄, V̄, dŌ), O(n·d) memory; fp16/bf16 tensor cores, fp32 general path",
       attention_double_backward_all_variants},
      {"lrpe_cosine", "LRPE-cosine o = [act(x)·cos Θ, act(x)·sin Θ], forward and backward, every act",
       [](const Target&) { return lrpe_all_variants(LrpeOp::cosine); }},
      {"md_lrpe_cosine", "multi-dimensional LRPE-cosine (1d/2d/3d grids, extra tokens, angle cache), forward and backward",
       [](const Target&) { return lrpe_all_variants(LrpeOp::md_cosine); }},
  };
  return kOperators;
}

const OperatorInfo* find_operator(std::string_view name) {
  for (const auto& op : operators())
    if (op.name == name) return &op;
  return nullptr;
}

}  // namespace kgen
