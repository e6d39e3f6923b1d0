// kgen's log: one line per event on stderr, filtered by KGEN_LOG_LEVEL
// (error | warn | info | debug; default info, so a compile is never a silent stall).
#pragma once

#include <string_view>

namespace kgen {

enum class LogLevel { error = 0, warn = 1, info = 2, debug = 3 };

// The level set by KGEN_LOG_LEVEL, read once.
LogLevel log_level();

// Writes "kgen [level] message" to stderr if `level` is enabled. Thread-safe.
void log(LogLevel level, std::string_view message);

}  // namespace kgen
