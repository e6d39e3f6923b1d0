// The sweep options of `kgen check`, `kgen bench` and `kgen tune` and the registry of the
// operators that have a sweep. The options are one vocabulary, so that the three commands take
// the same option names with the same meaning; each operator registers (in its own
// tools/sweep_<family>.cpp) which options it takes, their defaults, and what each command runs
// for it. An option that does not apply to the operator (or to the command) is rejected, naming
// the option and the operator.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "check/harness_check.h"
#include "tuning/autotune.h"

namespace kgen::cli {

class BenchRows;

enum class SweepCommand { check, bench, tune };
// Commands, as bits: which take an option, which a default is for.
enum SweepCommands : unsigned { kCheck = 1, kBench = 2, kTune = 4, kEvery = kCheck | kBench | kTune };

// The operators of the registry (generator/registry.h) with a sweep, comma-separated.
std::string sweep_operator_names();

// The options of one command, as given on its command line. Made by add_sweep_options; the
// command's callback reads them once CLI11 has parsed.
class SweepOptions {
 public:
  SweepCommand command() const { return command_; }
  // The operator (--op, or the alias sub-command's). Throws Error(invalid_argument) naming the
  // valid ones when it is unknown.
  const std::string& op() const;
  // Whether the option (a name without dashes: "dtypes") was on the command line.
  bool given(const std::string& name) const;
  // Its value: as given, else the command's default for the operator ("" when it has none).
  std::string value(const std::string& name) const;
  bool flag(const std::string& name) const { return given(name); }
  // One integer option (--batch, --warmup, ...), 0 when absent; throws naming it when not >= min.
  int integer(const std::string& name, int min) const;
  // Throws Error(invalid_argument) for the first given option that does not apply to the
  // operator, and for an unknown operator. Call before anything else reads the options.
  void validate() const;
  // Whether `kgen check` runs the operator's correctness list: no option that fixes a shape of it
  // was given (SweepOperator::check_list_options).
  bool uses_check_list() const;

 private:
  friend std::shared_ptr<SweepOptions> add_sweep_options(CLI::App&, SweepCommand, const std::string&);
  friend std::shared_ptr<SweepOptions> sweep_options_from(SweepCommand, const std::string&);
  SweepCommand command_ = SweepCommand::check;
  std::string op_, fixed_op_;
  std::map<std::string, std::string> values_;
  std::map<std::string, bool> flags_;
  std::map<std::string, CLI::Option*> options_;
  std::shared_ptr<CLI::App> owner_;  // sweep_options_from's: where options_ live
};

// A default of a sweep option for some commands.
struct SweepDefault {
  const char* option;  // "seqlens"
  unsigned commands;   // SweepCommands bits
  const char* value;
};

// What the operators of one family (the attention ones, the lrpe ones) share in --help.
struct SweepFamily {
  const char* name;    // "attention": the group of its defaults in --help
  const char* footer;  // how the options make its cases, for every command's footer
  // `kgen check`'s footer: the options that replace the correctness list ("attention: --seqlens,
  // ..."), where that list is specified, and what it covers.
  const char* check_list_options;
  const char* check_list_doc;
  const char* check_list_covers;
  const char* tune_footer;  // a sentence for `kgen tune`'s footer, or ""
  // What an option means for the family, appended to the option's help ("seqlens", "attention
  // n_q = n_k").
  std::vector<std::pair<const char*, const char*>> option_notes;
};

// One case of `kgen check`: its title, how to make its harness bench (inputs and reference), and
// the configs to check on it ("" = the default choice, first).
struct CheckItem {
  std::string title;
  std::function<std::unique_ptr<HarnessBench>()> make;
  std::vector<std::string> configs;
};

// One operator's sweep: what `kgen check|bench|tune --op NAME` runs.
struct SweepOperator {
  const char* name;  // the registry's (generator/registry.h)
  const SweepFamily* family;
  const char* alias;  // a sub-command of check and bench standing for `--op name`, or nullptr
  std::vector<std::string_view> options;             // the sweep options it takes
  std::vector<SweepDefault> defaults;                // its defaults beyond every operator's
  std::vector<std::string_view> check_list_options;  // given, check runs the product sweep instead of the correctness list
  // The cases of `kgen check` with `configs` ("" first).
  std::function<std::vector<CheckItem>(const SweepOptions&, const std::vector<std::string>& configs)> check_items;
  // The cases of `kgen bench --list`, one line each.
  std::function<std::vector<std::string>(const SweepOptions&)> case_titles;
  // The problems of `kgen tune`, one per case.
  std::function<std::vector<std::unique_ptr<TuningProblem>>(const SweepOptions&)> tuning_problems;
  // `kgen bench`: checks and times every case, its rows into `rows`; returns the exit code.
  std::function<int(const SweepOptions&, BenchRows& rows)> bench;
};

// Adds `op` to the operators with a sweep (each operator's tools/sweep_<family>.cpp at start-up);
// returns true.
bool register_sweep_operator(SweepOperator op);
// The operators with a sweep, in the registry's order.
std::vector<const SweepOperator*> sweep_operators();
// The one called `name`, or nullptr.
const SweepOperator* find_sweep_operator(std::string_view name);

// Registers --op (unless `fixed_op` names the operator: an alias sub-command) and every sweep
// option `command` takes on `app`, with help that names the defaults of each family.
std::shared_ptr<SweepOptions> add_sweep_options(CLI::App& app, SweepCommand command, const std::string& fixed_op = "");

// Options made from `args` ("--dtypes bf16 --quick") as if given to `command`'s command line.
std::shared_ptr<SweepOptions> sweep_options_from(SweepCommand command, const std::string& args);

// Footer text for --help: how the options make the cases of `command`.
std::string sweep_footer(SweepCommand command);

// --configs: the explicit configs, comma- or '|'-separated.
std::vector<std::string> sweep_configs(const SweepOptions& o);

}  // namespace kgen::cli
