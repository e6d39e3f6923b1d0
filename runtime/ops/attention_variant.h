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

// An integer tensor a variant's mask reads: its slot in VariantArgs and its view.
struct VariantRangeSource {
  int slot;
  TensorView tensor;
};

struct ResolvedVariant {
  std::string canonical;  // the composed expressions' canonical text; empty when there are none
  bool sinks = false;
  bool packed = false;  // a packed batch (args.cu_seqlens_q / _k set)
  bool paged = false;   // paged K/V (args.block_table, page_shift, seqused_k set)
  int id = 0;                 // 0: plain attention; otherwise the process-wide id of (canonical, sinks)
  std::string_view op_name;   // the kernel table's op name for this variant ("attention_fwd#3"), static
  VariantArgs args{};
  // Gradient buffers the backward zeroes before its kernels accumulate into them (learnable
  // tensors and sinks): device pointer and bytes.
  std::vector<std::pair<void*, std::size_t>> grads;
  // The integer tensors the mask reads: a launch builds their range tables
  // (build_variant_ranges), with which the kernels' tile() skips tiles from the tensors' values.
  std::vector<VariantRangeSource> ranges;
  bool active() const { return id != 0; }
};

class Workspace;

// Scratch bytes of the range tables of `ranges` (0 without any).
std::size_t variant_range_bytes(const std::vector<VariantRangeSource>& ranges);
// Builds the range tables of `ranges` in scratch from `ws` on `stream` (one small kernel each)
// and points `args` (a launch's copy of the variant's args) at them. The kernels are correct
// without them, only without skipping tiles from the tensors' values.
void build_variant_ranges(const std::vector<VariantRangeSource>& ranges, VariantArgs& args, Workspace& ws, int device,
                          void* stream);

// Resolves `variant` for a call with these q and k views (b, h_q, n_q, d) / (b, h_kv, n_k, d).
// `op` is the operator's registry name ("attention_fwd", "attention_bwd"), used for op_name.
// `backward`: learnable tensors must come with their gradient views (and sinks with sinks_grad),
// which fill args.grad and grads. `packed` (checked by check_packed_sequences; null for dense
// batches) makes b its sequence count. Throws Error(invalid_argument) naming the argument, e.g.
// "variant.alibi_slopes: shape (8) must be (heads_q) = (16)" or an expression's error.
ResolvedVariant resolve_attention_variant(const AttentionVariant& variant, const TensorView& q, const TensorView& k,
                                          const char* op, bool backward, const PackedSequences* packed = nullptr,
                                          const PagedKV* paged = nullptr);

// Checks paged K/V for q (b, h_q, n_q, d) and a cache (num_pages, page_size, h_kv, d); returns
// page_size. With KGEN_CHECK_INDICES=1 also every used block-table entry and cache_seqlens.
int check_paged_kv(const PagedKV& kv, const TensorView& q, const TensorView& k_cache);

// Checks a packed batch's cu_seqlens (int32 (b + 1) on `device`, contiguous) and maxima for
// tensors of total_q query rows and total_k key rows; returns b. With KGEN_CHECK_INDICES=1 it also
// copies cu_seqlens to the host and checks every bound (0 first, non-decreasing, within the rows,
// lengths within the maxima), naming the first bad index.
int check_packed_sequences(const PackedSequences& packed, std::int64_t total_q, std::int64_t total_k, int device);

// A packed batch's (total, h, d) tensor as the kernels' 4-d (1, h, total, d) view (batch stride
// 0). `like`, when given, is the packed tensor whose shape `t` must have (both named in errors).
TensorView packed_view(const TensorView& t, const char* name, const TensorView* like = nullptr,
                       const char* like_name = nullptr);

// The forward's packed tensors checked against each other (q, o: (total_q, h_q, d); k, v:
// (total_k, h_kv, d); lse (h_q, total_q) fp32) and viewed as the kernels' 4-d tensors, lse as
// (1, h_q, total_q). Throws Error(invalid_argument) naming the argument.
struct PackedViews {
  TensorView q, k, v, o, lse;
};
PackedViews packed_views(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& o,
                         const TensorView* lse);

// Whether `variant` asks for anything beyond plain attention (cheap: no parsing).
bool variant_requested(const AttentionVariant& variant);

}  // namespace kgen
