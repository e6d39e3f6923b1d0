// The checking layer's side of tuning: each operator's harness bench as the tuner's bench,
// installed into runtime/tuning/bench_registry.h when the program starts (each operator's harness
// file installs its own). The launch path never links the checking layer; a program that links it
// (libkgen.so, the CLI, the tests) can tune.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "check/harness_check.h"
#include "kgen/types.hpp"
#include "tuning/autotune.h"

namespace kgen {

// Installs operator `op`'s tuner bench: a problem's candidates are checked and timed on
// `make(problem, device)`, and a run of `median_ms` has the rate `rate(problem, median_ms)` (in the
// problem's rate_unit()). Returns true, for a static initialiser.
bool install_harness_bench(std::string_view op,
                           std::function<std::unique_ptr<HarnessBench>(const TuningProblem& problem, int device)> make,
                           std::function<double(const TuningProblem& problem, double median_ms)> rate);

// *c, the call `problem` describes; Error(internal) naming the operator when c is nullptr (the
// problem was not made by the operator's own runtime/ops/<op>_tuning).
template <class Case>
const Case& described_case(const Case* c, const TuningProblem& problem) {
  if (!c) throw Error(Status::internal, "operator '" + std::string(problem.op()) + "' was not described by its runtime/ops tuning file");
  return *c;
}

// TFLOPS of `flops` in `median_ms`.
double tflops_of(double flops, double median_ms);

}  // namespace kgen
