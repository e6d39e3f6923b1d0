// The sweep options of `kgen check`, `kgen bench` and `kgen tune`: one description per operator
// family, so that the three commands take the same option names with the same meaning, and
// the cases each command runs for an operator. An option that does not apply to the operator
// (or to the command) is rejected, naming the option and the operator.
#pragma once

#include <CLI/CLI.hpp>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ops/cases.h"

namespace kgen::cli {

enum class SweepCommand { check, bench, tune };
enum class OpFamily { attention, lrpe };

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
  OpFamily family() const;
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

// Registers --op (unless `fixed_op` names the operator: an alias sub-command) and every sweep
// option `command` takes on `app`, with help that names the defaults of each family.
std::shared_ptr<SweepOptions> add_sweep_options(CLI::App& app, SweepCommand command, const std::string& fixed_op = "");

// Options made from `args` ("--dtypes bf16 --quick") as if given to `command`'s command line.
std::shared_ptr<SweepOptions> sweep_options_from(SweepCommand command, const std::string& args);

// Footer text for --help: how the options make the cases of `command`.
std::string sweep_footer(SweepCommand command);

// The attention cases (attention_fwd, attention_bwd, attention_double_bwd) of the options.
// `kgen check` without a shape option runs the correctness list of docs/attention.md §5.6;
// otherwise dtype × head dim × causal × n, with b = --batch or --tokens / n and h = --heads or
// --hidden / d.
std::vector<AttentionCase> attention_cases(const SweepOptions& o);

// The lrpe cases (lrpe_cosine, md_lrpe_cosine): `kgen check` without a shape option runs the
// correctness list of docs/lrpe.md §6; otherwise dtype × act × direction × d × (n, or grid ×
// extra tokens) at --batch × --heads. `kgen check` runs md cases with and without the angle cache.
std::vector<LrpeCase> lrpe_cases(const SweepOptions& o);

// --configs: the explicit configs, comma- or '|'-separated.
std::vector<std::string> sweep_configs(const SweepOptions& o);

// "64x64" → {64, 64} (--grids).
std::vector<int> parse_grid(const std::string& text);

}  // namespace kgen::cli
