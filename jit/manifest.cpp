#include "jit/manifest.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <utility>

#include <nlohmann/json.hpp>

#include "generator/attention_forward.h"
#include "kgen/types.hpp"

namespace kgen {
namespace {

[[noreturn]] void fail_line(std::size_t line, const std::string& why) {
  throw Error(Status::invalid_argument, "manifest:" + std::to_string(line) + ": " + why);
}

}  // namespace

std::vector<WarmItem> read_manifest(const std::filesystem::path& path, const std::vector<std::string>& archs) {
  std::vector<Target> targets;
  for (const auto& arch : archs) {
    auto t = parse_target(arch);
    if (!t) throw Error(Status::invalid_argument, "--arch: unknown target '" + arch + "' (known: sm_80, sm_86, sm_89, sm_90, sm_90a)");
    targets.push_back(*t);
  }
  if (targets.empty()) throw Error(Status::invalid_argument, "--arch: no target given");
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw Error(Status::invalid_argument, "manifest: " + path.string() + " is a directory");
  std::ifstream in(path);
  if (!in) throw Error(Status::invalid_argument, "manifest: cannot read " + path.string() + ": " + std::strerror(errno));

  std::vector<WarmItem> items;
  std::set<std::pair<std::string, std::string>> seen;  // (variant, arch)
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
      if (k != "op" && k != "dtype" && k != "head_dim" && k != "causal" && k != "config")
        fail_line(line_no, "unknown key '" + k + "' (known: op, dtype, head_dim, causal, config)");
    }
    if (!j.contains("op") || !j["op"].is_string()) fail_line(line_no, "\"op\" must be a string");
    const std::string op = j["op"];
    if (op != "attention_fwd") fail_line(line_no, "unknown op '" + op + "' (known: attention_fwd)");
    if (!j.contains("dtype") || !j["dtype"].is_string()) fail_line(line_no, "\"dtype\" must be a string");
    const std::string dtype_text = j["dtype"];
    auto dtype = parse_dtype(dtype_text);
    if (!dtype) fail_line(line_no, "unknown dtype '" + dtype_text + "' (known: fp16, bf16, fp32)");
    if (!j.contains("head_dim") || !j["head_dim"].is_number_integer())
      fail_line(line_no, "\"head_dim\" must be an integer");
    const auto head_dim = j["head_dim"].get<long long>();
    if (head_dim <= 0 || head_dim > kMaxHeadDim)
      fail_line(line_no, "head_dim " + std::to_string(head_dim) + " is out of range (1.." + std::to_string(kMaxHeadDim) + ")");
    bool causal = false;
    if (j.contains("causal")) {
      if (!j["causal"].is_boolean()) fail_line(line_no, "\"causal\" must be true or false");
      causal = j["causal"];
    }
    const AttentionForwardSpec spec{*dtype, static_cast<int>(head_dim), causal};
    if (auto why = check_attention_forward_spec(spec)) fail_line(line_no, *why);
    std::optional<AttentionForwardConfig> config;
    if (j.contains("config")) {
      if (!j["config"].is_string()) fail_line(line_no, "\"config\" must be a string");
      const std::string text = j["config"];
      config = parse_attention_forward_config(text);
      if (!config) fail_line(line_no, "cannot parse config '" + text + "'");
    }
    ++variant_lines;
    for (const Target& target : targets) {
      std::vector<AttentionForwardConfig> configs;
      if (config) {
        if (auto why = check_attention_forward_config(spec, *config, target))
          fail_line(line_no, "config '" + to_string(*config) + "' is invalid for " + target.arch + ": " + *why);
        configs.push_back(*config);
      } else {
        configs = attention_forward_config_space(spec, target);
        if (configs.empty()) fail_line(line_no, "no valid config for " + to_string(spec) + " on " + target.arch);
      }
      for (const auto& c : configs) {
        KernelSource src = render_attention_forward(spec, c);
        if (seen.emplace(src.variant, target.arch).second) items.push_back({std::move(src), target});
      }
    }
  }
  if (in.bad()) throw Error(Status::invalid_argument, "manifest: cannot read " + path.string());
  if (variant_lines == 0) throw Error(Status::invalid_argument, "manifest:" + std::to_string(std::max<std::size_t>(line_no, 1)) + ": the manifest lists no variants (empty file)");
  return items;
}

}  // namespace kgen
