// The attention forward behind kgen::attention_forward: validation, variant choice, launch.
#pragma once

#include "generator/attention_forward.h"
#include "kgen_device/attention/params.h"
#include "kgen/kgen.hpp"
#include "driver/device.h"
#include "ops/attention_variant.h"

namespace kgen {

struct DecisionContext;

// A validated call: shape, spec and kernel parameters, ready to launch.
struct AttentionForwardCall {
  AttentionForwardSpec spec;
  AttentionShape shape;
  bool aligned16 = true;  // every base pointer and row/head/batch stride allows 16-byte loads
  int device = 0;
  ResolvedVariant variant;  // options.variant, resolved (spec.variant and spec.sinks follow it)
};

// The kernel table's op name of `op`'s kernels for a v head dim of their own ("attention_fwd.dv128"),
// in static storage: their keys pack the same fields as the one-head-dim kernels'.
std::string_view attention_head_dim_v_op(std::string_view op, int head_dim_v);

// Throws Error(invalid_argument) naming q when its head_dim (q.shape[3]) is above kMaxHeadDim.
void check_head_dim(const TensorView& q);

// Checks the tensors and options; throws Error(invalid_argument) naming the argument.
// `packed`: a packed batch, whose tensors come as packed_view (1, h, total, d) and lse as
// packed_lse_view; the call's shape then has the sequence count as batch and the maxima as n_q, n_k.
// `paged`: paged K/V, k and v the caches viewed (num_pages, h_kv, page_size, d); the call's n_k is
// then max_pages · page_size.
AttentionForwardCall validate_attention_forward(const TensorView& q, const TensorView& k,
                                                const TensorView& v, const TensorView& o,
                                                const TensorView* lse, const AttentionOptions& options,
                                                const PackedSequences* packed = nullptr,
                                                const PagedKV* paged = nullptr);

// A resolved launch: the loaded kernel, its grid and packed parameters.
struct AttentionForwardLaunch {
  LoadedKernel kernel;
  LaunchGrid grid;
  AttentionForwardParams params;
  bool tma = false;                      // the warp-specialised kernel: it takes tma_params
  AttentionForwardTmaParams tma_params;  // params plus the TMA maps of q, k, v and o
  // A split-keys launch (a ":split" config): the kernel takes split_params, whose workspace
  // pointers the caller fills (partial_rows rows of head_dim + 1 floats), then `combine` runs on
  // combine_grid.
  bool split = false;
  AttentionForwardSplitParams split_params;
  LoadedKernel combine;
  LaunchGrid combine_grid;
  bool combine_after_prior = false;  // combine launched after the prior grid (launch_kernel)
  std::size_t partial_rows = 0;  // splits · batch · heads_q · n_q
  // A stream-K launch (a ":persist:sk" config): the kernel takes stream_params, whose workspace
  // pointers the caller fills: grid.x slots of stream_rows rows of stream_cols fp32 values and an
  // lse2 each, then stream_flags() 8-byte flags, which must be zero at launch.
  bool stream_k = false;
  AttentionForwardStreamParams stream_params;
  int stream_rows = 0;  // block_m
  int stream_cols = 0;  // the tile's head dim
  std::size_t stream_flags() const { return std::size_t{grid.x} * (stream_rows / 64); }
  // A packed batch's persistent grid (a ":persist" config): the kernel takes stream_params, whose
  // flags hold one 8-byte tile counter, zero at launch (the caller fills the pointer).
  bool tile_counter = false;
  AttentionForwardConfig config;  // the config it runs
  bool packed_heads = false;       // pack_query_heads regrouped q, o and lse
  int kv_rows = 0;  // the ws kernel's K and V box rows (a page's rows when fewer than block_n)
  // An attention variant's kernel takes its inputs as a second parameter.
  bool variant = false;
  VariantArgs variant_args{};
  std::vector<VariantRangeSource> ranges;  // built into variant_args at each launch (workspace)
  void* variant_params() { return variant ? &variant_args : nullptr; }
  // The kernel's one parameter, as launch_kernel takes it.
  void* kernel_params() {
    if (stream_k || tile_counter) return &stream_params;
    if (split) return &split_params;
    return tma ? static_cast<void*>(&tma_params) : static_cast<void*>(&params);
  }
};

// Query rows per packed problem up to which pack_query_heads applies: one query tile of the
// warp-specialised kernel.
inline constexpr std::int64_t kMaxPackedQueryRows = 128;

// Decode-like grouped-query calls: the h_q / h_kv query heads that share a K/V head become the
// rows of one (batch, K/V head) problem, so one block reads that K and V once instead of once
// per query head. Row m = j·n_q + r of the packed problem is row r of query head kv·group + j;
// the views stay views (no copy) when m steps by one stride, i.e. n_q == 1 or the heads of q, o
// (and lse) lie n_q rows apart. A causal mask would see the packed rows at the wrong positions,
// so causal calls pack only with n_q == 1, where the one bottom-right-aligned row sees every key
// (options.causal is then cleared). Returns false, leaving everything alone, when it does not
// apply: no GQA, more than kMaxPackedQueryRows packed rows, other strides, or options.config
// set. prepare_attention_forward calls it on validated views.
bool pack_query_heads(TensorView& q, TensorView& o, TensorView* lse, const TensorView& k, AttentionOptions& options);
// pack_query_heads's rule on shapes alone: h_q over h_kv K/V heads (h_q > h_kv), causal only with
// one query row, the group's rows within kMaxPackedQueryRows (views, variants and configs aside).
bool query_heads_pack(std::int64_t heads_q, std::int64_t heads_kv, std::int64_t n_q, bool causal);

// The kernels' parameters of a validated call on these views: pointers, strides, the call's shape,
// the head dim and group, and the scale (options.scale, or 1/√d) with its log2(e) multiple.
AttentionForwardParams attention_forward_params(const AttentionForwardCall& call, const TensorView& q,
                                                const TensorView& k, const TensorView& v, const TensorView& o,
                                                const TensorView* lse, const AttentionOptions& options);

// Validates, chooses the config and resolves the kernel (compiling or loading it on first use)
// without launching: attention_forward is this plus one cuLaunchKernel.
AttentionForwardLaunch prepare_attention_forward(const TensorView& q, const TensorView& k, const TensorView& v,
                                                 const TensorView& o, const TensorView* lse,
                                                 const AttentionOptions& options,
                                                 const PackedSequences* packed = nullptr,
                                                 const PagedKV* paged = nullptr);

// The kernels' view (num_pages, h_kv, page_size, d) of a (num_pages, page_size, h_kv, d) cache;
// checks its shape (naming `name`).
TensorView paged_cache_view(const TensorView& cache, const char* name);

// Bytes of scratch `launch` needs on its device (its split or stream-K parts; 0: none).
std::size_t attention_forward_workspace_bytes(const AttentionForwardLaunch& launch);

// Launches a prepared forward on `stream`, its scratch from `workspace` (at least
// attention_forward_workspace_bytes; null: stream-ordered memory of kgen's pool).
void launch_attention_forward(AttentionForwardLaunch& launch, int device, void* stream, void* workspace = nullptr,
                              std::size_t workspace_bytes = 0);

// Points a prepared launch at other tensors of the same shapes and strides (the views
// prepare_attention_forward would pass its kernels: packed heads, the caches' page views): the
// kernels' data pointers, the tensor maps of the ws kernel (re-encoded on the host) and a paged
// call's block table and key counts. No device work.
void rebind_attention_forward(AttentionForwardLaunch& launch, const TensorView& q, const TensorView& k,
                              const TensorView& v, const TensorView& o, const TensorView* lse, const PagedKV* paged);

// The config a call runs with: options.config if given (checked; throws Error(invalid_argument)
// naming `config`), else the general path for unaligned views, else the launch-path decision
// (runtime/tuning/tuning_decision.h), made once per (spec, bucket, device) and process.
AttentionForwardConfig choose_attention_forward_config(const AttentionForwardCall& call,
                                                       const AttentionOptions& options);
// The same precedence against `context`, uncached (no GPU needed).
AttentionForwardConfig choose_attention_forward_config(const AttentionForwardCall& call, const AttentionOptions& options,
                                                       const DecisionContext& context);

}  // namespace kgen
