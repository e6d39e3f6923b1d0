#include "tools/sweep.h"

#include <algorithm>
#include <string_view>
#include <utility>

#include "generator/registry.h"
#include "tools/commands.h"

namespace kgen::cli {
namespace {

// An option of the sweep: the commands that take it. Which operators take it is theirs to say
// (SweepOperator::options).
struct OptionSpec {
  const char* name;
  unsigned commands;
  bool flag;
  bool alias_only;  // the old `bench md_lrpe` sub-command's --dims
  const char* help;
};
constexpr OptionSpec kOptions[] = {
    {"dtypes", kEvery, false, false, "Comma-separated dtypes: fp16, bf16, fp32"},
    {"head-dims", kEvery, false, false, "Comma-separated head dims (lrpe: d of x; o has 2d features)"},
    {"causal", kEvery, false, false, "Causal masking: yes, no or both"},
    {"seqlens", kEvery, false, false, "Comma-separated sequence lengths"},
    {"batch", kEvery, false, false, "Batch size (attention: --tokens / n when absent)"},
    {"heads", kEvery, false, false, "Heads (attention: query heads, --hidden / d when absent)"},
    {"heads-kv", kEvery, false, false, "Key/value heads (default: --heads)"},
    {"q-len", kEvery, false, false,
     "Query rows of every sequence against its --seqlens keys (decode-like shapes; default: n_q = n)"},
    {"tokens", kEvery, false, false, "b·n when --batch is absent"},
    {"hidden", kEvery, false, false, "h·d when --heads is absent"},
    {"deterministic", kEvery, true, false,
     "The deterministic mode (dQ without atomics); without it check runs both modes, bench and tune the atomic one"},
    {"acts", kEvery, false, false, "Comma-separated acts: none, relu, sigmoid, silu, softmax, softmax_seq"},
    {"directions", kEvery, false, false, "Comma-separated directions: fwd, bwd"},
    {"grids", kEvery, false, false, "Comma-separated grids, sizes joined by x (64x64, 16x16x16)"},
    {"extras", kEvery, false, false, "Comma-separated extra tokens l (n = l + grid cells)"},
    {"configs", kEvery, false, false,
     "Configs, comma- or '|'-separated: check and bench run them beside the default (md: ':cache' ones with the "
     "angle cache), tune takes them as its candidates (default: the whole config space)"},
    {"warmup", kBench | kTune, false, false, "Untimed runs"},
    {"reps", kBench | kTune, false, false, "Timed runs"},
    {"quick", kCheck, true, false, "Skip the large shape of the correctness list"},
    {"copy-mib", kBench, false, false, "Size in MiB of the copy that measures the device bandwidth"},
    {"launch", kBench, true, false,
     "Measure first-call cost (cold compile, disk hit, in-memory hit) and hot launch overhead instead"},
    {"dims", kBench, false, true, "Only the grids of these dims m (1, 2, 3)"},
    {"list", kEvery, true, false, "Print the cases (tune: the problems) instead of running them; no GPU needed"},
    {"json", kBench, true, false,
     "Print the rows as one JSON array of objects, one per row, with the tables' columns as fields (lrpe and the "
     "first-call tables: also \"table\"), instead of the tables"},
};
// The options every operator with a sweep takes.
constexpr const char* kCommonOptions[] = {"dtypes", "configs", "warmup", "reps", "list", "json"};

// The singular spellings of the list options, accepted as aliases (README: a plural option takes a
// comma-separated list and also answers to its singular). Not --dims: `bench md_lrpe`'s --dim is
// its --head-dims.
constexpr std::pair<const char*, const char*> kSingulars[] = {
    {"dtypes", "dtype"}, {"head-dims", "head-dim"}, {"seqlens", "seqlen"}, {"acts", "act"},
    {"directions", "direction"}, {"grids", "grid"}, {"extras", "extra"}, {"configs", "config"}};

// The defaults every operator shares; an operator's own are in its SweepOperator.
constexpr SweepDefault kCommonDefaults[] = {
    {"dtypes", kCheck, "fp16,bf16,fp32"},
    {"dtypes", kBench | kTune, "bf16"},
    {"warmup", kTune, "10"},
    {"reps", kTune, "50"},
};

unsigned command_bit(SweepCommand c) { return c == SweepCommand::check ? kCheck : c == SweepCommand::bench ? kBench : kTune; }

const char* command_name(SweepCommand c) {
  return c == SweepCommand::check ? "check" : c == SweepCommand::bench ? "bench" : "tune";
}

std::vector<SweepOperator>& sweep_registry() {
  static std::vector<SweepOperator> ops;
  return ops;
}

bool takes(const SweepOperator& op, std::string_view option) {
  return std::find(std::begin(kCommonOptions), std::end(kCommonOptions), option) != std::end(kCommonOptions) ||
         std::find(op.options.begin(), op.options.end(), option) != op.options.end();
}

// The operators that take `option`, by name: "attention_bwd", or "lrpe_cosine, md_lrpe_cosine".
std::string takers(std::string_view option) {
  std::string s;
  for (const SweepOperator* op : sweep_operators())
    if (takes(*op, option)) s += (s.empty() ? "" : ", ") + std::string(op->name);
  return s;
}

const SweepOperator& sweep_operator(const std::string& name) { return *find_sweep_operator(name); }

// `op`'s default of `option` for `command`, or nullptr.
const char* default_of(const SweepOperator& op, std::string_view option, unsigned command) {
  for (const SweepDefault& d : kCommonDefaults)
    if (option == d.option && (d.commands & command)) return d.value;
  for (const SweepDefault& d : op.defaults)
    if (option == d.option && (d.commands & command)) return d.value;
  return nullptr;
}

// The families of `ops`, in order of first appearance.
std::vector<const SweepFamily*> families_of(const std::vector<const SweepOperator*>& ops) {
  std::vector<const SweepFamily*> out;
  for (const SweepOperator* op : ops)
    if (std::find(out.begin(), out.end(), op->family) == out.end()) out.push_back(op->family);
  return out;
}

// The defaults of `option` for `command` for the operators `fixed` (all, or an alias's one), for
// --help: the common one alone, else per family the groups of operators with one value
// ("attention 64,128; lrpe 128", "lrpe_cosine none,silu; md_lrpe_cosine none"), a group named by
// its family when it is the whole family and by nothing when it is all of `fixed`.
std::string defaults_help(std::string_view option, SweepCommand command, const std::vector<const SweepOperator*>& fixed) {
  const unsigned cmd = command_bit(command);
  for (const SweepDefault& d : kCommonDefaults)
    if (option == d.option && (d.commands & cmd)) return d.value;
  const std::vector<const SweepOperator*> all = sweep_operators();
  std::string out;
  for (const SweepFamily* family : families_of(fixed)) {
    std::vector<const SweepOperator*> whole;
    for (const SweepOperator* op : all)
      if (op->family == family) whole.push_back(op);
    std::vector<std::pair<std::string, std::vector<const SweepOperator*>>> groups;  // a value, its operators
    for (const SweepOperator* op : fixed) {
      const char* value = op->family == family ? default_of(*op, option, cmd) : nullptr;
      if (!value) continue;
      auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == value; });
      if (it == groups.end()) groups.push_back({value, {op}});
      else it->second.push_back(op);
    }
    for (const auto& [value, group] : groups) {
      std::string who;
      if (group == fixed) who = "";
      else if (group == whole) who = std::string(family->name) + " ";
      else
        for (const SweepOperator* op : group) who += (who.empty() ? "" : ", ") + std::string(op->name);
      if (!who.empty() && who.back() != ' ') who += ' ';
      const auto& list_options = group.front()->check_list_options;
      const bool list = command == SweepCommand::check &&
                        std::find(list_options.begin(), list_options.end(), option) != list_options.end();
      out += (out.empty() ? "" : "; ") + who + (list ? "the correctness list, else " : "") + value;
    }
  }
  return out;
}

}  // namespace

bool register_sweep_operator(SweepOperator op) {
  sweep_registry().push_back(std::move(op));
  return true;
}

std::vector<const SweepOperator*> sweep_operators() {
  std::vector<const SweepOperator*> out;
  for (const OperatorInfo& info : operators())
    if (const SweepOperator* op = find_sweep_operator(info.name)) out.push_back(op);
  return out;
}

const SweepOperator* find_sweep_operator(std::string_view name) {
  for (const SweepOperator& op : sweep_registry())
    if (name == op.name) return &op;
  return nullptr;
}

std::string sweep_operator_names() {
  std::string s;
  for (const SweepOperator* op : sweep_operators()) s += (s.empty() ? "" : ", ") + std::string(op->name);
  return s;
}

const std::string& SweepOptions::op() const {
  const std::string& name = fixed_op_.empty() ? op_ : fixed_op_;
  if (!find_operator(name) || !find_sweep_operator(name))
    throw Error(Status::invalid_argument, "--op: unknown operator '" + name + "' (kgen " + command_name(command_) +
                                              " serves " + sweep_operator_names() + ")");
  return name;
}

bool SweepOptions::given(const std::string& name) const {
  auto it = options_.find(name);
  return it != options_.end() && it->second->count() > 0;
}

std::string SweepOptions::value(const std::string& name) const {
  if (given(name)) return values_.at(name);
  const char* d = default_of(sweep_operator(op()), name, command_bit(command_));
  return d ? d : "";
}

int SweepOptions::integer(const std::string& name, int min) const {
  const std::string text = value(name);
  if (text.empty()) return 0;
  const auto v = parse_int_list(text, ("--" + name).c_str(), min);
  if (v.size() != 1) throw Error(Status::invalid_argument, "--" + name + ": expected one integer, got '" + text + "'");
  return v[0];
}

void SweepOptions::validate() const {
  const SweepOperator& op = sweep_operator(this->op());
  for (const OptionSpec& spec : kOptions)
    if (given(spec.name) && !takes(op, spec.name))
      throw Error(Status::invalid_argument, std::string("--") + spec.name + ": does not apply to --op " + op.name +
                                                " (it applies to " + takers(spec.name) + ")");
}

bool SweepOptions::uses_check_list() const {
  if (command() != SweepCommand::check) return false;
  for (std::string_view name : sweep_operator(op()).check_list_options)
    if (given(std::string(name))) return false;
  return true;
}

std::shared_ptr<SweepOptions> add_sweep_options(CLI::App& app, SweepCommand command, const std::string& fixed_op) {
  auto o = std::make_shared<SweepOptions>();
  o->command_ = command;
  o->fixed_op_ = fixed_op;
  const std::vector<const SweepOperator*> all = sweep_operators();
  o->op_ = all.empty() ? "" : all.front()->name;
  const unsigned cmd = command_bit(command);
  const std::vector<const SweepOperator*> fixed =
      fixed_op.empty() ? all : std::vector<const SweepOperator*>{find_sweep_operator(fixed_op)};
  if (fixed_op.empty())
    app.add_option("--op", o->op_, "Operator: " + sweep_operator_names())->capture_default_str();
  for (const OptionSpec& spec : kOptions) {
    std::vector<const SweepOperator*> taking;
    for (const SweepOperator* op : fixed)
      if (takes(*op, spec.name)) taking.push_back(op);
    if (!(spec.commands & cmd) || taking.empty() || (spec.alias_only && fixed_op.empty())) continue;
    std::string help = spec.help, notes;
    for (const SweepFamily* family : families_of(all))
      for (const auto& [option, note] : family->option_notes)
        if (spec.name == std::string_view(option)) notes += (notes.empty() ? ": " : "; ") + std::string(note);
    help += notes;
    const std::string defaults = defaults_help(spec.name, command, fixed);
    if (!defaults.empty()) help += " (default: " + defaults + ")";
    if (taking.size() != all.size() && fixed_op.empty()) help += " [" + takers(spec.name) + "]";
    std::string names = "--" + std::string(spec.name);
    // The old `bench lrpe|md_lrpe` sub-commands took one feature count as --dim.
    if (!fixed_op.empty() && command == SweepCommand::bench && names == "--head-dims") names += ",--dim";
    for (const auto& [plural, singular] : kSingulars)
      if (spec.name == std::string_view(plural)) names += ",--" + std::string(singular);
    o->options_[spec.name] = spec.flag ? app.add_flag(names, o->flags_[spec.name], help)
                                       : app.add_option(names, o->values_[spec.name], help)->check(non_empty_list());
  }
  return o;
}

std::shared_ptr<SweepOptions> sweep_options_from(SweepCommand command, const std::string& args) {
  auto app = std::make_shared<CLI::App>();
  auto o = add_sweep_options(*app, command);
  app->parse(args, /*program_name_included=*/false);
  o->owner_ = app;
  return o;
}

std::string sweep_footer(SweepCommand command) {
  const std::vector<const SweepFamily*> families = families_of(sweep_operators());
  std::string s;
  for (const SweepFamily* f : families) s += (s.empty() ? "" : " ") + std::string(f->footer);
  s += " An option that does not apply to the operator is an error.";
  if (command == SweepCommand::check) {
    std::string options, docs, covers;
    for (const SweepFamily* f : families) {
      options += (options.empty() ? "" : "; ") + std::string(f->check_list_options);
      docs += (docs.empty() ? "" : " or ") + std::string(f->check_list_doc);
      covers += (covers.empty() ? "" : ", ") + std::string(f->check_list_covers);
    }
    s += " Without a shape option (" + options + ") check runs the correctness list of " + docs + " (" + covers + ").";
  }
  if (command == SweepCommand::tune)
    for (const SweepFamily* f : families)
      if (*f->tune_footer) s += " " + std::string(f->tune_footer);
  return s;
}

std::vector<std::string> sweep_configs(const SweepOptions& o) {
  const std::string given = o.value("configs");
  std::string text = given;
  std::replace(text.begin(), text.end(), '|', ',');
  std::vector<std::string> configs = split_list(text);
  if (configs.empty() && o.given("configs")) throw Error(Status::invalid_argument, "--configs: no config in '" + given + "'");
  return configs;
}

}  // namespace kgen::cli
