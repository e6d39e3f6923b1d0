// The checking layer's side of tuning: for every operator, a bench that checks candidates with
// the op's harness and times them, and the rate of a run (TFLOPS or GB/s), installed into
// runtime/tuning/bench_registry.h when the program starts. The launch path never links this file;
// a program that links the checking layer (libkgen.so, the CLI, the tests) can tune.
#include <cstdio>

#include "check/attention_backward_harness.h"
#include "check/attention_harness.h"
#include "check/lrpe_harness.h"
#include "ops/tuning_problems.h"
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

const AttentionCase& attention_case(const TuningProblem& p) {
  const AttentionCase* c = attention_case_of(p);
  if (!c) throw Error(Status::internal, "operator '" + std::string(p.op()) + "' was not described by runtime/ops/tuning_problems");
  return *c;
}

const LrpeCase& lrpe_case(const TuningProblem& p) {
  const LrpeCase* c = lrpe_case_of(p);
  if (!c) throw Error(Status::internal, "operator '" + std::string(p.op()) + "' was not described by runtime/ops/tuning_problems");
  return *c;
}

double tflops(double flops, double median_ms) { return flops / (median_ms * 1e-3) / 1e12; }

std::unique_ptr<CandidateBench> gradient_bench(const TuningProblem& p, int device, bool double_backward) {
  BackwardBenchOptions o;
  o.deterministic = deterministic_of(p);
  std::unique_ptr<AttentionGradientBench> b;
  if (double_backward) b = std::make_unique<AttentionDoubleBackwardBench>(attention_case(p), o, device);
  else b = std::make_unique<AttentionBackwardBench>(attention_case(p), o, device);
  return std::make_unique<TunerBench>(std::move(b));
}

const bool installed = [] {
  install_problem_bench(
      "attention_fwd",
      {[](const TuningProblem& p, int device) -> std::unique_ptr<CandidateBench> {
         return std::make_unique<TunerBench>(
             std::make_unique<AttentionForwardBench>(attention_case(p), device));
       },
       [](const TuningProblem& p, double ms) { return tflops(attention_forward_flops(attention_case(p)), ms); }});
  install_problem_bench(
      "attention_bwd", {[](const TuningProblem& p, int device) { return gradient_bench(p, device, false); },
                        [](const TuningProblem& p, double ms) { return tflops(attention_backward_flops(attention_case(p)), ms); }});
  install_problem_bench(
      "attention_double_bwd",
      {[](const TuningProblem& p, int device) { return gradient_bench(p, device, true); },
       [](const TuningProblem& p, double ms) { return tflops(attention_double_backward_flops(attention_case(p)), ms); }});
  for (const char* op : {"lrpe_cosine", "md_lrpe_cosine"})
    install_problem_bench(
        op, {[](const TuningProblem& p, int device) -> std::unique_ptr<CandidateBench> {
               return std::make_unique<TunerBench>(std::make_unique<LrpeBench>(lrpe_case(p), device));
             },
             [](const TuningProblem& p, double ms) { return lrpe_floor_bytes(lrpe_case(p)) / (ms * 1e-3) / 1e9; }});
  return true;
}();

}  // namespace

// Referenced by programs that link the checking layer as a static library, so that the linker
// keeps this file and its installation runs.
bool harness_benches_installed() { return installed; }

}  // namespace kgen
