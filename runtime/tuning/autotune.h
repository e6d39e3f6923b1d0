// The autotuner, one core for every operator: for one (op, spec, shape) compile every candidate
// of the op's config space in parallel, check each against the reference on NaN-poisoned
// buffers (a failing candidate is reported and never wins), time the survivors with device
// events, and pick the winner with a deterministic tie-break inside the measured noise.
//
// What differs per operator sits behind TuningProblem (each registered op makes its own in
// runtime/ops/<op>_tuning): its candidates, variant key and shape bucket, the kernels a candidate
// compiles to, and a bench that checks and times a candidate.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "generator/kernel_source.h"
#include "generator/target.h"
#include "tuning/timing.h"
#include "compiler/compiler.h"
#include "tuning/tuning_db.h"

namespace kgen {

// The verdict of one checked run of a candidate.
struct CandidateCheck {
  bool pass = false;
  std::string detail;  // "rel_l2 1.2e-03" on pass, the first failed rule otherwise
};

// One problem's inputs and reference on one device, computed once; candidates are checked and
// timed on the same buffers.
class CandidateBench {
 public:
  virtual ~CandidateBench() = default;
  // Runs `config` on NaN-poisoned outputs and compares every output with the reference.
  virtual CandidateCheck check(const std::string& config) = 0;
  // Median/p20/p80 of `reps` device-event-timed runs after `warmup` (callers check first).
  virtual Timing time(const std::string& config, int warmup, int reps) = 0;
};

// One (op, spec, shape) to tune: the per-operator side of the tuner. Describing a problem needs
// no device; only bench() does.
class TuningProblem {
 public:
  virtual ~TuningProblem() = default;
  virtual std::string_view op() const = 0;     // "attention_bwd", the registry's name
  virtual std::string variant_key() const = 0;  // what changes the kernel source: "attention_bwd.bf16.d128.causal"
  virtual std::string bucket() const = 0;       // what only changes the shape: "nq4096.nk4096.g1.bh64"
  virtual std::string shape_text() const = 0;   // the exact shape: "b=4 h=16 h_kv=16 n=4096"
  // Why the problem cannot be tuned at all (nullopt when it can).
  virtual std::optional<std::string> check_problem() const = 0;
  // The canonical text of `config`, nullopt when it does not parse as one of this op's configs.
  virtual std::optional<std::string> parse_config(const std::string& config) const = 0;
  // Every candidate for `target`, in canonical order (the tie-break order).
  virtual std::vector<std::string> config_space(const Target& target) const = 0;
  // Why `config` cannot run this problem on `target` (nullopt when it can).
  virtual std::optional<std::string> check_config(const std::string& config, const Target& target) const = 0;
  // The kernels a run of `config` launches (valid configs only).
  virtual std::vector<KernelSource> kernels(const std::string& config) const = 0;
  // The bench on GPU `device`. Throws Error(no_device) without one. By default the checking
  // layer's, through runtime/tuning/bench_registry.h.
  virtual std::unique_ptr<CandidateBench> bench(int device) const;
  // Throughput of one run taking `median_ms`, in rate_unit(); by default the checking layer's.
  virtual double rate(double median_ms) const;
  virtual std::string_view rate_unit() const = 0;  // "TFLOPS" or "GB/s"
};

struct TuneOptions {
  int warmup = 10;
  int reps = 50;
  int jobs = 0;                        // parallel compiles (0 = all cores)
  std::vector<int> devices = {0};      // candidates are spread over these GPUs, one worker each; the final runs on the first
  std::vector<std::string> candidates;  // empty = the whole config space
};

struct CandidateResult {
  std::string config;
  int device = 0;
  bool compiled = false;
  ResourceUsage resources;  // the most registers and spills over the candidate's kernels
  CandidateCheck check;     // pass == false: never timed, never wins
  Timing timing;            // the final's when final_round (refine_finalists), else the first pass's
  bool final_round = false;  // timed again, interleaved with the other finalists
  double rate = 0;          // of `timing` (TuningProblem::rate_unit())
  std::string error;        // invalid, compile or launch error
};

struct TuneResult {
  std::vector<CandidateResult> candidates;  // in canonical (config space) order
  std::optional<std::size_t> winner;        // index into candidates
  std::optional<std::size_t> runner_up;
  double margin = 0;                        // runner-up median / winner median − 1
  bool within_noise = false;                // the runner-up was inside the winner's noise band
};

// Progress: (stage "compile" | "check+time" | "final", done, total, candidate or nullptr).
using TuneProgress = std::function<void(const char*, std::size_t, std::size_t, const CandidateResult*)>;

// Tunes `problem`. Throws Error(no_device) without a GPU, Error(invalid_argument) for a problem
// that cannot be tuned or devices of different kinds.
TuneResult tune(const TuningProblem& problem, const TuneOptions& options, const TuneProgress& progress = {});

// Picks the winner among timed, passing candidates: the fastest median, except that candidates
// whose median is within the noise band of the fastest (two standard errors of the difference
// of the medians, at least 1 %) tie, and ties go to the earliest in canonical order, so two
// runs agree. When some candidates ran the interleaved final (final_round), the winner and the
// runner-up are chosen among them alone: their timings were taken under the same conditions.
void choose_winner(TuneResult& result);

// The final round of tune(). Sustained work meets a GPU's power cap within a fraction of a
// second (on an H200 the SM clock falls from 1980 to about 1770 MHz, docs/kernels/measurements.md
// "Uniform wgmma descriptors in the backward"), so candidates timed one after another need not have
// run at the same clock, and a 5–10 % slower kernel timed first can look the fastest. The passing
// candidates whose median is within kFinalBand of the fastest (at most kMaxFinalists, fastest
// first; none unless two qualify) are timed again on `bench`, in rounds of kTurnReps runs each,
// the finalists' order rotating from round to round, until each has about `reps` runs; each
// one's timing becomes that of its turns' medians and final_round is set. `progress` as tune's
// ("final" stage).
inline constexpr double kFinalBand = 0.05;
inline constexpr int kMaxFinalists = 4;
inline constexpr int kTurnReps = 3;
void refine_finalists(CandidateBench& bench, TuneResult& result, int reps, const TuneProgress& progress = {});

// The database record of `result`'s winner for `problem` (tuned_at and device left empty: the
// writer stamps them). Requires result.winner.
TuningRecord winner_record(const TuningProblem& problem, const TuneResult& result);

// KGEN_AUTOTUNE on the launch path: tunes `problem` on `device` with short runs on the calling
// thread and appends the winner to a shard in default_tuning_shard_dir() (a write failure is a
// warning). The winner's config, nullopt when no candidate passed.
std::optional<std::string> autotune_and_record(const TuningProblem& problem, int device);

}  // namespace kgen
