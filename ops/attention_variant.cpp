#include "ops/attention_variant.h"

#include <cmath>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <unordered_map>

#include "generator/target.h"
#include "generator/variant.h"
#include "ops/tensor_checks.h"

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
      if (!c->decl.score_mod.empty() || !c->decl.mask_mod.empty()) c->canonical = Variant::parse(c->decl).canonical();
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
std::pair<int, std::string_view> variant_id(const std::string& canonical, bool sinks, const char* op) {
  static std::mutex mu;
  static std::map<std::string, int> ids;
  static std::deque<std::string> names;
  static std::map<std::pair<int, std::string>, std::string_view> op_names;
  std::lock_guard lock(mu);
  auto [it, fresh] = ids.try_emplace(canonical + (sinks ? "|sinks" : ""), static_cast<int>(ids.size()) + 1);
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
                                          const char* op, bool backward) {
  ResolvedVariant out;
  if (!variant_requested(v)) return out;
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
  if (out.canonical.empty() && !out.sinks) return out;

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
  std::tie(out.id, out.op_name) = variant_id(out.canonical, out.sinks, op);
  return out;
}

}  // namespace kgen
