#include "check/harness_benches.h"

#include <cstdio>

#include "tuning/bench_registry.h"

namespace kgen {
namespace {

std::string scientific(const char* format, double v) {
  char buf[48];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

// A harness verdict as the tuner's: the worst rel_l2 on pass, else the first failure.
CandidateCheck verdict(const HarnessCheck& r) {
  if (r.pass) return {true, scientific("rel_l2 ≤ %.1e", r.worst_rel_l2())};
  return {false, r.failure()};
}

// An operator's harness bench as the tuner's CandidateBench.
class TunerBench final : public CandidateBench {
 public:
  explicit TunerBench(std::unique_ptr<HarnessBench> bench) : bench_(std::move(bench)) {}
  CandidateCheck check(const std::string& config) override { return verdict(bench_->check(config)); }
  Timing time(const std::string& config, int warmup, int reps) override { return bench_->time(config, warmup, reps); }

 private:
  std::unique_ptr<HarnessBench> bench_;
};

}  // namespace

bool install_harness_bench(std::string_view op,
                           std::function<std::unique_ptr<HarnessBench>(const TuningProblem& problem, int device)> make,
                           std::function<double(const TuningProblem& problem, double median_ms)> rate) {
  install_problem_bench(op, {[make](const TuningProblem& p, int device) -> std::unique_ptr<CandidateBench> {
                               return std::make_unique<TunerBench>(make(p, device));
                             },
                             std::move(rate)});
  return true;
}

double tflops_of(double flops, double median_ms) { return flops / (median_ms * 1e-3) / 1e12; }

}  // namespace kgen
