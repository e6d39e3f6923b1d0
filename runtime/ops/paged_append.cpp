#include "ops/paged_append.h"

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "driver/device.h"
#include "driver/gpu_driver.h"
#include "jit/kernel_table.h"
#include "ops/tensor_checks.h"
#include "ops/validate_only.h"

namespace kgen {
namespace {

std::string text(std::int64_t v) { return std::to_string(v); }

// An int32 index tensor on `device`: `ndim` dimensions, non-negative strides, aligned.
void check_index_tensor(const TensorView& t, const char* name, int ndim, int device) {
  const std::string n(name);
  if (!t.data) invalid_argument(n + ": data pointer is null");
  if (t.dtype != DType::i32) invalid_argument(n + ": dtype " + std::string(dtype_name(t.dtype)) + " must be int32");
  if (t.device != device) invalid_argument(n + ": on device " + text(t.device) + ", k_cache is on device " + text(device));
  check_shape(t, name, ndim);
  for (int i = 0; i < ndim; ++i)
    if (t.strides[i] < 0 || t.strides[i] > (std::int64_t{1} << 31) - 1)
      invalid_argument(n + ": strides must be in [0, 2^31)");
  if (reinterpret_cast<std::uintptr_t>(t.data) % 4) invalid_argument(n + ": data pointer is not 4-byte aligned");
}

void check_same_shape(const TensorView& t, const char* name, const TensorView& ref, const char* ref_name) {
  for (int i = 0; i < ref.ndim; ++i)
    if (t.shape[i] != ref.shape[i])
      invalid_argument(std::string(name) + ": shape " + shape_string(t) + " differs from " + ref_name + " " +
                       shape_string(ref));
}

void check_dtype_device(const TensorView& t, const char* name, const TensorView& ref, const char* ref_name) {
  if (t.dtype != ref.dtype)
    invalid_argument(std::string(name) + ": dtype " + std::string(dtype_name(t.dtype)) + " differs from " + ref_name +
                     "'s " + std::string(dtype_name(ref.dtype)));
  if (t.device != ref.device)
    invalid_argument(std::string(name) + ": on device " + text(t.device) + ", " + ref_name + " is on device " +
                     text(ref.device));
}

// Whether `t` allows whole pieces of `vec` elements: its base and every stride but the last.
bool pieces_fit(const TensorView& t, int vec) {
  if (reinterpret_cast<std::uintptr_t>(t.data) % (vec * dtype_bytes(t.dtype))) return false;
  for (int i = 0; i + 1 < t.ndim; ++i)
    if (t.shape[i] > 1 && t.strides[i] % vec) return false;
  return true;
}

// KGEN_CHECK_INDICES=1: every position a row is written at, and every page it lands in.
void check_append_indices(const PagedKV& kv, std::int64_t batch, std::int64_t n_new, std::int64_t n_q,
                          bool q_sequential, std::int64_t page_size, std::int64_t max_keys, std::int64_t num_pages,
                          int device) {
  use_primary_context(device);
  gpu_driver().synchronize_device("KGEN_CHECK_INDICES");
  std::vector<int> lens(static_cast<std::size_t>(batch));
  gpu_driver().copy_to_host(lens.data(), reinterpret_cast<DevicePtr>(kv.cache_seqlens->data), lens.size() * 4);
  const std::int64_t q_last = n_q == 0 ? 0 : (q_sequential ? n_q : 1);
  std::vector<int> row(kv.block_table ? static_cast<std::size_t>(kv.block_table->shape[1]) : 0);
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::string at = "cache_seqlens[" + text(b) + "]: " + text(lens[b]);
    if (lens[b] < 0) invalid_argument(at + " is negative");
    const std::int64_t end = lens[b] + std::max(n_new, q_last);
    if (end > max_keys)
      invalid_argument(at + " + " + text(std::max(n_new, q_last)) + " new rows pass the " + text(max_keys) +
                       " rows the cache holds per batch (max_pages · page_size)");
    if (!kv.block_table) continue;
    gpu_driver().copy_to_host(row.data(),
                              reinterpret_cast<DevicePtr>(static_cast<const int*>(kv.block_table->data) +
                                                          b * kv.block_table->strides[0]),
                              row.size() * 4);
    for (std::int64_t j = lens[b] / page_size; j * page_size < lens[b] + n_new; ++j)
      if (row[j] < 0 || row[j] >= num_pages)
        invalid_argument("block_table[" + text(b) + "][" + text(j) + "]: page " + text(row[j]) + " is past the cache's " +
                         text(num_pages) + " pages");
  }
}

std::uint64_t append_kernel_key(const PagedAppendSpec& s, const PagedAppendConfig& c) {
  return KeyPacker()
      .add(int(s.dtype), 4)
      .add(int(s.rotary), 2)
      .add(s.rotary_f32, 1)
      .add(c.threads, 10)
      .add(c.vec, 5)
      .value();
}

}  // namespace

PagedAppendCall prepare_paged_append(const TensorView& k_new, const TensorView& v_new, const TensorView& k_cache,
                                     const TensorView& v_cache, const PagedKV& kv, const PagedAppendOptions& options) {
  check_view(k_cache, "k_cache", 4);
  check_view(v_cache, "v_cache", 4);
  check_dtype_device(v_cache, "v_cache", k_cache, "k_cache");
  check_same_shape(v_cache, "v_cache", k_cache, "k_cache");
  check_tensor(k_new, "k_new", 4);
  check_tensor(v_new, "v_new", 4);
  check_dtype_device(k_new, "k_new", k_cache, "k_cache");
  check_dtype_device(v_new, "v_new", k_cache, "k_cache");
  check_same_shape(v_new, "v_new", k_new, "k_new");
  const std::int64_t batch = k_new.shape[0], heads_kv = k_new.shape[1], n_new = k_new.shape[2], d = k_new.shape[3];
  const std::int64_t num_pages = k_cache.shape[0], page_size = k_cache.shape[1];
  if (k_cache.shape[2] != heads_kv || k_cache.shape[3] != d)
    invalid_argument("k_new: shape " + shape_string(k_new) + " (b, h_kv, n_new, d) does not match k_cache " +
                     shape_string(k_cache) + " (num_pages, page_size, h_kv, d) in h_kv or d");
  const int device = k_cache.device;

  // Where the rows go.
  std::int64_t max_keys = page_size;
  if (kv.block_table) {
    check_index_tensor(*kv.block_table, "block_table", 2, device);
    if (kv.block_table->shape[0] != batch)
      invalid_argument("block_table: shape " + shape_string(*kv.block_table) + " must have k_new's batch " + text(batch) +
                       " rows");
    if (kv.block_table->shape[1] > 1 && kv.block_table->strides[1] != 1)
      invalid_argument("block_table: the pages of a row must be contiguous");
    max_keys = kv.block_table->shape[1] * page_size;
  } else if (num_pages < batch) {
    invalid_argument("k_cache: " + text(num_pages) + " cache rows for k_new's batch " + text(batch) +
                     " (without a block_table the caches are contiguous (b_cache >= b, n_cache, h_kv, d))");
  }
  if (max_keys > (std::int64_t{1} << 30)) invalid_argument("block_table: max_pages · page_size must be below 2^30");
  if (!kv.cache_seqlens) invalid_argument("cache_seqlens: missing (the append writes each batch's rows from there)");
  check_index_tensor(*kv.cache_seqlens, "cache_seqlens", 1, device);
  if (kv.cache_seqlens->shape[0] != batch)
    invalid_argument("cache_seqlens: shape " + shape_string(*kv.cache_seqlens) + " must be (batch) = (" + text(batch) +
                     ")");
  if (batch > 1 && kv.cache_seqlens->strides[0] != 1) invalid_argument("cache_seqlens: must be contiguous");

  // The rotary tables and the queries.
  const RotaryEmbedding& rot = options.rotary;
  PagedAppendCall call;
  call.device = device;
  call.spec.dtype = k_cache.dtype;
  std::int64_t rotary_dim = 0;
  if (rot.cos || rot.sin) {
    if (!rot.cos || !rot.sin) invalid_argument(std::string(rot.cos ? "rotary.sin" : "rotary.cos") + ": missing (give both tables)");
    check_view(*rot.cos, "rotary.cos", 2);
    check_view(*rot.sin, "rotary.sin", 2);
    if (rot.cos->dtype != k_cache.dtype && rot.cos->dtype != DType::f32)
      invalid_argument("rotary.cos: dtype " + std::string(dtype_name(rot.cos->dtype)) + " must be k_cache's " +
                       std::string(dtype_name(k_cache.dtype)) + " or fp32");
    if (rot.cos->device != device)
      invalid_argument("rotary.cos: on device " + text(rot.cos->device) + ", k_cache is on device " + text(device));
    check_dtype_device(*rot.sin, "rotary.sin", *rot.cos, "rotary.cos");
    check_same_shape(*rot.sin, "rotary.sin", *rot.cos, "rotary.cos");
    rotary_dim = 2 * rot.cos->shape[1];
    if (rotary_dim > d)
      invalid_argument("rotary.cos: shape " + shape_string(*rot.cos) + " gives rotary_dim " + text(rotary_dim) +
                       ", more than head_dim " + text(d));
    if (rot.cos->shape[0] < max_keys)
      invalid_argument("rotary.cos: " + text(rot.cos->shape[0]) + " positions, fewer than the " + text(max_keys) +
                       " rows the cache holds per batch (max_pages · page_size)");
    if (rot.cos->strides[0] > (std::int64_t{1} << 31) || rot.sin->strides[0] > (std::int64_t{1} << 31))
      invalid_argument("rotary.cos: rows must lie less than 2^31 elements apart");
    call.spec.rotary = rot.interleaved ? AppendRotary::pairs : AppendRotary::halves;
    call.spec.rotary_f32 = rot.cos->dtype == DType::f32 && k_cache.dtype != DType::f32;
  }
  TensorView q, q_out;
  if (options.q || options.q_out) {
    if (!options.q) invalid_argument("q: missing (q_out is given)");
    if (!rot.cos) invalid_argument("q: is rotated only with rotary tables (rotary.cos, rotary.sin)");
    q = *options.q;
    q_out = options.q_out ? *options.q_out : q;
    check_tensor(q, "q", 4);
    check_tensor(q_out, "q_out", 4);
    check_dtype_device(q, "q", k_cache, "k_cache");
    check_dtype_device(q_out, "q_out", q, "q");
    check_same_shape(q_out, "q_out", q, "q");
    if (q.shape[0] != batch || q.shape[3] != d)
      invalid_argument("q: shape " + shape_string(q) + " does not match k_new " + shape_string(k_new) +
                       " in batch or head_dim");
    if (q_out.data == q.data)
      for (int i = 0; i < 4; ++i)
        if (q.shape[i] > 1 && q_out.strides[i] != q.strides[i])
          invalid_argument("q_out: shares q's data with other strides (in place needs the same view)");
  }

  // The config.
  if (options.config.empty()) {
    call.config = paged_append_default_config(call.spec);
  } else {
    auto c = parse_paged_append_config(options.config);
    if (!c) invalid_argument("config: cannot parse '" + options.config + "' (e.g. ap:t128:v8)");
    call.config = *c;
  }
  if (auto why = check_paged_append_config_for_head_dim(call.spec, call.config, static_cast<int>(d)))
    invalid_argument((options.config.empty() ? "k_new: head_dim " + text(d) + " is unsupported: " : "config: ") + *why);

  PagedAppendParams& p = call.params;
  std::memset(&p, 0, sizeof p);
  p.k_new = k_new.data, p.v_new = v_new.data, p.k_cache = k_cache.data, p.v_cache = v_cache.data;
  p.block_table = kv.block_table ? static_cast<const int*>(kv.block_table->data) : nullptr;
  p.table_stride = kv.block_table ? kv.block_table->strides[0] : 0;
  p.cache_seqlens = static_cast<const int*>(kv.cache_seqlens->data);
  p.kn_stride_b = k_new.strides[0], p.kn_stride_h = k_new.strides[1], p.kn_stride_n = k_new.strides[2];
  p.vn_stride_b = v_new.strides[0], p.vn_stride_h = v_new.strides[1], p.vn_stride_n = v_new.strides[2];
  p.kc_stride_page = k_cache.strides[0], p.kc_stride_row = k_cache.strides[1], p.kc_stride_h = k_cache.strides[2];
  p.vc_stride_page = v_cache.strides[0], p.vc_stride_row = v_cache.strides[1], p.vc_stride_h = v_cache.strides[2];
  if (rot.cos) {
    p.cos = rot.cos->data, p.sin = rot.sin->data;
    p.cos_stride = rot.cos->strides[0], p.sin_stride = rot.sin->strides[0];
  }
  if (q.data) {
    p.q = q.data, p.q_out = q_out.data;
    p.q_stride_b = q.strides[0], p.q_stride_h = q.strides[1], p.q_stride_n = q.strides[2];
    p.qo_stride_b = q_out.strides[0], p.qo_stride_h = q_out.strides[1], p.qo_stride_n = q_out.strides[2];
    p.n_q = static_cast<int>(q.shape[2]), p.heads_q = static_cast<int>(q.shape[1]);
  }
  p.k_rows = batch * n_new * heads_kv;
  p.rows = p.k_rows + (q.data ? batch * q.shape[1] * q.shape[2] : 0);
  p.n_new = static_cast<int>(n_new), p.heads_kv = static_cast<int>(heads_kv), p.head_dim = static_cast<int>(d);
  p.rotary_dim = static_cast<int>(rotary_dim);
  p.page_size = static_cast<int>(page_size), p.max_keys = static_cast<int>(max_keys);
  p.q_sequential = rot.q_sequential ? 1 : 0;
  const int vec = call.config.vec;
  bool whole = d % vec == 0 && (call.spec.rotary != AppendRotary::halves || (rotary_dim / 2) % vec == 0);
  for (const TensorView* t : {&k_new, &v_new, &k_cache, &v_cache}) whole = whole && pieces_fit(*t, vec);
  if (q.data) whole = whole && pieces_fit(q, vec) && pieces_fit(q_out, vec);
  p.vectorized = whole ? 1 : 0;
  call.plan = paged_append_launch_plan(call.config, static_cast<int>(d), p.rows);
  const std::int64_t rows_per_block = call.config.threads / call.plan.row_group;
  if ((p.rows + rows_per_block - 1) / rows_per_block >= (std::int64_t{1} << 31))
    invalid_argument("k_new: " + text(p.rows) + " rows exceed kgen's launch limit");
  p.row_group = call.plan.row_group, p.row_group_log2 = call.plan.row_group_log2;

  if (check_indices_requested())
    check_append_indices(kv, batch, n_new, q.data ? q.shape[2] : 0, rot.q_sequential, page_size, max_keys, num_pages,
                         device);
  return call;
}

void attention_paged_append(const TensorView& k_new, const TensorView& v_new, const TensorView& k_cache,
                            const TensorView& v_cache, const PagedKV& kv, const PagedAppendOptions& options,
                            void* stream) {
  PagedAppendCall call = prepare_paged_append(k_new, v_new, k_cache, v_cache, kv, options);
  end_of_validation();
  const LoadedKernel& kernel = loaded_kernel({kPagedAppendOp, append_kernel_key(call.spec, call.config), call.device},
                                             [&] { return render_paged_append(call.spec, call.config); });
  use_primary_context(call.device);
  launch_kernel(kernel, call.plan.grid, &call.params, stream, "launch(paged_append)");
}

}  // namespace kgen
