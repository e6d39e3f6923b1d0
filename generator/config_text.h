// Small text helpers shared by the operators' config and spec string forms.
#pragma once

#include <charconv>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>


namespace kgen {

// "a:b:c" split on `sep` (empty parts kept).
inline std::vector<std::string> split_fields(const std::string& text, char sep) {
  std::vector<std::string> parts;
  std::stringstream in(text);
  for (std::string p; std::getline(in, p, sep);) parts.push_back(p);
  return parts;
}

// The largest number a config or spec field may hold. Fields are tile sizes, warp and thread
// counts, stages, splits and head dims, all far below it; the bound keeps the checks' products
// of two fields (warps·32, rows·fold, block_n/16·splits, occupancy·threads) within int.
inline constexpr int kMaxConfigNumber = 4096;

// Parses "<prefix><digits>" (e.g. "bm64") into `out`; false if the field has another form (a
// sign, no digits, trailing text) or its number is above kMaxConfigNumber.
inline bool parse_prefixed_int(std::string_view field, std::string_view prefix, int& out) {
  if (!field.starts_with(prefix)) return false;
  const char* b = field.data() + prefix.size();
  const char* e = field.data() + field.size();
  if (b == e || *b < '0' || *b > '9') return false;
  int value = 0;
  auto [ptr, ec] = std::from_chars(b, e, value);
  if (ec != std::errc() || ptr != e || value > kMaxConfigNumber) return false;
  out = value;
  return true;
}

// A config field's refusal in the words of the config text, naming the value given:
// "<path> <field> must be <allowed>, got <field><value>" (e.g. "wgmma bm must be 64, 128 or 192
// (one to three warpgroups), got bm96").
inline std::string field_refusal(std::string_view path, std::string_view field, std::string_view allowed, int got) {
  std::string why(path);
  why.append(" ").append(field).append(" must be ").append(allowed).append(", got ").append(field);
  return why + std::to_string(got);
}

}  // namespace kgen
