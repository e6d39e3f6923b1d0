#include "base/log.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <string>

namespace kgen {
namespace {

constexpr int kUnset = -1;
std::atomic<int> g_override{kUnset};

LogLevel level_from_env() {
  static const LogLevel level = parse_log_level(std::getenv("KGEN_LOG_LEVEL"));
  return level;
}

// Everything written to stderr goes through this lock, so a log line never lands inside the
// status line.
std::mutex& stderr_mutex() {
  static std::mutex m;
  return m;
}

std::string& status_text() {
  static std::string text;
  return text;
}

// Columns of the terminal on stderr (80 when unknown).
std::size_t terminal_columns() {
  winsize ws{};
  if (::ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  return 80;
}

// "\r" + erase to the end of the line: the cursor is back at the start of an empty line.
constexpr const char* kEraseLine = "\r\033[K";

void erase_status_locked() {
  if (!status_text().empty()) std::fputs(kEraseLine, stderr);
}

void draw_status_locked() {
  if (status_text().empty()) return;
  std::fwrite(status_text().data(), 1, status_text().size(), stderr);
  std::fflush(stderr);
}

}  // namespace

LogLevel parse_log_level(const char* value) {
  const std::string_view s = value ? value : "";
  if (s == "error") return LogLevel::error;
  if (s == "warn" || s == "warning") return LogLevel::warn;
  if (s == "debug") return LogLevel::debug;
  return LogLevel::info;
}

LogLevel log_level() {
  const int v = g_override.load(std::memory_order_relaxed);
  return v == kUnset ? level_from_env() : static_cast<LogLevel>(v);
}

void set_log_level(LogLevel level) { g_override.store(static_cast<int>(level), std::memory_order_relaxed); }

void log(LogLevel level, std::string_view message) {
  if (level > log_level()) return;
  static const char* names[] = {"error", "warn", "info", "debug"};
  std::lock_guard lock(stderr_mutex());
  erase_status_locked();
  std::fprintf(stderr, "kgen [%s] %.*s\n", names[static_cast<int>(level)],
               static_cast<int>(message.size()), message.data());
  draw_status_locked();
}

void set_status_line(std::string_view text) {
  std::lock_guard lock(stderr_mutex());
  erase_status_locked();
  std::string line(text.substr(0, text.find('\n')));
  const std::size_t width = terminal_columns() - 1;  // the last column would wrap on some terminals
  if (line.size() > width) line.resize(width);
  status_text() = std::move(line);
  draw_status_locked();
  std::fflush(stderr);
}

void print_above_status(std::FILE* stream, std::string_view text) {
  std::lock_guard lock(stderr_mutex());
  erase_status_locked();
  std::fflush(stderr);
  std::fwrite(text.data(), 1, text.size(), stream);
  std::fflush(stream);
  draw_status_locked();
}

bool stderr_is_terminal() {
  if (::isatty(STDERR_FILENO) != 1) return false;
  const char* term = std::getenv("TERM");
  return !(term && std::string_view(term) == "dumb");
}

}  // namespace kgen
