#include "cache/log.h"

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

namespace kgen::cache {
namespace {

std::mutex& sink_mutex() {
  static std::mutex m;
  return m;
}

LogSink& current_sink() {
  static LogSink sink;
  return sink;
}

void default_sink(std::string_view line) {
  const char* level = std::getenv("KGEN_LOG_LEVEL");
  if (level == nullptr) return;
  const std::string_view lv(level);
  if (lv != "debug" && lv != "info") return;
  std::fprintf(stderr, "kgen cache: %.*s\n", static_cast<int>(line.size()), line.data());
}

}  // namespace

void set_log_sink(LogSink sink) {
  std::lock_guard lock(sink_mutex());
  current_sink() = std::move(sink);
}

void log_line(std::string_view line) noexcept {
  try {
    std::lock_guard lock(sink_mutex());
    if (current_sink()) {
      current_sink()(line);
    } else {
      default_sink(line);
    }
  } catch (...) {
    // A throwing sink must not turn a cache miss into a failure.
  }
}

}  // namespace kgen::cache
