#include "ops/attention_forward.h"

#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>

#include "kgen_device/attention/forward_config.h"
#include "kgen_device/attention/params.h"
#include "driver/device.h"
#include "jit/kernel_table.h"
#include "ops/buckets.h"
#include "ops/general_path.h"
#include "base/log.h"
#include "ops/tensor_checks.h"
#include "ops/tensor_maps.h"
#include "ops/validate_only.h"
#include "ops/workspace.h"
#include "tuning/tuning_db.h"
#include "tuning/tuning_decision.h"
#include "ops/attention_tuning.h"

namespace kgen {
namespace {

constexpr double kLog2e = 1.4426950408889634;

// The forward's packing of its kernel identity for runtime/jit/kernel_table.
std::uint64_t forward_kernel_key(const AttentionForwardSpec& s, const AttentionForwardConfig& c) {
  KeyPacker k;
  k.add(int(s.dtype), 4).add(s.head_dim, 10).add(s.causal, 1).add(int(c.path), 3).add(c.block_m, 10).add(c.block_n, 10);
  k.add(c.stages, 4).add(c.max_head_dim, 10).add(c.warps, 6).add(c.ping_pong, 1).add(c.split_keys, 1);
  k.add(c.persistent, 1).add(c.stream_k, 1);
  return k.value();
}

// The combine kernel's identity: its dtype, and a field no forward key sets.
std::uint64_t combine_kernel_key(DType dtype) { return KeyPacker().add(int(dtype), 4).add(1023, 10).add(1, 1).value(); }

// The tensor maps of the warp-specialised forward, or false when a view cannot have one.
// `kv_rows`: the rows of a K or V box (the config's block_n, or a page's rows when fewer).
bool fill_tensor_maps(AttentionForwardTmaParams& tp, const TensorView& q, const TensorView& k, const TensorView& v,
                      const TensorView& o, int kv_rows) {
  TiledTensorMap maps[4];
  if (!tiled_map(q, 64, maps[0]) || !tiled_map(k, kv_rows, maps[1]) || !tiled_map(v, kv_rows, maps[2]) ||
      !tiled_map(o, 64, maps[3]))
    return false;
  TensorMapBytes* out[4] = {&tp.q_map, &tp.k_map, &tp.v_map, &tp.o_map};
  for (int i = 0; i < 4; ++i) gpu_driver().encode_tensor_map(out[i], maps[i], "cuTensorMapEncodeTiled(attention_fwd)");
  return true;
}

}  // namespace

TensorView make_contiguous_view(void* data, DType dtype, int ndim, const std::int64_t* shape, int device) {
  TensorView t;
  t.data = data;
  t.dtype = dtype;
  t.ndim = ndim;
  t.device = device;
  std::int64_t stride = 1;
  for (int i = ndim - 1; i >= 0; --i) {
    t.shape[i] = shape[i];
    t.strides[i] = stride;
    // Wraps (never overflows) on a shape that the operators' check_shape then rejects.
    stride = static_cast<std::int64_t>(static_cast<std::uint64_t>(stride) * static_cast<std::uint64_t>(shape[i]));
  }
  return t;
}

std::string_view attention_head_dim_v_op(std::string_view op, int head_dim_v) {
  static std::mutex mutex;
  static std::map<std::pair<std::string, int>, std::string> names;
  std::lock_guard lock(mutex);
  auto [it, added] = names.try_emplace({std::string(op), head_dim_v});
  if (added) it->second = std::string(op) + ".dv" + std::to_string(head_dim_v);
  return it->second;
}

void check_head_dim(const TensorView& q) {
  if (q.shape[3] > kMaxHeadDim)
    invalid_argument("q: head_dim=" + std::to_string(q.shape[3]) + " is unsupported (kgen serves head_dim <= " +
                     std::to_string(kMaxHeadDim) + ")");
}

AttentionForwardCall validate_attention_forward(const TensorView& q, const TensorView& k,
                                                const TensorView& v, const TensorView& o,
                                                const TensorView* lse, const AttentionOptions& options,
                                                const PackedSequences* packed, const PagedKV* paged) {
  // Paged K/V: k and v are the caches viewed (num_pages, h_kv, page_size, d); their first
  // dimension counts pages, not batches (no grid limit applies to it).
  const char* k_name = paged ? "k_cache" : "k";
  const char* v_name = paged ? "v_cache" : "v";
  if (q.dtype == DType::f8e4m3)
    invalid_argument("q: dtype fp8_e4m3: FP8 inputs run through attention_forward_fp8, with their descale factors");
  check_tensor(q, "q", 4);
  if (paged) {
    check_view(k, k_name, 4);
    check_view(v, v_name, 4);
  } else {
    check_tensor(k, k_name, 4);
    check_tensor(v, v_name, 4);
  }
  check_tensor(o, "o", 4);
  for (auto [t, name] : {std::pair{&k, k_name}, {&v, v_name}, {&o, "o"}})
    if (t->dtype != q.dtype)
      invalid_argument(std::string(name) + ": dtype " + std::string(dtype_name(t->dtype)) +
              " differs from q's " + std::string(dtype_name(q.dtype)));
  for (auto [t, name] : {std::pair{&k, k_name}, {&v, v_name}, {&o, "o"}})
    if (t->device != q.device) invalid_argument(std::string(name) + ": on device " + std::to_string(t->device) + ", q is on device " + std::to_string(q.device));
  const std::int64_t b = q.shape[0], hq = q.shape[1], nq = q.shape[2], d = q.shape[3];
  const std::int64_t hkv = k.shape[1], dv = v.shape[3];
  if ((!paged && k.shape[0] != b) || k.shape[3] != d)
    invalid_argument(std::string(k_name) + ": shape " + shape_string(k) + " does not match q " + shape_string(q) +
                     (paged ? " in head_dim" : " in batch or head_dim"));
  for (int i = 0; i < 3; ++i)
    if (v.shape[i] != k.shape[i])
      invalid_argument(std::string(v_name) + ": shape " + shape_string(v) + " differs from " + k_name + " " +
                       shape_string(k));
  // v may have a head dim of its own, below q's and k's (MLA, docs/attention.md §1); o has v's.
  if (dv > d || dv < 1)
    invalid_argument(std::string(v_name) + ": head dim " + std::to_string(dv) + " must be at most q's " +
                     std::to_string(d) + " (d_v <= d_qk)");
  const std::int64_t nk = paged ? check_paged_kv(*paged, q, k) * paged->block_table->shape[1] : k.shape[2];
  for (int i = 0; i < 4; ++i)
    if (o.shape[i] != (i < 3 ? q.shape[i] : dv))
      invalid_argument("o: shape " + shape_string(o) + (dv == d ? " differs from q " + shape_string(q)
                                                                : " must be q's (b, h_q, n_q) with v's head dim " +
                                                                      std::to_string(dv)));
  if (hq % hkv) invalid_argument("k: heads_kv=" + std::to_string(hkv) + " does not divide q's heads=" + std::to_string(hq));
  check_head_dim(q);
  if (lse) {
    check_tensor(*lse, "lse", 3);
    if (lse->dtype != DType::f32) invalid_argument("lse: dtype must be fp32");
    if (lse->shape[0] != b || lse->shape[1] != hq || lse->shape[2] != nq)
      invalid_argument("lse: shape " + shape_string(*lse) + " must be (batch, heads_q, n_q) of q");
    if (lse->device != q.device) invalid_argument("lse: not on q's device");
  }
  if (!std::isfinite(options.scale)) invalid_argument("scale: must be finite");
  AttentionForwardCall call;
  call.spec = {q.dtype, static_cast<int>(d), options.causal};
  const int sequences = packed ? check_packed_sequences(*packed, nq, nk, q.device) : 0;
  call.variant = resolve_attention_variant(options.variant, q, k, "attention_fwd", false, packed, paged);
  call.spec.variant = call.variant.canonical;
  call.spec.sinks = call.variant.sinks;
  call.spec.packed = call.variant.packed;
  call.spec.paged = call.variant.paged;
  if (dv != d) {
    call.spec.head_dim_v = static_cast<int>(dv);
    // The sentence names v (v_cache for paged K/V).
    if (auto why = check_head_dim_v(call.spec.head_dim, call.spec.head_dim_v, call.spec.has_variant(), "", "attention"))
      invalid_argument(std::string(v_name) + why->substr(1));
  }
  call.shape = {static_cast<int>(b), static_cast<int>(hq), static_cast<int>(hkv), static_cast<int>(nq), static_cast<int>(nk)};
  if (packed) {
    call.shape.batch = sequences;
    call.shape.n_q = packed->max_seqlen_q, call.shape.n_k = packed->max_seqlen_k;
  }
  call.aligned16 = aligned16(q) && aligned16(k) && aligned16(v) && aligned16(o);
  call.device = q.device;
  return call;
}

namespace {

// options.config, checked for `target` and the call's alignment.
AttentionForwardConfig explicit_config(const AttentionForwardCall& call, const AttentionOptions& options,
                                       const Target& target) {
  auto c = parse_attention_forward_config(options.config);
  if (!c) invalid_argument("config: cannot parse '" + options.config + "' (e.g. fa2:bm128:bn64:w4:s2, wg:bm128:bn128:s2 or simt:bm4:bn32:dmax128)");
  if (auto why = check_attention_forward_config(call.spec, *c, target))
    invalid_argument("config: " + options.config + " is invalid here: " + *why);
  if (c->path != ForwardPath::simt && !call.aligned16)
    invalid_argument("config: " + options.config + " needs 16-byte aligned pointers and strides that are multiples of 16 bytes");
  return *c;
}

AttentionCase tuning_case(const AttentionForwardCall& call) {
  AttentionCase c;
  c.dtype = call.spec.dtype, c.head_dim = call.spec.head_dim, c.causal = call.spec.causal;
  c.batch = call.shape.batch, c.heads_q = call.shape.heads_q, c.heads_kv = call.shape.heads_kv;
  c.n_q = call.shape.n_q, c.n_k = call.shape.n_k;
  return c;
}

}  // namespace

AttentionForwardConfig choose_attention_forward_config(const AttentionForwardCall& call, const AttentionOptions& options,
                                                       const DecisionContext& ctx) {
  if (!options.config.empty()) return explicit_config(call, options, ctx.target);
  // Tensor-core loads are 16 bytes wide: serve unaligned views on the general path.
  if (!call.aligned16) return attention_forward_general_config(call.spec);
  // Variants and v head dims of their own run the heuristic's config (the tuner and its database
  // serve plain attention of one head dim).
  if (call.spec.has_variant() || call.spec.head_dim_v > 0)
    return attention_forward_default_config(call.spec, call.shape, ctx.target, ctx.sm_count);
  auto problem = attention_forward_tuning(tuning_case(call));
  DecisionRequest request;
  request.problem = problem.get();
  request.invalid = [&](const std::string& text) -> std::optional<std::string> {
    auto c = parse_attention_forward_config(text);
    if (!c) return "cannot parse '" + text + "'";
    return check_attention_forward_config(call.spec, *c, ctx.target);
  };
  request.heuristic = [&] {
    return to_string(attention_forward_default_config(call.spec, call.shape, ctx.target, ctx.sm_count));
  };
  return parse_attention_forward_config(decide_config(request, ctx).config).value();
}

namespace {

// The launch path's decision through the per-process table (explicit configs and unaligned views
// skip it).
AttentionForwardConfig cached_forward_config(const AttentionForwardCall& call, const AttentionOptions& options) {
  if (!call.aligned16) return attention_forward_general_config(call.spec);
  static DecisionTable<AttentionForwardConfig> decisions;
  const AttentionShape& s = call.shape;
  const DecisionKey key{KeyPacker()
                            .add(int(call.spec.dtype), 4)
                            .add(call.spec.head_dim, 10)
                            .add(call.spec.causal, 1)
                            .add(call.variant.id, 24)
                            .add(call.spec.head_dim_v, 10)
                            .value(),
                        attention_bucket(s).values,
                        call.device,
                        attention_forward_shape_class(s, device_info(call.device).sm_count)};
  return decisions.get(key, [&] { return choose_attention_forward_config(call, options, decision_context(call.device)); });
}

}  // namespace

AttentionForwardConfig choose_attention_forward_config(const AttentionForwardCall& call,
                                                       const AttentionOptions& options) {
  if (!options.config.empty()) return explicit_config(call, options, device_info(call.device).target);
  AttentionForwardConfig config = cached_forward_config(call, options);
  if (config.path == ForwardPath::simt)
    note_general_path("attention_fwd", to_string(call.spec),
                      general_path_reason(call.spec.dtype, call.spec.head_dim, call.aligned16));
  return config;
}

bool query_heads_pack(std::int64_t heads_q, std::int64_t heads_kv, std::int64_t n_q, bool causal) {
  return heads_kv > 0 && heads_q > heads_kv && heads_q % heads_kv == 0 && !(causal && n_q != 1) &&
         heads_q / heads_kv * n_q <= kMaxPackedQueryRows;
}

bool pack_query_heads(TensorView& q, TensorView& o, TensorView* lse, const TensorView& k, AttentionOptions& options) {
  const std::int64_t hq = q.shape[1], nq = q.shape[2], hkv = k.shape[1];
  if (!options.config.empty() || !query_heads_pack(hq, hkv, nq, options.causal) || variant_requested(options.variant))
    return false;
  const std::int64_t group = hq / hkv;
  for (const TensorView* t : {&q, &o})
    if (nq != 1 && t->strides[1] != nq * t->strides[2]) return false;
  if (lse && lse->strides[1] != nq) return false;  // lse rows are 1 apart
  for (TensorView* t : {&q, &o}) {
    if (nq == 1) t->strides[2] = t->strides[1];
    t->shape[1] = hkv, t->shape[2] = group * nq;
    t->strides[1] *= group;
  }
  if (lse) lse->shape[1] = hkv, lse->shape[2] = group * nq, lse->strides[1] *= group;
  options.causal = false;
  return true;
}

AttentionForwardParams attention_forward_params(const AttentionForwardCall& call, const TensorView& q,
                                                const TensorView& k, const TensorView& v, const TensorView& o,
                                                const TensorView* lse, const AttentionOptions& options) {
  AttentionForwardParams p;
  std::memset(&p, 0, sizeof p);
  p.q = q.data; p.k = k.data; p.v = v.data; p.o = o.data;
  p.lse = lse ? static_cast<float*>(lse->data) : nullptr;
  p.q_stride_b = q.strides[0]; p.q_stride_h = q.strides[1]; p.q_stride_n = q.strides[2];
  p.k_stride_b = k.strides[0]; p.k_stride_h = k.strides[1]; p.k_stride_n = k.strides[2];
  p.v_stride_b = v.strides[0]; p.v_stride_h = v.strides[1]; p.v_stride_n = v.strides[2];
  p.o_stride_b = o.strides[0]; p.o_stride_h = o.strides[1]; p.o_stride_n = o.strides[2];
  if (lse) { p.lse_stride_b = lse->strides[0]; p.lse_stride_h = lse->strides[1]; }
  p.batch = call.shape.batch; p.heads_q = call.shape.heads_q; p.heads_kv = call.shape.heads_kv;
  p.n_q = call.shape.n_q; p.n_k = call.shape.n_k;
  p.head_dim = call.spec.head_dim;
  p.head_group = call.shape.heads_q / call.shape.heads_kv;
  const double scale = options.scale > 0 ? options.scale : 1.0 / std::sqrt(double(call.spec.head_dim));
  p.scale = static_cast<float>(scale);
  p.scale_log2 = static_cast<float>(scale * kLog2e);
  return p;
}

AttentionForwardLaunch prepare_attention_forward(const TensorView& q_in, const TensorView& k, const TensorView& v,
                                                 const TensorView& o_in, const TensorView* lse_in,
                                                 const AttentionOptions& options_in, const PackedSequences* packed,
                                                 const PagedKV* paged) {
  AttentionForwardCall call = validate_attention_forward(q_in, k, v, o_in, lse_in, options_in, packed, paged);
  end_of_validation();
  TensorView q = q_in, o = o_in, lse_packed = lse_in ? *lse_in : TensorView{};
  const TensorView* lse = lse_in ? &lse_packed : nullptr;
  AttentionOptions options = options_in;
  AttentionForwardLaunch launch;
  if (!packed && pack_query_heads(q, o, lse_in ? &lse_packed : nullptr, k, options)) {
    launch.packed_heads = true;
    // The packed views only regroup validated elements: the call's shape and mask follow.
    call.shape.heads_q = call.shape.heads_kv;
    call.shape.n_q = static_cast<int>(q.shape[2]);
    call.spec.causal = false;
  }
  AttentionForwardConfig config = choose_attention_forward_config(call, options);
  if (paged && config.path == ForwardPath::ws) {
    // The tiles' TMA boxes take at most a page's rows: a tile lies within one page or covers whole pages.
    const int page_size = static_cast<int>(k.shape[2]), bn = attention_forward_paged_key_tile(config.block_n, page_size);
    if (bn != config.block_n && !options.config.empty())
      invalid_argument("config: " + options.config + " has " + std::to_string(config.block_n) +
                       "-key tiles, which neither divide nor fill k_cache's pages of " + std::to_string(page_size) +
                       " rows; paged K/V needs bn and page_size to divide one another (e.g. bn" + std::to_string(bn) + ")");
    config.block_n = bn;
  }
  if (config.path == ForwardPath::ws) {
    launch.tma = true;
    use_primary_context(call.device);  // the driver encodes tensor maps in the current context
    // An expanded (stride-0) view has no tensor map: the same tiles without TMA serve it.
    // Paged K/V: boxes of at most a page's rows.
    const int kv_rows = paged ? std::min<int>(config.block_n, static_cast<int>(k.shape[2])) : config.block_n;
    launch.kv_rows = kv_rows;
    if (!fill_tensor_maps(launch.tma_params, q, k, v, o, kv_rows)) {
      if (!options.config.empty())
        invalid_argument("config: " + options.config + " needs views without zero strides (TMA); use a wg: config");
      config = {.path = ForwardPath::wgmma, .block_m = 128, .block_n = config.block_n, .warps = 8};
      // The wgmma kernels do not serve variants: the fa2 kernels (sm_80 code) run them here.
      if (call.spec.has_variant())
        config = attention_forward_default_config(call.spec, call.shape, *parse_target("sm_80"),
                                                  device_info(call.device).sm_count);
      launch.tma = false;
    }
  }
  if (config.stream_k) {
    // Stream-K cuts key tiles: a call without keys, or with 2^31 (query tile, key tile) units or
    // more, runs the same tiles in plain persistent rounds.
    const long long units = 1LL * call.shape.batch * call.shape.heads_q *
                            ((call.shape.n_q + config.block_m - 1) / config.block_m) *
                            ((call.shape.n_k + config.block_n - 1) / config.block_n);
    if (units == 0 || units >= (1LL << 31)) config.stream_k = false;
  }
  launch.config = config;
  const std::string_view op = call.variant.active()    ? call.variant.op_name
                              : call.spec.head_dim_v > 0 ? attention_head_dim_v_op("attention_fwd", call.spec.head_dim_v)
                                                         : std::string_view("attention_fwd");
  launch.variant = call.variant.active();
  launch.variant_args = call.variant.args;
  launch.ranges = call.variant.ranges;
  launch.kernel = loaded_kernel({op, forward_kernel_key(call.spec, config), call.device},
                                [&] { return render_attention_forward(call.spec, config); });
  AttentionForwardParams& p = launch.params;
  p = attention_forward_params(call, q, k, v, o, lse, options);
  // A packed batch: one physical batch of all rows (the kernels take each sequence's from
  // cu_seqlens; the grid covers the longest).
  if (packed) p.n_q = static_cast<int>(q.shape[2]), p.n_k = static_cast<int>(k.shape[2]);
  const DeviceInfo& info = device_info(call.device);
  const int splits = attention_forward_key_splits(config, call.shape, info.sm_count);
  // A packed batch on the ws kernel: the compact grid (every block but a few has a tile).
  launch.grid = packed && config.path == ForwardPath::ws
                    ? attention_forward_packed_grid(config, p.n_q, call.shape.batch, call.shape.heads_q, info.sm_count)
                    : attention_forward_grid(config, call.shape, splits, info.sm_count);
  // Plain causal attention on one block per query tile: sections of heads, heaviest tiles first
  // across each section's heads (forward_ws_config.h).
  p.sections_log2 = attention_forward_sections(config, call.spec, call.shape, launch.grid);
  launch.tma_params.a = p;  // split and stream-K params start from tma_params (maps unused without TMA)
  if (config.split_keys) {
    launch.split = true;
    static_cast<AttentionForwardTmaParams&>(launch.split_params) = launch.tma_params;
    launch.split_params.splits = splits;
    launch.partial_rows = static_cast<std::size_t>(call.shape.batch) * call.shape.heads_q * call.shape.n_q * splits;
    launch.combine = loaded_kernel({"attention_fwd", combine_kernel_key(call.spec.dtype), call.device},
                                   [&] { return render_attention_forward_combine(call.spec.dtype); });
    launch.combine_grid = attention_forward_combine_grid(call.shape);
    // On sm_90 and later the combine kernel is scheduled while the split kernel runs (it waits for
    // the partial results itself): the second launch's latency overlaps the first kernel.
    launch.combine_after_prior =
        info.target.vendor == Vendor::nvidia && info.cc_major >= 9 && programmatic_launches_enabled();
  }
  if (packed && config.persistent && config.path == ForwardPath::ws) {
    launch.tile_counter = true;
    static_cast<AttentionForwardTmaParams&>(launch.stream_params) = launch.tma_params;
    launch.stream_params.splits = 1;
  }
  if (config.stream_k) {
    launch.stream_k = true;
    static_cast<AttentionForwardTmaParams&>(launch.stream_params) = launch.tma_params;
    launch.stream_params.splits = 1;
    launch.stream_rows = config.block_m;
    launch.stream_cols = attention_fwd::wgmma_tile_head_dim(call.spec.head_dim);
  }
  return launch;
}

namespace {

// The byte sizes of a launch's scratch parts: stream-K (o, lse, flags) or split (o, lse), and a
// variant's range tables.
struct ScratchParts {
  std::size_t o = 0, lse = 0, flags = 0, ranges = 0;
  std::size_t total() const {
    return Workspace::aligned(o) + Workspace::aligned(lse) + Workspace::aligned(flags) + ranges;
  }
};

ScratchParts scratch_parts(const AttentionForwardLaunch& launch) {
  ScratchParts parts;
  if (launch.stream_k) {
    const std::size_t rows = std::size_t{launch.grid.x} * launch.stream_rows;
    parts = {rows * launch.stream_cols * 4, rows * 4, launch.stream_flags() * sizeof(unsigned long long)};
  } else if (launch.split) {
    parts = {launch.partial_rows * launch.params.head_dim * 4, launch.partial_rows * 4, 0};
  } else if (launch.tile_counter) {
    parts.flags = sizeof(unsigned long long);
  }
  parts.ranges = variant_range_bytes(launch.ranges);
  return parts;
}

}  // namespace

std::size_t attention_forward_workspace_bytes(const AttentionForwardLaunch& launch) {
  return scratch_parts(launch).total();
}

void rebind_attention_forward(AttentionForwardLaunch& launch, const TensorView& q, const TensorView& k,
                              const TensorView& v, const TensorView& o, const TensorView* lse, const PagedKV* paged) {
  AttentionForwardParams& p = launch.params;
  p.q = q.data; p.k = k.data; p.v = v.data; p.o = o.data;
  p.lse = lse ? static_cast<float*>(lse->data) : nullptr;
  if (paged) {
    launch.variant_args.block_table = static_cast<const int*>(paged->block_table->data);
    launch.variant_args.seqused_k = paged->cache_seqlens ? static_cast<const int*>(paged->cache_seqlens->data) : nullptr;
  }
  if (launch.tma && !fill_tensor_maps(launch.tma_params, q, k, v, o, launch.kv_rows))
    invalid_argument("q: these views have no tensor map, the planned ones had");
  launch.tma_params.a = p;
  if (launch.split) {
    const int splits = launch.split_params.splits;
    static_cast<AttentionForwardTmaParams&>(launch.split_params) = launch.tma_params;
    launch.split_params.splits = splits;
  }
  if (launch.stream_k || launch.tile_counter) {
    static_cast<AttentionForwardTmaParams&>(launch.stream_params) = launch.tma_params;
    launch.stream_params.splits = 1;
  }
}

void launch_attention_forward(AttentionForwardLaunch& launch, int device, void* stream, void* workspace,
                              std::size_t workspace_bytes) {
  if (!launch.tma) use_primary_context(device);  // prepare made it current for the tensor maps
  const ScratchParts parts = scratch_parts(launch);
  if (launch.stream_k) {
    const std::size_t o_bytes = parts.o, lse_bytes = parts.lse, flag_bytes = parts.flags;
    Workspace ws(workspace, workspace_bytes, parts.total(), device, stream, "the stream-K parts of cut query tiles");
    launch.stream_params.o_partial = ws.take(o_bytes);
    launch.stream_params.lse_partial = ws.take(lse_bytes);
    launch.stream_params.flags = reinterpret_cast<unsigned long long*>(ws.take(flag_bytes));
    gpu_driver().fill32_async(reinterpret_cast<DevicePtr>(launch.stream_params.flags), 0, launch.stream_flags() * 2,
                              stream);
    launch_kernel(launch.kernel, launch.grid, launch.kernel_params(), launch.variant_params(), stream, "launch(attention_fwd)");
    return;
  }
  if (launch.tile_counter) {
    Workspace ws(workspace, workspace_bytes, parts.total(), device, stream, "the packed grid's tile counter");
    launch.stream_params.flags = reinterpret_cast<unsigned long long*>(ws.take(parts.flags));
    gpu_driver().fill32_async(reinterpret_cast<DevicePtr>(launch.stream_params.flags), 0, 2, stream);
    launch_kernel(launch.kernel, launch.grid, launch.kernel_params(), launch.variant_params(), stream, "launch(attention_fwd)");
    return;
  }
  if (!launch.split) {
    std::optional<Workspace> ws;  // lives until the kernel is queued
    if (!launch.ranges.empty()) {
      ws.emplace(workspace, workspace_bytes, parts.total(), device, stream, "the variant's range tables");
      build_variant_ranges(launch.ranges, launch.variant_args, *ws, device, stream);
    }
    launch_kernel(launch.kernel, launch.grid, launch.kernel_params(), launch.variant_params(), stream, "launch(attention_fwd)");
    return;
  }
  const std::size_t o_bytes = parts.o, lse_bytes = parts.lse;
  Workspace ws(workspace, workspace_bytes, parts.total(), device, stream, "the key ranges' partial results");
  build_variant_ranges(launch.ranges, launch.variant_args, ws, device, stream);
  launch.split_params.o_partial = ws.take(o_bytes);
  launch.split_params.lse_partial = ws.take(lse_bytes);
  launch_kernel(launch.kernel, launch.grid, launch.kernel_params(), launch.variant_params(), stream, "launch(attention_fwd)");
  launch_kernel(launch.combine, launch.combine_grid, launch.kernel_params(), stream, "launch(attention_fwd combine)",
                launch.combine_after_prior);
}

void attention_forward(const TensorView& q, const TensorView& k, const TensorView& v,
                       const TensorView& o, const TensorView* lse, const AttentionOptions& options,
                       void* stream) {
  AttentionForwardLaunch launch = prepare_attention_forward(q, k, v, o, lse, options);
  launch_attention_forward(launch, q.device, stream);
}

TensorView paged_cache_view(const TensorView& cache, const char* name) {
  check_shape(cache, name, 4);
  TensorView v = cache;
  std::swap(v.shape[1], v.shape[2]);
  std::swap(v.strides[1], v.strides[2]);
  return v;
}

void attention_paged_forward(const TensorView& q, const TensorView& k_cache, const TensorView& v_cache,
                             const TensorView& o, const TensorView* lse, const PagedKV& kv,
                             const AttentionOptions& options, void* stream) {
  AttentionForwardLaunch launch = prepare_attention_forward(q, paged_cache_view(k_cache, "k_cache"),
                                                            paged_cache_view(v_cache, "v_cache"), o, lse, options,
                                                            nullptr, &kv);
  launch_attention_forward(launch, q.device, stream);
}

void attention_varlen_forward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& o,
                              const TensorView* lse, const PackedSequences& sequences,
                              const AttentionOptions& options, void* stream) {
  const PackedViews views = packed_views(q, k, v, o, lse);
  AttentionForwardLaunch launch = prepare_attention_forward(views.q, views.k, views.v, views.o,
                                                            lse ? &views.lse : nullptr, options, &sequences);
  launch_attention_forward(launch, q.device, stream);
}

const char* version() { return KGEN_VERSION; }

}  // namespace kgen
