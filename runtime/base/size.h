// Byte sizes as users write them, in command-line options and environment variables:
// "1073741824", "512K", "64M", "1G", "2T" (powers of 1024). The suffix may also be written
// KB/KiB, MB/MiB, GB/GiB, TB/TiB or B, in any case. One parser for every size kgen reads, so that
// "1G" means a gibibyte everywhere.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace kgen {

// The bytes `text` says, or nullopt when it is empty, negative, not a size, or more than 2^64 - 1
// bytes; then `*error` (when given) is a sentence that starts with `name` (the option or variable
// that held the text), e.g. "KGEN_CACHE_MAX_BYTES: '1Q' is not a size ...".
std::optional<std::uint64_t> parse_byte_size(std::string_view text, std::string_view name, std::string* error = nullptr);

// The size in environment variable `var`: 0 when it is unset or empty, and when it is not a size
// (logged as a warning that names the variable and says the value is ignored).
std::uint64_t byte_size_from_env(const char* var);

}  // namespace kgen
