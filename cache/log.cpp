#include "cache/log.h"

#include <mutex>
#include <string>

#include "base/log.h"

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
  const bool warn = line.find("corrupt") != std::string_view::npos || line.find("failed") != std::string_view::npos ||
                    line.find("cannot") != std::string_view::npos;
  log(warn ? LogLevel::warn : LogLevel::info, "cache: " + std::string(line));
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
