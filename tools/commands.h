// Sub-command registration of the `kgen` CLI; each returns the process exit code via `exit_code`.
#pragma once

#include <CLI/CLI.hpp>

namespace kgen::cli {

// Exit codes scripts can rely on.
enum ExitCode { kOk = 0, kFailed = 1, kUsage = 2, kNoDevice = 3 };

void add_cache_commands(CLI::App& app, int& exit_code);
void add_gpu_commands(CLI::App& app, int& exit_code);
void add_tune_commands(CLI::App& app, int& exit_code);

// Splits "a,b,c" into its non-empty parts.
std::vector<std::string> split_list(const std::string& text);

// Parses "1,2,3" as integers >= `min`; throws kgen::Error(invalid_argument) naming `option`.
std::vector<int> parse_int_list(const std::string& text, const char* option, int min = 1);

}  // namespace kgen::cli
