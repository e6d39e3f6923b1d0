// `kgen tune`: autotune an operator's shapes, print every candidate, append the winners to the
// tuning database (one shard per process). Resumable: shapes with an exact record are skipped.
// The tuner is one core for every operator (runtime/tuning/autotune.h); this file only turns the
// sweep options (tools/sweep.h, the same as `kgen check` and `kgen bench`) into TuningProblems
// through each operator's sweep (tools/sweep_<family>.cpp).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>

#include "tuning/autotune.h"
#include "driver/cuda_driver.h"
#include "driver/device.h"
#include "tuning/tuning_db.h"
#include "tools/commands.h"
#include "tools/commands_tune_db.h"
#include "tools/sweep.h"

namespace kgen::cli {
namespace {

// The options of `kgen tune` beyond the sweep's.
struct TuneCliOptions {
  std::string devices = "0", db_dir;
  int jobs = 0;
  bool force = false, no_record = false;
};

using Problems = std::vector<std::unique_ptr<TuningProblem>>;

void print_candidates(const TuningProblem& p, const TuneResult& r) {
  const std::string unit(p.rate_unit());
  std::printf("| config | check | median ms | p20–p80 ms | %s | regs | spill B | note |\n", unit.c_str());
  std::printf("|---|---|---|---|---|---|---|---|\n");
  for (std::size_t i = 0; i < r.candidates.size(); ++i) {
    const CandidateResult& c = r.candidates[i];
    std::string note = r.winner && *r.winner == i ? "WINNER" : (r.runner_up && *r.runner_up == i ? "runner-up" : "");
    if (c.compiled) note += (note.empty() ? "" : ", ") + std::string("GPU ") + std::to_string(c.device);
    if (c.final_round) note += ", final";
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

int run_tune(const SweepOptions& sweep, const TuneCliOptions& o) {
  // Arguments first, so a typo is named even on a machine without a GPU.
  sweep.validate();
  const std::string op = sweep.op();
  TuneOptions opts;
  opts.warmup = sweep.integer("warmup", 0), opts.reps = sweep.integer("reps", 1), opts.jobs = o.jobs;
  opts.devices = parse_int_list(o.devices, "--devices", 0);
  const Problems problems = find_sweep_operator(op)->tuning_problems(sweep);
  for (const auto& text : sweep_configs(sweep)) {
    auto c = problems.empty() ? std::nullopt : problems.front()->parse_config(text);
    if (!c) throw Error(Status::invalid_argument, "--configs: cannot parse '" + text + "' as an " + op + " config");
    opts.candidates.push_back(*c);
  }
  if (sweep.flag("list")) {
    for (const auto& p : problems) std::printf("%s %s (%s)\n", p->variant_key().c_str(), p->bucket().c_str(), p->shape_text().c_str());
    return kOk;
  }
  std::string why;
  if (!cuda_available(&why)) throw Error(Status::no_device, why);
  TuningContext ctx = TuningContext::current(opts.devices[0]);
  TuningDatabase db = TuningDatabase::open(default_tuning_db_files(), ctx);
  std::unique_ptr<TuningShardWriter> writer;
  if (!o.no_record)
    writer = std::make_unique<TuningShardWriter>(o.db_dir.empty() ? default_tuning_shard_dir() : std::filesystem::path(o.db_dir), ctx);
  const DeviceInfo& dev = device_info(opts.devices[0]);
  std::printf("kgen tune --op %s on %s (%s, %d SMs); %d warm-up + %d timed runs per candidate; every candidate checked first; "
              "the candidates within %.0f %% of the fastest (at most %d) timed again, interleaved on GPU %d (\"final\"), "
              "and the winner chosen among them\n",
              op.c_str(), dev.name.c_str(), dev.target.arch.c_str(), dev.sm_count, opts.warmup, opts.reps, 100 * kFinalBand,
              kMaxFinalists, opts.devices[0]);

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
  auto sweep = add_sweep_options(*tune, SweepCommand::tune);
  auto o = std::make_shared<TuneCliOptions>();
  tune->add_option("--jobs,-j", o->jobs, "Parallel compiles (default: all cores)")->check(CLI::NonNegativeNumber);
  tune->add_option("--devices,--device", o->devices,
                   "Comma-separated GPUs to spread candidates over, one worker each (use identical GPUs: their first "
                   "timings are compared directly); the finalists are timed again on the first")
      ->capture_default_str()
      ->check(non_empty_list());
  tune->add_option("--db-dir", o->db_dir, "Directory for this run's shard (default: KGEN_TUNE_DB's directory or ~/.cache/kgen/tuning)")
      ->check(non_empty_value());
  tune->add_flag("--force", o->force, "Re-tune shapes that already have a record");
  tune->add_flag("--no-record", o->no_record, "Do not write the winners");
  tune->footer(
      "Per shape: every candidate is compiled in parallel, checked against the fp64 reference on NaN-poisoned outputs "
      "(a failing one is listed and never wins), the survivors timed; those within " +
      std::to_string(static_cast<int>(100 * kFinalBand)) + " % of the fastest are timed again, "
      "interleaved in rounds so that they meet the same clock (a GPU's power cap lowers it under sustained load), and the "
      "winner, chosen among them, is appended to the tuning database. " +
      sweep_footer(SweepCommand::tune));
  add_tune_db_commands(*tune, exit_code);
  tune->callback([tune, sweep, o, &exit_code] {
    if (!tune->get_subcommands().empty()) return;  // merge / show ran
    exit_code = run_tune(*sweep, *o);
  });
}

}  // namespace kgen::cli
