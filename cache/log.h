// The cache's one-line diagnostics (corrupt entries, failed publishes) go through a log sink.
#pragma once

#include <functional>
#include <string_view>

namespace kgen::cache {

using LogSink = std::function<void(std::string_view line)>;

// Replaces the process-wide sink (thread-safe); an empty function restores the default: kgen's
// log (runtime/base/log.h, filtered by KGEN_LOG_LEVEL like every other line), "kgen [warn] cache:
// …" for a line about a corrupt entry or a failure (it costs a compile), "kgen [info] cache: …"
// else.
void set_log_sink(LogSink sink);

// Sends one line (no trailing newline) to the current sink; never throws.
void log_line(std::string_view line) noexcept;

}  // namespace kgen::cache
