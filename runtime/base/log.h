// kgen's log: one line per event on stderr, filtered by KGEN_LOG_LEVEL
// (error | warn | info | debug; default info, so a compile is never a silent stall).
//
// A program may keep one status line at the bottom of a terminal (a progress line rewritten in
// place with '\r'); log lines are then printed above it, and it is redrawn after them.
#pragma once

#include <cstdio>
#include <string_view>

namespace kgen {

enum class LogLevel { error = 0, warn = 1, info = 2, debug = 3 };

// The level a KGEN_LOG_LEVEL value names: error, warn (or warning), info or debug; anything else,
// and no value (nullptr), is info.
LogLevel parse_log_level(const char* value);

// The level in force: the one set by set_log_level, else KGEN_LOG_LEVEL (read once). Every line
// kgen logs goes through here, the cache's too (cache/log.h).
LogLevel log_level();

// Overrides KGEN_LOG_LEVEL for the rest of the process (the CLI's --quiet and --verbose).
void set_log_level(LogLevel level);

// Writes "kgen [level] message" to stderr if `level` is enabled. Thread-safe.
void log(LogLevel level, std::string_view message);

// Shows `text` as the status line on stderr, replacing the previous one; empty text removes it.
// Text wider than the terminal is cut, so the line never wraps. Callers show a status line only
// when stderr is a terminal (stderr_is_terminal()). Thread-safe.
void set_status_line(std::string_view text);

// Writes `text` (any number of lines, each ending in '\n') to `stream` above the status line.
// Thread-safe with log() and set_status_line().
void print_above_status(std::FILE* stream, std::string_view text);

// True when stderr is a terminal that can rewrite a line (not TERM=dumb).
bool stderr_is_terminal();

}  // namespace kgen
