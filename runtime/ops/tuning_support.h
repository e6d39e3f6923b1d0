// What every operator's TuningProblem (runtime/tuning/autotune.h) uses. Each operator makes its
// problems in its own runtime/ops/<op>_tuning.{h,cpp}: what `kgen tune --op`, KGEN_AUTOTUNE and
// the launch paths' database lookups share, so the variant key and bucket a launch looks up are
// the ones the tuner recorded. Checking and timing come from the checking layer through
// runtime/tuning/bench_registry.h.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "kgen/types.hpp"
#include "tuning/autotune.h"

namespace kgen {

// A config text through a parser and printer pair: its canonical text, or nullopt when `parse`
// rejects it.
template <class Parse>
std::optional<std::string> canonical_config(Parse parse, const std::string& text) {
  auto c = parse(text);
  if (!c) return std::nullopt;
  return to_string(*c);
}

// The texts of `configs` (to_string of each), in their order.
template <class Config>
std::vector<std::string> config_texts(const std::vector<Config>& configs) {
  std::vector<std::string> out;
  for (const auto& c : configs) out.push_back(to_string(c));
  return out;
}

// The problem `problem` as its operator's own type, or nullptr when it was made by another
// operator: how an operator's checking-layer bench gets back the call it describes.
template <class Problem>
const Problem* problem_as(const TuningProblem& problem) {
  return dynamic_cast<const Problem*>(&problem);
}

}  // namespace kgen
