// A call's attention variant (kgen::AttentionVariant) resolved for the launch path: checked
// (every failure names the argument), composed from presets and expressions into one checked
// variant (generator/variant.h), given a small id for the kernel table, and its run-time inputs
// packed into the VariantArgs the variant kernels take.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "kgen/kgen.hpp"
#include "kgen_device/attention/variant_args.h"

namespace kgen {

struct ResolvedVariant {
  std::string canonical;  // the composed expressions' canonical text; empty when there are none
  bool sinks = false;
  int id = 0;                 // 0: plain attention; otherwise the process-wide id of (canonical, sinks)
  std::string_view op_name;   // the kernel table's op name for this variant ("attention_fwd#3"), static
  VariantArgs args{};
  // Gradient buffers the backward zeroes before its kernels accumulate into them (learnable
  // tensors and sinks): device pointer and bytes.
  std::vector<std::pair<void*, std::size_t>> grads;
  bool active() const { return id != 0; }
};

// Resolves `variant` for a call with these q and k views (b, h_q, n_q, d) / (b, h_kv, n_k, d).
// `op` is the operator's registry name ("attention_fwd", "attention_bwd"), used for op_name.
// `backward`: learnable tensors must come with their gradient views (and sinks with sinks_grad),
// which fill args.grad and grads. Throws Error(invalid_argument) naming the argument, e.g.
// "variant.alibi_slopes: shape (8) must be (heads_q) = (16)" or an expression's error.
ResolvedVariant resolve_attention_variant(const AttentionVariant& variant, const TensorView& q, const TensorView& k,
                                          const char* op, bool backward);

// Whether `variant` asks for anything beyond plain attention (cheap: no parsing).
bool variant_requested(const AttentionVariant& variant);

}  // namespace kgen
