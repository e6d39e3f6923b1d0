// `kgen tune`: autotune an operator's shapes, print every candidate, append the winners to the
// tuning database (one shard per process). Resumable: shapes with an exact record are skipped.
// The tuner is one core for every operator (tuning/autotune.h); this file only turns each
// op's options into TuningProblems (ops/tuning_problems.h).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>

#include "tuning/autotune.h"
#include "driver/cuda_driver.h"
#include "driver/device.h"
#include "tuning/tuning_db.h"
#include "ops/tuning_problems.h"
#include "tools/commands.h"
#include "tools/commands_tune_db.h"

namespace kgen::cli {
namespace {

struct TuneCliOptions {
  std::string op = "attention_fwd", dtypes = "bf16", head_dims = "128", causal = "both",
              seqlens = "1024,4096,16384", devices = "0", db_dir, configs;
  std::string acts = "none,silu,softmax,softmax_seq", directions = "fwd,bwd", grids = "4096,64x64,16x16x16", extras = "0";
  int tokens = 16384, hidden = 2048, batch = 0, heads = 0, heads_kv = 0, warmup = 10, reps = 50, jobs = 0;
  bool deterministic = false, force = false, no_record = false;
};

using Problems = std::vector<std::unique_ptr<TuningProblem>>;

// dtype × head dim × causal × n of one attention-family op; b·n = --tokens and h·d = --hidden
// unless --batch / --heads are given.
template <class Make>
Problems attention_problems(const TuneCliOptions& o, Make make) {
  const auto dtypes = parse_dtypes(o.dtypes);
  const auto head_dims = parse_int_list(o.head_dims, "--head-dims");
  const auto seqlens = parse_int_list(o.seqlens, "--seqlens");
  Problems out;
  for (DType dtype : dtypes)
    for (int d : head_dims)
      for (bool causal : o.causal == "both" ? std::vector<bool>{false, true} : std::vector<bool>{o.causal == "yes"})
        for (int n : seqlens) {
          AttentionCase c;
          c.dtype = dtype, c.head_dim = d, c.causal = causal, c.n_q = c.n_k = n;
          c.batch = o.batch ? o.batch : std::max(1, o.tokens / n);
          c.heads_q = o.heads ? o.heads : std::max(1, o.hidden / d);
          c.heads_kv = o.heads_kv ? o.heads_kv : c.heads_q;
          out.push_back(make(c));
        }
  return out;
}

// "64x64" → {64, 64}.
std::vector<int> parse_grid(const std::string& text) {
  std::vector<int> sizes;
  std::string part;
  for (std::size_t i = 0; i <= text.size(); ++i) {
    if (i < text.size() && text[i] != 'x') {
      part += text[i];
      continue;
    }
    auto v = parse_int_list(part, "--grids");
    if (v.size() != 1) throw Error(Status::invalid_argument, "--grids: '" + text + "' is not a grid like 64x64");
    sizes.push_back(v[0]);
    part.clear();
  }
  if (sizes.size() > 3) throw Error(Status::invalid_argument, "--grids: '" + text + "' has more than 3 dims");
  return sizes;
}

// dtype × act × direction × d × (n | grid × extra) of lrpe_cosine or md_lrpe_cosine.
Problems lrpe_problems(const TuneCliOptions& o, LrpeOp op) {
  const auto dtypes = parse_dtypes(o.dtypes);
  std::vector<LrpeAct> acts;
  for (const auto& s : split_list(o.acts)) {
    auto act = parse_lrpe_act(s);
    if (!act) throw Error(Status::invalid_argument, "--acts: unknown act '" + s + "' (none, relu, sigmoid, silu, softmax, softmax_seq)");
    acts.push_back(*act);
  }
  std::vector<LrpeDirection> directions;
  for (const auto& d : split_list(o.directions)) {
    if (d != "fwd" && d != "bwd") throw Error(Status::invalid_argument, "--directions: expected fwd and/or bwd, got '" + d + "'");
    directions.push_back(d == "fwd" ? LrpeDirection::forward : LrpeDirection::backward);
  }
  const auto dims = parse_int_list(o.head_dims, "--head-dims");
  std::vector<LrpeCase> shapes;  // n (lrpe_cosine) or grid and extra tokens (md)
  if (op == LrpeOp::cosine) {
    for (int n : parse_int_list(o.seqlens, "--seqlens")) {
      LrpeCase c;
      c.n = n;
      shapes.push_back(c);
    }
  } else {
    const auto extras = parse_int_list(o.extras, "--extras", 0);
    for (const auto& g : split_list(o.grids))
      for (int extra : extras) {
        LrpeCase c;
        c.op = LrpeOp::md_cosine, c.grid = parse_grid(g), c.extra = extra, c.n = extra;
        long long cells = 1;
        for (int v : c.grid) cells *= v;
        if (cells + extra >= (1LL << 31)) throw Error(Status::invalid_argument, "--grids: '" + g + "' is too large");
        c.n += static_cast<int>(cells);
        shapes.push_back(c);
      }
  }
  Problems out;
  for (DType dtype : dtypes)
    for (LrpeAct act : acts)
      for (LrpeDirection dir : directions)
        for (int d : dims)
          for (LrpeCase c : shapes) {
            c.op = op, c.dtype = dtype, c.act = act, c.direction = dir, c.d = d;
            c.batch = o.batch ? o.batch : 12, c.heads = o.heads ? o.heads : 12;
            out.push_back(lrpe_tuning(c));
          }
  return out;
}

// The operators `kgen tune` serves and how each turns the options into problems.
struct TunableOp {
  const char* name;
  Problems (*problems)(const TuneCliOptions&);
};
constexpr TunableOp kTunableOps[] = {
    {"attention_fwd", [](const TuneCliOptions& o) { return attention_problems(o, attention_forward_tuning); }},
    {"attention_bwd",
     [](const TuneCliOptions& o) {
       return attention_problems(o, [&](const AttentionCase& c) { return attention_backward_tuning(c, o.deterministic); });
     }},
    {"attention_double_bwd", [](const TuneCliOptions& o) { return attention_problems(o, attention_double_backward_tuning); }},
    {"lrpe_cosine", [](const TuneCliOptions& o) { return lrpe_problems(o, LrpeOp::cosine); }},
    {"md_lrpe_cosine", [](const TuneCliOptions& o) { return lrpe_problems(o, LrpeOp::md_cosine); }},
};

std::string tunable_op_names() {
  std::string s;
  for (const auto& op : kTunableOps) s += (s.empty() ? "" : ", ") + std::string(op.name);
  return s;
}

const TunableOp& find_tunable_op(const std::string& name) {
  for (const auto& op : kTunableOps)
    if (name == op.name) return op;
  throw Error(Status::invalid_argument, "--op: unknown operator '" + name + "' (kgen tune serves " + tunable_op_names() + ")");
}

void print_candidates(const TuningProblem& p, const TuneResult& r) {
  const std::string unit(p.rate_unit());
  std::printf("| config | check | median ms | p20–p80 ms | %s | regs | spill B | note |\n", unit.c_str());
  std::printf("|---|---|---|---|---|---|---|---|\n");
  for (std::size_t i = 0; i < r.candidates.size(); ++i) {
    const CandidateResult& c = r.candidates[i];
    std::string note = r.winner && *r.winner == i ? "WINNER" : (r.runner_up && *r.runner_up == i ? "runner-up" : "");
    if (c.compiled) note += (note.empty() ? "" : ", ") + std::string("GPU ") + std::to_string(c.device);
    if (!c.error.empty()) {
      std::string first_line = c.error.substr(0, c.error.find('\n'));
      std::printf("| %s | – | – | – | – | %d | %d | %s |\n", c.config.c_str(), c.resources.registers, c.resources.spill_stores,
                  first_line.c_str());
    } else if (!c.check.pass) {
      std::printf("| %s | FAIL (%s) | – | – | – | %d | %d | never timed |\n", c.config.c_str(), c.check.detail.c_str(),
                  c.resources.registers, c.resources.spill_stores);
    } else {
      std::printf("| %s | pass (%s) | %.4f | %.4f–%.4f | %.1f | %d | %d | %s |\n", c.config.c_str(), c.check.detail.c_str(),
                  c.timing.median_ms, c.timing.p20_ms, c.timing.p80_ms, c.rate, c.resources.registers,
                  c.resources.spill_stores, note.c_str());
    }
  }
}

int run_tune(const TuneCliOptions& o) {
  // Arguments first, so a typo is named even on a machine without a GPU.
  const TunableOp& op = find_tunable_op(o.op);
  TuneOptions opts;
  opts.warmup = o.warmup, opts.reps = o.reps, opts.jobs = o.jobs;
  opts.devices = parse_int_list(o.devices, "--devices", 0);
  const Problems problems = op.problems(o);
  for (const auto& text : split_list(o.configs)) {
    auto c = problems.empty() ? std::nullopt : problems.front()->parse_config(text);
    if (!c) throw Error(Status::invalid_argument, "--configs: cannot parse '" + text + "' as an " + o.op + " config");
    opts.candidates.push_back(*c);
  }
  std::string why;
  if (!cuda_available(&why)) throw Error(Status::no_device, why);
  TuningContext ctx = TuningContext::current(opts.devices[0]);
  TuningDatabase db = TuningDatabase::open(default_tuning_db_files(), ctx);
  std::unique_ptr<TuningShardWriter> writer;
  if (!o.no_record)
    writer = std::make_unique<TuningShardWriter>(o.db_dir.empty() ? default_tuning_shard_dir() : std::filesystem::path(o.db_dir), ctx);
  const DeviceInfo& dev = device_info(opts.devices[0]);
  std::printf("kgen tune --op %s on %s (%s, %d SMs); %d warm-up + %d timed runs per candidate; every candidate checked first\n",
              o.op.c_str(), dev.name.c_str(), dev.target.arch.c_str(), dev.sm_count, o.warmup, o.reps);

  int failed = 0, tuned = 0, skipped = 0;
  for (const auto& p : problems) {
    const std::string variant = p->variant_key(), bucket = p->bucket();
    std::printf("\n## %s %s (%s)\n", variant.c_str(), bucket.c_str(), p->shape_text().c_str());
    if (!o.force)
      if (auto hit = db.lookup(p->op(), variant, bucket); hit && hit->exact) {
        std::printf("already tuned: %s (%s); --force to re-tune\n", hit->record.config.c_str(), hit->source_file.c_str());
        ++skipped;
        continue;
      }
    auto start = std::chrono::steady_clock::now();
    TuneResult r = tune(*p, opts, [&](const char* stage, std::size_t done, std::size_t total, const CandidateResult*) {
      double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      double eta = done ? s / done * (total - done) : 0;
      std::fprintf(stderr, "\r%-10s [%zu/%zu] %.0f s elapsed, ETA %.0f s   ", stage, done, total, s, eta);
      if (done == total) std::fprintf(stderr, "\n");
    });
    print_candidates(*p, r);
    if (!r.winner) {
      std::printf("no candidate passed its check: nothing recorded\n");
      ++failed;
      continue;
    }
    const CandidateResult& w = r.candidates[*r.winner];
    std::string runner = r.runner_up ? r.candidates[*r.runner_up].config : "";
    std::printf("winner %s: %.4f ms, %.1f %s, margin %.1f%% over %s%s (%.1f s)\n", w.config.c_str(), w.timing.median_ms,
                w.rate, std::string(p->rate_unit()).c_str(), 100 * r.margin, runner.empty() ? "nothing" : runner.c_str(),
                r.within_noise ? ", within noise: canonical order decided" : "",
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    if (writer) writer->append(winner_record(*p, r));
    ++tuned;
  }
  std::printf("\ntuned %d, skipped %d (already tuned), failed %d%s%s\n", tuned, skipped, failed,
              writer ? "; records in " : "", writer ? writer->path().c_str() : "");
  return failed ? kFailed : kOk;
}

}  // namespace

void add_tune_commands(CLI::App& app, int& exit_code) {
  auto* tune = app.add_subcommand("tune", "Autotune an operator's shapes and record the winners (or: tune merge|show)");
  auto o = std::make_shared<TuneCliOptions>();
  tune->add_option("--op", o->op, "Operator: " + tunable_op_names())->capture_default_str();
  tune->add_option("--dtypes", o->dtypes, "Comma-separated dtypes")->capture_default_str();
  tune->add_option("--head-dims", o->head_dims, "Comma-separated head dims (lrpe: d of x)")->capture_default_str();
  tune->add_option("--causal", o->causal, "attention: yes, no or both")->check(CLI::IsMember({"yes", "no", "both"}))->capture_default_str();
  tune->add_option("--seqlens", o->seqlens, "Comma-separated sequence lengths (attention: n_q = n_k; lrpe_cosine: n)")->capture_default_str();
  tune->add_option("--tokens", o->tokens, "attention: b·n when --batch is not given")->capture_default_str()->check(CLI::PositiveNumber);
  tune->add_option("--hidden", o->hidden, "attention: h·d when --heads is not given")->capture_default_str()->check(CLI::PositiveNumber);
  tune->add_option("--batch", o->batch, "Batch size (lrpe default 12)")->check(CLI::PositiveNumber);
  tune->add_option("--heads", o->heads, "Query heads (lrpe: heads, default 12)")->check(CLI::PositiveNumber);
  tune->add_option("--heads-kv", o->heads_kv, "attention: key/value heads (default: --heads)")->check(CLI::PositiveNumber);
  tune->add_flag("--deterministic", o->deterministic, "attention_bwd: tune the deterministic mode (dQ without atomics)");
  tune->add_option("--acts", o->acts, "lrpe: comma-separated acts (none, relu, sigmoid, silu, softmax, softmax_seq)")->capture_default_str();
  tune->add_option("--directions", o->directions, "lrpe: comma-separated directions, fwd and/or bwd")->capture_default_str();
  tune->add_option("--grids", o->grids, "md_lrpe_cosine: comma-separated grids, sizes joined by x (4096, 64x64, 16x16x16)")->capture_default_str();
  tune->add_option("--extras", o->extras, "md_lrpe_cosine: comma-separated extra tokens l (n = l + grid cells)")->capture_default_str();
  tune->add_option("--configs", o->configs, "Comma-separated candidates (default: the op's whole config space)");
  tune->add_option("--warmup", o->warmup, "Untimed runs per candidate")->capture_default_str()->check(CLI::NonNegativeNumber);
  tune->add_option("--reps", o->reps, "Timed runs per candidate")->capture_default_str()->check(CLI::PositiveNumber);
  tune->add_option("--jobs,-j", o->jobs, "Parallel compiles (default: all cores)")->check(CLI::NonNegativeNumber);
  tune->add_option("--devices", o->devices,
                   "Comma-separated GPUs to spread candidates over, one worker each; their timings are compared "
                   "directly, so use identical GPUs")
      ->capture_default_str();
  tune->add_option("--db-dir", o->db_dir, "Directory for this run's shard (default: KGEN_TUNE_DB's directory or ~/.cache/kgen/tuning)");
  tune->add_flag("--force", o->force, "Re-tune shapes that already have a record");
  tune->add_flag("--no-record", o->no_record, "Do not write the winners");
  tune->footer(
      "Per shape: every candidate is compiled in parallel, checked against the fp64 reference on NaN-poisoned outputs "
      "(a failing one is listed and never wins), the survivors timed; the winner is appended to the tuning database. "
      "attention_fwd|attention_bwd|attention_double_bwd: --dtypes × --head-dims × --causal × --seqlens "
      "(attention_bwd --deterministic tunes that mode). lrpe_cosine: --dtypes × --acts × --directions × --head-dims × "
      "--seqlens at --batch × --heads; md_lrpe_cosine: the same with --grids × --extras instead of --seqlens.");
  add_tune_db_commands(*tune, exit_code);
  tune->callback([tune, o, &exit_code] {
    if (!tune->get_subcommands().empty()) return;  // merge / show ran
    exit_code = run_tune(*o);
  });
}

}  // namespace kgen::cli
