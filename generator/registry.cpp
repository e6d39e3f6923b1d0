#include "generator/registry.h"

#include "generator/attention_backward.h"
#include "generator/attention_forward.h"

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
  };
  return kOperators;
}

const OperatorInfo* find_operator(std::string_view name) {
  for (const auto& op : operators())
    if (op.name == name) return &op;
  return nullptr;
}

}  // namespace kgen
