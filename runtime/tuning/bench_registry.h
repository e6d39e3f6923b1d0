// The seam between the launch path and the checking layer. Describing a tuning problem needs no
// device and lives with the operators (runtime/ops/<op>_tuning); checking and timing its
// candidates needs references and harnesses, which the launch path must not link. The checking
// layer installs, per operator, how to bench a problem and how fast a run is (each operator's
// harness through check/harness_benches.h); the tuner asks here.
#pragma once

#include <functional>
#include <memory>
#include <string_view>

namespace kgen {

class TuningProblem;
class CandidateBench;

struct ProblemBenchHooks {
  // The bench of `problem` on GPU `device` (inputs and reference made once).
  std::function<std::unique_ptr<CandidateBench>(const TuningProblem& problem, int device)> bench;
  // Throughput of one run of `problem` taking `median_ms`, in the problem's rate_unit().
  std::function<double(const TuningProblem& problem, double median_ms)> rate;
};

// Installs the hooks of operator `op` (replacing earlier ones). Thread-safe.
void install_problem_bench(std::string_view op, ProblemBenchHooks hooks);

// The hooks of `op`. Throws Error(internal) naming the op when none are installed (a program
// that tunes must link kgen's checking layer; libkgen.so does).
const ProblemBenchHooks& problem_bench(std::string_view op);

}  // namespace kgen
