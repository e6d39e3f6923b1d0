#include "base/size.h"

#include <cctype>
#include <cstdlib>

#include "base/log.h"

namespace kgen {
namespace {

// The power of 1024 a suffix stands for ("", "B", "K", "KB", "KiB", ... "TiB"; any case), or -1.
int suffix_power(std::string_view suffix) {
  std::string s;
  for (char ch : suffix) s += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (s.empty() || s == "b") return 0;
  static constexpr std::string_view kUnits = "kmgt";
  const std::size_t unit = kUnits.find(s[0]);
  if (unit == std::string_view::npos) return -1;
  const std::string_view rest = std::string_view(s).substr(1);
  if (!rest.empty() && rest != "b" && rest != "ib") return -1;
  return static_cast<int>(unit) + 1;
}

}  // namespace

std::optional<std::uint64_t> parse_byte_size(std::string_view text, std::string_view name, std::string* error) {
  auto fail = [&](const std::string& why) -> std::optional<std::uint64_t> {
    if (error) *error = std::string(name) + ": " + why;
    return std::nullopt;
  };
  const std::string quoted = "'" + std::string(text) + "'";
  if (text.empty()) return fail("empty value; give a size such as 1073741824, 512M or 1G");
  std::size_t digits = 0;
  std::uint64_t value = 0;
  for (; digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits])); ++digits)
    if (__builtin_mul_overflow(value, 10u, &value) || __builtin_add_overflow(value, text[digits] - '0', &value))
      return fail(quoted + " is more than 2^64 - 1 bytes");
  const int power = suffix_power(text.substr(digits));
  if (digits == 0 || power < 0)
    return fail(quoted + " is not a size (bytes, or a whole number with K, M, G or T: powers of 1024)");
  for (int i = 0; i < power; ++i)
    if (__builtin_mul_overflow(value, 1024u, &value)) return fail(quoted + " is more than 2^64 - 1 bytes");
  return value;
}

std::uint64_t byte_size_from_env(const char* var) {
  const char* v = std::getenv(var);
  if (!v || !*v) return 0;
  std::string why;
  const auto bytes = parse_byte_size(v, var, &why);
  if (!bytes) log(LogLevel::warn, why + " (ignored)");
  return bytes.value_or(0);
}

}  // namespace kgen
