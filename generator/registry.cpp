#include "generator/registry.h"

#include "generator/attention_backward.h"
#include "generator/attention_forward.h"
#include "generator/lrpe.h"
#include "generator/paged_append.h"

namespace kgen {
namespace {

// The shape whose heuristic default `kgen warm --db` and `kgen inspect` use.
constexpr AttentionShape kWarmShape{1, 16, 16, 4096, 4096};
constexpr int kWarmSmCount = 132;

// The kernels of one config: `config` parsed (empty: `fallback`, the default), checked, rendered.
// parse(text) → optional<Config>; check(config) → optional<string> why not; render(config) →
// vector<KernelSource>.
template <class Config, class Parse, class Check, class Render>
ConfigKernels kernels_of(const std::string& config, const Config& fallback, Parse parse, Check check, Render render) {
  Config c = fallback;
  if (!config.empty()) {
    auto parsed = parse(config);
    if (!parsed) return {{}, ConfigKernels::Problem::unparsable_config, "cannot parse config '" + config + "'"};
    c = *parsed;
  }
  if (auto why = check(c))
    return {{}, ConfigKernels::Problem::invalid_config,
            (config.empty() ? std::string("the default config") : "config '" + config + "'") + ": " + *why};
  return {render(c), ConfigKernels::Problem::none, {}};
}

ConfigKernels unknown_variant(const std::string& variant) {
  return {{}, ConfigKernels::Problem::unknown_variant, "unknown variant key '" + variant + "'"};
}

// A variant key whose attention variant text (".var{…}") does not parse.
ConfigKernels bad_attention_variant(const std::string& variant, const AttentionForwardSpec& spec) {
  if (auto why = check_attention_forward_spec(spec))
    return {{}, ConfigKernels::Problem::unknown_variant, "variant key '" + variant + "': " + *why};
  return {};
}

ConfigKernels forward_kernels(const std::string& variant, const std::string& config, const Target& target) {
  auto spec = parse_attention_forward_spec(variant);
  if (!spec) return unknown_variant(variant);
  if (ConfigKernels bad = bad_attention_variant(variant, *spec); !bad.error.empty()) return bad;
  return kernels_of(
      config, attention_forward_default_config(*spec, kWarmShape, target, kWarmSmCount), parse_attention_forward_config,
      [&](const auto& c) { return check_attention_forward_config(*spec, c, target); },
      [&](const auto& c) { return render_attention_forward_kernels(*spec, c); });
}

ConfigKernels backward_kernels(const std::string& variant, const std::string& config, const Target& target) {
  auto key = parse_attention_backward_variant_key(variant);
  if (!key) return unknown_variant(variant);
  const auto [spec, deterministic] = *key;
  if (ConfigKernels bad = bad_attention_variant(
          variant, {spec.dtype, spec.head_dim, spec.causal, spec.variant, spec.sinks, spec.packed});
      !bad.error.empty())
    return bad;
  return kernels_of(
      config, attention_backward_default_config(spec, kWarmShape, target, kWarmSmCount), parse_attention_backward_config,
      [&](const auto& c) { return check_attention_backward_config(spec, c, target); },
      [&](const auto& c) {
        std::vector<KernelSource> out;
        for (BackwardKernel k : attention_backward_kernels(c, deterministic)) out.push_back(render_attention_backward(spec, c, k));
        return out;
      });
}

ConfigKernels double_backward_kernels(const std::string& variant, const std::string& config, const Target& target) {
  auto spec = parse_double_backward_variant_key(variant);
  if (!spec) return unknown_variant(variant);
  return kernels_of(
      config, attention_double_backward_default_config(*spec, target), parse_attention_double_backward_config,
      [&](const auto& c) { return check_attention_double_backward_config(*spec, c, target); },
      [&](const auto& c) {
        std::vector<KernelSource> out;
        for (DoubleBackwardKernel k : attention_double_backward_kernels(c)) out.push_back(render_attention_double_backward(*spec, c, k));
        return out;
      });
}

// The texts of `configs` (to_string of each).
template <class Config>
ConfigSpace space_of(const std::vector<Config>& configs) {
  ConfigSpace out;
  for (const Config& c : configs) out.configs.push_back(to_string(c));
  return out;
}

ConfigSpace unknown_variant_space(const std::string& variant) { return {{}, unknown_variant(variant).error}; }

ConfigSpace forward_space(const std::string& variant, const Target& target) {
  auto spec = parse_attention_forward_spec(variant);
  if (!spec) return unknown_variant_space(variant);
  if (auto why = check_attention_forward_spec(*spec)) return {{}, "variant key '" + variant + "': " + *why};
  return space_of(attention_forward_config_space(*spec, target));
}

ConfigSpace backward_space(const std::string& variant, const Target& target) {
  auto key = parse_attention_backward_variant_key(variant);
  if (!key) return unknown_variant_space(variant);
  return space_of(attention_backward_config_space(key->first, target));
}

ConfigSpace double_backward_space(const std::string& variant, const Target& target) {
  auto spec = parse_double_backward_variant_key(variant);
  if (!spec) return unknown_variant_space(variant);
  return space_of(attention_double_backward_config_space(*spec, target));
}

ConfigSpace lrpe_space(LrpeOp op, const std::string& variant) {
  auto key = parse_lrpe_variant_key(variant);
  if (!key || key->first.op != op) return unknown_variant_space(variant);
  return space_of(lrpe_config_space(key->first, key->second));
}

// lrpe kernels do not depend on the target.
ConfigKernels lrpe_kernels(LrpeOp op, const std::string& variant, const std::string& config) {
  auto key = parse_lrpe_variant_key(variant);
  if (!key || key->first.op != op) return unknown_variant(variant);
  const auto [spec, cache] = *key;
  return kernels_of(
      config, lrpe_default_config(spec, {}, cache), parse_lrpe_config,
      [&](const LrpeConfig& c) -> std::optional<std::string> {
        if (c.cache != cache) return std::string(cache ? "the cache variant needs a :cache config" : ":cache needs the .cache variant");
        return check_lrpe_config(spec, c);
      },
      [&](const LrpeConfig& c) { return std::vector<KernelSource>{render_lrpe(spec, c)}; });
}

// The explanation of `config` parsed by `parse` (nullopt when it does not parse).
template <class Parse>
std::optional<std::vector<ConfigField>> explain_with(const std::string& config, Parse parse) {
  auto c = parse(config);
  if (!c) return std::nullopt;
  return explain(*c);
}

std::optional<std::vector<ConfigField>> explain_forward(const std::string& c) { return explain_with(c, parse_attention_forward_config); }
std::optional<std::vector<ConfigField>> explain_backward(const std::string& c) { return explain_with(c, parse_attention_backward_config); }
std::optional<std::vector<ConfigField>> explain_double_backward(const std::string& c) {
  return explain_with(c, parse_attention_double_backward_config);
}
std::optional<std::vector<ConfigField>> explain_lrpe(const std::string& c) { return explain_with(c, parse_lrpe_config); }
std::optional<std::vector<ConfigField>> explain_append(const std::string& c) {
  return explain_with(c, parse_paged_append_config);
}

// paged_append kernels do not depend on the target (vendor-neutral code).
ConfigKernels append_kernels(const std::string& variant, const std::string& config) {
  auto spec = parse_paged_append_spec(variant);
  if (!spec) return unknown_variant(variant);
  return kernels_of(
      config, paged_append_default_config(*spec), parse_paged_append_config,
      [&](const PagedAppendConfig& c) { return check_paged_append_config(*spec, c); },
      [&](const PagedAppendConfig& c) { return std::vector<KernelSource>{render_paged_append(*spec, c)}; });
}

ConfigSpace append_space(const std::string& variant) {
  auto spec = parse_paged_append_spec(variant);
  if (!spec) return unknown_variant_space(variant);
  return space_of(paged_append_config_space(*spec));
}

std::string forward_shape_variant(DType dtype, int head_dim, bool causal, std::string* why) {
  const AttentionForwardSpec spec{dtype, head_dim, causal};
  if (auto problem = check_attention_forward_spec(spec)) {
    *why = *problem;
    return "";
  }
  return to_string(spec);
}

}  // namespace

std::span<const OperatorInfo> operators() {
  static const OperatorInfo kOperators[] = {
      {"attention_fwd", "flash attention forward (O, LSE); fp16/bf16 tensor cores, fp32 general path",
       attention_forward_all_variants, attention_forward_default_variants, forward_kernels, forward_space, explain_forward,
       forward_shape_variant, ""},
      {"attention_bwd", "flash attention backward (dQ, dK, dV); fp16/bf16 tensor cores, fp32 general path",
       attention_backward_all_variants, attention_backward_default_variants, backward_kernels, backward_space,
       explain_backward, nullptr, "attention_bwd.bf16.d128.causal"},
      {"attention_double_bwd",
       "flash attention double backward (Q̄, K̄, V̄, dŌ), O(n·d) memory; fp16/bf16 tensor cores, fp32 general path",
       attention_double_backward_all_variants, attention_double_backward_default_variants,
       double_backward_kernels, double_backward_space, explain_double_backward, nullptr, ""},
      {"lrpe_cosine", "LRPE-cosine o = [act(x)·cos Θ, act(x)·sin Θ], forward and backward, every act",
       [](const Target&) { return lrpe_all_variants(LrpeOp::cosine); },
       [](const Target&) { return lrpe_default_variants(LrpeOp::cosine); },
       [](const std::string& v, const std::string& c, const Target&) { return lrpe_kernels(LrpeOp::cosine, v, c); },
       [](const std::string& v, const Target&) { return lrpe_space(LrpeOp::cosine, v); }, explain_lrpe, nullptr,
       "lrpe_cosine.fwd.bf16.softmax_seq"},
      {"md_lrpe_cosine", "multi-dimensional LRPE-cosine (1d/2d/3d grids, extra tokens, angle cache), forward and backward",
       [](const Target&) { return lrpe_all_variants(LrpeOp::md_cosine); },
       [](const Target&) { return lrpe_default_variants(LrpeOp::md_cosine); },
       [](const std::string& v, const std::string& c, const Target&) { return lrpe_kernels(LrpeOp::md_cosine, v, c); },
       [](const std::string& v, const Target&) { return lrpe_space(LrpeOp::md_cosine, v); }, explain_lrpe, nullptr, ""},
      {kPagedAppendOp, "paged K/V append: new rows into their pages, optional fused rotary embedding (k, and q)",
       [](const Target&) { return paged_append_all_variants(); },
       [](const Target&) { return paged_append_default_variants(); },
       [](const std::string& v, const std::string& c, const Target&) { return append_kernels(v, c); },
       [](const std::string& v, const Target&) { return append_space(v); }, explain_append, nullptr, ""},
  };
  return kOperators;
}

std::optional<std::vector<KernelSource>> recorded_kernels(const OperatorInfo& op, const std::string& variant,
                                                          const std::string& config, const Target& target) {
  if (config.empty()) return std::nullopt;
  ConfigKernels recorded = op.config_kernels(variant, config, target);
  using enum ConfigKernels::Problem;
  if (recorded.problem == unknown_variant || recorded.problem == unparsable_config) return std::nullopt;
  std::vector<KernelSource> out = std::move(recorded.kernels);
  for (auto& k : op.config_kernels(variant, "", target).kernels) out.push_back(std::move(k));
  return out;
}

std::string operator_names() {
  std::string out;
  for (const auto& op : operators()) out += (out.empty() ? "" : ", ") + std::string(op.name);
  return out;
}

const OperatorInfo* find_operator(std::string_view name) {
  for (const auto& op : operators())
    if (op.name == name) return &op;
  return nullptr;
}

}  // namespace kgen
