// lrpe_cosine and md_lrpe_cosine behind the public API: validation naming the argument, config
// choice, kernel resolution (compiled or loaded once per process), and the launch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "ops/buckets.h"
#include "generator/lrpe.h"
#include "kgen/kgen.hpp"
#include "kgen_device/lrpe/params.h"
#include "driver/device.h"

namespace kgen {

struct DecisionContext;

// One call's arguments, whichever public function it came from.
struct LrpeRequest {
  LrpeOp op = LrpeOp::cosine;
  LrpeDirection direction = LrpeDirection::forward;
  LrpeAct act = LrpeAct::none;
  std::int64_t offset = 0;                // lrpe_cosine
  int dims = 0;                           // md: m
  std::int64_t grid[3] = {};              // md: n_1..n_m
  int extra = 0;                          // md: l
  std::string config;                     // "" = heuristic
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;
};

LrpeRequest lrpe_request(LrpeDirection direction, const LrpeOptions& options);
LrpeRequest md_lrpe_request(LrpeDirection direction, const MdLrpeOptions& options);

// A validated, resolved call: launch_lrpe is this plus one or two cuLaunchKernel.
struct LrpeLaunch {
  LrpeSpec spec;
  LrpeConfig config;
  LrpeShape shape;
  LrpeLaunchPlan plan;
  LrpeParams params{};
  std::size_t stats_bytes = 0;  // scratch of softmax over the sequence
  LoadedKernel apply, stats;    // stats: only for softmax over the sequence
  int device = 0;
};

// Checks the tensors and options (throws Error(invalid_argument) naming the argument) and fills
// everything but the kernels and the launch plan: no device call.
LrpeLaunch validate_lrpe(const LrpeRequest& request, const TensorView& x, const TensorView& theta,
                         const TensorView* d_o, const TensorView& out, const TensorView* angles);

// The config a call runs with: request.config if given (checked for the spec, shape and cache;
// throws Error(invalid_argument) naming `config`), else the launch-path decision
// (runtime/tuning/tuning_decision.h: database record for lrpe_variant_key(spec, cache) and
// lrpe_bucket(shape, md dims), KGEN_AUTOTUNE, heuristic), made once per (spec, cache, bucket,
// device) and process.
LrpeConfig choose_lrpe_config(const LrpeRequest& request, const LrpeSpec& spec, const LrpeShape& shape, bool cache,
                              int device);
// The same precedence against `context`, uncached (no GPU needed).
LrpeConfig choose_lrpe_config(const LrpeRequest& request, const LrpeSpec& spec, const LrpeShape& shape, bool cache,
                              const DecisionContext& context);

// validate_lrpe, then the config (choose_lrpe_config), the plan for the device and
// the loaded kernels (compiled or read from the cache on first use).
LrpeLaunch prepare_lrpe(const LrpeRequest& request, const TensorView& x, const TensorView& theta,
                        const TensorView* d_o, const TensorView& out, const TensorView* angles);

// Launches on `stream`; softmax over the sequence uses request.workspace or a stream-ordered
// allocation.
void launch_lrpe(LrpeLaunch& launch, void* workspace, std::size_t workspace_bytes, void* stream);

}  // namespace kgen
