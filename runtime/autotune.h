// The autotuner: for one attention_fwd spec and shape, compile every candidate of the config
// space in parallel, check each against the reference on NaN-poisoned buffers (a failing
// candidate is reported and never wins), time the survivors with device events, and pick the
// winner with a deterministic tie-break inside the measured noise.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "generator/attention_forward.h"
#include "runtime/attention_harness.h"
#include "runtime/nvrtc.h"

namespace kgen {

struct TuneOptions {
  int warmup = 10;
  int reps = 50;
  int jobs = 0;                        // parallel compiles (0 = all cores)
  std::vector<int> devices = {0};      // candidates are spread over these GPUs, one worker each
  std::vector<AttentionForwardConfig> candidates;  // empty = the whole config space
};

struct CandidateResult {
  AttentionForwardConfig config;
  int device = 0;
  bool compiled = false;
  ResourceUsage resources;
  AttentionCheck check;   // pass == false: never timed, never wins
  Timing timing;
  double tflops = 0;
  std::string error;      // compile or launch error
};

struct TuneResult {
  AttentionCase problem;
  std::vector<CandidateResult> candidates;  // in canonical (config space) order
  std::optional<std::size_t> winner;        // index into candidates
  std::optional<std::size_t> runner_up;
  double margin = 0;                        // runner-up median / winner median − 1
  bool within_noise = false;                // the runner-up was inside the winner's noise band
};

// Progress: (stage "compile" | "check+time", done, total, candidate or nullptr).
using TuneProgress = std::function<void(const char*, std::size_t, std::size_t, const CandidateResult*)>;

// Tunes `problem` (its config field is ignored). Throws Error(no_device) without a GPU.
TuneResult tune_attention_forward(const AttentionCase& problem, const TuneOptions& options,
                                  const TuneProgress& progress = {});

// Picks the winner among timed, passing candidates: the fastest median, except that candidates
// whose median is within the noise band of the fastest (two standard errors of the difference
// of the medians, at least 1 %) tie, and ties go to the earliest in canonical order, so two
// runs agree.
void choose_winner(TuneResult& result);

}  // namespace kgen
