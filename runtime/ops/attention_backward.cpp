#include "ops/attention_backward.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <optional>

#include "kgen_device/attention/backward_params.h"
#include "ops/attention_forward.h"
#include "driver/device.h"
#include "jit/kernel_table.h"
#include "ops/buckets.h"
#include "ops/general_path.h"
#include "ops/tensor_checks.h"
#include "ops/tensor_maps.h"
#include "ops/workspace.h"
#include "tuning/tuning_decision.h"
#include "ops/attention_tuning.h"
#include "ops/validate_only.h"

namespace kgen {
namespace {

constexpr double kLog2e = 1.4426950408889634;


AttentionTensorArg arg(const TensorView* t) {
  if (!t) return {nullptr, 0, 0, 0};
  return {t->data, t->strides[0], t->strides[1], t->strides[2]};
}

// Validates the inputs shared by the backward and the double backward: the forward's checks on
// q, k, v, o and lse (required), plus d_o shaped like q.
// `packed`: a packed batch, its tensors as packed_view gives them.
AttentionBackwardCall validate_inputs(const TensorView& q, const TensorView& k, const TensorView& v,
                                      const TensorView& o, const TensorView& lse, const TensorView& d_o,
                                      const AttentionBackwardOptions& options, bool double_backward,
                                      const PackedSequences* packed = nullptr) {
  AttentionOptions fwd;
  fwd.scale = options.scale;
  fwd.causal = options.causal;
  AttentionForwardCall f = validate_attention_forward(q, k, v, o, &lse, fwd, packed);
  check_tensor(d_o, "d_o", 4);
  // d_o is shaped like o: like q, or with v's head dim when that is q's own (MLA).
  const bool own_v = f.spec.head_dim_v > 0;
  check_like(d_o, "d_o", own_v ? o : q, own_v ? "o" : "q");
  AttentionBackwardCall call;
  call.spec = {f.spec.dtype, f.spec.head_dim, f.spec.causal};
  call.spec.head_dim_v = f.spec.head_dim_v;
  if (variant_requested(options.variant) || packed) {
    // The double backward takes the variant's sinks and tensors as constants: it gives them no
    // gradient, so it needs no gradient buffers.
    call.variant = double_backward ? resolve_attention_variant(options.variant, q, k, "attention_double_bwd", false, packed)
                                   : resolve_attention_variant(options.variant, q, k, "attention_bwd", true, packed);
    call.spec.variant = call.variant.canonical;
    call.spec.sinks = call.variant.sinks;
    call.spec.packed = call.variant.packed;
    if (auto why = check_head_dim_v(call.spec.head_dim, call.spec.head_dim_v, true, "", "attention"))
      invalid_argument(*why);
  }
  call.shape = f.shape;
  call.rows = f.shape;
  if (packed) call.rows = {1, f.shape.heads_q, f.shape.heads_kv, static_cast<int>(q.shape[2]), static_cast<int>(k.shape[2])};
  call.aligned16 = f.aligned16 && aligned16(d_o);
  call.device = f.device;
  return call;
}

void check_output(const TensorView& t, const char* name, const TensorView& like, const char* like_name,
                  AttentionBackwardCall& call) {
  check_tensor(t, name, 4);
  check_like(t, name, like, like_name);
  call.aligned16 = call.aligned16 && aligned16(t);
}

AttentionBackwardParams base_params(const AttentionBackwardCall& call, const TensorView& q, const TensorView& k,
                                    const TensorView& v, const TensorView& o, const TensorView& lse,
                                    const TensorView& d_o, double scale_option) {
  AttentionBackwardParams p;
  std::memset(&p, 0, sizeof p);
  p.q = arg(&q), p.k = arg(&k), p.v = arg(&v), p.o = arg(&o), p.d_o = arg(&d_o);
  p.lse = static_cast<const float*>(lse.data);
  p.lse_stride_b = lse.strides[0], p.lse_stride_h = lse.strides[1];
  // The tensors' rows: a packed batch's kernels take each sequence's from cu_seqlens.
  p.batch = call.rows.batch, p.heads_q = call.rows.heads_q, p.heads_kv = call.rows.heads_kv;
  p.n_q = call.rows.n_q, p.n_k = call.rows.n_k;
  p.head_dim = call.spec.head_dim;
  p.head_group = call.shape.heads_q / call.shape.heads_kv;
  const double scale = scale_option > 0 ? scale_option : 1.0 / std::sqrt(double(call.spec.head_dim));
  p.scale = static_cast<float>(scale);
  p.scale_log2 = static_cast<float>(scale * kLog2e);
  return p;
}

// A workspace size is arithmetic on q's shape alone (no data pointer, strides or device), for
// the shapes a call can serve: within the launch limits and head_dim <= kMaxHeadDim.
void check_workspace_query(const TensorView& q) {
  check_tensor_shape(q, "q", 4);
  check_head_dim(q);
}

std::size_t stat_rows(const TensorView& q) {
  return static_cast<std::size_t>(q.shape[0]) * q.shape[1] * q.shape[2];
}

std::size_t backward_workspace_bytes(const TensorView& q, bool atomic_dq) {
  const std::size_t rows = stat_rows(q);
  return 2 * Workspace::aligned(rows * 4) + (atomic_dq ? Workspace::aligned(rows * q.shape[3] * 4) : 0);
}

// The TMA view of dq_accum for the kernels that add dQ by TMA (AttentionBackwardTmaParams): 3-d
// (head_dim, n_q, batch·heads_q), fp32, boxes of 32 columns by 64 rows.
void fill_dq_map(AttentionBackwardTmaParams& tp, const AttentionBackwardCall& call) {
  TiledTensorMap m;
  m.base = tp.a.dq_accum;
  m.rank = 3;
  m.element = TiledTensorMap::Element::f32;
  // The tensors' rows (a packed batch: one physical batch of every sequence's rows).
  const std::uint64_t d = static_cast<std::uint64_t>(call.spec.head_dim), n_q = static_cast<std::uint64_t>(call.rows.n_q);
  m.dims[0] = d, m.dims[1] = n_q, m.dims[2] = static_cast<std::uint64_t>(call.rows.batch) * call.rows.heads_q;
  m.strides_bytes[0] = d * 4, m.strides_bytes[1] = d * n_q * 4;
  m.box[0] = 32, m.box[1] = 64, m.box[2] = 1;
  gpu_driver().encode_tensor_map(&tp.dq_map, m, "cuTensorMapEncodeTiled(attention_bwd dq_accum)");
}

// A variant's inputs for its kernels: with mask tensors, their range tables built into `ranges`,
// stream-ordered beside the caller's workspace (whose size the workspace queries give from q alone).
VariantArgs variant_launch_args(const AttentionBackwardCall& call, std::optional<Workspace>& ranges, void* stream) {
  VariantArgs args = call.variant.args;
  if (!call.variant.ranges.empty()) {
    ranges.emplace(nullptr, 0, variant_range_bytes(call.variant.ranges), call.device, stream, "the variant's range tables");
    build_variant_ranges(call.variant.ranges, args, *ranges, call.device, stream);
  }
  return args;
}

// `loads`: with a wgmma config's tma_loads, the TMA views of q and d_o (tiled_map, boxes of its
// query_rows rows).
void launch_backward_kernels(const AttentionBackwardCall& call, const AttentionBackwardConfig& config,
                             const std::vector<BackwardKernel>& kernels, AttentionBackwardParams& p,
                             const TiledTensorMap (&loads)[2], void* stream) {
  use_primary_context(call.device);
  AttentionBackwardTmaParams tp;
  // The decoupled kernel's forms with tensor maps, when the atomic kernel runs (deterministic
  // mode: no dq_accum).
  const BackwardWgmmaConfig* wg = config.as<BackwardWgmmaConfig>();
  const bool dq_map = attention_backward_dq_by_tma(call.spec, config);
  const bool maps = wg && (dq_map || wg->tma_loads || wg->group_splits != 1) && p.dq_accum;
  if (maps) {
    tp.a = p;
    if (dq_map) fill_dq_map(tp, call);
    if (wg->tma_loads) {
      gpu_driver().encode_tensor_map(&tp.q_map, loads[0], "cuTensorMapEncodeTiled(attention_bwd q)");
      gpu_driver().encode_tensor_map(&tp.do_map, loads[1], "cuTensorMapEncodeTiled(attention_bwd d_o)");
    }
  }
  const int sm_count = device_info(call.device).sm_count;
  // A variant: its gradient buffers zeroed before the kernels add into them, its kernels under
  // their own op name, its inputs as the second parameter, and the sinks' kernel after preprocess.
  std::optional<Workspace> range_ws;
  VariantArgs variant_args = variant_launch_args(call, range_ws, stream);
  const bool variant = call.variant.active();
  for (const auto& [ptr, bytes] : call.variant.grads)
    gpu_driver().fill32_async(reinterpret_cast<DevicePtr>(ptr), 0, bytes / 4, stream);
  auto launch = [&](BackwardKernel kernel) {
    const KernelKey key{variant                    ? call.variant.op_name
                        : call.spec.head_dim_v > 0 ? attention_head_dim_v_op("attention_bwd", call.spec.head_dim_v)
                                                   : std::string_view("attention_bwd"),
                        gradient_kernel_key(call.spec, config, int(kernel)), call.device};
    const LoadedKernel& k = loaded_kernel(key, [&] { return render_attention_backward(call.spec, config, kernel); });
    void* params = maps && kernel == BackwardKernel::kv_atomic ? static_cast<void*>(&tp) : static_cast<void*>(&p);
    // The row-wise kernels walk the tensors' rows, the others the sequences (the same for dense batches).
    const bool row_wise = kernel == BackwardKernel::preprocess || kernel == BackwardKernel::dq_convert ||
                          kernel == BackwardKernel::dkv_convert;
    // A packed batch: the warp-specialised key-major kernel on its compact grid.
    std::optional<LaunchGrid> grid;
    if (call.spec.packed)
      grid = attention_backward_packed_grid(config, kernel, call.rows.n_k, call.shape.batch, call.shape.heads_kv);
    if (!grid) grid = attention_backward_grid(config, kernel, row_wise ? call.rows : call.shape, call.spec.head_dim, sm_count);
    launch_kernel(k, *grid, params, variant ? &variant_args : nullptr, stream, "launch(attention_bwd)");
  };
  for (BackwardKernel kernel : kernels) {
    launch(kernel);
    // The sinks' gradient needs preprocess's rows.
    if (kernel == BackwardKernel::preprocess && call.spec.sinks) launch(BackwardKernel::sinks);
  }
}

}  // namespace

// 64 bits in all: a field added needs another narrowed (tests/runtime/ops/kernel_key_test.cpp).
std::uint64_t gradient_kernel_key(const AttentionBackwardSpec& s, const AttentionBackwardConfig& c, int kernel) {
  KeyPacker k;
  k.add(int(s.dtype), 4).add(s.head_dim, 10).add(s.causal, 1).add(kernel, 4).add(static_cast<int>(c.form.index()), 3);
  if (const auto* f = c.as<BackwardFa2Config>()) k.add(f->query_rows, 8).add(f->keys, 9).add(f->warps, 5);
  if (const auto* wg = c.as<BackwardWgmmaConfig>()) {
    k.add(wg->query_rows, 8).add(wg->keys, 9).add(wg->column_splits, 2).add(wg->async_wgs, 2).add(wg->tma_dq, 1);
    k.add(wg->tma_loads, 1).add(std::countr_zero(static_cast<unsigned>(wg->group_splits)), 2);
    k.add(wg->warp_specialised, 1).add(wg->persistent, 1);
  }
  if (const auto* simt = c.as<BackwardSimtConfig>()) k.add(simt->warps, 8).add(simt->max_head_dim, 10);
  if (const auto* m = c.as<BackwardMfmaConfig>()) k.add(m->query_rows, 8).add(m->keys, 9).add(m->waves, 5).add(m->column_splits, 2);
  if (const auto* f = c.as<DoubleBackwardFa2Config>()) k.add(f->rows, 8).add(f->tile, 9).add(f->warps, 5);
  if (const auto* wg = c.as<DoubleBackwardWgmmaConfig>()) k.add(wg->tile, 8).add(wg->rows, 9).add(wg->column_splits, 2);
  return k.value();
}

namespace {

// The backward and the double backward: one config type, their own validity rules, defaults
// and tuning problems.
struct GradientOp {
  bool double_backward;
  const char* example;  // configs named in the parse error
  std::optional<AttentionBackwardConfig> (*parse)(const std::string&);  // the op's reading of a config
};
constexpr GradientOp kBackward{false, "fa2:bm64:bn128:w8, wg:bm64:bn128 or simt:w4:dmax128",
                               parse_attention_backward_config};
constexpr GradientOp kDoubleBackward{true, "fa2:bm64:bn32:w4 or simt:w4:dmax128", parse_attention_double_backward_config};

std::optional<std::string> check_config(const GradientOp& op, const AttentionBackwardSpec& spec,
                                        const AttentionBackwardConfig& c, const Target& target) {
  return op.double_backward ? check_attention_double_backward_config(spec, c, target)
                            : check_attention_backward_config(spec, c, target);
}

AttentionBackwardConfig explicit_config(const GradientOp& op, const AttentionBackwardCall& call,
                                        const AttentionBackwardOptions& options, const Target& target) {
  auto c = op.parse(options.config);
  if (!c) invalid_argument("config: cannot parse '" + options.config + "' (e.g. " + op.example + ")");
  if (auto why = check_config(op, call.spec, *c, target))
    invalid_argument("config: " + options.config + " is invalid here: " + *why);
  if (!c->as<BackwardSimtConfig>() && !call.aligned16)
    invalid_argument("config: " + options.config + " needs 16-byte aligned pointers and strides that are multiples of 16 bytes");
  if (c->as<BackwardWgmmaConfig>() && call.spec.has_variant() && options.deterministic && !op.double_backward)
    invalid_argument("config: " + options.config +
                     " serves a variant's or packed batch's atomic mode only; the deterministic mode runs fa2: or simt:");
  return *c;
}

// The heuristic's config of a variant or packed batch, for the call's mode.
AttentionBackwardConfig variant_default(const GradientOp& op, const AttentionBackwardCall& call, bool deterministic,
                                        const Target& target, int sm_count) {
  if (op.double_backward) return attention_double_backward_default_config(call.spec, call.shape, target, sm_count);
  return attention_backward_variant_config(
      call.spec, attention_backward_default_config(call.spec, call.shape, target, sm_count), call.shape, sm_count,
      deterministic, true);
}

AttentionBackwardConfig decide(const GradientOp& op, const AttentionBackwardCall& call,
                               const AttentionBackwardOptions& options, const DecisionContext& ctx) {
  if (!options.config.empty()) return explicit_config(op, call, options, ctx.target);
  if (!call.aligned16) return attention_backward_general_config(call.spec);
  // Variants and v head dims of their own run the heuristic's config (the tuner and its database
  // serve plain attention of one head dim).
  if (call.spec.has_variant() || call.spec.head_dim_v > 0)
    return variant_default(op, call, options.deterministic, ctx.target, ctx.sm_count);
  AttentionCase c;
  c.dtype = call.spec.dtype, c.head_dim = call.spec.head_dim, c.causal = call.spec.causal;
  c.batch = call.shape.batch, c.heads_q = call.shape.heads_q, c.heads_kv = call.shape.heads_kv;
  c.n_q = call.shape.n_q, c.n_k = call.shape.n_k;
  auto problem = op.double_backward ? attention_double_backward_tuning(c)
                                    : attention_backward_tuning(c, options.deterministic);
  DecisionRequest request;
  request.problem = problem.get();
  request.invalid = [&](const std::string& text) -> std::optional<std::string> {
    auto config = op.parse(text);
    if (!config) return "cannot parse '" + text + "'";
    return check_config(op, call.spec, *config, ctx.target);
  };
  request.heuristic = [&] {
    return to_string(op.double_backward ? attention_double_backward_default_config(call.spec, call.shape, ctx.target, ctx.sm_count)
                                        : attention_backward_default_config(call.spec, call.shape, ctx.target, ctx.sm_count));
  };
  return op.parse(decide_config(request, ctx).config).value();
}

// decide() through the op's per-process table (explicit configs and unaligned views skip it).
AttentionBackwardConfig decide_cached(const GradientOp& op, const AttentionBackwardCall& call,
                                      const AttentionBackwardOptions& options) {
  if (!options.config.empty()) return explicit_config(op, call, options, device_info(call.device).target);
  if (!call.aligned16) return attention_backward_general_config(call.spec);
  static DecisionTable<AttentionBackwardConfig> tables[2];
  const AttentionShape& s = call.shape;
  const bool deterministic = options.deterministic && !op.double_backward;
  const int sm_count = device_info(call.device).sm_count;
  const int shape_class = op.double_backward ? attention_double_backward_shape_class(s, sm_count)
                                             : attention_backward_shape_class(s, sm_count);
  const DecisionKey key{KeyPacker().add(int(call.spec.dtype), 4).add(call.spec.head_dim, 10).add(call.spec.causal, 1)
                            .add(deterministic, 1).add(call.variant.id, 24).add(call.spec.head_dim_v, 10).value(),
                        attention_bucket(s).values,
                        call.device, shape_class};
  return tables[op.double_backward].get(key, [&] { return decide(op, call, options, decision_context(call.device)); });
}

// decide_cached(), and a note the first time a variant lands on the general path.
AttentionBackwardConfig decide_and_note(const GradientOp& op, const AttentionBackwardCall& call,
                                        const AttentionBackwardOptions& options) {
  const AttentionBackwardConfig config = decide_cached(op, call, options);
  if (config.as<BackwardSimtConfig>() && options.config.empty())
    note_general_path(op.double_backward ? "attention_double_bwd" : "attention_bwd",
                      op.double_backward ? double_backward_variant_key(call.spec)
                                         : attention_backward_variant_key(call.spec, options.deterministic),
                      general_path_reason(call.spec.dtype, call.spec.head_dim, call.aligned16));
  return config;
}

}  // namespace

AttentionBackwardConfig choose_attention_backward_config(const AttentionBackwardCall& call,
                                                         const AttentionBackwardOptions& options) {
  return decide_and_note(kBackward, call, options);
}

AttentionBackwardConfig choose_attention_backward_config(const AttentionBackwardCall& call,
                                                         const AttentionBackwardOptions& options,
                                                         const DecisionContext& context) {
  return decide(kBackward, call, options, context);
}

AttentionBackwardConfig choose_attention_double_backward_config(const AttentionBackwardCall& call,
                                                                const AttentionBackwardOptions& options) {
  return decide_and_note(kDoubleBackward, call, options);
}

AttentionBackwardConfig choose_attention_double_backward_config(const AttentionBackwardCall& call,
                                                                const AttentionBackwardOptions& options,
                                                                const DecisionContext& context) {
  return decide(kDoubleBackward, call, options, context);
}

std::size_t attention_backward_workspace_bytes(const TensorView& q, const AttentionBackwardOptions& options) {
  check_workspace_query(q);
  return backward_workspace_bytes(q, !options.deterministic);
}

namespace {

void backward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& o, const TensorView& lse,
              const TensorView& d_o, const TensorView& dq, const TensorView& dk, const TensorView& dv,
              const AttentionBackwardOptions& options, void* stream, const PackedSequences* packed);

}  // namespace

void attention_backward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& o,
                        const TensorView& lse, const TensorView& d_o, const TensorView& dq, const TensorView& dk,
                        const TensorView& dv, const AttentionBackwardOptions& options, void* stream) {
  backward(q, k, v, o, lse, d_o, dq, dk, dv, options, stream, nullptr);
}

std::size_t attention_varlen_backward_workspace_bytes(const TensorView& q, const AttentionBackwardOptions& options) {
  check_shape(q, "q", 3);
  TensorView q4 = q;
  q4.ndim = 4, q4.shape[0] = 1, q4.shape[1] = q.shape[1], q4.shape[2] = q.shape[0], q4.shape[3] = q.shape[2];
  return attention_backward_workspace_bytes(q4, options);
}

void attention_varlen_backward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& o,
                               const TensorView& lse, const TensorView& d_o, const TensorView& dq, const TensorView& dk,
                               const TensorView& dv, const PackedSequences& sequences,
                               const AttentionBackwardOptions& options, void* stream) {
  const PackedViews views = packed_views(q, k, v, o, &lse);
  backward(views.q, views.k, views.v, views.o, views.lse, packed_view(d_o, "d_o", &q, "q"), packed_view(dq, "dq", &q, "q"),
           packed_view(dk, "dk", &k, "k"), packed_view(dv, "dv", &k, "k"), options, stream, &sequences);
}

namespace {

void backward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& o, const TensorView& lse,
              const TensorView& d_o, const TensorView& dq, const TensorView& dk, const TensorView& dv,
              const AttentionBackwardOptions& options, void* stream, const PackedSequences* packed) {
  AttentionBackwardCall call = validate_inputs(q, k, v, o, lse, d_o, options, false, packed);
  check_output(dq, "dq", q, "q", call);
  check_output(dk, "dk", k, "k", call);
  if (call.spec.head_dim_v > 0) check_output(dv, "dv", v, "v", call);
  else check_output(dv, "dv", k, "k", call);
  end_of_validation();
  AttentionBackwardConfig config = choose_attention_backward_config(call, options);
  std::vector<BackwardKernel> kernels = attention_backward_kernels(config, options.deterministic);
  const bool atomic = std::ranges::find(kernels, BackwardKernel::kv_atomic) != kernels.end();
  // An expanded (stride-0) view has no tensor map: a kernel with cp.async loads serves it.
  TiledTensorMap loads[2];
  if (const auto* wg = config.as<BackwardWgmmaConfig>();
      wg && wg->tma_loads && atomic &&
      !(tiled_map(q, wg->query_rows, loads[0]) && tiled_map(d_o, wg->query_rows, loads[1]))) {
    if (!options.config.empty())
      invalid_argument("config: " + options.config +
                       " loads Q and dO by TMA (l), which needs views without zero strides; leave out :l");
    const AttentionBackwardConfig chosen = config;
    config = call.spec.has_variant() ? attention_backward_variant_config(call.spec, config, call.shape,
                                                                         device_info(call.device).sm_count, false, false)
                                     : attention_backward_config_without_tma_loads(call.spec, config);
    kernels = attention_backward_kernels(config, options.deterministic);
    const std::string variant = attention_backward_variant_key(call.spec, options.deterministic);
    note_once(variant + " " + to_string(chosen) + " no tensor map",
              variant + ": q or d_o has a zero stride (no tensor map), so " + to_string(config) +
                  " runs in place of " + to_string(chosen));
  }

  // Group splits need a group the split divides (else the blocks run unsplit) and the atomic mode.
  if (auto* wg = config.as<BackwardWgmmaConfig>();
      wg && wg->group_splits != 1 && (!atomic || call.shape.heads_q / call.shape.heads_kv % wg->group_splits != 0)) {
    wg->group_splits = 1;
    kernels = attention_backward_kernels(config, options.deterministic);
  }

  AttentionBackwardParams p = base_params(call, q, k, v, o, lse, d_o, options.scale);
  p.dq = arg(&dq), p.dk = arg(&dk), p.dv = arg(&dv);
  Workspace ws(options.workspace, options.workspace_bytes, backward_workspace_bytes(q, atomic), call.device, stream, "this call");
  const std::size_t rows = stat_rows(q);
  p.lse2 = ws.take(rows * 4);
  p.delta = ws.take(rows * 4);
  p.dq_accum = atomic ? ws.take(rows * q.shape[3] * 4) : nullptr;
  // Group splits: fp32 dK and dV rows, stream-ordered beside the caller's workspace (whose size
  // attention_backward_workspace_bytes gives from q alone).
  std::optional<Workspace> dkv_ws;
  if (const auto* wg = config.as<BackwardWgmmaConfig>(); wg && wg->group_splits != 1) {
    const std::size_t kv_rows = static_cast<std::size_t>(k.shape[0]) * k.shape[1] * k.shape[2];
    const std::size_t dkv_bytes = 2 * kv_rows * k.shape[3] * 4;
    dkv_ws.emplace(nullptr, 0, dkv_bytes, call.device, stream, "group splits");
    p.dkv_accum = dkv_ws->take(dkv_bytes);
  }
  launch_backward_kernels(call, config, kernels, p, loads, stream);
}

}  // namespace

std::size_t attention_double_backward_workspace_bytes(const TensorView& q, const AttentionBackwardOptions&) {
  check_workspace_query(q);
  return 4 * Workspace::aligned(stat_rows(q) * 4);
}

std::size_t attention_varlen_double_backward_workspace_bytes(const TensorView& q, const AttentionBackwardOptions& options) {
  check_shape(q, "q", 3);
  TensorView q4 = q;
  q4.ndim = 4, q4.shape[0] = 1, q4.shape[1] = q.shape[1], q4.shape[2] = q.shape[0], q4.shape[3] = q.shape[2];
  return attention_double_backward_workspace_bytes(q4, options);
}

namespace {

void double_backward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& o,
                     const TensorView& lse, const TensorView& d_o, const TensorView* gq, const TensorView* gk,
                     const TensorView* gv, const TensorView& q_bar, const TensorView& k_bar, const TensorView& v_bar,
                     const TensorView& do_bar, const AttentionBackwardOptions& options, void* stream,
                     const PackedSequences* packed);

}  // namespace

void attention_double_backward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& o,
                               const TensorView& lse, const TensorView& d_o, const TensorView* gq,
                               const TensorView* gk, const TensorView* gv, const TensorView& q_bar,
                               const TensorView& k_bar, const TensorView& v_bar, const TensorView& do_bar,
                               const AttentionBackwardOptions& options, void* stream) {
  double_backward(q, k, v, o, lse, d_o, gq, gk, gv, q_bar, k_bar, v_bar, do_bar, options, stream, nullptr);
}

void attention_varlen_double_backward(const TensorView& q, const TensorView& k, const TensorView& v,
                                      const TensorView& o, const TensorView& lse, const TensorView& d_o,
                                      const TensorView* gq, const TensorView* gk, const TensorView* gv,
                                      const TensorView& q_bar, const TensorView& k_bar, const TensorView& v_bar,
                                      const TensorView& do_bar, const PackedSequences& sequences,
                                      const AttentionBackwardOptions& options, void* stream) {
  const PackedViews views = packed_views(q, k, v, o, &lse);
  TensorView g[3];
  if (gq) g[0] = packed_view(*gq, "gq", &q, "q");
  if (gk) g[1] = packed_view(*gk, "gk", &k, "k");
  if (gv) g[2] = packed_view(*gv, "gv", &k, "k");
  double_backward(views.q, views.k, views.v, views.o, views.lse, packed_view(d_o, "d_o", &q, "q"), gq ? &g[0] : nullptr,
                  gk ? &g[1] : nullptr, gv ? &g[2] : nullptr, packed_view(q_bar, "q_bar", &q, "q"),
                  packed_view(k_bar, "k_bar", &k, "k"), packed_view(v_bar, "v_bar", &k, "k"),
                  packed_view(do_bar, "do_bar", &q, "q"), options, stream, &sequences);
}

namespace {

void double_backward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& o,
                     const TensorView& lse, const TensorView& d_o, const TensorView* gq, const TensorView* gk,
                     const TensorView* gv, const TensorView& q_bar, const TensorView& k_bar, const TensorView& v_bar,
                     const TensorView& do_bar, const AttentionBackwardOptions& options, void* stream,
                     const PackedSequences* packed) {
  AttentionBackwardCall call = validate_inputs(q, k, v, o, lse, d_o, options, true, packed);
  // v's own head dim (MLA): gv and v_bar are shaped like v, do_bar like d_o.
  const bool own_v = call.spec.head_dim_v > 0;
  if (gq) check_output(*gq, "gq", q, "q", call);
  if (gk) check_output(*gk, "gk", k, "k", call);
  if (gv) check_output(*gv, "gv", own_v ? v : k, own_v ? "v" : "k", call);
  check_output(q_bar, "q_bar", q, "q", call);
  check_output(k_bar, "k_bar", k, "k", call);
  check_output(v_bar, "v_bar", own_v ? v : k, own_v ? "v" : "k", call);
  check_output(do_bar, "do_bar", own_v ? d_o : q, own_v ? "d_o" : "q", call);
  end_of_validation();
  const AttentionBackwardConfig config = choose_attention_double_backward_config(call, options);

  AttentionBackwardParams p = base_params(call, q, k, v, o, lse, d_o, options.scale);
  p.gq = arg(gq), p.gk = arg(gk), p.gv = arg(gv);
  p.q_bar = arg(&q_bar), p.k_bar = arg(&k_bar), p.v_bar = arg(&v_bar), p.do_bar = arg(&do_bar);
  Workspace ws(options.workspace, options.workspace_bytes, attention_double_backward_workspace_bytes(q, options), call.device,
               stream, "this call");
  const std::size_t rows = stat_rows(q);
  p.lse2 = ws.take(rows * 4);
  p.delta = ws.take(rows * 4);
  p.row_r = ws.take(rows * 4);
  p.row_c = ws.take(rows * 4);
  const int sm_count = device_info(call.device).sm_count;
  p.stats_splits = attention_double_backward_stats_splits(config, call.shape, sm_count, options.deterministic);
  use_primary_context(call.device);
  // A variant: its kernels under their own op name, its inputs as the second parameter.
  std::optional<Workspace> range_ws;
  VariantArgs variant_args = variant_launch_args(call, range_ws, stream);
  const bool variant = call.variant.active();
  for (DoubleBackwardKernel kernel : attention_double_backward_kernels(config)) {
    const KernelKey key{variant                    ? call.variant.op_name
                        : call.spec.head_dim_v > 0 ? attention_head_dim_v_op("attention_double_bwd", call.spec.head_dim_v)
                                                   : std::string_view("attention_double_bwd"),
                        gradient_kernel_key(call.spec, config, int(kernel)), call.device};
    const LoadedKernel& lk = loaded_kernel(key, [&] { return render_attention_double_backward(call.spec, config, kernel); });
    // The row-wise preprocess walks the tensors' rows, the others the sequences (the same for dense batches).
    const bool row_wise = kernel == DoubleBackwardKernel::preprocess;
    launch_kernel(lk,
                  attention_double_backward_grid(config, kernel, row_wise ? call.rows : call.shape, sm_count,
                                                 options.deterministic, call.spec.head_dim, call.spec.packed),
                  &p, variant && !row_wise ? &variant_args : nullptr, stream, "launch(attention_double_bwd)");
  }
}

}  // namespace

}  // namespace kgen
