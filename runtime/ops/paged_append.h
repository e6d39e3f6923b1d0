// The paged K/V append behind kgen::attention_paged_append (docs/attention.md §10): validation
// (naming the argument), the config, the launch.
#pragma once

#include "generator/paged_append.h"
#include "kgen/kgen.hpp"
#include "kgen_device/attention/paged_append_params.h"

namespace kgen {

// A validated append: what the kernel is, how it runs, its parameters.
struct PagedAppendCall {
  PagedAppendSpec spec;
  PagedAppendConfig config;
  PagedAppendParams params{};
  PagedAppendLaunchPlan plan;
  int device = 0;
};

// Checks the arguments (no device work, unless KGEN_CHECK_INDICES=1: then it copies cache_seqlens
// and the table's rows to the host, synchronously, and names the first bad entry) and plans the
// launch. Throws Error(invalid_argument) naming the argument.
PagedAppendCall prepare_paged_append(const TensorView& k_new, const TensorView& v_new, const TensorView& k_cache,
                                     const TensorView& v_cache, const PagedKV& kv, const PagedAppendOptions& options);

}  // namespace kgen
