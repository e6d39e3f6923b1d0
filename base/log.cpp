#include "base/log.h"

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

namespace kgen {

LogLevel log_level() {
  static const LogLevel level = [] {
    const char* v = std::getenv("KGEN_LOG_LEVEL");
    std::string s = v ? v : "";
    if (s == "error") return LogLevel::error;
    if (s == "warn" || s == "warning") return LogLevel::warn;
    if (s == "debug") return LogLevel::debug;
    return LogLevel::info;
  }();
  return level;
}

void log(LogLevel level, std::string_view message) {
  if (level > log_level()) return;
  static const char* names[] = {"error", "warn", "info", "debug"};
  static std::mutex m;
  std::lock_guard lock(m);
  std::fprintf(stderr, "kgen [%s] %.*s\n", names[static_cast<int>(level)],
               static_cast<int>(message.size()), message.data());
}

}  // namespace kgen
