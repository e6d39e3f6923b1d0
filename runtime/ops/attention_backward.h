// The attention backward and double backward behind kgen::attention_backward and
// kgen::attention_double_backward: validation, config choice, workspace, launches.
#pragma once

#include <cstdint>

#include "ops/buckets.h"
#include "generator/attention_backward.h"
#include "kgen/kgen.hpp"
#include "ops/attention_variant.h"

namespace kgen {

struct DecisionContext;

// A validated backward call.
struct AttentionBackwardCall {
  AttentionBackwardSpec spec;
  AttentionShape shape;
  bool aligned16 = true;  // every tensor allows 16-byte loads (tensor-core path)
  int device = 0;
  ResolvedVariant variant;  // options.variant with its gradient buffers (spec.variant, spec.sinks follow)
  // The tensors' rows: `shape` itself for dense batches; for a packed batch (spec.packed) one
  // batch of all rows, which the row-wise kernels walk (shape holds the sequences and maxima).
  AttentionShape rows;
};

// The config a backward call runs with: options.config if given (checked; throws
// Error(invalid_argument) naming `config`), else the general path for unaligned views, else the
// launch-path decision (runtime/tuning/tuning_decision.h: database record for the variant
// attention_backward_variant_key(spec, options.deterministic) and attention_bucket, KGEN_AUTOTUNE,
// heuristic), made once per (spec, mode, bucket, device) and process.
AttentionBackwardConfig choose_attention_backward_config(const AttentionBackwardCall& call,
                                                         const AttentionBackwardOptions& options);
// The same precedence against `context`, uncached (no GPU needed).
AttentionBackwardConfig choose_attention_backward_config(const AttentionBackwardCall& call,
                                                         const AttentionBackwardOptions& options,
                                                         const DecisionContext& context);

// The same for the double backward (variant double_backward_variant_key).
AttentionBackwardConfig choose_attention_double_backward_config(const AttentionBackwardCall& call,
                                                                const AttentionBackwardOptions& options);
AttentionBackwardConfig choose_attention_double_backward_config(const AttentionBackwardCall& call,
                                                                const AttentionBackwardOptions& options,
                                                                const DecisionContext& context);

// The backward's and double backward's packing of one kernel's identity for
// runtime/jit/kernel_table (`kernel`: a BackwardKernel or DoubleBackwardKernel). Throws
// Error(internal) if a field does not fit its bits; tests/runtime/ops pack every config kgen can
// choose or be given.
std::uint64_t gradient_kernel_key(const AttentionBackwardSpec& s, const AttentionBackwardConfig& c, int kernel);

}  // namespace kgen
