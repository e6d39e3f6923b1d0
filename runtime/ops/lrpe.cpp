#include "ops/lrpe.h"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <utility>

#include "jit/kernel_table.h"
#include "ops/buckets.h"
#include "ops/tensor_checks.h"
#include "ops/workspace.h"
#include "tuning/tuning_decision.h"
#include "ops/lrpe_tuning.h"
#include "ops/validate_only.h"

namespace kgen {
namespace {

constexpr std::int64_t kMaxGridYZ = 65535;
constexpr std::int64_t kMaxExactPosition = 1LL << 24;  // positions stay exact in fp32

std::string dtype_text(DType t) { return std::string(dtype_name(t)); }

// The (batch, heads, n, width) view of a 4-d tensor, or of a 3-d (batch, n, width) one as a
// single head; reads only ndim, shape and strides.
TensorView as4(const TensorView& t) {
  if (t.ndim == 4) return t;
  TensorView v = t;
  v.ndim = 4;
  v.shape[0] = t.shape[0], v.shape[1] = 1, v.shape[2] = t.shape[1], v.shape[3] = t.shape[2];
  v.strides[0] = t.strides[0], v.strides[1] = 0, v.strides[2] = t.strides[1], v.strides[3] = t.strides[2];
  return v;
}

// as4 of a tensor that passes check_view.
TensorView logical4(const TensorView& t, const char* name) {
  check_view(t, name, t.ndim == 4 ? 4 : 3);
  return as4(t);
}

// x's ndim, sizes, head dim and kgen's launch limits (its shape only): what every lrpe call and
// workspace size needs of x.
void check_x_shape(const TensorView& x_in) {
  if (x_in.ndim != 3 && x_in.ndim != 4)
    invalid_argument("x: expected (batch, heads, n, d) or (batch, n, d), got " + std::to_string(x_in.ndim) + " dimensions");
  check_shape(x_in, "x", x_in.ndim);
  const TensorView x = as4(x_in);
  const std::int64_t b = x.shape[0], h = x.shape[1], n = x.shape[2], d = x.shape[3];
  if (d > kLrpeMaxHeadDim)
    invalid_argument("x: head dim d=" + std::to_string(d) + " is unsupported (kgen serves d <= " +
                     std::to_string(kLrpeMaxHeadDim) + ")");
  if (b > kMaxGridYZ || h > kMaxGridYZ || n >= (1LL << 31))
    invalid_argument("x: shape " + shape_string(x_in) + " exceeds kgen's launch limits (batch, heads <= 65535, n < 2^31)");
}

void check_like(const TensorView& t, const char* name, const TensorView& x, std::int64_t width, const char* what) {
  for (int i = 0; i < 3; ++i)
    if (t.shape[i] != x.shape[i] || t.shape[3] != width)
      invalid_argument(std::string(name) + ": shape " + shape_string(t) + " must be " + what + " (x is " +
                       shape_string(x) + ")");
  if (t.dtype != x.dtype)
    invalid_argument(std::string(name) + ": dtype " + dtype_text(t.dtype) + " differs from x's " + dtype_text(x.dtype));
  if (t.device != x.device)
    invalid_argument(std::string(name) + ": on device " + std::to_string(t.device) + ", x is on device " +
                     std::to_string(x.device));
}

// Strides of the kernel parameters for a logical (b, h, n, ·) view.
void set_strides(long long& sb, long long& sh, long long& sn, const TensorView& t) {
  sb = t.strides[0], sh = t.strides[1], sn = t.strides[2];
}

// lrpe's packing of its kernel identity (spec and config) for runtime/jit/kernel_table.
std::uint64_t lrpe_kernel_key(const LrpeSpec& s, const LrpeConfig& c) {
  KeyPacker k;
  k.add(int(s.direction), 3).add(int(s.dtype), 3).add(int(s.act), 3).add(c.strategy == LrpeStrategy::bp, 1);
  k.add(c.threads, 11).add(c.rows, 4).add(c.vec, 6).add(c.cache, 1).add(c.fold, 6).add(c.occupancy, 5);
  return k.value();
}

// The apply and (softmax over the sequence) statistics kernels of a config, and how many blocks
// of them fit on one SM at once (they share the grid: the smaller of the two).
struct ResolvedKernels {
  LoadedKernel apply, stats;
  int resident_blocks_per_sm = 1;
};

ResolvedKernels resolve_kernels(const LrpeSpec& spec, const LrpeConfig& config, int device) {
  const KernelKey key{lrpe_op_name(spec.op), lrpe_kernel_key(spec, config), device};
  auto render = [&] { return render_lrpe(spec, config); };
  ResolvedKernels k;
  k.apply = loaded_kernel(key, render);
  k.resident_blocks_per_sm = k.apply.resident_blocks_per_sm;
  if (spec.act == LrpeAct::softmax_seq) {
    const EntryPoint stats{kLrpeStatsEntry, 0};
    k.stats = loaded_kernel({"lrpe statistics", key.packed * 2 + (spec.op == LrpeOp::md_cosine), device}, render, &stats);
    k.resident_blocks_per_sm = std::min(k.resident_blocks_per_sm, k.stats.resident_blocks_per_sm);
  }
  return k;
}

void launch(const LoadedKernel& k, const LaunchGrid& grid, LrpeParams& params, GpuStream stream, const char* what) {
  launch_kernel(k, grid, &params, stream, what);
}

}  // namespace

LrpeRequest lrpe_request(LrpeDirection direction, const LrpeOptions& o) {
  LrpeRequest r;
  r.op = LrpeOp::cosine, r.direction = direction, r.act = o.act, r.offset = o.offset;
  r.config = o.config, r.workspace = o.workspace, r.workspace_bytes = o.workspace_bytes;
  return r;
}

LrpeRequest md_lrpe_request(LrpeDirection direction, const MdLrpeOptions& o) {
  LrpeRequest r;
  r.op = LrpeOp::md_cosine, r.direction = direction, r.act = o.act, r.dims = o.dims, r.extra = o.extra;
  for (int j = 0; j < 3; ++j) r.grid[j] = o.grid[j];
  r.config = o.config, r.workspace = o.workspace, r.workspace_bytes = o.workspace_bytes;
  return r;
}

LrpeLaunch validate_lrpe(const LrpeRequest& r, const TensorView& x_in, const TensorView& theta, const TensorView* d_o_in,
                         const TensorView& out_in, const TensorView* angles) {
  const bool fwd = r.direction == LrpeDirection::forward;
  if (static_cast<int>(r.act) < 0 || static_cast<int>(r.act) > static_cast<int>(LrpeAct::softmax_seq))
    invalid_argument("act: unknown activation " + std::to_string(static_cast<int>(r.act)));
  check_x_shape(x_in);
  const TensorView x = logical4(x_in, "x");
  const std::int64_t b = x.shape[0], h = x.shape[1], n = x.shape[2], d = x.shape[3];
  TensorView d_o;
  if (!fwd) {
    if (!d_o_in) invalid_argument("d_o: is null");
    if (d_o_in->ndim != x_in.ndim)
      invalid_argument("d_o: has " + std::to_string(d_o_in->ndim) + " dimensions, x has " + std::to_string(x_in.ndim));
    d_o = logical4(*d_o_in, "d_o");
    check_like(d_o, "d_o", x, 2 * d, "x's with 2d features");
  }
  const char* out_name = fwd ? "o" : "dx";
  if (out_in.ndim != x_in.ndim)
    invalid_argument(std::string(out_name) + ": has " + std::to_string(out_in.ndim) + " dimensions, x has " +
                     std::to_string(x_in.ndim));
  const TensorView out = logical4(out_in, out_name);
  check_like(out, out_name, x, fwd ? 2 * d : d, fwd ? "x's with 2d features" : "x's");

  // theta: fp32 (heads | 1, width | 1); any strides.
  const bool md = r.op == LrpeOp::md_cosine;
  if (!theta.data) invalid_argument("theta: data pointer is null");
  if (theta.ndim != 2) invalid_argument("theta: expected 2 dimensions (heads or 1, features), got " + std::to_string(theta.ndim));
  if (theta.dtype != DType::f32) invalid_argument("theta: dtype must be fp32, got " + dtype_text(theta.dtype));
  if (theta.device != x.device) invalid_argument("theta: not on x's device");
  if (reinterpret_cast<std::uintptr_t>(theta.data) % 4) invalid_argument("theta: data pointer is not aligned to 4 bytes");
  if (theta.strides[0] < 0 || theta.strides[1] < 0) invalid_argument("theta: negative strides are not supported");
  if (theta.shape[0] != 1 && theta.shape[0] != h)
    invalid_argument("theta: shape " + shape_string(theta) + " must have 1 or heads=" + std::to_string(h) + " rows");
  if (!md && theta.shape[1] != 1 && theta.shape[1] != d)
    invalid_argument("theta: shape " + shape_string(theta) + " must have 1 or d=" + std::to_string(d) + " columns");

  LrpeLaunch l;
  l.spec = {r.op, r.direction, x.dtype, r.act};
  l.shape = {static_cast<int>(b), static_cast<int>(h), static_cast<int>(n), static_cast<int>(d), theta.shape[0] == 1};
  l.device = x.device;
  LrpeParams& p = l.params;
  std::memset(&p, 0, sizeof p);
  p.x = x.data, p.d_o = fwd ? nullptr : d_o.data, p.out = out.data;
  p.theta = static_cast<const float*>(theta.data);
  set_strides(p.x_stride_b, p.x_stride_h, p.x_stride_n, x);
  if (!fwd) set_strides(p.do_stride_b, p.do_stride_h, p.do_stride_n, d_o);
  set_strides(p.out_stride_b, p.out_stride_h, p.out_stride_n, out);
  p.theta_stride_h = theta.shape[0] == 1 ? 0 : theta.strides[0];
  p.theta_stride_k = theta.shape[1] == 1 ? 0 : theta.strides[1];
  p.batch = l.shape.batch, p.heads = l.shape.heads, p.n = l.shape.n, p.d = l.shape.d;

  if (!md) {
    // Compared without negating the offset, which would overflow for INT64_MIN.
    if (r.offset >= kMaxExactPosition - n || r.offset <= n - kMaxExactPosition)
      invalid_argument("offset: |offset| + n must stay below 2^24 (positions are exact fp32 integers), got offset " +
                       std::to_string(r.offset) + " with n=" + std::to_string(n));
    if (angles) invalid_argument("angles: the angle cache exists for md_lrpe_cosine only");
    p.offset = r.offset;
  } else {
    if (r.dims < 1 || r.dims > 3) invalid_argument("dims: the grid must have 1, 2 or 3 dimensions, got " + std::to_string(r.dims));
    if (r.extra < 0) invalid_argument("extra: the number of extra tokens l must be >= 0, got " + std::to_string(r.extra));
    std::int64_t cells = 1;
    std::string sizes;
    for (int j = 0; j < r.dims; ++j) {
      if (r.grid[j] < 1 || r.grid[j] >= kMaxExactPosition)
        invalid_argument("grid: size " + std::to_string(r.grid[j]) + " of dim " + std::to_string(j) + " must be in 1..2^24");
      cells *= r.grid[j];
      if (cells > n) break;
      sizes += (j ? "×" : "") + std::to_string(r.grid[j]);
    }
    if (r.extra + cells != n)
      invalid_argument("grid: l + Π grid = " + std::to_string(r.extra) + " + " + (cells > n ? "more than n" : sizes) +
                       " must equal x's n=" + std::to_string(n));
    const std::int64_t e = theta.shape[1];
    if (e * r.dims < d)
      invalid_argument("theta: e=" + std::to_string(e) + " frequencies per dim × m=" + std::to_string(r.dims) +
                       " dims must cover d=" + std::to_string(d));
    p.extra = r.extra, p.e = static_cast<int>(e), p.dims = r.dims;
    for (int j = 0; j < r.dims; ++j) p.grid[j] = static_cast<int>(r.grid[j]);
    if (angles) {
      check_view(*angles, "angles", 3);
      if (angles->dtype != DType::f32) invalid_argument("angles: dtype must be fp32, got " + dtype_text(angles->dtype));
      if (angles->device != x.device) invalid_argument("angles: not on x's device");
      if (angles->shape[0] != h || angles->shape[1] != n || angles->shape[2] != d || angles->strides[1] != d ||
          angles->strides[0] != n * d)
        invalid_argument("angles: must be a contiguous fp32 (heads, n, d) = (" + std::to_string(h) + ", " +
                         std::to_string(n) + ", " + std::to_string(d) + ") tensor, got " + shape_string(*angles));
      p.angles = static_cast<float*>(angles->data);
    }
  }
  const bool reads_x = fwd || r.act != LrpeAct::none;
  bool aligned = aligned16(out) && (fwd || aligned16(d_o)) && (!reads_x || aligned16(x));
  if (angles) aligned = aligned && aligned16(*angles);
  p.vectorized = aligned;  // and d % vec == 0, added once the config is known
  return l;
}

namespace {

LrpeConfig explicit_config(const LrpeRequest& r, const LrpeSpec& spec, const LrpeShape& shape, bool cache) {
  auto c = parse_lrpe_config(r.config);
  if (!c) invalid_argument("config: cannot parse '" + r.config + "' (e.g. sp:t256:r4:v8, bp:t256:r1:v8:b4, sp:t256:r4:v8:cache)");
  if (auto why = check_lrpe_config_for_shape(spec, *c, shape)) invalid_argument("config: " + r.config + " is invalid here: " + *why);
  if (c->cache != cache)
    invalid_argument("config: " + r.config + (cache ? " lacks ':cache' but angles were given" : " uses the angle cache but no angles were given"));
  return *c;
}

}  // namespace

LrpeConfig choose_lrpe_config(const LrpeRequest& r, const LrpeSpec& spec, const LrpeShape& shape, bool cache,
                              const DecisionContext& ctx) {
  if (!r.config.empty()) return explicit_config(r, spec, shape, cache);
  LrpeCase c;
  c.op = spec.op, c.direction = spec.direction, c.dtype = spec.dtype, c.act = spec.act;
  c.batch = shape.batch, c.heads = shape.heads, c.n = shape.n, c.d = shape.d;
  c.offset = r.offset, c.extra = r.extra, c.cache = cache;
  if (spec.op == LrpeOp::md_cosine) c.grid.assign(r.grid, r.grid + std::clamp(r.dims, 0, 3));
  auto problem = lrpe_tuning(c);
  DecisionRequest request;
  request.problem = problem.get();
  request.invalid = [&](const std::string& text) { return problem->check_config(text, ctx.target); };
  request.heuristic = [&] { return to_string(lrpe_default_config(spec, shape, cache)); };
  return parse_lrpe_config(decide_config(request, ctx).config).value();
}

LrpeConfig choose_lrpe_config(const LrpeRequest& r, const LrpeSpec& spec, const LrpeShape& shape, bool cache,
                              int device) {
  if (!r.config.empty()) return explicit_config(r, spec, shape, cache);
  static DecisionTable<LrpeConfig> decisions;
  const DecisionKey key{KeyPacker().add(int(spec.op), 3).add(int(spec.direction), 3).add(int(spec.dtype), 3)
                            .add(int(spec.act), 3).add(cache, 1).value(),
                        lrpe_bucket(shape, spec.op == LrpeOp::md_cosine ? r.dims : 0).values,
                        device};
  return decisions.get(key, [&] { return choose_lrpe_config(r, spec, shape, cache, decision_context(device)); });
}

LrpeLaunch prepare_lrpe(const LrpeRequest& r, const TensorView& x, const TensorView& theta, const TensorView* d_o,
                        const TensorView& out, const TensorView* angles) {
  LrpeLaunch l = validate_lrpe(r, x, theta, d_o, out, angles);
  end_of_validation();
  l.config = choose_lrpe_config(r, l.spec, l.shape, angles != nullptr, l.device);
  l.params.vectorized = l.params.vectorized && l.shape.d % l.config.vec == 0;
  const ResolvedKernels kernels = resolve_kernels(l.spec, l.config, l.device);
  l.apply = kernels.apply, l.stats = kernels.stats;
  l.plan = lrpe_launch_plan(l.config, l.shape, device_info(l.device).sm_count, kernels.resident_blocks_per_sm,
                            lrpe_stats_fold(l.spec, l.config));
  l.params.fold_heads = l.plan.fold_heads;
  l.params.row_group = l.plan.row_group;
  l.params.row_group_log2 = l.plan.row_group_log2;
  l.params.rows_per_block = l.plan.rows_per_block;
  l.stats_bytes = lrpe_stats_floats(l.spec, l.shape, l.plan) * sizeof(float);
  return l;
}

void launch_lrpe(LrpeLaunch& l, void* workspace, std::size_t workspace_bytes, void* stream) {
  use_primary_context(l.device);
  LrpeParams params = l.params;
  if (l.stats_bytes == 0) {
    launch(l.apply, l.plan.grid, params, stream, "launch(lrpe)");
    return;
  }
  Workspace scratch(workspace, workspace_bytes, l.stats_bytes, l.device, stream, "softmax over the sequence");
  params.stats = scratch.take(l.stats_bytes);
  launch(l.stats, l.plan.stats_grid, params, stream, "launch(lrpe statistics)");
  launch(l.apply, l.plan.grid, params, stream, "launch(lrpe)");
}

// --- public API ---------------------------------------------------------------------------------

void lrpe_cosine_forward(const TensorView& x, const TensorView& theta, const TensorView& o, const LrpeOptions& options,
                         void* stream) {
  LrpeLaunch l = prepare_lrpe(lrpe_request(LrpeDirection::forward, options), x, theta, nullptr, o, nullptr);
  launch_lrpe(l, options.workspace, options.workspace_bytes, stream);
}

void lrpe_cosine_backward(const TensorView& x, const TensorView& theta, const TensorView& d_o, const TensorView& dx,
                          const LrpeOptions& options, void* stream) {
  LrpeLaunch l = prepare_lrpe(lrpe_request(LrpeDirection::backward, options), x, theta, &d_o, dx, nullptr);
  launch_lrpe(l, options.workspace, options.workspace_bytes, stream);
}

void md_lrpe_cosine_forward(const TensorView& x, const TensorView& theta, const TensorView& o, const TensorView* angles,
                            const MdLrpeOptions& options, void* stream) {
  LrpeLaunch l = prepare_lrpe(md_lrpe_request(LrpeDirection::forward, options), x, theta, nullptr, o, angles);
  launch_lrpe(l, options.workspace, options.workspace_bytes, stream);
}

void md_lrpe_cosine_backward(const TensorView& x, const TensorView& theta, const TensorView& d_o, const TensorView& dx,
                             const TensorView* angles, const MdLrpeOptions& options, void* stream) {
  LrpeLaunch l = prepare_lrpe(md_lrpe_request(LrpeDirection::backward, options), x, theta, &d_o, dx, angles);
  launch_lrpe(l, options.workspace, options.workspace_bytes, stream);
}

std::size_t lrpe_workspace_bytes(const TensorView& x, LrpeAct act, bool backward) {
  check_x_shape(x);
  if (act != LrpeAct::softmax_seq) return 0;
  const TensorView v = logical4(x, "x");  // the device's SM count bounds the splits
  LrpeShape shape{static_cast<int>(v.shape[0]), static_cast<int>(v.shape[1]), static_cast<int>(v.shape[2]),
                  static_cast<int>(v.shape[3])};
  LrpeLaunchPlan bound;
  bound.splits = lrpe_max_splits(shape, device_info(x.device).sm_count);
  LrpeSpec spec{LrpeOp::cosine, backward ? LrpeDirection::backward : LrpeDirection::forward, v.dtype, act};
  return lrpe_stats_floats(spec, shape, bound) * sizeof(float);
}

}  // namespace kgen
