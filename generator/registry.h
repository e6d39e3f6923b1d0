// The operators kgen knows, by their public names. Adding an operator means adding one row
// here and its own spec/config/render files; nothing else switches on operator names.
#pragma once

#include <functional>
#include <span>
#include <string_view>
#include <vector>

#include "generator/kernel_source.h"
#include "generator/target.h"

namespace kgen {

struct OperatorInfo {
  std::string_view name;     // "attention_fwd", the same in the APIs, CLI and tuning database
  std::string_view summary;  // one line for --help and show-config
  // Every variant `kgen warm` compiles for a target.
  std::function<std::vector<KernelSource>(const Target&)> all_variants;
};

// All registered operators, in a fixed order.
std::span<const OperatorInfo> operators();

// The operator called `name`, or nullptr.
const OperatorInfo* find_operator(std::string_view name);

}  // namespace kgen
