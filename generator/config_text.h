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

// Parses "<prefix><integer>" (e.g. "bm64") into `out`; false if the field has another form.
inline bool parse_prefixed_int(std::string_view field, std::string_view prefix, int& out) {
  if (!field.starts_with(prefix)) return false;
  const char* b = field.data() + prefix.size();
  const char* e = field.data() + field.size();
  auto [ptr, ec] = std::from_chars(b, e, out);
  return ec == std::errc() && ptr == e && b != e;
}

}  // namespace kgen
