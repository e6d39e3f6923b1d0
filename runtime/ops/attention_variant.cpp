#include "ops/attention_variant.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <bit>
#include <tuple>
#include <deque>
#include <map>
#include <mutex>
#include <unordered_map>

#include "generator/target.h"
#include "generator/variant.h"
#include "generator/variant_ranges.h"
#include "jit/kernel_table.h"
#include "kgen_device/attention/variant_ranges_params.h"
#include "kgen_device/core/expr_interval.h"
#include "ops/workspace.h"
#include "ops/tensor_checks.h"
#include "ops/validate_only.h"
#include "driver/device.h"
#include "driver/gpu_driver.h"

namespace kgen {
namespace {

// A variant tensor: device memory on q's device, `dtype`, `ndim` dimensions, strides >= 0,
// aligned to its element.
void check_variant_tensor(const TensorView& t, const std::string& name, DType dtype, int ndim, int device) {
  if (!t.data) invalid_argument(name + ": data pointer is null");
  if (t.device != device)
    invalid_argument(name + ": on device " + std::to_string(t.device) + ", q is on device " + std::to_string(device));
  if (t.dtype != dtype)
    invalid_argument(name + ": dtype " + std::string(dtype_name(t.dtype)) + " must be " + std::string(dtype_name(dtype)));
  check_shape(t, name.c_str(), ndim);
  // The kernels index variant tensors in 32-bit arithmetic.
  std::int64_t last = 0;
  for (int i = 0; i < ndim; ++i) {
    if (t.strides[i] < 0) invalid_argument(name + ": negative strides are not supported");
    last += (t.shape[i] - 1) * t.strides[i];
    if (t.strides[i] > (std::int64_t{1} << 31) - 1 || last > (std::int64_t{1} << 31) - 1)
      invalid_argument(name + ": elements lie 2^31 or more apart; variant tensors must be smaller");
  }
  if (reinterpret_cast<std::uintptr_t>(t.data) % 4 != 0) invalid_argument(name + ": data pointer is not 4-byte aligned");
}

void check_shape_is(const TensorView& t, const std::string& name, std::initializer_list<std::int64_t> want,
                    const char* meaning) {
  int i = 0;
  bool ok = true;
  for (std::int64_t w : want) ok = ok && t.shape[i++] == w;
  if (!ok) {
    std::string expect = "(";
    i = 0;
    for (std::int64_t w : want) expect += (i++ ? ", " : "") + std::to_string(w);
    invalid_argument(name + ": shape " + shape_string(t) + " must be " + meaning + " = " + expect + ")");
  }
}

// A call's presets composed with its user's declaration and checked: done once per distinct
// (presets, declaration) in the process, so a launch only builds the key.
struct ComposedVariant {
  VariantDecl decl;        // the composed declaration: the run-time inputs' order
  std::string canonical;   // empty when no expression remains
  std::vector<int> range_tensors;  // the integer tensors its mask reads (Variant::mask_range_tensors)
};

const ComposedVariant& composed_variant(const VariantPresets& p, const VariantDecl& user) {
  static std::mutex mu;
  static std::unordered_map<std::string, std::unique_ptr<ComposedVariant>> done;
  std::string key{char('0' + p.causal_top_left), char('0' + p.window), char('0' + p.softcap), char('0' + p.alibi),
                  char('0' + p.prefix_lm), char('0' + p.chunked), char('0' + p.document)};
  key += user.score_mod + '\x1f' + user.mask_mod;
  for (const VariantScalar& s : user.scalars) key += '\x1e' + s.name + char('0' + int(s.type));
  for (const VariantTensor& t : user.tensors)
    key += '\x1d' + t.name + char('0' + t.rank) + char('0' + int(t.type)) + (t.learnable ? 'L' : '-');
  std::lock_guard lock(mu);
  auto& slot = done[key];
  if (!slot) {
    try {
      auto c = std::make_unique<ComposedVariant>();
      c->decl = compose_variant(p, user);
      if (!c->decl.score_mod.empty() || !c->decl.mask_mod.empty()) {
        const Variant v = Variant::parse(c->decl);
        c->canonical = v.canonical();
        c->range_tensors = v.mask_range_tensors();
      }
      slot = std::move(c);
    } catch (...) {
      done.erase(key);
      throw;
    }
  }
  return *slot;
}

// The process-wide id of (canonical, sinks) and its kernel-table op name, stored for the life of
// the process.
std::pair<int, std::string_view> variant_id(const std::string& canonical, bool sinks, bool packed, bool paged,
                                            const char* op) {
  static std::mutex mu;
  static std::map<std::string, int> ids;
  static std::deque<std::string> names;
  static std::map<std::pair<int, std::string>, std::string_view> op_names;
  std::lock_guard lock(mu);
  auto [it, fresh] = ids.try_emplace(canonical + (sinks ? "|sinks" : "") + (packed ? "|packed" : "") + (paged ? "|paged" : ""),
                                     static_cast<int>(ids.size()) + 1);
  auto& name = op_names[{it->second, op}];
  if (name.empty()) name = names.emplace_back(std::string(op) + "#" + std::to_string(it->second));
  return {it->second, name};
}

}  // namespace

bool variant_requested(const AttentionVariant& v) {
  return v.causal_top_left || v.window_left != -1 || v.window_right != -1 || v.softcap != 0 || v.alibi_slopes ||
         v.prefix != -1 || v.chunk != 0 || v.document_ids || v.sinks || !v.score_mod.empty() || !v.mask_mod.empty() ||
         !v.scalars.empty() || !v.tensors.empty();
}

ResolvedVariant resolve_attention_variant(const AttentionVariant& v, const TensorView& q, const TensorView& k,
                                          const char* op, bool backward, const PackedSequences* packed,
                                          const PagedKV* paged) {
  ResolvedVariant out;
  if (packed) {
    out.packed = true;
    out.args.cu_seqlens_q = static_cast<const int*>(packed->cu_seqlens_q->data);
    out.args.cu_seqlens_k = static_cast<const int*>(packed->cu_seqlens_k->data);
  }
  if (paged) {  // checked by check_paged_kv
    out.paged = true;
    out.args.block_table = static_cast<const int*>(paged->block_table->data);
    out.args.table_stride = paged->block_table->strides[0];
    out.args.page_shift = std::countr_zero(static_cast<unsigned>(k.shape[2]));
    if (paged->cache_seqlens) out.args.seqused_k = static_cast<const int*>(paged->cache_seqlens->data);
  }
  if (!variant_requested(v)) {
    if (packed || paged) std::tie(out.id, out.op_name) = variant_id(out.canonical, false, out.packed, out.paged, op);
    return out;
  }
  const std::int64_t batch = q.shape[0], heads_q = q.shape[1], n_k = k.shape[2];
  const int device = q.device;

  // Presets and their inputs by name.
  VariantPresets presets;
  std::map<std::string, double> scalar_values;
  std::map<std::string, const TensorView*> tensor_values;
  auto integer_in_range = [](const char* name, long long x, long long lo) {
    if (x < lo || x > (1LL << 30))
      invalid_argument(std::string("variant.") + name + ": " + std::to_string(x) + " must be in [" + std::to_string(lo) +
                       ", 2^30]");
  };
  presets.causal_top_left = v.causal_top_left;
  if (v.window_left >= 0 || v.window_right >= 0) {
    integer_in_range("window_left", v.window_left, -1);
    integer_in_range("window_right", v.window_right, -1);
    presets.window = true;
    scalar_values["window_left"] = v.window_left;
    scalar_values["window_right"] = v.window_right;
  } else if (v.window_left < -1 || v.window_right < -1) {
    invalid_argument("variant.window_left: -1 (open) or a key count >= 0, got " +
                     std::to_string(std::min(v.window_left, v.window_right)));
  }
  if (v.softcap != 0) {
    if (!(v.softcap > 0) || !std::isfinite(v.softcap))
      invalid_argument("variant.softcap: must be a finite number > 0 (or 0 for none), got " + std::to_string(v.softcap));
    presets.softcap = true;
    scalar_values["softcap"] = v.softcap;
  }
  if (v.alibi_slopes) {
    check_variant_tensor(*v.alibi_slopes, "variant.alibi_slopes", DType::f32, 1, device);
    check_shape_is(*v.alibi_slopes, "variant.alibi_slopes", {heads_q}, "(heads_q)");
    presets.alibi = true;
    tensor_values["alibi_slopes"] = v.alibi_slopes;
  }
  if (v.prefix != -1) {
    integer_in_range("prefix", v.prefix, 0);
    presets.prefix_lm = true;
    scalar_values["prefix"] = v.prefix;
  }
  if (v.chunk != 0) {
    integer_in_range("chunk", v.chunk, 1);
    presets.chunked = true;
    scalar_values["chunk"] = v.chunk;
  }
  if (v.document_ids) {
    if (paged) invalid_argument("variant.document_ids: applies to dense K/V, not to a paged cache");
    if (packed)
      invalid_argument("variant.document_ids: a packed batch's sequences are its documents (cu_seqlens); "
                       "document_ids applies to dense batches");
    if (q.shape[2] > n_k)
      invalid_argument("variant.document_ids: needs n_q <= n_k (query q is key q + n_k - n_q), got n_q=" +
                       std::to_string(q.shape[2]) + " and n_k=" + std::to_string(n_k));
    check_variant_tensor(*v.document_ids, "variant.document_ids", DType::i32, 2, device);
    check_shape_is(*v.document_ids, "variant.document_ids", {batch, n_k}, "(batch, n_k)");
    presets.document = true;
    tensor_values["document_ids"] = v.document_ids;
  }
  if (v.sinks) {
    check_variant_tensor(*v.sinks, "variant.sinks", DType::f32, 1, device);
    check_shape_is(*v.sinks, "variant.sinks", {heads_q}, "(heads_q)");
    if (v.sinks->shape[0] > 1 && v.sinks->strides[0] != 1) invalid_argument("variant.sinks: must be contiguous");
    out.sinks = true;
    out.args.sinks = static_cast<const float*>(v.sinks->data);
    if (backward) {
      if (!v.sinks_grad) invalid_argument("variant.sinks_grad: the backward of a call with sinks needs sinks_grad");
      check_variant_tensor(*v.sinks_grad, "variant.sinks_grad", DType::f32, 1, device);
      check_shape_is(*v.sinks_grad, "variant.sinks_grad", {heads_q}, "(heads_q)");
      if (v.sinks_grad->shape[0] > 1 && v.sinks_grad->strides[0] != 1)
        invalid_argument("variant.sinks_grad: must be contiguous");
      out.args.sinks_grad = static_cast<float*>(v.sinks_grad->data);
      out.grads.emplace_back(v.sinks_grad->data, static_cast<std::size_t>(heads_q) * 4);
    }
  }

  // The user's declaration.
  VariantDecl user;
  user.score_mod = v.score_mod;
  user.mask_mod = v.mask_mod;
  std::map<std::string, const VariantTensorArg*> user_tensors;
  for (const VariantScalarArg& s : v.scalars) {
    const std::string name = "variant.scalars[" + s.name + "]";
    if (!std::isfinite(s.value)) invalid_argument(name + ": value must be finite");
    if (s.integer && (s.value != std::floor(s.value) || std::fabs(s.value) > 2147483647.0))
      invalid_argument(name + ": an integer scalar needs an integral value within int32, got " + std::to_string(s.value));
    user.scalars.push_back({s.name, s.integer ? VariantType::integer : VariantType::real});
    scalar_values[s.name] = s.value;
  }
  for (const VariantTensorArg& t : v.tensors) {
    const std::string name = "variant.tensors[" + t.name + "]";
    if (t.tensor.dtype != DType::f32 && t.tensor.dtype != DType::i32)
      invalid_argument(name + ": dtype " + std::string(dtype_name(t.tensor.dtype)) + " must be fp32 or int32");
    if (t.tensor.ndim < 1 || t.tensor.ndim > kMaxVariantTensorRank)
      invalid_argument(name + ": rank " + std::to_string(t.tensor.ndim) + " must be 1 to 4");
    check_variant_tensor(t.tensor, name, t.tensor.dtype, t.tensor.ndim, device);
    if (t.learnable && t.tensor.dtype != DType::f32) invalid_argument(name + ": a learnable tensor must be fp32");
    user.tensors.push_back({t.name, t.tensor.ndim, t.tensor.dtype == DType::i32 ? VariantType::integer : VariantType::real,
                            t.learnable});
    tensor_values[t.name] = &t.tensor;
    user_tensors[t.name] = &t;
  }

  const ComposedVariant& composed = composed_variant(presets, user);
  const VariantDecl& decl = composed.decl;
  out.canonical = composed.canonical;
  if (out.canonical.empty() && (!decl.scalars.empty() || !decl.tensors.empty())) {
    invalid_argument("variant.scalars: inputs were given but no score_mod or mask_mod reads them");
  }
  if (out.canonical.empty() && !out.sinks && !out.packed && !out.paged) return out;

  // The run-time inputs, in the composed declaration's order.
  for (std::size_t i = 0; i < decl.scalars.size(); ++i) {
    const double value = scalar_values.at(decl.scalars[i].name);
    if (decl.scalars[i].type == VariantType::integer) out.args.integer[i] = static_cast<int>(value);
    else out.args.real[i] = static_cast<float>(value);
  }
  for (std::size_t j = 0; j < decl.tensors.size(); ++j) {
    const TensorView& t = *tensor_values.at(decl.tensors[j].name);
    out.args.tensor[j] = t.data;
    for (int d = 0; d < t.ndim; ++d) out.args.stride[j][d] = t.strides[d];
    if (!decl.tensors[j].learnable || !backward) continue;
    const VariantTensorArg& arg = *user_tensors.at(decl.tensors[j].name);
    const std::string name = "variant.tensors[" + arg.name + "].grad";
    check_variant_tensor(arg.grad, name, DType::f32, t.ndim, device);
    for (int d = 0; d < t.ndim; ++d)
      if (arg.grad.shape[d] != t.shape[d])
        invalid_argument(name + ": shape " + shape_string(arg.grad) + " must be the tensor's " + shape_string(t));
    std::int64_t elements = 1;
    for (int d = 0; d < t.ndim; ++d) elements *= t.shape[d];
    std::int64_t expect = 1;
    for (int d = t.ndim - 1; d >= 0; --d) {
      if (t.shape[d] > 1 && arg.grad.strides[d] != expect) invalid_argument(name + ": must be contiguous");
      expect *= t.shape[d];
    }
    out.args.grad[j] = static_cast<float*>(arg.grad.data);
    for (int d = 0; d < t.ndim; ++d) out.args.grad_stride[j][d] = arg.grad.strides[d];
    out.grads.emplace_back(arg.grad.data, static_cast<std::size_t>(elements) * 4);
  }
  for (int j : composed.range_tensors) out.ranges.push_back({j, *tensor_values.at(decl.tensors[j].name)});
  std::tie(out.id, out.op_name) = variant_id(out.canonical, out.sinks, out.packed, out.paged, op);
  return out;
}

namespace {

struct RangeTableSize {
  long long n = 0, rows = 1, lead[3] = {};
  std::size_t bytes = 0;
};

RangeTableSize range_table_size(const TensorView& t) {
  RangeTableSize r;
  r.n = t.shape[t.ndim - 1];
  for (int d = t.ndim - 2; d >= 0; --d) r.lead[d] = r.rows, r.rows *= t.shape[d];
  if (r.n > 0 && r.rows > 0) {
    const long long blocks = iv_table_blocks(r.n);
    r.bytes = static_cast<std::size_t>(r.rows * iv_table_levels(blocks) * blocks) * 2 * sizeof(int);
  }
  return r;
}

}  // namespace

std::size_t variant_range_bytes(const std::vector<VariantRangeSource>& ranges) {
  std::size_t total = 0;
  for (const auto& r : ranges) total += Workspace::aligned(range_table_size(r.tensor).bytes);
  return total;
}

void build_variant_ranges(const std::vector<VariantRangeSource>& ranges, VariantArgs& args, Workspace& ws, int device,
                          void* stream) {
  for (const auto& r : ranges) {
    const RangeTableSize size = range_table_size(r.tensor);
    if (size.bytes == 0 || size.rows > 2147483647LL) continue;  // no table: tile() leaves its reads unbounded
    VariantRangeParams p{};
    p.src = static_cast<const int*>(r.tensor.data);
    p.table = reinterpret_cast<int*>(ws.take(size.bytes));
    p.n = size.n, p.rows = size.rows, p.rank = r.tensor.ndim;
    for (int d = 0; d < r.tensor.ndim; ++d) p.shape[d] = r.tensor.shape[d], p.stride[d] = r.tensor.strides[d];
    static const auto render = [] { return render_variant_ranges(); };
    const LoadedKernel& kernel = loaded_kernel({"attention_fwd.variant_ranges", 0, device}, render);
    launch_kernel(kernel, LaunchGrid{static_cast<unsigned>(size.rows), 1, 1}, &p, stream, "launch(variant ranges)");
    args.range[r.slot] = p.table;
    args.range_len[r.slot] = size.n;
    args.range_rows[r.slot] = size.rows;
    for (int d = 0; d < 3; ++d) args.range_lead[r.slot][d] = size.lead[d];
  }
}

int check_packed_sequences(const PackedSequences& p, std::int64_t total_q, std::int64_t total_k, int device) {
  std::int64_t batch = 0;
  for (auto [t, name] : {std::pair{p.cu_seqlens_q, "cu_seqlens_q"}, {p.cu_seqlens_k, "cu_seqlens_k"}}) {
    if (!t) invalid_argument(std::string(name) + ": missing (a packed batch needs cu_seqlens_q and cu_seqlens_k)");
    check_variant_tensor(*t, name, DType::i32, 1, device);
    if (t->shape[0] < 1) invalid_argument(std::string(name) + ": needs at least one element (batch + 1)");
    if (t->shape[0] > 1 && t->strides[0] != 1) invalid_argument(std::string(name) + ": must be contiguous");
  }
  batch = p.cu_seqlens_q->shape[0] - 1;
  if (p.cu_seqlens_k->shape[0] != batch + 1)
    invalid_argument("cu_seqlens_k: shape " + shape_string(*p.cu_seqlens_k) + " must be (batch + 1) = (" +
                     std::to_string(batch + 1) + "), as cu_seqlens_q");
  if (batch > 65535) invalid_argument("cu_seqlens_q: " + std::to_string(batch) + " sequences; kgen serves up to 65535");
  for (auto [m, total, name] : {std::tuple{p.max_seqlen_q, total_q, "max_seqlen_q"}, {p.max_seqlen_k, total_k, "max_seqlen_k"}})
    if (m < 0 || m > total)
      invalid_argument(std::string(name) + ": " + std::to_string(m) + " must be in [0, " + std::to_string(total) +
                       "] (the tensor's rows)");
  if (check_indices_requested()) {
    for (auto [t, name, total, most] : {std::tuple{p.cu_seqlens_q, "cu_seqlens_q", total_q, p.max_seqlen_q},
                                        {p.cu_seqlens_k, "cu_seqlens_k", total_k, p.max_seqlen_k}}) {
      std::vector<int> h(static_cast<std::size_t>(batch) + 1);
      use_primary_context(device);
      gpu_driver().synchronize_device("KGEN_CHECK_INDICES");
      gpu_driver().copy_to_host(h.data(), reinterpret_cast<DevicePtr>(t->data), h.size() * sizeof(int));
      if (h[0] != 0) invalid_argument(std::string(name) + "[0]: " + std::to_string(h[0]) + " must be 0");
      for (std::size_t i = 1; i < h.size(); ++i) {
        const std::string at = std::string(name) + "[" + std::to_string(i) + "]: " + std::to_string(h[i]);
        if (h[i] < h[i - 1]) invalid_argument(at + " is below the previous " + std::to_string(h[i - 1]) + " (must not decrease)");
        if (h[i] > total) invalid_argument(at + " is past the tensor's " + std::to_string(total) + " rows");
        if (h[i] - h[i - 1] > most)
          invalid_argument(at + ": sequence " + std::to_string(i - 1) + " has " + std::to_string(h[i] - h[i - 1]) +
                           " rows, more than max_seqlen " + std::to_string(most));
      }
    }
  }
  return static_cast<int>(batch);
}

TensorView packed_view(const TensorView& t, const char* name, const TensorView* like, const char* like_name) {
  check_view(t, name, 3);
  if (t.shape[0] > (1LL << 31) - 1 || t.shape[1] > 65535)  // the grid's y dimension holds the heads
    invalid_argument(std::string(name) + ": shape " + shape_string(t) +
                     " exceeds kgen's launch limits (total rows < 2^31, heads <= 65535)");
  if (like)
    for (int i = 0; i < 3; ++i)
      if (t.shape[i] != like->shape[i])
        invalid_argument(std::string(name) + ": shape " + shape_string(t) + " differs from " + like_name + " " +
                         shape_string(*like));
  TensorView v = t;
  v.ndim = 4;
  v.shape[0] = 1, v.shape[1] = t.shape[1], v.shape[2] = t.shape[0], v.shape[3] = t.shape[2];
  v.strides[0] = 0, v.strides[1] = t.strides[1], v.strides[2] = t.strides[0], v.strides[3] = t.strides[2];
  return v;
}

PackedViews packed_views(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& o,
                         const TensorView* lse) {
  PackedViews out;
  out.q = packed_view(q, "q");
  out.k = packed_view(k, "k");
  out.v = packed_view(v, "v", &k, "k");
  out.o = packed_view(o, "o", &q, "q");
  if (k.shape[2] != q.shape[2])
    invalid_argument("k: head_dim " + std::to_string(k.shape[2]) + " differs from q's " + std::to_string(q.shape[2]) +
                     " (shapes (total, heads, head_dim))");
  if (lse) {
    check_shape(*lse, "lse", 2);
    if (lse->shape[0] != q.shape[1] || lse->shape[1] != q.shape[0])
      invalid_argument("lse: shape " + shape_string(*lse) + " must be (heads_q, total_q) = (" + std::to_string(q.shape[1]) +
                       ", " + std::to_string(q.shape[0]) + ")");
    out.lse = *lse;
    out.lse.ndim = 3;
    out.lse.shape[0] = 1, out.lse.shape[1] = lse->shape[0], out.lse.shape[2] = lse->shape[1];
    out.lse.strides[0] = 0, out.lse.strides[1] = lse->strides[0], out.lse.strides[2] = lse->strides[1];
  }
  return out;
}

int check_paged_kv(const PagedKV& kv, const TensorView& q, const TensorView& k) {
  // k: the kernels' view (num_pages, h_kv, page_size, d) of the (num_pages, page_size, h_kv, d) cache.
  const std::int64_t batch = q.shape[0], page_size = k.shape[2];
  if (page_size < 16 || page_size > 256 || !std::has_single_bit(static_cast<std::uint64_t>(page_size)))
    invalid_argument("k_cache: page_size " + std::to_string(page_size) + " must be a power of two from 16 to 256");
  if (!kv.block_table) invalid_argument("block_table: missing (paged K/V needs one row of pages per batch)");
  check_variant_tensor(*kv.block_table, "block_table", DType::i32, 2, q.device);
  if (kv.block_table->shape[0] != batch)
    invalid_argument("block_table: shape " + shape_string(*kv.block_table) + " must have q's batch " +
                     std::to_string(batch) + " rows");
  if (kv.block_table->shape[1] > 1 && kv.block_table->strides[1] != 1)
    invalid_argument("block_table: the pages of a row must be contiguous");
  const std::int64_t max_keys = kv.block_table->shape[1] * page_size;
  if (max_keys > (std::int64_t{1} << 30)) invalid_argument("block_table: max_pages · page_size must be below 2^30");
  if (kv.cache_seqlens) {
    check_variant_tensor(*kv.cache_seqlens, "cache_seqlens", DType::i32, 1, q.device);
    if (kv.cache_seqlens->shape[0] != batch)
      invalid_argument("cache_seqlens: shape " + shape_string(*kv.cache_seqlens) + " must be (batch) = (" +
                       std::to_string(batch) + ")");
    if (batch > 1 && kv.cache_seqlens->strides[0] != 1) invalid_argument("cache_seqlens: must be contiguous");
  }
  if (check_indices_requested()) {
    use_primary_context(q.device);
    gpu_driver().synchronize_device("KGEN_CHECK_INDICES");
    const std::int64_t pages = kv.block_table->shape[1], num_pages = k.shape[0];
    std::vector<int> lens(static_cast<std::size_t>(batch), static_cast<int>(max_keys));
    if (kv.cache_seqlens)
      gpu_driver().copy_to_host(lens.data(), reinterpret_cast<DevicePtr>(kv.cache_seqlens->data), lens.size() * 4);
    std::vector<int> row(static_cast<std::size_t>(pages));
    for (std::int64_t b = 0; b < batch; ++b) {
      const std::string at = "cache_seqlens[" + std::to_string(b) + "]: " + std::to_string(lens[b]);
      if (lens[b] < 0 || lens[b] > max_keys)
        invalid_argument(at + " must be in [0, max_pages · page_size = " + std::to_string(max_keys) + "]");
      gpu_driver().copy_to_host(row.data(),
                                reinterpret_cast<DevicePtr>(static_cast<const int*>(kv.block_table->data) +
                                                            b * kv.block_table->strides[0]),
                                row.size() * 4);
      for (std::int64_t j = 0; j * page_size < lens[b]; ++j)
        if (row[j] < 0 || row[j] >= num_pages)
          invalid_argument("block_table[" + std::to_string(b) + "][" + std::to_string(j) + "]: page " +
                           std::to_string(row[j]) + " is past the cache's " + std::to_string(num_pages) + " pages");
    }
  }
  return static_cast<int>(page_size);
}

}  // namespace kgen
