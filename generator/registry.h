// The operators kgen knows, by their public names: each operator's generator half, one row per
// operator in registry.cpp. The runtime halves are registered under the same name by the
// operator's own files in the layers above (its TuningProblems in runtime/ops/<op>_tuning, its
// tuner bench in check/<op>_harness, its sweep in tools/sweep_<family>.cpp); code shared by every
// operator iterates these registries and never names one (tests/layers/operator_names.py).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <span>
#include <string_view>
#include <vector>

#include "generator/kernel_source.h"
#include "generator/target.h"

namespace kgen {

// The kernels of one config of one variant, or why there are none ("cannot parse", or the
// config's validity rule for the target).
struct ConfigKernels {
  enum class Problem { none, unknown_variant, unparsable_config, invalid_config };
  std::vector<KernelSource> kernels;
  Problem problem = Problem::none;
  std::string error;  // what `problem` means here; empty when `kernels` is the answer
};

// The configs of one variant that are valid on a target, or why the variant key is not one of the
// operator's.
struct ConfigSpace {
  std::vector<std::string> configs;  // canonical order (the tuner's); may be empty on a target
  std::string error;                 // "unknown variant key '…'"; empty when `configs` is the answer
};

struct OperatorInfo {
  std::string_view name;     // "attention_fwd", the same in the APIs, CLI and tuning database
  std::string_view summary;  // one line for --help and show-config
  // Every variant `kgen warm` compiles for a target.
  std::function<std::vector<KernelSource>(const Target&)> all_variants;
  // The kernels of the built-in defaults a deployment's common calls run on a target (`kgen warm
  // --defaults`, `kgen demo` without a GPU): fp16 and bf16, the common head dims, both masks and
  // the shape classes each default chooser tells apart. Each is also one of all_variants.
  std::function<std::vector<KernelSource>(const Target&)> default_variants;
  // The kernels of `config` (empty: the variant's built-in default for a b=1, h=16, n=4096 shape
  // on 132 SMs) of the variant with key `variant` on `target` (`kgen inspect`).
  std::function<ConfigKernels(const std::string& variant, const std::string& config, const Target&)> config_kernels;
  // Every config of the variant with key `variant` valid on `target` (`kgen warm --manifest` lines
  // without a config).
  std::function<ConfigSpace(const std::string& variant, const Target&)> config_space;
  // The fields of a config text of this operator with their meanings (`kgen inspect --explain`),
  // or nullopt when `config` does not parse as one.
  std::function<std::optional<std::vector<ConfigField>>(const std::string& config)> explain_config;
  // The variant key of a call given by dtype, head dim and mask alone (`kgen inspect` without
  // --variant), or "" with *why set when the operator has no such variant; empty when the
  // operator's variants need more than those three (then `kgen inspect` needs --variant).
  std::function<std::string(DType dtype, int head_dim, bool causal, std::string* why)> shape_variant;
  // A variant key `kgen inspect --help` shows as an example ("" for none).
  std::string_view help_variant;
};

// The registered operator names, ", "-separated ("attention_fwd, attention_bwd, …"), for messages.
std::string operator_names();

// The kernels behind one tuning-database record on `target` (`kgen warm --db`): those of the
// recorded config and of the variant's built-in default, each left out when invalid for
// `target`. nullopt when the record's variant key or config cannot be parsed.
std::optional<std::vector<KernelSource>> recorded_kernels(const OperatorInfo& op, const std::string& variant,
                                                          const std::string& config, const Target& target);

// All registered operators, in a fixed order.
std::span<const OperatorInfo> operators();

// The operator called `name`, or nullptr.
const OperatorInfo* find_operator(std::string_view name);

}  // namespace kgen
