// `kgen tune`: autotune attention_fwd shapes, print every candidate, append the winners to the
// tuning database (one shard per process). Resumable: shapes with an exact record are skipped.
#include <chrono>
#include <cstdio>
#include <memory>

#include "runtime/autotune.h"
#include "runtime/cuda_driver.h"
#include "runtime/device.h"
#include "runtime/tuning_db.h"
#include "tools/commands.h"
#include "tools/commands_tune_db.h"

namespace kgen::cli {
namespace {

struct TuneCliOptions {
  std::string op = "attention_fwd", dtypes = "bf16", head_dims = "128", causal = "both",
              seqlens = "1024,4096,16384", devices = "0", db_dir, configs;
  int tokens = 16384, hidden = 2048, batch = 0, heads = 0, heads_kv = 0, warmup = 10, reps = 50, jobs = 0;
  bool force = false, no_record = false;
};

void print_candidates(const TuneResult& r) {
  std::printf("| config | check | median ms | p20–p80 ms | TFLOPS | regs | spill B | note |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  for (std::size_t i = 0; i < r.candidates.size(); ++i) {
    const CandidateResult& c = r.candidates[i];
    std::string note = r.winner && *r.winner == i ? "WINNER" : (r.runner_up && *r.runner_up == i ? "runner-up" : "");
    if (c.compiled) note += (note.empty() ? "" : ", ") + std::string("GPU ") + std::to_string(c.device);
    if (!c.error.empty()) {
      std::string first_line = c.error.substr(0, c.error.find('\n'));
      std::printf("| %s | – | – | – | – | %d | %d | %s |\n", to_string(c.config).c_str(), c.resources.registers,
                  c.resources.spill_stores, first_line.c_str());
    } else if (!c.check.pass) {
      std::printf("| %s | FAIL (%s) | – | – | – | %d | %d | never timed |\n", to_string(c.config).c_str(),
                  (c.check.o.pass ? c.check.lse.why : c.check.o.why).c_str(), c.resources.registers, c.resources.spill_stores);
    } else {
      std::printf("| %s | pass (rel_l2 %.1e) | %.4f | %.4f–%.4f | %.1f | %d | %d | %s |\n", to_string(c.config).c_str(),
                  c.check.o.rel_l2, c.timing.median_ms, c.timing.p20_ms, c.timing.p80_ms, c.tflops, c.resources.registers,
                  c.resources.spill_stores, note.c_str());
    }
  }
}

int run_tune(const TuneCliOptions& o) {
  if (o.op != "attention_fwd")
    throw Error(Status::invalid_argument, "--op: kgen tune knows attention_fwd only so far, got '" + o.op + "'");
  // Arguments first, so a typo is named even on a machine without a GPU.
  TuneOptions opts;
  opts.warmup = o.warmup, opts.reps = o.reps, opts.jobs = o.jobs;
  opts.devices = parse_int_list(o.devices, "--devices", 0);
  for (const auto& text : split_list(o.configs)) {
    auto c = parse_attention_forward_config(text);
    if (!c) throw Error(Status::invalid_argument, "--configs: cannot parse '" + text + "'");
    opts.candidates.push_back(*c);
  }
  std::vector<DType> dtypes;
  for (const auto& dname : split_list(o.dtypes)) {
    auto dtype = parse_dtype(dname);
    if (!dtype) throw Error(Status::invalid_argument, "--dtypes: unknown dtype '" + dname + "'");
    dtypes.push_back(*dtype);
  }
  const auto head_dims = parse_int_list(o.head_dims, "--head-dims");
  const auto seqlens = parse_int_list(o.seqlens, "--seqlens");
  std::string why;
  if (!cuda_available(&why)) throw Error(Status::no_device, why);
  TuningContext ctx = TuningContext::current(opts.devices[0]);
  TuningDatabase db = TuningDatabase::open(default_tuning_db_files(), ctx);
  std::unique_ptr<TuningShardWriter> writer;
  if (!o.no_record)
    writer = std::make_unique<TuningShardWriter>(o.db_dir.empty() ? default_tuning_shard_dir() : std::filesystem::path(o.db_dir), ctx);
  const DeviceInfo& dev = device_info(opts.devices[0]);
  std::printf("kgen tune on %s (%s, %d SMs); %d warm-up + %d timed runs per candidate; every candidate checked first\n",
              dev.name.c_str(), dev.target.arch.c_str(), dev.sm_count, o.warmup, o.reps);

  int failed = 0, tuned = 0, skipped = 0;
  for (DType dtype : dtypes) {
    for (int d : head_dims)
      for (bool causal : o.causal == "both" ? std::vector<bool>{false, true} : std::vector<bool>{o.causal == "yes"})
        for (int n : seqlens) {
          AttentionCase c;
          c.dtype = dtype, c.head_dim = d, c.causal = causal, c.n_q = c.n_k = n;
          c.batch = o.batch ? o.batch : std::max(1, o.tokens / n);
          c.heads_q = o.heads ? o.heads : std::max(1, o.hidden / d);
          c.heads_kv = o.heads_kv ? o.heads_kv : c.heads_q;
          AttentionForwardSpec spec{c.dtype, d, causal};
          AttentionShape shape{c.batch, c.heads_q, c.heads_kv, n, n};
          const std::string bucket = attention_bucket(shape);
          std::printf("\n## %s %s (b=%d h=%d h_kv=%d n=%d)\n", to_string(spec).c_str(), bucket.c_str(), c.batch, c.heads_q, c.heads_kv, n);
          if (!o.force)
            if (auto hit = db.lookup("attention_fwd", to_string(spec), bucket); hit && hit->exact) {
              std::printf("already tuned: %s (%s); --force to re-tune\n", hit->record.config.c_str(), hit->source_file.c_str());
              ++skipped;
              continue;
            }
          auto start = std::chrono::steady_clock::now();
          TuneResult r = tune_attention_forward(c, opts, [&](const char* stage, std::size_t done, std::size_t total, const CandidateResult*) {
            double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
            double eta = done ? s / done * (total - done) : 0;
            std::fprintf(stderr, "\r%-10s [%zu/%zu] %.0f s elapsed, ETA %.0f s   ", stage, done, total, s, eta);
            if (done == total) std::fprintf(stderr, "\n");
          });
          print_candidates(r);
          if (!r.winner) {
            std::printf("no candidate passed its check: nothing recorded\n");
            ++failed;
            continue;
          }
          const CandidateResult& w = r.candidates[*r.winner];
          std::string runner = r.runner_up ? to_string(r.candidates[*r.runner_up].config) : "";
          std::printf("winner %s: %.4f ms, %.1f TFLOPS, margin %.1f%% over %s%s (%.1f s)\n", to_string(w.config).c_str(),
                      w.timing.median_ms, w.tflops, 100 * r.margin, runner.empty() ? "nothing" : runner.c_str(),
                      r.within_noise ? ", within noise: canonical order decided" : "",
                      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
          if (writer) {
            TuningRecord rec;
            rec.op = "attention_fwd", rec.variant_key = to_string(spec), rec.bucket = bucket;
            rec.config = to_string(w.config);
            rec.median_ms = w.timing.median_ms, rec.p20_ms = w.timing.p20_ms, rec.p80_ms = w.timing.p80_ms;
            rec.margin = r.margin, rec.runner_up = runner, rec.reps = w.timing.reps;
            writer->append(rec);
          }
          ++tuned;
        }
  }
  std::printf("\ntuned %d, skipped %d (already tuned), failed %d%s%s\n", tuned, skipped, failed,
              writer ? "; records in " : "", writer ? writer->path().c_str() : "");
  return failed ? kFailed : kOk;
}

}  // namespace

void add_tune_commands(CLI::App& app, int& exit_code) {
  auto* tune = app.add_subcommand("tune", "Autotune attention_fwd shapes and record the winners (or: tune merge|show)");
  auto o = std::make_shared<TuneCliOptions>();
  tune->add_option("--op", o->op, "Operator")->capture_default_str();
  tune->add_option("--dtypes", o->dtypes, "Comma-separated dtypes")->capture_default_str();
  tune->add_option("--head-dims", o->head_dims, "Comma-separated head dims")->capture_default_str();
  tune->add_option("--causal", o->causal, "yes, no or both")->check(CLI::IsMember({"yes", "no", "both"}))->capture_default_str();
  tune->add_option("--seqlens", o->seqlens, "Comma-separated sequence lengths (n_q = n_k)")->capture_default_str();
  tune->add_option("--tokens", o->tokens, "b·n when --batch is not given")->capture_default_str()->check(CLI::PositiveNumber);
  tune->add_option("--hidden", o->hidden, "h·d when --heads is not given")->capture_default_str()->check(CLI::PositiveNumber);
  tune->add_option("--batch", o->batch, "Batch size")->check(CLI::PositiveNumber);
  tune->add_option("--heads", o->heads, "Query heads")->check(CLI::PositiveNumber);
  tune->add_option("--heads-kv", o->heads_kv, "Key/value heads (default: --heads)")->check(CLI::PositiveNumber);
  tune->add_option("--configs", o->configs, "Comma-separated candidates (default: the whole config space)");
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
  add_tune_db_commands(*tune, exit_code);
  tune->callback([tune, o, &exit_code] {
    if (!tune->get_subcommands().empty()) return;  // merge / show ran
    exit_code = run_tune(*o);
  });
}

}  // namespace kgen::cli
