#include "jit/manifest.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <utility>

#include <nlohmann/json.hpp>

#include "generator/registry.h"
#include "kgen/types.hpp"

namespace kgen {
namespace {

constexpr const char* kKnownKeys = "op, variant, config";

[[noreturn]] void fail_line(std::size_t line, const std::string& why) {
  throw Error(Status::invalid_argument, "manifest:" + std::to_string(line) + ": " + why);
}

[[noreturn]] void fail_field(std::size_t line, std::string_view field, const std::string& why) {
  fail_line(line, "\"" + std::string(field) + "\": " + why);
}

// The string value of `field`, or nullopt when absent; a present non-string or empty value fails.
std::optional<std::string> string_field(const nlohmann::json& j, std::size_t line, std::string_view field,
                                        const std::string& hint) {
  const auto it = j.find(field);
  if (it == j.end()) return std::nullopt;
  if (!it->is_string() || it->get_ref<const std::string&>().empty())
    fail_field(line, field, "must be a non-empty string" + hint);
  return it->get<std::string>();
}

// The kernels one manifest line names on `target`: those of its config, or of every config of
// its variant valid there.
std::vector<KernelSource> line_kernels(const OperatorInfo& op, const std::string& variant,
                                       const std::optional<std::string>& config, const Target& target,
                                       std::size_t line) {
  std::vector<std::string> configs;
  if (config) {
    configs.push_back(*config);
  } else {
    ConfigSpace space = op.config_space(variant, target);
    if (!space.error.empty()) fail_field(line, "variant", space.error + " (op " + std::string(op.name) + ")");
    if (space.configs.empty())
      fail_field(line, "variant", "no config of " + variant + " is valid for " + target.arch);
    configs = std::move(space.configs);
  }
  std::vector<KernelSource> out;
  for (const std::string& c : configs) {
    ConfigKernels found = op.config_kernels(variant, c, target);
    using enum ConfigKernels::Problem;
    switch (found.problem) {
      case none: break;
      case unknown_variant: fail_field(line, "variant", found.error + " (op " + std::string(op.name) + ")");
      case unparsable_config: fail_field(line, "config", found.error + " (op " + std::string(op.name) + ")");
      case invalid_config: fail_field(line, "config", "invalid for " + target.arch + ": " + found.error);
    }
    for (KernelSource& k : found.kernels) out.push_back(std::move(k));
  }
  return out;
}

}  // namespace

std::vector<WarmItem> read_manifest(const std::filesystem::path& path, const std::vector<std::string>& archs) {
  const std::vector<Target> targets = warm_targets(archs);
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw Error(Status::invalid_argument, "manifest: " + path.string() + " is a directory");
  std::ifstream in(path);
  if (!in) throw Error(Status::invalid_argument, "manifest: cannot read " + path.string() + ": " + std::strerror(errno));

  std::vector<WarmItem> items;
  std::set<std::pair<std::string, std::string>> seen;  // (kernel variant, arch)
  std::size_t line_no = 0, variant_lines = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) fail_line(line_no, "not valid JSON");
    if (!j.is_object()) fail_line(line_no, "expected a JSON object");
    for (const auto& [k, v] : j.items()) {
      (void)v;
      if (k != "op" && k != "variant" && k != "config")
        fail_line(line_no, "unknown key \"" + k + "\" (known: " + kKnownKeys +
                               "; a variant is named by its key, as in tuning records and `kgen inspect --variant`)");
    }
    const auto op_name = string_field(j, line_no, "op", " (known: " + operator_names() + ")");
    if (!op_name) fail_field(line_no, "op", "missing (known: " + operator_names() + ")");
    const OperatorInfo* op = find_operator(*op_name);
    if (!op) fail_field(line_no, "op", "unknown operator '" + *op_name + "' (known: " + operator_names() + ")");
    const std::string variant_hint = " (a variant key of " + *op_name + ", as in tuning records)";
    const auto variant = string_field(j, line_no, "variant", variant_hint);
    if (!variant) fail_field(line_no, "variant", "missing" + variant_hint);
    const auto config = string_field(j, line_no, "config", " (leave it out for every config of the variant)");
    ++variant_lines;
    for (const Target& target : targets)
      for (KernelSource& src : line_kernels(*op, *variant, config, target, line_no))
        if (seen.emplace(src.variant, target.arch).second) items.push_back({std::move(src), target});
  }
  if (in.bad()) throw Error(Status::invalid_argument, "manifest: cannot read " + path.string());
  if (variant_lines == 0)
    throw Error(Status::invalid_argument, "manifest:" + std::to_string(std::max<std::size_t>(line_no, 1)) +
                                              ": the manifest lists no variants (empty file)");
  return items;
}

}  // namespace kgen
