// The C API: DLTensor descriptors in, kgen_status out, one sentence in kgen_last_error().
#include "kgen/c_api.h"

#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <utility>

#include "kgen/kgen.hpp"
#include "ops/tensor_checks.h"
#include "ops/validate_only.h"

namespace {

thread_local std::string last_error;

kgen_status fail(kgen_status s, const std::string& message) {
  last_error = message;
  return s;
}

// DLPack's code of OCP FP8 E4M3 (float8_e4m3fn), DLPack 1.1 on.
constexpr std::uint8_t kDLFloat8E4m3fn = 10;

// Converts a DLTensor into a TensorView; throws Error(invalid_argument) naming `name`. `index_ok`
// also accepts int32 (kDLInt, 32 bits): the variants' index and integer tensors; `fp8_ok` E4M3
// (the FP8 forward's inputs).
kgen::TensorView to_view(const DLTensor* t, const char* name, bool index_ok = false, bool fp8_ok = false) {
  using kgen::Error;
  using kgen::Status;
  if (!t) throw Error(Status::invalid_argument, std::string(name) + ": tensor descriptor is null");
  kgen::TensorView v;
  if (t->dtype.lanes != 1) throw Error(Status::invalid_argument, std::string(name) + ": vector dtypes (lanes != 1) are not supported");
  if (t->dtype.code == kDLFloat && t->dtype.bits == 16) v.dtype = kgen::DType::f16;
  else if (t->dtype.code == kDLBfloat && t->dtype.bits == 16) v.dtype = kgen::DType::bf16;
  else if (t->dtype.code == kDLFloat && t->dtype.bits == 32) v.dtype = kgen::DType::f32;
  else if (index_ok && t->dtype.code == kDLInt && t->dtype.bits == 32) v.dtype = kgen::DType::i32;
  else if (fp8_ok && t->dtype.code == kDLFloat8E4m3fn && t->dtype.bits == 8) v.dtype = kgen::DType::f8e4m3;
  else
    throw Error(Status::invalid_argument,
                std::string(name) + ": dtype (code " + std::to_string(t->dtype.code) + ", " +
                    std::to_string(t->dtype.bits) + " bits) is not float16, bfloat16" +
                    (index_ok ? ", float32 or int32" : fp8_ok ? ", float32 or float8_e4m3fn" : " or float32") +
                    (!fp8_ok && t->dtype.code == kDLFloat8E4m3fn ? " (float8_e4m3fn inputs: kgen_attention_forward_fp8)" : ""));
  if (t->device.device_type != kDLCUDA)
    throw Error(Status::invalid_argument, std::string(name) + ": tensor is not in CUDA device memory (DLPack device type " +
                                              std::to_string(t->device.device_type) + ")");
  if (t->ndim < 1 || t->ndim > 4)
    throw Error(Status::invalid_argument, std::string(name) + ": " + std::to_string(t->ndim) + " dimensions are not supported");
  if (!t->shape) throw Error(Status::invalid_argument, std::string(name) + ": shape pointer is null");
  v.ndim = t->ndim;
  v.device = t->device.device_id;
  // A null data pointer stays null whatever byte_offset says, so that check_view names it.
  v.data = t->data ? static_cast<char*>(t->data) + t->byte_offset : nullptr;
  for (int i = 0; i < t->ndim; ++i) v.shape[i] = t->shape[i];
  // Sizes >= 1 and a bounded element count, so the compact strides below cannot overflow.
  kgen::check_shape(v, name, v.ndim);
  std::int64_t stride = 1;
  for (int i = t->ndim - 1; i >= 0; --i) {
    v.strides[i] = t->strides ? t->strides[i] : stride;
    stride *= t->shape[i];
  }
  return v;
}

// Runs `body`, turning any exception into a status and kgen_last_error()'s sentence.
template <class Body>
kgen_status guarded(Body&& body) {
  try {
    body();
    last_error.clear();
    return KGEN_OK;
  } catch (const kgen::ValidationComplete&) {  // a validate-only call whose arguments passed
    last_error.clear();
    return KGEN_OK;
  } catch (const kgen::Error& e) {
    return fail(static_cast<kgen_status>(e.status()), e.what());
  } catch (const std::exception& e) {
    return fail(KGEN_ERROR_INTERNAL, e.what());
  } catch (...) {
    return fail(KGEN_ERROR_INTERNAL, "unknown error");
  }
}

kgen::LrpeAct lrpe_act(int act) {
  if (act < KGEN_LRPE_ACT_NONE || act > KGEN_LRPE_ACT_SOFTMAX_SEQ)
    throw kgen::Error(kgen::Status::invalid_argument, "act: unknown activation " + std::to_string(act) + " (0..5)");
  return static_cast<kgen::LrpeAct>(act);
}

kgen::LrpeOptions lrpe_options(const kgen_lrpe_options* o) {
  kgen::LrpeOptions opts;
  if (!o) return opts;
  opts.act = lrpe_act(o->act);
  opts.offset = o->offset;
  opts.config = o->config ? o->config : "";
  opts.workspace = o->workspace, opts.workspace_bytes = o->workspace_bytes;
  return opts;
}

kgen::MdLrpeOptions md_lrpe_options(const kgen_lrpe_options* o) {
  if (!o) throw kgen::Error(kgen::Status::invalid_argument, "options: md_lrpe_cosine needs options with dims and grid");
  kgen::MdLrpeOptions opts;
  opts.act = lrpe_act(o->act);
  opts.dims = o->dims, opts.extra = o->extra;
  for (int j = 0; j < 3; ++j) opts.grid[j] = o->grid[j];
  opts.config = o->config ? o->config : "";
  opts.workspace = o->workspace, opts.workspace_bytes = o->workspace_bytes;
  return opts;
}

kgen::AttentionOptions forward_options(const kgen_attention_options* o) {
  kgen::AttentionOptions opts;
  if (o) {
    opts.scale = o->scale;
    opts.causal = o->causal != 0;
  }
  return opts;
}

// The views a variant's TensorView pointers refer to, and the variant itself; built in place
// (the variant points into it), so it is neither copied nor moved.
struct VariantViews {
  kgen::TensorView alibi_slopes, document_ids, sinks, sinks_grad;
  kgen::AttentionVariant variant;
  VariantViews() = default;
  VariantViews(const VariantViews&) = delete;
  VariantViews& operator=(const VariantViews&) = delete;
};

// An optional variant tensor: `slot` filled and returned, or null for a null descriptor.
const kgen::TensorView* optional_view(const DLTensor* t, const char* name, bool index_ok, kgen::TensorView& slot) {
  if (!t) return nullptr;
  slot = to_view(t, name, index_ok);
  return &slot;
}

// variant.`name` (a C array) and variant.`count_name` (its length): non-negative, and the array
// not null unless empty.
void check_array(const void* data, int count, const char* name, const char* count_name) {
  using kgen::Error;
  using kgen::Status;
  if (count < 0)
    throw Error(Status::invalid_argument,
                std::string("variant.") + count_name + ": " + std::to_string(count) + " is negative");
  if (!data && count > 0)
    throw Error(Status::invalid_argument,
                std::string("variant.") + name + ": NULL with " + count_name + "=" + std::to_string(count));
}

// Converts `c` (not null) into out.variant, its fields in struct order; `backward` also converts
// the gradient descriptors (the forward ignores them).
void convert_variant(const kgen_attention_variant* c, bool backward, VariantViews& out) {
  using kgen::Error;
  using kgen::Status;
  kgen::AttentionVariant& v = out.variant;
  v.causal_top_left = c->causal_top_left != 0;
  v.window_left = c->window_left;
  v.window_right = c->window_right;
  v.softcap = c->softcap;
  v.alibi_slopes = optional_view(c->alibi_slopes, "variant.alibi_slopes", false, out.alibi_slopes);
  v.prefix = c->prefix;
  v.chunk = c->chunk;
  v.document_ids = optional_view(c->document_ids, "variant.document_ids", true, out.document_ids);
  v.sinks = optional_view(c->sinks, "variant.sinks", false, out.sinks);
  if (backward) v.sinks_grad = optional_view(c->sinks_grad, "variant.sinks_grad", false, out.sinks_grad);
  if (c->score_mod) v.score_mod = c->score_mod;
  if (c->mask_mod) v.mask_mod = c->mask_mod;
  check_array(c->scalars, c->num_scalars, "scalars", "num_scalars");
  for (int i = 0; i < c->num_scalars; ++i) {
    const kgen_variant_scalar& s = c->scalars[i];
    if (!s.name) throw Error(Status::invalid_argument, "variant.scalars[" + std::to_string(i) + "].name: NULL");
    v.scalars.push_back({s.name, s.value, s.integer != 0});
  }
  check_array(c->tensors, c->num_tensors, "tensors", "num_tensors");
  for (int i = 0; i < c->num_tensors; ++i) {
    const kgen_variant_tensor& t = c->tensors[i];
    if (!t.name) throw Error(Status::invalid_argument, "variant.tensors[" + std::to_string(i) + "].name: NULL");
    const std::string name = "variant.tensors[" + std::string(t.name) + "]";
    kgen::VariantTensorArg arg;
    arg.name = t.name;
    arg.tensor = to_view(t.tensor, name.c_str(), true);
    arg.learnable = t.learnable != 0;
    if (backward && t.grad) arg.grad = to_view(t.grad, (name + ".grad").c_str());
    v.tensors.push_back(std::move(arg));
  }
}

// Sets `into` to the variant `c` converted (kept in `views`; unchanged for a null `c`).
void set_variant(const kgen_attention_variant* c, bool backward, VariantViews& views, kgen::AttentionVariant& into) {
  if (!c) return;
  convert_variant(c, backward, views);
  into = std::move(views.variant);  // its view pointers still refer to `views`
}

kgen::AttentionBackwardOptions backward_options(const kgen_attention_backward_options* o) {
  kgen::AttentionBackwardOptions opts;
  if (o) {
    opts.scale = o->scale;
    opts.causal = o->causal != 0;
    opts.deterministic = o->deterministic != 0;
    opts.workspace = o->workspace;
    opts.workspace_bytes = o->workspace_bytes;
    if (o->config) opts.config = o->config;
  }
  return opts;
}

// The views of a paged attention call's descriptors; kv points into it, so it is built in place.
struct PagedCallViews {
  kgen::TensorView q, k_cache, v_cache, o, lse, table, lens;
  kgen::PagedKV kv;
  bool has_lse = false;
  PagedCallViews(const DLTensor* q_, const DLTensor* k_, const DLTensor* v_, const DLTensor* o_, const DLTensor* lse_,
                 const kgen_paged_kv* kv_)
      : q(to_view(q_, "q")), k_cache(to_view(k_, "k_cache")), v_cache(to_view(v_, "v_cache")), o(to_view(o_, "o")) {
    if (lse_) lse = to_view(lse_, "lse"), has_lse = true;
    if (!kv_) kgen::invalid_argument("kv: NULL (paged K/V needs a block_table)");
    if (kv_->block_table) table = to_view(kv_->block_table, "block_table", true), kv.block_table = &table;
    if (kv_->cache_seqlens) lens = to_view(kv_->cache_seqlens, "cache_seqlens", true), kv.cache_seqlens = &lens;
  }
  PagedCallViews(const PagedCallViews&) = delete;
  PagedCallViews& operator=(const PagedCallViews&) = delete;
  const kgen::TensorView* lse_view() const { return has_lse ? &lse : nullptr; }
};

}  // namespace

extern "C" {

kgen_status kgen_attention_forward(const DLTensor* q, const DLTensor* k, const DLTensor* v, DLTensor* o,
                                   DLTensor* lse, const kgen_attention_options* options, void* stream) {
  return guarded([&] {
    // Converted in argument order, so an error names the first offending argument.
    const kgen::TensorView qv = to_view(q, "q"), kv = to_view(k, "k"), vv = to_view(v, "v"), ov = to_view(o, "o");
    kgen::TensorView lse_view;
    if (lse) lse_view = to_view(lse, "lse");
    kgen::attention_forward(qv, kv, vv, ov, lse ? &lse_view : nullptr, forward_options(options), stream);
  });
}

kgen_status kgen_attention_forward_fp8(const DLTensor* q, const DLTensor* k, const DLTensor* v, DLTensor* o, DLTensor* lse,
                                       const DLTensor* descale_q, const DLTensor* descale_k, const DLTensor* descale_v,
                                       const kgen_attention_options* options, const char* config, void* stream) {
  return guarded([&] {
    const kgen::TensorView qv = to_view(q, "q", false, true), kv = to_view(k, "k", false, true),
                           vv = to_view(v, "v", false, true), ov = to_view(o, "o");
    kgen::TensorView lse_view, dq, dk, dv;
    if (lse) lse_view = to_view(lse, "lse");
    if (descale_q) dq = to_view(descale_q, "descale_q");
    if (descale_k) dk = to_view(descale_k, "descale_k");
    if (descale_v) dv = to_view(descale_v, "descale_v");
    const kgen::Fp8Descales descales{descale_q ? &dq : nullptr, descale_k ? &dk : nullptr, descale_v ? &dv : nullptr};
    kgen::AttentionOptions fwd = forward_options(options);
    if (config) fwd.config = config;
    kgen::attention_forward_fp8(qv, kv, vv, ov, lse ? &lse_view : nullptr, descales, fwd, stream);
  });
}

void kgen_attention_variant_init(kgen_attention_variant* v) {
  if (!v) return;
  *v = kgen_attention_variant{};
  v->window_left = v->window_right = -1;
  v->prefix = -1;
}

kgen_status kgen_attention_forward_variant(const DLTensor* q, const DLTensor* k, const DLTensor* v, DLTensor* o,
                                           DLTensor* lse, const kgen_attention_options* options,
                                           const kgen_attention_variant* variant, void* stream) {
  return guarded([&] {
    const kgen::TensorView qv = to_view(q, "q"), kv = to_view(k, "k"), vv = to_view(v, "v"), ov = to_view(o, "o");
    kgen::TensorView lse_view;
    if (lse) lse_view = to_view(lse, "lse");
    kgen::AttentionOptions opts = forward_options(options);
    VariantViews views;
    set_variant(variant, false, views, opts.variant);
    kgen::attention_forward(qv, kv, vv, ov, lse ? &lse_view : nullptr, opts, stream);
  });
}

// A kgen_packed_sequences as the C++ API takes it (the views live as long as this object).
struct PackedViews {
  kgen::TensorView cu_q, cu_k;
  kgen::PackedSequences sequences;
  explicit PackedViews(const kgen_packed_sequences* s) {
    if (!s) kgen::invalid_argument("sequences: NULL (a packed batch needs cu_seqlens_q and cu_seqlens_k)");
    if (s->cu_seqlens_q) cu_q = to_view(s->cu_seqlens_q, "cu_seqlens_q", true), sequences.cu_seqlens_q = &cu_q;
    if (s->cu_seqlens_k) cu_k = to_view(s->cu_seqlens_k, "cu_seqlens_k", true), sequences.cu_seqlens_k = &cu_k;
    sequences.max_seqlen_q = s->max_seqlen_q, sequences.max_seqlen_k = s->max_seqlen_k;
  }
};

kgen_status kgen_attention_varlen_forward(const DLTensor* q, const DLTensor* k, const DLTensor* v, DLTensor* o,
                                          DLTensor* lse, const kgen_attention_options* options,
                                          const kgen_packed_sequences* sequences,
                                          const kgen_attention_variant* variant, void* stream) {
  return guarded([&] {
    const kgen::TensorView qv = to_view(q, "q"), kv = to_view(k, "k"), vv = to_view(v, "v"), ov = to_view(o, "o");
    kgen::TensorView lse_view;
    if (lse) lse_view = to_view(lse, "lse");
    PackedViews packed(sequences);
    kgen::AttentionOptions opts = forward_options(options);
    VariantViews views;
    set_variant(variant, false, views, opts.variant);
    kgen::attention_varlen_forward(qv, kv, vv, ov, lse ? &lse_view : nullptr, packed.sequences, opts, stream);
  });
}

kgen_status kgen_attention_backward(const DLTensor* q, const DLTensor* k, const DLTensor* v, const DLTensor* o,
                                    const DLTensor* lse, const DLTensor* d_o, DLTensor* dq, DLTensor* dk, DLTensor* dv,
                                    const kgen_attention_backward_options* options, void* stream) {
  return kgen_attention_backward_variant(q, k, v, o, lse, d_o, dq, dk, dv, options, nullptr, stream);
}

kgen_status kgen_attention_backward_variant(const DLTensor* q, const DLTensor* k, const DLTensor* v, const DLTensor* o,
                                            const DLTensor* lse, const DLTensor* d_o, DLTensor* dq, DLTensor* dk,
                                            DLTensor* dv, const kgen_attention_backward_options* options,
                                            const kgen_attention_variant* variant, void* stream) {
  return guarded([&] {
    const kgen::TensorView qv = to_view(q, "q"), kv = to_view(k, "k"), vv = to_view(v, "v"), ov = to_view(o, "o"),
                           lv = to_view(lse, "lse"), dov = to_view(d_o, "d_o"), dqv = to_view(dq, "dq"),
                           dkv = to_view(dk, "dk"), dvv = to_view(dv, "dv");
    kgen::AttentionBackwardOptions opts = backward_options(options);
    VariantViews views;
    set_variant(variant, true, views, opts.variant);
    kgen::attention_backward(qv, kv, vv, ov, lv, dov, dqv, dkv, dvv, opts, stream);
  });
}

kgen_status kgen_attention_paged_forward(const DLTensor* q, const DLTensor* k_cache, const DLTensor* v_cache,
                                         DLTensor* o, DLTensor* lse, const kgen_attention_options* options,
                                         const kgen_paged_kv* kv, const kgen_attention_variant* variant,
                                         void* stream) {
  return guarded([&] {
    const PagedCallViews c(q, k_cache, v_cache, o, lse, kv);
    kgen::AttentionOptions opts = forward_options(options);
    VariantViews views;
    set_variant(variant, false, views, opts.variant);
    kgen::attention_paged_forward(c.q, c.k_cache, c.v_cache, c.o, c.lse_view(), c.kv, opts, stream);
  });
}

kgen_status kgen_attention_paged_append(const DLTensor* k_new, const DLTensor* v_new, DLTensor* k_cache,
                                        DLTensor* v_cache, const kgen_paged_kv* kv, const kgen_rotary* rotary,
                                        const DLTensor* q, DLTensor* q_out, void* stream) {
  return guarded([&] {
    const kgen::TensorView kn = to_view(k_new, "k_new"), vn = to_view(v_new, "v_new"),
                           kc = to_view(k_cache, "k_cache"), vc = to_view(v_cache, "v_cache");
    if (!kv) kgen::invalid_argument("kv: NULL (the append needs cache_seqlens)");
    kgen::TensorView table, lens, cos, sin, qv, qo;
    kgen::PagedKV paged;
    if (kv->block_table) table = to_view(kv->block_table, "block_table", true), paged.block_table = &table;
    if (kv->cache_seqlens) lens = to_view(kv->cache_seqlens, "cache_seqlens", true), paged.cache_seqlens = &lens;
    kgen::PagedAppendOptions opts;
    if (rotary) {
      if (rotary->cos) cos = to_view(rotary->cos, "rotary.cos"), opts.rotary.cos = &cos;
      if (rotary->sin) sin = to_view(rotary->sin, "rotary.sin"), opts.rotary.sin = &sin;
      opts.rotary.interleaved = rotary->interleaved != 0;
      opts.rotary.q_sequential = rotary->q_sequential != 0;
    }
    if (q) qv = to_view(q, "q"), opts.q = &qv;
    if (q_out) qo = to_view(q_out, "q_out"), opts.q_out = &qo;
    kgen::attention_paged_append(kn, vn, kc, vc, paged, opts, stream);
  });
}

struct kgen_paged_plan {
  kgen::AttentionPagedPlan plan;
  std::string config;
};

kgen_status kgen_attention_paged_plan(const DLTensor* q, const DLTensor* k_cache, const DLTensor* v_cache,
                                      const DLTensor* o, const DLTensor* lse, const kgen_attention_options* options,
                                      const kgen_paged_kv* kv, const kgen_attention_variant* variant,
                                      kgen_paged_plan** plan) {
  return guarded([&] {
    if (!plan) kgen::invalid_argument("plan: NULL (where the plan goes)");
    *plan = nullptr;
    const PagedCallViews c(q, k_cache, v_cache, o, lse, kv);
    kgen::AttentionOptions opts = forward_options(options);
    VariantViews views;
    set_variant(variant, false, views, opts.variant);
    auto made = std::make_unique<kgen_paged_plan>();
    made->plan = kgen::attention_paged_plan(c.q, c.k_cache, c.v_cache, c.o, c.lse_view(), c.kv, opts);
    made->config = made->plan.config();
    *plan = made.release();
  });
}

kgen_status kgen_paged_plan_info(const kgen_paged_plan* plan, size_t* workspace_bytes, int* splits,
                                 const char** config) {
  return guarded([&] {
    if (!plan) kgen::invalid_argument("plan: NULL");
    if (workspace_bytes) *workspace_bytes = plan->plan.workspace_bytes();
    if (splits) *splits = plan->plan.splits();
    if (config) *config = plan->config.c_str();
  });
}

kgen_status kgen_attention_paged_run(const kgen_paged_plan* plan, const DLTensor* q, const DLTensor* k_cache,
                                     const DLTensor* v_cache, DLTensor* o, DLTensor* lse, const kgen_paged_kv* kv,
                                     void* workspace, size_t workspace_bytes, void* stream) {
  return guarded([&] {
    if (!plan) kgen::invalid_argument("plan: NULL (make one with kgen_attention_paged_plan)");
    const PagedCallViews c(q, k_cache, v_cache, o, lse, kv);
    kgen::attention_paged_run(plan->plan, c.q, c.k_cache, c.v_cache, c.o, c.lse_view(), c.kv, workspace,
                              workspace_bytes, stream);
  });
}

void kgen_paged_plan_destroy(kgen_paged_plan* plan) { delete plan; }

kgen_status kgen_attention_varlen_backward(const DLTensor* q, const DLTensor* k, const DLTensor* v, const DLTensor* o,
                                           const DLTensor* lse, const DLTensor* d_o, DLTensor* dq, DLTensor* dk,
                                           DLTensor* dv, const kgen_attention_backward_options* options,
                                           const kgen_packed_sequences* sequences,
                                           const kgen_attention_variant* variant, void* stream) {
  return guarded([&] {
    const kgen::TensorView qv = to_view(q, "q"), kv = to_view(k, "k"), vv = to_view(v, "v"), ov = to_view(o, "o"),
                           lv = to_view(lse, "lse"), dov = to_view(d_o, "d_o"), dqv = to_view(dq, "dq"),
                           dkv = to_view(dk, "dk"), dvv = to_view(dv, "dv");
    PackedViews packed(sequences);
    kgen::AttentionBackwardOptions opts = backward_options(options);
    VariantViews views;
    set_variant(variant, true, views, opts.variant);
    kgen::attention_varlen_backward(qv, kv, vv, ov, lv, dov, dqv, dkv, dvv, packed.sequences, opts, stream);
  });
}

kgen_status kgen_attention_varlen_backward_workspace_bytes(const DLTensor* q,
                                                           const kgen_attention_backward_options* options,
                                                           size_t* bytes) {
  return guarded([&] {
    if (!bytes) kgen::invalid_argument("bytes: NULL");
    *bytes = kgen::attention_varlen_backward_workspace_bytes(to_view(q, "q"), backward_options(options));
  });
}

kgen_status kgen_attention_double_backward(const DLTensor* q, const DLTensor* k, const DLTensor* v, const DLTensor* o,
                                           const DLTensor* lse, const DLTensor* d_o, const DLTensor* gq,
                                           const DLTensor* gk, const DLTensor* gv, DLTensor* q_bar, DLTensor* k_bar,
                                           DLTensor* v_bar, DLTensor* do_bar,
                                           const kgen_attention_backward_options* options, void* stream) {
  return kgen_attention_double_backward_variant(q, k, v, o, lse, d_o, gq, gk, gv, q_bar, k_bar, v_bar, do_bar, options,
                                                nullptr, stream);
}

namespace {

// The double backward's tensors, converted in parameter order (an error names the first bad one);
// the cotangents gq, gk, gv may be NULL.
struct DoubleBackwardViews {
  kgen::TensorView q, k, v, o, lse, d_o, g[3], q_bar, k_bar, v_bar, do_bar;
  bool has[3] = {false, false, false};
  DoubleBackwardViews(const DLTensor* q_, const DLTensor* k_, const DLTensor* v_, const DLTensor* o_, const DLTensor* lse_,
                      const DLTensor* d_o_, const DLTensor* gq, const DLTensor* gk, const DLTensor* gv,
                      const DLTensor* q_bar_, const DLTensor* k_bar_, const DLTensor* v_bar_, const DLTensor* do_bar_)
      : q(to_view(q_, "q")), k(to_view(k_, "k")), v(to_view(v_, "v")), o(to_view(o_, "o")), lse(to_view(lse_, "lse")),
        d_o(to_view(d_o_, "d_o")) {
    const DLTensor* given[3] = {gq, gk, gv};
    const char* names[3] = {"gq", "gk", "gv"};
    for (int i = 0; i < 3; ++i)
      if ((has[i] = given[i] != nullptr)) g[i] = to_view(given[i], names[i]);
    q_bar = to_view(q_bar_, "q_bar"), k_bar = to_view(k_bar_, "k_bar"), v_bar = to_view(v_bar_, "v_bar");
    do_bar = to_view(do_bar_, "do_bar");
  }
  const kgen::TensorView* given(int i) const { return has[i] ? &g[i] : nullptr; }
};

}  // namespace

kgen_status kgen_attention_double_backward_variant(const DLTensor* q, const DLTensor* k, const DLTensor* v,
                                                   const DLTensor* o, const DLTensor* lse, const DLTensor* d_o,
                                                   const DLTensor* gq, const DLTensor* gk, const DLTensor* gv,
                                                   DLTensor* q_bar, DLTensor* k_bar, DLTensor* v_bar, DLTensor* do_bar,
                                                   const kgen_attention_backward_options* options,
                                                   const kgen_attention_variant* variant, void* stream) {
  return guarded([&] {
    const DoubleBackwardViews t(q, k, v, o, lse, d_o, gq, gk, gv, q_bar, k_bar, v_bar, do_bar);
    kgen::AttentionBackwardOptions opts = backward_options(options);
    VariantViews views;
    set_variant(variant, false, views, opts.variant);
    kgen::attention_double_backward(t.q, t.k, t.v, t.o, t.lse, t.d_o, t.given(0), t.given(1), t.given(2), t.q_bar,
                                    t.k_bar, t.v_bar, t.do_bar, opts, stream);
  });
}

kgen_status kgen_attention_varlen_double_backward(const DLTensor* q, const DLTensor* k, const DLTensor* v,
                                                  const DLTensor* o, const DLTensor* lse, const DLTensor* d_o,
                                                  const DLTensor* gq, const DLTensor* gk, const DLTensor* gv,
                                                  DLTensor* q_bar, DLTensor* k_bar, DLTensor* v_bar, DLTensor* do_bar,
                                                  const kgen_attention_backward_options* options,
                                                  const kgen_packed_sequences* sequences,
                                                  const kgen_attention_variant* variant, void* stream) {
  return guarded([&] {
    const DoubleBackwardViews t(q, k, v, o, lse, d_o, gq, gk, gv, q_bar, k_bar, v_bar, do_bar);
    PackedViews packed(sequences);
    kgen::AttentionBackwardOptions opts = backward_options(options);
    VariantViews views;
    set_variant(variant, false, views, opts.variant);
    kgen::attention_varlen_double_backward(t.q, t.k, t.v, t.o, t.lse, t.d_o, t.given(0), t.given(1), t.given(2),
                                           t.q_bar, t.k_bar, t.v_bar, t.do_bar, packed.sequences, opts, stream);
  });
}

kgen_status kgen_attention_varlen_double_backward_workspace_bytes(const DLTensor* q,
                                                                  const kgen_attention_backward_options* options,
                                                                  size_t* bytes) {
  return guarded([&] {
    if (!bytes) kgen::invalid_argument("bytes: NULL");
    *bytes = kgen::attention_varlen_double_backward_workspace_bytes(to_view(q, "q"), backward_options(options));
  });
}

kgen_status kgen_attention_backward_workspace_bytes(const DLTensor* q, const kgen_attention_backward_options* options,
                                                    int double_backward, size_t* bytes) {
  return guarded([&] {
    const kgen::TensorView qv = to_view(q, "q");
    if (!bytes) throw kgen::Error(kgen::Status::invalid_argument, "bytes: output pointer is null");
    const kgen::AttentionBackwardOptions opts = backward_options(options);
    *bytes = double_backward ? kgen::attention_double_backward_workspace_bytes(qv, opts)
                             : kgen::attention_backward_workspace_bytes(qv, opts);
  });
}

kgen_status kgen_lrpe_workspace_bytes(const DLTensor* x, int act, int backward, size_t* bytes) {
  return guarded([&] {
    const kgen::TensorView xv = to_view(x, "x");
    if (!bytes) throw kgen::Error(kgen::Status::invalid_argument, "bytes: output pointer is null");
    if (act < 0 || act > static_cast<int>(kgen::LrpeAct::softmax_seq))
      throw kgen::Error(kgen::Status::invalid_argument, "act: unknown kgen_lrpe_act " + std::to_string(act));
    *bytes = kgen::lrpe_workspace_bytes(xv, static_cast<kgen::LrpeAct>(act), backward != 0);
  });
}

kgen_status kgen_lrpe_cosine_forward(const DLTensor* x, const DLTensor* theta, DLTensor* o,
                                     const kgen_lrpe_options* options, void* stream) {
  return guarded([&] {
    const kgen::TensorView xv = to_view(x, "x"), tv = to_view(theta, "theta"), ov = to_view(o, "o");
    kgen::lrpe_cosine_forward(xv, tv, ov, lrpe_options(options), stream);
  });
}

kgen_status kgen_lrpe_cosine_backward(const DLTensor* x, const DLTensor* theta, const DLTensor* d_o, DLTensor* dx,
                                      const kgen_lrpe_options* options, void* stream) {
  return guarded([&] {
    const kgen::TensorView xv = to_view(x, "x"), tv = to_view(theta, "theta"), gv = to_view(d_o, "d_o"),
                           dv = to_view(dx, "dx");
    kgen::lrpe_cosine_backward(xv, tv, gv, dv, lrpe_options(options), stream);
  });
}

kgen_status kgen_md_lrpe_cosine_forward(const DLTensor* x, const DLTensor* theta, DLTensor* o, DLTensor* angles,
                                        const kgen_lrpe_options* options, void* stream) {
  return guarded([&] {
    const kgen::TensorView xv = to_view(x, "x"), tv = to_view(theta, "theta"), ov = to_view(o, "o");
    kgen::TensorView av;
    if (angles) av = to_view(angles, "angles");
    kgen::md_lrpe_cosine_forward(xv, tv, ov, angles ? &av : nullptr, md_lrpe_options(options), stream);
  });
}

kgen_status kgen_md_lrpe_cosine_backward(const DLTensor* x, const DLTensor* theta, const DLTensor* d_o, DLTensor* dx,
                                         const DLTensor* angles, const kgen_lrpe_options* options, void* stream) {
  return guarded([&] {
    const kgen::TensorView xv = to_view(x, "x"), tv = to_view(theta, "theta"), gv = to_view(d_o, "d_o"),
                           dv = to_view(dx, "dx");
    kgen::TensorView av;
    if (angles) av = to_view(angles, "angles");
    kgen::md_lrpe_cosine_backward(xv, tv, gv, dv, angles ? &av : nullptr, md_lrpe_options(options), stream);
  });
}

int kgen_validate_only(int on) { return kgen::set_validate_only(on != 0) ? 1 : 0; }

const char* kgen_last_error(void) { return last_error.c_str(); }

const char* kgen_version(void) { return kgen::version(); }

}  // extern "C"
