#include "tuning/autotune.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <thread>

#include "driver/device.h"
#include "jit/kernel_builder.h"
#include "base/log.h"
#include "jit/warm.h"
#include "tuning/bench_registry.h"

namespace kgen {

std::unique_ptr<CandidateBench> TuningProblem::bench(int device) const { return problem_bench(op()).bench(*this, device); }

double TuningProblem::rate(double median_ms) const { return problem_bench(op()).rate(*this, median_ms); }

namespace {

constexpr double kMinNoise = 0.01;  // relative: two medians closer than 1 % are a tie

// Standard error of a median from its p20–p80 spread: σ ≈ spread / 1.683 for a normal
// distribution, SE(median) ≈ 1.2533 σ / √reps.
double median_standard_error(const Timing& t) {
  return 1.2533 * ((t.p80_ms - t.p20_ms) / 1.683) / std::sqrt(std::max(1, t.reps));
}

// Two medians closer than this are a tie: two standard errors of their difference, at least
// 1 %. (A run seen on an H200 had one candidate's p20–p80 spread at 3.3 % of its median; the
// raw spread as the band let a 3 % slower kernel tie with the fastest.)
double noise_band(const Timing& a, const Timing& b) {
  double se = std::hypot(median_standard_error(a), median_standard_error(b));
  return std::max(2 * se, kMinNoise * std::min(a.median_ms, b.median_ms));
}

// Checked, passed and timed: a candidate that can win.
bool timed_pass(const CandidateResult& c) { return c.check.pass && c.timing.reps > 0; }

}  // namespace

void choose_winner(TuneResult& r) {
  r.winner.reset();
  r.runner_up.reset();
  const bool final_ran = std::ranges::any_of(r.candidates, [](const CandidateResult& c) { return c.final_round; });
  auto eligible = [&](const CandidateResult& c) {
    return timed_pass(c) && (c.final_round || !final_ran);
  };
  std::optional<std::size_t> fastest;
  for (std::size_t i = 0; i < r.candidates.size(); ++i) {
    const auto& c = r.candidates[i];
    if (!eligible(c)) continue;
    if (!fastest || c.timing.median_ms < r.candidates[*fastest].timing.median_ms) fastest = i;
  }
  if (!fastest) return;
  const Timing& best = r.candidates[*fastest].timing;
  // The earliest candidate inside the fastest one's noise band wins.
  for (std::size_t i = 0; i < r.candidates.size() && !r.winner; ++i) {
    const auto& c = r.candidates[i];
    if (eligible(c) && c.timing.median_ms - best.median_ms <= noise_band(c.timing, best)) r.winner = i;
  }
  for (std::size_t i = 0; i < r.candidates.size(); ++i) {
    const auto& c = r.candidates[i];
    if (i == *r.winner || !eligible(c)) continue;
    if (!r.runner_up || c.timing.median_ms < r.candidates[*r.runner_up].timing.median_ms) r.runner_up = i;
  }
  if (r.runner_up) {
    const Timing& w = r.candidates[*r.winner].timing;
    const Timing& u = r.candidates[*r.runner_up].timing;
    r.margin = u.median_ms / w.median_ms - 1;
    r.within_noise = std::abs(u.median_ms - w.median_ms) <= noise_band(u, w);
  }
}

void refine_finalists(CandidateBench& bench, TuneResult& r, int reps, const TuneProgress& progress) {
  std::vector<std::size_t> order;  // passing, timed candidates, fastest first
  for (std::size_t i = 0; i < r.candidates.size(); ++i)
    if (timed_pass(r.candidates[i])) order.push_back(i);
  std::ranges::stable_sort(order, {}, [&](std::size_t i) { return r.candidates[i].timing.median_ms; });
  std::vector<std::size_t> finalists;
  for (std::size_t i : order)
    if (finalists.size() < kMaxFinalists &&
        r.candidates[i].timing.median_ms <= (1 + kFinalBand) * r.candidates[order.front()].timing.median_ms)
      finalists.push_back(i);
  if (finalists.size() < 2) return;
  const std::size_t n = finalists.size();
  const int rounds = std::max(3, (reps + kTurnReps - 1) / kTurnReps);
  std::vector<std::vector<double>> turns(n);
  for (int round = 0; round < rounds; ++round)
    for (std::size_t k = 0; k < n; ++k) {
      const std::size_t f = (k + static_cast<std::size_t>(round)) % n;  // who goes first moves on every round
      turns[f].push_back(bench.time(r.candidates[finalists[f]].config, 0, kTurnReps).median_ms);
      if (progress) progress("final", round * n + k + 1, rounds * n, &r.candidates[finalists[f]]);
    }
  for (std::size_t f = 0; f < n; ++f) {
    CandidateResult& c = r.candidates[finalists[f]];
    c.timing = timing_of(turns[f]);
    c.final_round = true;
  }
}

namespace {

// Validates the devices: they exist and are of one kind. Returns their target.
Target tuning_target(const TuneOptions& options) {
  if (options.devices.empty()) throw Error(Status::invalid_argument, "--devices: no device given");
  for (int d : options.devices) device_info(d);  // throws for a missing device
  const Target& target = device_info(options.devices[0]).target;
  for (int d : options.devices)
    if (!(device_info(d).target == target))
      throw Error(Status::invalid_argument, "--devices: devices of different kinds cannot be tuned together");
  return target;
}

// Compiles every valid candidate's kernels in parallel (a kernel shared by several candidates
// compiles once; cache hits are free) and records per candidate whether all of them built.
void compile_candidates(const TuningProblem& problem, const Target& target, const TuneOptions& options,
                        const TuneProgress& progress, TuneResult& result) {
  std::vector<WarmItem> items;
  std::vector<std::vector<std::size_t>> items_of(result.candidates.size());
  for (std::size_t i = 0; i < result.candidates.size(); ++i) {
    if (!result.candidates[i].error.empty()) continue;
    for (KernelSource& k : problem.kernels(result.candidates[i].config)) {
      auto same = std::ranges::find_if(items, [&](const WarmItem& w) { return w.source.variant == k.variant; });
      items_of[i].push_back(static_cast<std::size_t>(same - items.begin()));
      if (same == items.end()) items.push_back({std::move(k), target});
    }
  }
  WarmSummary compiled = warm(KernelBuilder::global(), items, options.jobs,
                              [&](const WarmResult&, std::size_t done, std::size_t total) {
                                if (progress) progress("compile", done, total, nullptr);
                              });
  for (std::size_t i = 0; i < result.candidates.size(); ++i) {
    CandidateResult& c = result.candidates[i];
    if (!c.error.empty()) continue;
    c.compiled = true;
    for (std::size_t j : items_of[i]) {
      const WarmResult& w = compiled.results[j];
      c.compiled = c.compiled && w.ok;
      if (!w.ok && c.error.empty()) c.error = w.error;
      c.resources.registers = std::max(c.resources.registers, w.resources.registers);
      c.resources.spill_stores = std::max(c.resources.spill_stores, w.resources.spill_stores);
      c.resources.spill_loads = std::max(c.resources.spill_loads, w.resources.spill_loads);
    }
  }
}

}  // namespace

TuneResult tune(const TuningProblem& problem, const TuneOptions& options, const TuneProgress& progress) {
  if (auto why = problem.check_problem()) throw Error(Status::invalid_argument, *why);
  const Target target = tuning_target(options);

  TuneResult result;
  for (const auto& text : options.candidates.empty() ? problem.config_space(target) : options.candidates) {
    CandidateResult r;
    auto canonical = problem.parse_config(text);
    r.config = canonical ? *canonical : text;
    if (!canonical) r.error = "invalid: cannot parse '" + text + "'";
    else if (auto why = problem.check_config(r.config, target)) r.error = "invalid: " + *why;
    result.candidates.push_back(r);
  }

  // 1. Compile every valid candidate in parallel.
  compile_candidates(problem, target, options, progress, result);

  // 2. Check, then time, on each device's own bench (same inputs and reference per device).
  std::vector<std::size_t> todo;
  for (std::size_t i = 0; i < result.candidates.size(); ++i)
    if (result.candidates[i].compiled) todo.push_back(i);
  std::mutex mutex;
  std::size_t done = 0;
  std::vector<std::unique_ptr<CandidateBench>> benches(options.devices.size());
  auto worker = [&](std::size_t slot) {
    const int device = options.devices[slot];
    std::unique_ptr<CandidateBench>& bench = benches[slot];
    for (std::size_t t = slot; t < todo.size(); t += options.devices.size()) {
      CandidateResult& c = result.candidates[todo[t]];
      c.device = device;
      try {
        if (!bench) bench = problem.bench(device);
        c.check = bench->check(c.config);
        if (c.check.pass) {
          c.timing = bench->time(c.config, options.warmup, options.reps);
          c.rate = problem.rate(c.timing.median_ms);
        }
      } catch (const std::exception& e) {
        c.error = e.what();
      }
      std::lock_guard lock(mutex);
      ++done;
      if (progress) progress("check+time", done, todo.size(), &c);
    }
  };
  std::vector<std::thread> workers;
  for (std::size_t s = 0; s < options.devices.size(); ++s) workers.emplace_back(worker, s);
  for (auto& w : workers) w.join();

  // 3. The finalists again, interleaved on the first device (refine_finalists). A final that
  //    fails leaves the first pass's timings (refine_finalists writes them only at its end).
  if (benches[0]) {
    try {
      refine_finalists(*benches[0], result, options.reps, progress);
      for (CandidateResult& c : result.candidates)
        if (c.final_round) c.device = options.devices[0], c.rate = problem.rate(c.timing.median_ms);
    } catch (const std::exception& e) {
      log(LogLevel::warn, std::string("tuning: the interleaved final failed, first-pass timings kept: ") + e.what());
    }
  }
  choose_winner(result);
  return result;
}

TuningRecord winner_record(const TuningProblem& problem, const TuneResult& r) {
  const CandidateResult& w = r.candidates.at(r.winner.value());
  TuningRecord rec;
  rec.op = std::string(problem.op()), rec.variant_key = problem.variant_key(), rec.bucket = problem.bucket();
  rec.config = w.config;
  rec.median_ms = w.timing.median_ms, rec.p20_ms = w.timing.p20_ms, rec.p80_ms = w.timing.p80_ms;
  rec.margin = r.margin, rec.reps = w.timing.reps;
  if (r.runner_up) rec.runner_up = r.candidates[*r.runner_up].config;
  return rec;
}

std::optional<std::string> autotune_and_record(const TuningProblem& problem, int device) {
  TuneOptions options;
  options.devices = {device};
  options.warmup = 5, options.reps = 20;
  log(LogLevel::info, "autotuning " + problem.variant_key() + " " + problem.bucket() + " on the launch path (KGEN_AUTOTUNE)");
  TuneResult r = tune(problem, options);
  if (!r.winner) return std::nullopt;
  try {
    static std::mutex mutex;
    static std::map<int, std::unique_ptr<TuningShardWriter>> writers;  // one shard per device class context
    std::lock_guard lock(mutex);
    auto& writer = writers[device];
    if (!writer) writer = std::make_unique<TuningShardWriter>(default_tuning_shard_dir(), TuningContext::current(device));
    writer->append(winner_record(problem, r));
  } catch (const Error& e) {
    log(LogLevel::warn, std::string("tuning result not recorded: ") + e.what());
  }
  return r.candidates[*r.winner].config;
}

}  // namespace kgen
