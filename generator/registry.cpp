#include "generator/registry.h"

#include "generator/attention_backward.h"
#include "generator/attention_forward.h"
#include "generator/lrpe.h"

namespace kgen {
namespace {

using Kernels = std::optional<std::vector<KernelSource>>;

// The shape whose heuristic default `kgen warm --db` compiles beside a recorded winner.
constexpr AttentionShape kWarmShape{1, 16, 16, 4096, 4096};
constexpr int kWarmSmCount = 132;

Kernels forward_record(const std::string& variant, const std::string& config, const Target& target) {
  auto spec = parse_attention_forward_spec(variant);
  auto recorded = parse_attention_forward_config(config);
  if (!spec || !recorded) return std::nullopt;
  std::vector<KernelSource> out;
  for (const auto& c : {*recorded, attention_forward_default_config(*spec, kWarmShape, target, kWarmSmCount)})
    if (!check_attention_forward_config(*spec, c, target)) out.push_back(render_attention_forward(*spec, c));
  return out;
}

Kernels backward_record(const std::string& variant, const std::string& config, const Target& target) {
  auto key = parse_attention_backward_variant_key(variant);
  auto recorded = parse_attention_backward_config(config);
  if (!key || !recorded) return std::nullopt;
  const auto [spec, deterministic] = *key;
  std::vector<KernelSource> out;
  for (const auto& c : {*recorded, attention_backward_default_config(spec, kWarmShape, target, kWarmSmCount)})
    if (!check_attention_backward_config(spec, c, target))
      for (BackwardKernel k : attention_backward_kernels(c, deterministic)) out.push_back(render_attention_backward(spec, c, k));
  return out;
}

Kernels double_backward_record(const std::string& variant, const std::string& config, const Target& target) {
  auto spec = parse_double_backward_variant_key(variant);
  auto recorded = parse_attention_backward_config(config);
  if (!spec || !recorded) return std::nullopt;
  std::vector<KernelSource> out;
  for (const auto& c : {*recorded, attention_double_backward_default_config(*spec, target)})
    if (!check_attention_double_backward_config(*spec, c, target))
      for (DoubleBackwardKernel k : attention_double_backward_kernels(c))
        out.push_back(render_attention_double_backward(*spec, c, k));
  return out;
}

// lrpe kernels do not depend on the target.
Kernels lrpe_record(LrpeOp op, const std::string& variant, const std::string& config) {
  auto key = parse_lrpe_variant_key(variant);
  auto recorded = parse_lrpe_config(config);
  if (!key || key->first.op != op || !recorded) return std::nullopt;
  const auto [spec, cache] = *key;
  std::vector<KernelSource> out;
  for (const auto& c : {*recorded, lrpe_default_config(spec, {}, cache)})
    if (!check_lrpe_config(spec, c) && c.cache == cache) out.push_back(render_lrpe(spec, c));
  return out;
}

}  // namespace

std::span<const OperatorInfo> operators() {
  static const OperatorInfo kOperators[] = {
      {"attention_fwd", "flash attention forward (O, LSE); fp16/bf16 tensor cores, fp32 general path",
       attention_forward_all_variants, forward_record},
      {"attention_bwd", "flash attention backward (dQ, dK, dV); fp16/bf16 tensor cores, fp32 general path",
       attention_backward_all_variants, backward_record},
      {"attention_double_bwd",
       "flash attention double backward (Q̄, K̄, V̄, dŌ), O(n·d) memory; fp16/bf16 tensor cores, fp32 general path",
       attention_double_backward_all_variants, double_backward_record},
      {"lrpe_cosine", "LRPE-cosine o = [act(x)·cos Θ, act(x)·sin Θ], forward and backward, every act",
       [](const Target&) { return lrpe_all_variants(LrpeOp::cosine); },
       [](const std::string& v, const std::string& c, const Target&) { return lrpe_record(LrpeOp::cosine, v, c); }},
      {"md_lrpe_cosine", "multi-dimensional LRPE-cosine (1d/2d/3d grids, extra tokens, angle cache), forward and backward",
       [](const Target&) { return lrpe_all_variants(LrpeOp::md_cosine); },
       [](const std::string& v, const std::string& c, const Target&) { return lrpe_record(LrpeOp::md_cosine, v, c); }},
  };
  return kOperators;
}

const OperatorInfo* find_operator(std::string_view name) {
  for (const auto& op : operators())
    if (op.name == name) return &op;
  return nullptr;
}

}  // namespace kgen
