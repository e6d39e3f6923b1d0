// The FP8 (E4M3) attention forward behind kgen::attention_forward_fp8: validation, config, and a
// launch of two kernels, the V transposition (forward_fp8.cuh) into scratch, then the
// warp-specialised forward with E4M3 inputs (forward_ws.cuh). docs/attention.md §11.

#include "driver/device.h"
#include "jit/kernel_table.h"
#include "kgen_device/attention/fp8_params.h"
#include "ops/attention_forward.h"
#include "ops/tensor_checks.h"
#include "ops/tensor_maps.h"
#include "ops/workspace.h"
#include "ops/validate_only.h"

namespace kgen {
namespace {

constexpr std::string_view kOp = "attention_fwd.fp8";

// An E4M3 (batch, heads, n, d) view seen as 16-bit elements: two values per element, half the head
// dim, the strides halved (every one is even: the caller checked 16-byte alignment).
TensorView as_pairs(const TensorView& t, DType pair_type) {
  TensorView v = t;
  v.dtype = pair_type;
  v.shape[3] = t.shape[3] / 2;
  for (int i = 0; i < 3; ++i) v.strides[i] = t.strides[i] / 2;
  return v;
}

// A descale tensor: float32 on q's device with one element, or (batch, heads_kv).
Fp8Descale descale_of(const TensorView* t, const char* name, const TensorView& q, std::int64_t heads_kv) {
  if (t == nullptr) return {nullptr, 0, 0};
  check_view(*t, name, t->ndim);
  if (t->dtype != DType::f32)
    invalid_argument(std::string(name) + ": dtype " + std::string(dtype_name(t->dtype)) + " must be fp32");
  if (t->device != q.device)
    invalid_argument(std::string(name) + ": on device " + std::to_string(t->device) + ", q is on device " +
                     std::to_string(q.device));
  std::int64_t elements = 1;
  for (int i = 0; i < t->ndim; ++i) elements *= t->shape[i];
  if (elements == 1) return {static_cast<const float*>(t->data), 0, 0};
  if (t->ndim != 2 || t->shape[0] != q.shape[0] || t->shape[1] != heads_kv)
    invalid_argument(std::string(name) + ": shape " + shape_string(*t) + " must be one element or (batch, heads_kv) = (" +
                     std::to_string(q.shape[0]) + ", " + std::to_string(heads_kv) + ")");
  return {static_cast<const float*>(t->data), t->strides[0], t->strides[1]};
}

std::uint64_t fp8_kernel_key(const AttentionForwardSpec& s, const AttentionForwardConfig& c) {
  return KeyPacker()
      .add(int(s.dtype), 4)
      .add(s.head_dim, 10)
      .add(s.causal, 1)
      .add(c.stages, 4)
      .add(c.ping_pong, 1)
      .add(c.block_n, 9)
      .value();
}
// The transposition's key: a value no forward key takes (its head-dim field 1023).
std::uint64_t transpose_kernel_key() { return KeyPacker().add(0, 4).add(1023, 10).value(); }

}  // namespace

void attention_forward_fp8(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& o,
                           const TensorView* lse, const Fp8Descales& descales, const AttentionOptions& options,
                           void* stream) {
  for (auto [t, name] : {std::pair{&q, "q"}, {&k, "k"}, {&v, "v"}})
    if (t->dtype != DType::f8e4m3)
      invalid_argument(std::string(name) + ": dtype " + std::string(dtype_name(t->dtype)) +
                       " is not fp8_e4m3 (attention_forward_fp8 takes E4M3 q, k and v)");
  if (o.dtype != DType::f16 && o.dtype != DType::bf16)
    invalid_argument("o: dtype " + std::string(dtype_name(o.dtype)) + " must be fp16 or bf16 (the FP8 forward's output)");
  // The shared checks on the inputs seen as o's type (shapes, heads, devices, lse, scale); the
  // spec then says what FP8 serves.
  TensorView q16 = q, k16 = k, v16 = v;
  q16.dtype = k16.dtype = v16.dtype = o.dtype;
  AttentionForwardCall call = validate_attention_forward(q16, k16, v16, o, lse, options);
  call.spec.fp8 = true;
  if (auto why = check_attention_forward_spec(call.spec)) invalid_argument(*why);
  for (auto [t, name] : {std::pair{&q, "q"}, {&k, "k"}, {&v, "v"}, {&o, "o"}})
    if (!aligned16(*t))
      invalid_argument(std::string(name) + ": the FP8 forward needs a 16-byte aligned pointer and strides that are "
                       "multiples of 16 bytes");
  const std::int64_t heads_kv = k.shape[1];
  const Fp8Descale dq = descale_of(descales.q, "descale_q", q, heads_kv);
  const Fp8Descale dk = descale_of(descales.k, "descale_k", q, heads_kv);
  const Fp8Descale dv = descale_of(descales.v, "descale_v", q, heads_kv);
  end_of_validation();

  const DeviceInfo& device = device_info(call.device);
  AttentionForwardConfig config;
  if (!options.config.empty()) {
    auto c = parse_attention_forward_config(options.config);
    if (!c) invalid_argument("config: cannot parse '" + options.config + "' (e.g. ws:bm128:bn128:s2:pp1)");
    config = *c;
  } else {
    config = attention_forward_default_config(call.spec, call.shape, device.target, device.sm_count);
  }
  if (auto why = check_attention_forward_config(call.spec, config, device.target))
    invalid_argument((options.config.empty() ? "q: " : "config: " + options.config + " is invalid here: ") + *why);
  const AttentionShape& shape = call.shape;  // every size >= 1 (validated)

  const LoadedKernel forward = loaded_kernel({kOp, fp8_kernel_key(call.spec, config), call.device},
                                             [&] { return render_attention_forward(call.spec, config); });
  const LoadedKernel transpose = loaded_kernel({kOp, transpose_kernel_key(), call.device},
                                               [] { return render_attention_fp8_v_transpose(); });

  // The transposed V: (batch, heads_kv, d, n_pad) bytes in scratch.
  const int d = call.spec.head_dim, n_pad = attention_fp8_keys_padded(shape.n_k);
  const std::size_t vt_bytes = static_cast<std::size_t>(shape.batch) * shape.heads_kv * d * n_pad;
  use_primary_context(call.device);  // the driver encodes tensor maps in the current context
  Workspace ws(nullptr, 0, Workspace::aligned(vt_bytes), call.device, stream, "the FP8 forward's transposed V");
  void* vt = vt_bytes > 0 ? static_cast<void*>(ws.take(vt_bytes)) : nullptr;

  AttentionFp8VParams tp{};
  tp.v = v.data, tp.vt = vt;
  tp.v_stride_b = v.strides[0], tp.v_stride_h = v.strides[1], tp.v_stride_n = v.strides[2];
  tp.batch = shape.batch, tp.heads_kv = shape.heads_kv, tp.n_k = shape.n_k, tp.head_dim = d, tp.n_pad = n_pad;

  AttentionForwardFp8Params fp{};
  fp.a = attention_forward_params(call, q, k, v, o, lse, options);
  fp.a.v = vt;  // the kernel reads V through v_map, the transposed copy
  fp.descale_q = dq, fp.descale_k = dk, fp.descale_v = dv;

  // Tensor maps: q and k as pairs of E4M3 values, the transposed V as (n_pad / 2, d, heads_kv,
  // batch) pairs in boxes of one column block of the kernel's V tile (128 keys in the 128-byte
  // swizzle, or 64 in the 64-byte one: attention_fwd::fp8_vt_row_bytes) by d rows, o as it is.
  const std::int64_t vt_shape[4] = {shape.batch, shape.heads_kv, d, n_pad / 2};
  const TensorView vt_view = make_contiguous_view(vt, o.dtype, 4, vt_shape, call.device);
  TiledTensorMap maps[4];
  if (!tiled_map(as_pairs(q, o.dtype), 64, maps[0]) || !tiled_map(as_pairs(k, o.dtype), config.block_n, maps[1]) ||
      !tiled_map(vt_view, d, maps[2]) || !tiled_map(o, 64, maps[3]))
    invalid_argument("q: the FP8 forward needs views without zero strides (TMA)");
  if (attention_fwd::fp8_vt_row_bytes(config.block_n) == 64) {
    maps[2].box[0] = 32;
    maps[2].swizzle = TiledTensorMap::Swizzle::b64;
  }
  TensorMapBytes* out[4] = {&fp.q_map, &fp.k_map, &fp.v_map, &fp.o_map};
  for (int i = 0; i < 4; ++i) gpu_driver().encode_tensor_map(out[i], maps[i], "cuTensorMapEncodeTiled(attention_fwd.fp8)");

  launch_kernel(transpose, attention_fp8_v_transpose_grid(shape, d), &tp, stream, "launch(attention_fwd.fp8 v_transpose)");
  LaunchGrid grid = attention_forward_grid(config, shape);
  fp.a.sections_log2 = attention_forward_sections(config, call.spec, shape, grid);
  launch_kernel(forward, grid, &fp, stream, "launch(attention_fwd.fp8)");
}

}  // namespace kgen
