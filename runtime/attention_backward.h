// The attention backward and double backward behind kgen::attention_backward and
// kgen::attention_double_backward: validation, config choice, workspace, launches.
#pragma once

#include "generator/attention_backward.h"
#include "kgen/kgen.hpp"

namespace kgen {

// A validated backward call.
struct AttentionBackwardCall {
  AttentionBackwardSpec spec;
  AttentionShape shape;
  bool aligned16 = true;  // every tensor allows 16-byte loads (tensor-core path)
  int device = 0;
};

// The config a backward call runs with (options.config if given, else the heuristic, else the
// general path for unaligned views). Throws Error(invalid_argument) naming `config`.
AttentionBackwardConfig choose_attention_backward_config(const AttentionBackwardCall& call,
                                                         const AttentionBackwardOptions& options);

}  // namespace kgen
