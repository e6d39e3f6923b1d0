#include "runtime/autotune.h"

#include <algorithm>
#include <cmath>
#include <mutex>
#include <thread>

#include "runtime/device.h"
#include "runtime/kernel_builder.h"
#include "runtime/warm.h"

namespace kgen {
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

}  // namespace

void choose_winner(TuneResult& r) {
  r.winner.reset();
  r.runner_up.reset();
  std::optional<std::size_t> fastest;
  for (std::size_t i = 0; i < r.candidates.size(); ++i) {
    const auto& c = r.candidates[i];
    if (!c.check.pass || c.timing.reps == 0) continue;
    if (!fastest || c.timing.median_ms < r.candidates[*fastest].timing.median_ms) fastest = i;
  }
  if (!fastest) return;
  const Timing& best = r.candidates[*fastest].timing;
  // The earliest candidate inside the fastest one's noise band wins.
  for (std::size_t i = 0; i < r.candidates.size() && !r.winner; ++i) {
    const auto& c = r.candidates[i];
    if (c.check.pass && c.timing.reps && c.timing.median_ms - best.median_ms <= noise_band(c.timing, best)) r.winner = i;
  }
  for (std::size_t i = 0; i < r.candidates.size(); ++i) {
    const auto& c = r.candidates[i];
    if (i == *r.winner || !c.check.pass || !c.timing.reps) continue;
    if (!r.runner_up || c.timing.median_ms < r.candidates[*r.runner_up].timing.median_ms) r.runner_up = i;
  }
  if (r.runner_up) {
    const Timing& w = r.candidates[*r.winner].timing;
    const Timing& u = r.candidates[*r.runner_up].timing;
    r.margin = u.median_ms / w.median_ms - 1;
    r.within_noise = std::abs(u.median_ms - w.median_ms) <= noise_band(u, w);
  }
}

TuneResult tune_attention_forward(const AttentionCase& problem, const TuneOptions& options,
                                  const TuneProgress& progress) {
  if (options.devices.empty()) throw Error(Status::invalid_argument, "--devices: no device given");
  for (int d : options.devices) device_info(d);  // throws for a missing device
  const Target& target = device_info(options.devices[0]).target;
  for (int d : options.devices)
    if (!(device_info(d).target == target))
      throw Error(Status::invalid_argument, "--devices: devices of different kinds cannot be tuned together");
  AttentionForwardSpec spec{problem.dtype, problem.head_dim, problem.causal};
  if (auto why = check_attention_forward_spec(spec)) throw Error(Status::invalid_argument, *why);

  TuneResult result;
  result.problem = problem;
  std::vector<AttentionForwardConfig> configs =
      options.candidates.empty() ? attention_forward_config_space(spec, target) : options.candidates;
  for (const auto& c : configs) {
    CandidateResult r;
    r.config = c;
    if (auto why = check_attention_forward_config(spec, c, target)) r.error = "invalid: " + *why;
    result.candidates.push_back(r);
  }

  // 1. Compile every valid candidate in parallel (cache hits are free).
  std::vector<WarmItem> items;
  std::vector<std::size_t> item_of;
  for (std::size_t i = 0; i < result.candidates.size(); ++i)
    if (result.candidates[i].error.empty()) {
      items.push_back({render_attention_forward(spec, result.candidates[i].config), target});
      item_of.push_back(i);
    }
  WarmSummary compiled = warm(KernelBuilder::global(), items, options.jobs,
                              [&](const WarmResult&, std::size_t done, std::size_t total) {
                                if (progress) progress("compile", done, total, nullptr);
                              });
  for (std::size_t j = 0; j < items.size(); ++j) {
    CandidateResult& c = result.candidates[item_of[j]];
    c.compiled = compiled.results[j].ok;
    c.resources = compiled.results[j].resources;
    if (!c.compiled) c.error = compiled.results[j].error;
  }

  // 2. Check, then time, on each device's own bench (same inputs and reference per device).
  std::vector<std::size_t> todo;
  for (std::size_t i = 0; i < result.candidates.size(); ++i)
    if (result.candidates[i].compiled) todo.push_back(i);
  std::mutex mutex;
  std::size_t done = 0;
  auto worker = [&](std::size_t slot) {
    const int device = options.devices[slot];
    std::unique_ptr<AttentionForwardBench> bench;
    for (std::size_t t = slot; t < todo.size(); t += options.devices.size()) {
      CandidateResult& c = result.candidates[todo[t]];
      c.device = device;
      try {
        if (!bench) bench = std::make_unique<AttentionForwardBench>(problem, device);
        const std::string config = to_string(c.config);
        c.check = bench->check(config);
        if (c.check.pass) {
          c.timing = bench->time(config, options.warmup, options.reps);
          c.tflops = attention_forward_flops(problem) / (c.timing.median_ms * 1e-3) / 1e12;
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
  choose_winner(result);
  return result;
}

}  // namespace kgen
