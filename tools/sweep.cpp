#include "tools/sweep.h"

#include <algorithm>
#include <string_view>
#include <utility>

#include "generator/registry.h"
#include "tools/commands.h"

namespace kgen::cli {
namespace {

// Operators, as bits: which options apply to which.
enum : unsigned {
  kFwd = 1,
  kBwd = 2,
  kDbl = 4,
  kLrpe = 8,
  kMd = 16,
  kAttention = kFwd | kBwd | kDbl,
  kLrpeFamily = kLrpe | kMd,
  kAll = kAttention | kLrpeFamily
};
// Commands, as bits: which take an option, which a default is for.
enum : unsigned { kCheck = 1, kBench = 2, kTune = 4, kEvery = kCheck | kBench | kTune };

struct SweepOp {
  const char* name;
  unsigned bit;
  OpFamily family;
};
constexpr SweepOp kSweepOps[] = {{"attention_fwd", kFwd, OpFamily::attention},
                                 {"attention_bwd", kBwd, OpFamily::attention},
                                 {"attention_double_bwd", kDbl, OpFamily::attention},
                                 {"lrpe_cosine", kLrpe, OpFamily::lrpe},
                                 {"md_lrpe_cosine", kMd, OpFamily::lrpe}};

const SweepOp* find_sweep_op(const std::string& name) {
  for (const SweepOp& op : kSweepOps)
    if (name == op.name) return &op;
  return nullptr;
}

// An option of the sweep: the operators it applies to, the commands that take it.
struct OptionSpec {
  const char* name;
  unsigned ops, commands;
  bool flag;
  bool alias_only;  // the old `bench md_lrpe` sub-command's --dims
  const char* help;
};
constexpr OptionSpec kOptions[] = {
    {"dtypes", kAll, kEvery, false, false, "Comma-separated dtypes: fp16, bf16, fp32"},
    {"head-dims", kAll, kEvery, false, false, "Comma-separated head dims (lrpe: d of x; o has 2d features)"},
    {"causal", kAttention, kEvery, false, false, "Causal masking: yes, no or both"},
    {"seqlens", kAll, kEvery, false, false,
     "Comma-separated sequence lengths: attention n_q = n_k; lrpe_cosine n; md_lrpe_cosine 1-d grids of n positions"},
    {"batch", kAll, kEvery, false, false, "Batch size (attention: --tokens / n when absent)"},
    {"heads", kAll, kEvery, false, false, "Heads (attention: query heads, --hidden / d when absent)"},
    {"heads-kv", kAttention, kEvery, false, false, "Key/value heads (default: --heads)"},
    {"q-len", kAttention, kEvery, false, false,
     "Query rows of every sequence against its --seqlens keys (decode-like shapes; default: n_q = n)"},
    {"tokens", kAttention, kEvery, false, false, "b·n when --batch is absent"},
    {"hidden", kAttention, kEvery, false, false, "h·d when --heads is absent"},
    {"deterministic", kBwd, kEvery, true, false,
     "The deterministic mode (dQ without atomics); without it check runs both modes, bench and tune the atomic one"},
    {"acts", kLrpeFamily, kEvery, false, false, "Comma-separated acts: none, relu, sigmoid, silu, softmax, softmax_seq"},
    {"directions", kLrpeFamily, kEvery, false, false, "Comma-separated directions: fwd, bwd"},
    {"grids", kMd, kEvery, false, false, "Comma-separated grids, sizes joined by x (64x64, 16x16x16)"},
    {"extras", kMd, kEvery, false, false, "Comma-separated extra tokens l (n = l + grid cells)"},
    {"configs", kAll, kEvery, false, false,
     "Configs, comma- or '|'-separated: check and bench run them beside the default (md: ':cache' ones with the "
     "angle cache), tune takes them as its candidates (default: the whole config space)"},
    {"warmup", kAll, kBench | kTune, false, false, "Untimed runs"},
    {"reps", kAll, kBench | kTune, false, false, "Timed runs"},
    {"quick", kAttention, kCheck, true, false, "Skip the large shape of the correctness list"},
    {"copy-mib", kLrpeFamily, kBench, false, false, "Size in MiB of the copy that measures the device bandwidth"},
    {"launch", kFwd, kBench, true, false,
     "Measure first-call cost (cold compile, disk hit, in-memory hit) and hot launch overhead instead"},
    {"dims", kMd, kBench, false, true, "Only the grids of these dims m (1, 2, 3)"},
    {"list", kAll, kEvery, true, false, "Print the cases (tune: the problems) instead of running them; no GPU needed"},
    {"json", kAll, kBench, true, false,
     "Print the rows as one JSON array of objects, one per row, with the tables' columns as fields (lrpe and the "
     "first-call tables: also \"table\"), instead of the tables"},
};

// The singular spellings of the list options, accepted as aliases (README: a plural option takes a
// comma-separated list and also answers to its singular). Not --dims: `bench md_lrpe`'s --dim is
// its --head-dims.
constexpr std::pair<const char*, const char*> kSingulars[] = {
    {"dtypes", "dtype"}, {"head-dims", "head-dim"}, {"seqlens", "seqlen"}, {"acts", "act"},
    {"directions", "direction"}, {"grids", "grid"}, {"extras", "extra"}, {"configs", "config"}};

// The default of an option for some operators and commands.
struct DefaultSpec {
  const char* name;
  unsigned ops, commands;
  const char* value;
};
constexpr DefaultSpec kDefaults[] = {
    {"dtypes", kAll, kCheck, "fp16,bf16,fp32"},
    {"dtypes", kAll, kBench | kTune, "bf16"},
    {"head-dims", kAttention, kCheck, "32,64,96,128,256,80"},
    {"head-dims", kAttention, kBench, "64,128"},
    {"head-dims", kAttention, kTune, "128"},
    {"head-dims", kLrpeFamily, kEvery, "128"},
    {"causal", kAttention, kEvery, "both"},
    {"seqlens", kAttention, kCheck | kBench, "512,1024,2048,4096,8192,16384"},
    {"seqlens", kAttention, kTune, "1024,4096,16384"},
    {"seqlens", kLrpeFamily, kCheck | kBench, "256,512,1024,2048,4096,8192,16384,32768"},
    {"seqlens", kLrpeFamily, kTune, "4096"},
    {"grids", kMd, kCheck | kBench, "16x16,32x32,64x64,128x128,4x4x4,8x8x8,16x16x16,32x32x32"},
    {"grids", kMd, kTune, "64x64,16x16x16"},
    {"extras", kMd, kCheck | kBench, "0,10"},
    {"extras", kMd, kTune, "0"},
    {"batch", kLrpeFamily, kEvery, "12"},
    {"heads", kLrpeFamily, kEvery, "12"},
    {"tokens", kAttention, kEvery, "16384"},
    {"hidden", kAttention, kEvery, "2048"},
    {"acts", kLrpeFamily, kCheck, "none,relu,sigmoid,silu,softmax,softmax_seq"},
    {"acts", kLrpe, kBench, "none,silu,softmax,softmax_seq"},
    {"acts", kMd, kBench, "none"},
    {"acts", kLrpeFamily, kTune, "none,silu,softmax,softmax_seq"},
    {"directions", kLrpeFamily, kEvery, "fwd,bwd"},
    {"warmup", kAttention, kBench, "5"},
    {"reps", kAttention, kBench, "30"},
    {"warmup", kLrpeFamily, kBench, "10"},
    {"reps", kLrpeFamily, kBench, "50"},
    {"warmup", kAll, kTune, "10"},
    {"reps", kAll, kTune, "50"},
    {"copy-mib", kLrpeFamily, kBench, "1024"},
};

unsigned command_bit(SweepCommand c) { return c == SweepCommand::check ? kCheck : c == SweepCommand::bench ? kBench : kTune; }

const char* command_name(SweepCommand c) {
  return c == SweepCommand::check ? "check" : c == SweepCommand::bench ? "bench" : "tune";
}

// The operators of `ops` by name: "attention_bwd", or "lrpe_cosine, md_lrpe_cosine".
std::string op_names(unsigned ops) {
  std::string s;
  for (const SweepOp& op : kSweepOps)
    if (ops & op.bit) s += (s.empty() ? "" : ", ") + std::string(op.name);
  return s;
}

// "attention", "lrpe", or the operators' names: who a default is for, in --help.
std::string group_name(unsigned ops) {
  if (ops == kAll) return "";
  if (ops == kAttention) return "attention ";
  if (ops == kLrpeFamily) return "lrpe ";
  return op_names(ops) + " ";
}

// The options that the correctness list of `kgen check` fixes: giving one of them makes check
// run the product sweep instead.
bool fixed_by_check_list(const std::string& name, OpFamily family) {
  static const char* const attention[] = {"seqlens", "batch", "heads", "heads-kv", "tokens", "hidden", "q-len"};
  static const char* const lrpe[] = {"head-dims", "seqlens", "batch", "heads", "grids", "extras"};
  auto has = [&](const auto& names) {
    return std::any_of(std::begin(names), std::end(names), [&](const char* n) { return name == n; });
  };
  return family == OpFamily::attention ? has(attention) : has(lrpe);
}

bool uses_check_list(const SweepOptions& o) {
  if (o.command() != SweepCommand::check) return false;
  for (const OptionSpec& spec : kOptions)
    if (fixed_by_check_list(spec.name, o.family()) && o.given(spec.name)) return false;
  return true;
}

std::vector<bool> parse_causal(const std::string& text) {
  if (text == "both") return {false, true};
  if (text == "yes") return {true};
  if (text == "no") return {false};
  throw Error(Status::invalid_argument, "--causal: expected yes, no or both, got '" + text + "'");
}

std::vector<LrpeAct> parse_acts(const std::string& text) {
  std::vector<LrpeAct> out;
  for (const auto& s : parse_list(text, "--acts")) {
    // "softmax-1" / "softmax-2": the reference reports' dims.
    auto act = parse_lrpe_act(s == "softmax-1" ? "softmax" : s == "softmax-2" ? "softmax_seq" : s);
    if (!act) throw Error(Status::invalid_argument, "--acts: unknown act '" + s + "' (none, relu, sigmoid, silu, softmax, softmax_seq)");
    out.push_back(*act);
  }
  return out;
}

std::vector<LrpeDirection> parse_directions(const std::string& text) {
  std::vector<LrpeDirection> out;
  for (const auto& d : parse_list(text, "--directions")) {
    if (d != "fwd" && d != "bwd") throw Error(Status::invalid_argument, "--directions: expected fwd and/or bwd, got '" + d + "'");
    out.push_back(d == "fwd" ? LrpeDirection::forward : LrpeDirection::backward);
  }
  return out;
}

AttentionCase attention_case(DType t, int d, bool causal, int b, int hq, int hkv, int nq, int nk) {
  AttentionCase c;
  c.dtype = t, c.head_dim = d, c.causal = causal;
  c.batch = b, c.heads_q = hq, c.heads_kv = hkv, c.n_q = nq, c.n_k = nk;
  return c;
}

// An md case of `grid` with `extra` tokens first.
LrpeCase md_case(const std::vector<int>& grid, int extra) {
  LrpeCase c;
  c.op = LrpeOp::md_cosine, c.grid = grid, c.extra = extra;
  long long cells = 1;
  for (int v : grid) cells *= v;
  if (cells + extra >= (1LL << 31))
    throw Error(Status::invalid_argument, "--grids: a grid of " + std::to_string(cells) + " positions is too large");
  c.n = static_cast<int>(extra + cells);
  return c;
}

// The md grids of the options: --grids and one 1-d grid per --seqlens entry; when neither is
// given, the command's defaults of both. The old `bench md_lrpe --dims` keeps those of its dims.
std::vector<std::vector<int>> md_grids(const SweepOptions& o) {
  const bool explicit_shapes = o.given("grids") || o.given("seqlens");
  std::vector<std::vector<int>> grids;
  if (!explicit_shapes || o.given("seqlens"))
    for (int n : parse_int_list(o.value("seqlens"), "--seqlens")) grids.push_back({n});
  if (!explicit_shapes || o.given("grids"))
    for (const auto& g : parse_list(o.value("grids"), "--grids")) grids.push_back(parse_grid(g));
  if (o.given("dims")) {
    const auto dims = parse_int_list(o.value("dims"), "--dims");
    for (int m : dims)
      if (m > 3) throw Error(Status::invalid_argument, "--dims: grids have 1, 2 or 3 dims, got " + std::to_string(m));
    std::erase_if(grids, [&](const std::vector<int>& g) { return std::find(dims.begin(), dims.end(), int(g.size())) == dims.end(); });
  }
  return grids;
}

}  // namespace

std::string sweep_operator_names() {
  std::string s;
  for (const OperatorInfo& op : operators())
    if (find_sweep_op(std::string(op.name))) s += (s.empty() ? "" : ", ") + std::string(op.name);
  return s;
}

const std::string& SweepOptions::op() const {
  const std::string& name = fixed_op_.empty() ? op_ : fixed_op_;
  if (!find_operator(name) || !find_sweep_op(name))
    throw Error(Status::invalid_argument, "--op: unknown operator '" + name + "' (kgen " + command_name(command_) +
                                              " serves " + sweep_operator_names() + ")");
  return name;
}

OpFamily SweepOptions::family() const { return find_sweep_op(op())->family; }

bool SweepOptions::given(const std::string& name) const {
  auto it = options_.find(name);
  return it != options_.end() && it->second->count() > 0;
}

std::string SweepOptions::value(const std::string& name) const {
  if (given(name)) return values_.at(name);
  const unsigned op = find_sweep_op(this->op())->bit;
  for (const DefaultSpec& d : kDefaults)
    if (name == d.name && (d.ops & op) && (d.commands & command_bit(command_))) return d.value;
  return "";
}

int SweepOptions::integer(const std::string& name, int min) const {
  const std::string text = value(name);
  if (text.empty()) return 0;
  const auto v = parse_int_list(text, ("--" + name).c_str(), min);
  if (v.size() != 1) throw Error(Status::invalid_argument, "--" + name + ": expected one integer, got '" + text + "'");
  return v[0];
}

void SweepOptions::validate() const {
  const SweepOp& op = *find_sweep_op(this->op());
  for (const OptionSpec& spec : kOptions)
    if (given(spec.name) && !(spec.ops & op.bit))
      throw Error(Status::invalid_argument, std::string("--") + spec.name + ": does not apply to --op " + op.name +
                                                " (it applies to " + op_names(spec.ops) + ")");
}

std::shared_ptr<SweepOptions> add_sweep_options(CLI::App& app, SweepCommand command, const std::string& fixed_op) {
  auto o = std::make_shared<SweepOptions>();
  o->command_ = command;
  o->fixed_op_ = fixed_op;
  o->op_ = "attention_fwd";
  const unsigned cmd = command_bit(command);
  const unsigned fixed = fixed_op.empty() ? kAll : find_sweep_op(fixed_op)->bit;
  if (fixed_op.empty())
    app.add_option("--op", o->op_, "Operator: " + sweep_operator_names())->capture_default_str();
  for (const OptionSpec& spec : kOptions) {
    if (!(spec.commands & cmd) || !(spec.ops & fixed) || (spec.alias_only && fixed_op.empty())) continue;
    std::string help = spec.help;
    std::string defaults;
    for (const DefaultSpec& d : kDefaults) {
      if (spec.name != std::string(d.name) || !(d.commands & cmd) || !(d.ops & fixed)) continue;
      const OpFamily family = d.ops & kAttention ? OpFamily::attention : OpFamily::lrpe;
      const bool list = command == SweepCommand::check && fixed_by_check_list(spec.name, family);
      defaults += (defaults.empty() ? "" : "; ") + group_name((d.ops & fixed) == fixed ? kAll : d.ops) +
                  (list ? "the correctness list, else " : "") + d.value;
    }
    if (!defaults.empty()) help += " (default: " + defaults + ")";
    if (spec.ops != kAll && fixed_op.empty()) help += " [" + op_names(spec.ops) + "]";
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
  std::string s =
      "attention_fwd|attention_bwd|attention_double_bwd: --dtypes × --head-dims × --causal × --seqlens, b = --batch "
      "(or --tokens / n), h = --heads (or --hidden / d). lrpe_cosine: --dtypes × --acts × --directions × --head-dims "
      "× --seqlens at --batch × --heads; md_lrpe_cosine: the same with --grids × --extras (and --seqlens as 1-d "
      "grids) instead of --seqlens. An option that does not apply to the operator is an error.";
  if (command == SweepCommand::check)
    s += " Without a shape option (attention: --seqlens, --batch, --heads, --heads-kv, --tokens, --hidden, --q-len; lrpe: "
         "--head-dims, --seqlens, --batch, --heads, --grids, --extras) check runs the correctness list of "
         "docs/attention.md §5.6 or docs/lrpe.md §6 (odd sizes, both layouts, GQA, theta shapes, the md angle cache).";
  return s;
}

std::vector<AttentionCase> attention_cases(const SweepOptions& o) {
  const auto dtypes = parse_dtypes(o.value("dtypes"));
  const auto head_dims = parse_int_list(o.value("head-dims"), "--head-dims");
  const auto causal = parse_causal(o.value("causal"));
  std::vector<AttentionCase> cases;
  if (uses_check_list(o)) {
    // docs/attention.md §5.6: odd sizes, n_q != n_k both ways, causal, GQA, more than one wave;
    // the layout alternates from case to case.
    struct Shape { int b, hq, hkv, nq, nk; };
    std::vector<Shape> shapes = {{1, 1, 1, 1, 1}, {1, 2, 1, 7, 7}, {2, 4, 1, 63, 63}, {1, 8, 1, 1000, 1000},
                                 {1, 2, 2, 1337, 1000}, {1, 4, 4, 1000, 1337}, {1, 2, 2, 65, 17}};
    if (!o.flag("quick")) shapes.push_back({4, 32, 4, 2048, 2048});
    for (DType t : dtypes)
      for (int d : head_dims)
        for (bool c : causal)
          for (const Shape& s : shapes) cases.push_back(attention_case(t, d, c, s.b, s.hq, s.hkv, s.nq, s.nk));
  } else {
    const auto seqlens = parse_int_list(o.value("seqlens"), "--seqlens");
    const int batch = o.integer("batch", 1), heads = o.integer("heads", 1), heads_kv = o.integer("heads-kv", 1);
    const int tokens = o.integer("tokens", 1), hidden = o.integer("hidden", 1), q_len = o.integer("q-len", 1);
    for (DType t : dtypes)
      for (int d : head_dims)
        for (bool c : causal)
          for (int n : seqlens) {
            const int hq = heads ? heads : std::max(1, hidden / d);
            if (heads_kv && hq % heads_kv)
              throw Error(Status::invalid_argument, "--heads-kv: " + std::to_string(heads_kv) + " does not divide " +
                                                        std::to_string(hq) + " query heads");
            cases.push_back(attention_case(t, d, c, batch ? batch : std::max(1, tokens / n), hq, heads_kv ? heads_kv : hq,
                                           q_len ? q_len : n, n));
          }
  }
  // check covers BNHD views: the layout alternates; bench and tune time BHND.
  std::uint64_t seed = 1;
  for (AttentionCase& c : cases) {
    if (o.command() == SweepCommand::check) c.layout = seed % 2 ? Layout::bnhd : Layout::bhnd;
    c.seed = seed++;
  }
  return cases;
}

std::vector<LrpeCase> lrpe_cases(const SweepOptions& o) {
  const LrpeOp op = o.op() == "lrpe_cosine" ? LrpeOp::cosine : LrpeOp::md_cosine;
  const auto dtypes = parse_dtypes(o.value("dtypes"));
  const auto acts = parse_acts(o.value("acts"));
  const auto directions = parse_directions(o.value("directions"));
  const bool check = o.command() == SweepCommand::check;
  // The shapes: (b, h, n, d) for lrpe_cosine, grid and extra tokens (b, h, d fixed) for md.
  std::vector<LrpeCase> shapes;
  auto shape = [&](int b, int h, int n, int d) {
    LrpeCase c;
    c.batch = b, c.heads = h, c.n = n, c.d = d;
    return c;
  };
  if (uses_check_list(o)) {
    // docs/lrpe.md §6.
    if (op == LrpeOp::cosine) {
      for (const LrpeCase& c : {shape(1, 1, 1, 1), shape(2, 3, 33, 33), shape(2, 4, 257, 48), shape(2, 12, 1000, 128),
                                shape(1, 2, 4096, 64)})
        shapes.push_back(c);
    } else {
      const std::pair<std::vector<int>, int> grids[] = {{{33}, 0}, {{16, 16}, 10}, {{4, 5, 6}, 0}, {{8, 8, 8}, 10}};
      for (const auto& [grid, extra] : grids) {
        LrpeCase c = md_case(grid, extra);
        c.batch = 2, c.heads = 3, c.d = 64;
        shapes.push_back(c);
      }
    }
  } else {
    const int batch = o.integer("batch", 1), heads = o.integer("heads", 1);
    for (int d : parse_int_list(o.value("head-dims"), "--head-dims")) {
      if (op == LrpeOp::cosine) {
        for (int n : parse_int_list(o.value("seqlens"), "--seqlens")) shapes.push_back(shape(batch, heads, n, d));
        continue;
      }
      // Grouped as the reports' tables: per grid dims m (in order of first appearance), per extra
      // tokens l, the grids of m dims.
      const auto extras = parse_int_list(o.value("extras"), "--extras", 0);
      const auto grids = md_grids(o);
      std::vector<std::size_t> dims;
      for (const auto& g : grids)
        if (std::find(dims.begin(), dims.end(), g.size()) == dims.end()) dims.push_back(g.size());
      for (std::size_t m : dims)
        for (int extra : extras)
          for (const auto& grid : grids) {
            if (grid.size() != m) continue;
            LrpeCase c = md_case(grid, extra);
            c.batch = batch, c.heads = heads, c.d = d;
            shapes.push_back(c);
          }
    }
  }
  std::vector<LrpeCase> cases;
  std::uint64_t seed = 1;
  for (DType t : dtypes)
    for (LrpeAct act : acts)
      for (LrpeDirection dir : directions)
        for (const LrpeCase& s : shapes)
          for (bool cache : {false, true}) {
            // check runs md with and without the angle cache; bench adds the cache as a column.
            if (cache && !(check && op == LrpeOp::md_cosine)) continue;
            LrpeCase c = s;
            c.op = op, c.dtype = t, c.act = act, c.direction = dir, c.cache = cache;
            if (check) {  // layouts, theta shapes and offsets vary from case to case
              if (op == LrpeOp::cosine) {
                c.layout = seed % 2 ? Layout::bnhd : Layout::bhnd, c.theta_kind = static_cast<int>(seed % 3);
                c.offset = seed % 2 ? 0 : 777;
              } else {
                c.theta_kind = seed % 2 ? 0 : 2;
              }
            }
            c.seed = seed++;
            cases.push_back(c);
          }
  return cases;
}

std::vector<std::string> sweep_configs(const SweepOptions& o) {
  const std::string given = o.value("configs");
  std::string text = given;
  std::replace(text.begin(), text.end(), '|', ',');
  std::vector<std::string> configs = split_list(text);
  if (configs.empty() && o.given("configs")) throw Error(Status::invalid_argument, "--configs: no config in '" + given + "'");
  return configs;
}

std::vector<int> parse_grid(const std::string& text) {
  std::vector<int> sizes;
  std::string part;
  for (std::size_t i = 0; i <= text.size(); ++i) {
    if (i < text.size() && text[i] != 'x') {
      part += text[i];
      continue;
    }
    auto v = part.empty() ? std::vector<int>{} : parse_int_list(part, "--grids");
    if (v.size() != 1) throw Error(Status::invalid_argument, "--grids: '" + text + "' is not a grid like 64x64");
    sizes.push_back(v[0]);
    part.clear();
  }
  if (sizes.size() > 3) throw Error(Status::invalid_argument, "--grids: '" + text + "' has more than 3 dims");
  return sizes;
}

}  // namespace kgen::cli
