// Sub-command registration of the `kgen` CLI; each returns the process exit code via `exit_code`.
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "kgen/types.hpp"

namespace kgen {
class KernelBuilder;
struct WarmItem;
}  // namespace kgen

namespace kgen::cli {

// Exit codes scripts can rely on. kInterrupted: Ctrl-C stopped `kgen warm` (128 + SIGINT, as shells say).
enum ExitCode { kOk = 0, kFailed = 1, kUsage = 2, kNoDevice = 3, kInterrupted = 130 };

void add_warm_command(CLI::App& app, int& exit_code);
void add_cache_commands(CLI::App& app, int& exit_code);
void add_gpu_commands(CLI::App& app, int& exit_code);
void add_tune_commands(CLI::App& app, int& exit_code);
void add_replay_command(CLI::App& app, int& exit_code);

class SweepOptions;

// `kgen check` / `kgen bench` of any operator with a sweep (tools/commands_gpu.cpp), from the
// sweep options of tools/sweep.h.
int run_sweep_check(const SweepOptions& o);
int run_sweep_bench(const SweepOptions& o);

// The rows of `kgen bench`'s tables: printed as they come ("| a | b |"), or with --json kept and
// printed by finish() as one JSON array of objects, one per row, keyed by its table's column
// names ("–" cells are null, numeric cells numbers, the others strings). Titles, notes and table
// headers are the caller's, printed only when !json().
class BenchRows {
 public:
  explicit BenchRows(bool json) : json_(json) {}
  bool json() const { return json_; }
  // The columns of the rows that follow; `table`, when given, is each JSON row's "table" field.
  void columns(std::vector<std::string> names, std::string table = "");
  void row(const std::vector<std::string>& cells);
  // Prints the JSON array (with --json).
  void finish() const;

 private:
  bool json_;
  std::vector<std::string> columns_;
  std::string table_;
  nlohmann::ordered_json rows_ = nlohmann::ordered_json::array();
};

// Builds `items` through `builder` on `jobs` threads as `kgen warm` does (per-kernel lines at debug
// level, a progress line rewritten in place on a terminal and printed every few seconds
// otherwise, errors for kernels not built or not stored, the summary line on stdout); returns
// kOk, or kFailed if any kernel failed or is not in the cache. SIGINT stops it after the
// compiles under way: it prints "interrupted: compiled N, cached M of T (...)" and returns
// kInterrupted.
int run_warm(KernelBuilder& builder, const std::vector<WarmItem>& items, int jobs);

// Throws Error(no_device) with the driver's reason when no GPU is usable.
void require_device();
// One line naming device 0, its SM count and clock, and kgen's version.
void print_device_header();
// Parses "bf16,fp16" (option --dtypes); throws Error(invalid_argument) naming an unknown one or
// an empty list.
std::vector<DType> parse_dtypes(const std::string& text);

// Splits "a,b,c" into its non-empty parts.
std::vector<std::string> split_list(const std::string& text);

// split_list of an option's value; throws Error(invalid_argument) naming `option` when the list
// has no item: an empty value never stands for "all" or "the default".
std::vector<std::string> parse_list(const std::string& text, const char* option);

// Parses "1,2,3" as integers >= `min` (at least one); throws kgen::Error(invalid_argument) naming `option`.
std::vector<int> parse_int_list(const std::string& text, const char* option, int min = 1);

// CLI11 checks for options whose empty value would otherwise read as "not given" (all operators,
// the default cache): a value with no character, and a comma-separated list with no item. The
// usage error names the option.
CLI::Validator non_empty_value();
CLI::Validator non_empty_list();

}  // namespace kgen::cli
