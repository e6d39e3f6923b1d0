// `kgen tune merge` and `kgen tune show`: the tuning database's sub-commands.
#pragma once

#include <CLI/CLI.hpp>

namespace kgen::cli {

// Adds `merge OUT IN...` and `show [--db PATH...]` under the existing `kgen tune` command;
// their callbacks set `exit_code` (kgen::Error escapes to main as usual).
void add_tune_db_commands(CLI::App& tune_cmd, int& exit_code);

}  // namespace kgen::cli
