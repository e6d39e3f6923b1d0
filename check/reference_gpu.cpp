#include "check/reference_gpu.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include "generator/attention_reference.h"
#include "kgen_device/reference/params.h"
#include "driver/gpu_driver.h"
#include "driver/device.h"
#include "jit/kernel_table.h"

namespace kgen {
namespace {

// Scratch of one launch pair: rows · n_k doubles, at most this many bytes.
constexpr std::size_t kScratchBytes = std::size_t(1) << 29;

// The reference kernels through runtime/jit/kernel_table, keyed by their role, dtype and order.
enum class ReferenceKernel { scores, softmax_pv, bwd_rows, bwd_keys };

template <class Render>
const LoadedKernel& load(int device, ReferenceKernel role, DType dtype, bool double_backward, Render render) {
  KeyPacker k;
  k.add(int(role), 3).add(int(dtype), 4).add(double_backward, 1);
  return loaded_kernel({"reference", k.value(), device}, render);
}

}  // namespace

void attention_forward_reference_gpu(const TensorView& q, const TensorView& k, const TensorView& v, float* o,
                                     float* lse, bool causal, double scale, void* stream,
                                     const std::vector<std::pair<int, int>>& heads) {
  const int device = q.device;
  use_primary_context(device);
  const GpuDriver& gpu = gpu_driver();
  const LoadedKernel& scores = load(device, ReferenceKernel::scores, q.dtype, false, [&] { return render_attention_reference_scores(q.dtype); });
  const LoadedKernel& softmax =
      load(device, ReferenceKernel::softmax_pv, q.dtype, false, [&] { return render_attention_reference_softmax_pv(q.dtype); });

  ReferenceAttentionParams p;
  std::memset(&p, 0, sizeof p);
  p.q = q.data, p.k = k.data, p.v = v.data, p.o = o, p.lse = lse;
  p.q_stride_b = q.strides[0], p.q_stride_h = q.strides[1], p.q_stride_n = q.strides[2];
  p.k_stride_b = k.strides[0], p.k_stride_h = k.strides[1], p.k_stride_n = k.strides[2];
  p.v_stride_b = v.strides[0], p.v_stride_h = v.strides[1], p.v_stride_n = v.strides[2];
  p.batch = int(q.shape[0]), p.heads_q = int(q.shape[1]), p.n_q = int(q.shape[2]), p.head_dim = int(q.shape[3]);
  p.heads_kv = int(k.shape[1]), p.n_k = int(k.shape[2]);
  p.head_group = p.heads_q / p.heads_kv;
  p.causal = causal ? 1 : 0;
  p.scale = scale > 0 ? scale : 1.0 / std::sqrt(double(p.head_dim));

  const int chunk = int(std::clamp<std::size_t>(kScratchBytes / (sizeof(double) * p.n_k), 1, 65535));
  const DevicePtr scratch = gpu.alloc(sizeof(double) * std::size_t(std::min(chunk, p.n_q)) * p.n_k, "reference scratch allocation");
  p.scores = reinterpret_cast<double*>(scratch);
  std::vector<std::pair<int, int>> todo = heads;
  if (todo.empty())
    for (int b = 0; b < p.batch; ++b)
      for (int h = 0; h < p.heads_q; ++h) todo.emplace_back(b, h);
  const GpuStream s = stream;
  try {
    for (auto [b, h] : todo)
      for (int row0 = 0; row0 < p.n_q; row0 += chunk) {
        p.batch_index = b, p.head_index = h, p.row0 = row0, p.rows = std::min(chunk, p.n_q - row0);
        unsigned gx = unsigned((p.n_k + scores.threads - 1) / scores.threads);
        launch_kernel(scores, {gx, unsigned(p.rows), 1}, &p, s, "launch(reference scores)");
        launch_kernel(softmax, {unsigned(p.rows), 1, 1}, &p, s, "launch(reference softmax_pv)");
      }
    gpu.synchronize(s, "reference kernels");
  } catch (...) {
    gpu.free(scratch);
    throw;
  }
  gpu.free(scratch);
}

namespace {

void set_strides(const TensorView& t, long long& b, long long& h, long long& n) {
  b = t.strides[0], h = t.strides[1], n = t.strides[2];
}

void require(bool ok, const std::string& what) {
  if (!ok) throw Error(Status::invalid_argument, "backward reference: " + what);
}

// Checks that `t` is a (b, h, n, d) view of `dtype` with a contiguous last dimension.
void require_view(const TensorView* t, const char* name, DType dtype, std::int64_t b, std::int64_t h, std::int64_t n,
                  std::int64_t d) {
  if (t == nullptr) return;
  require(t->ndim == 4 && t->shape[0] == b && t->shape[1] == h && t->shape[2] == n && t->shape[3] == d &&
              t->strides[3] == 1 && t->dtype == dtype && t->data != nullptr,
          std::string(name) + " must be a (" + std::to_string(b) + ", " + std::to_string(h) + ", " + std::to_string(n) +
              ", " + std::to_string(d) + ") " + std::string(dtype_name(dtype)) + " tensor with unit last stride");
}

struct Cotangents {
  const TensorView *gq, *gk, *gv;
};

void run_backward_reference(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& d_o,
                            const Cotangents* g, float* q_out, float* k_out, float* v_out, float* do_out, bool causal,
                            double scale, void* stream, const std::vector<std::pair<int, int>>& groups) {
  const bool double_backward = g != nullptr;
  require(q.ndim == 4 && k.ndim == 4, "q and k must be 4-d");
  const std::int64_t b = q.shape[0], hq = q.shape[1], nq = q.shape[2], d = q.shape[3], hkv = k.shape[1], nk = k.shape[2];
  require(hkv > 0 && hq % hkv == 0, "heads_q must be a multiple of heads_kv");
  require(d >= 1 && d <= kReferenceBwdMaxHeadDim, "head_dim must be in [1, " + std::to_string(kReferenceBwdMaxHeadDim) + "]");
  require_view(&q, "q", q.dtype, b, hq, nq, d);
  require_view(&d_o, "d_o", q.dtype, b, hq, nq, d);
  require_view(&k, "k", q.dtype, b, hkv, nk, d);
  require_view(&v, "v", q.dtype, b, hkv, nk, d);
  if (double_backward) {
    require_view(g->gq, "gq", q.dtype, b, hq, nq, d);
    require_view(g->gk, "gk", q.dtype, b, hkv, nk, d);
    require_view(g->gv, "gv", q.dtype, b, hkv, nk, d);
  }
  const int device = q.device;
  use_primary_context(device);
  const GpuDriver& gpu = gpu_driver();
  const LoadedKernel& rows = load(device, ReferenceKernel::bwd_rows, q.dtype, double_backward,
                                  [&] { return render_attention_reference_bwd_rows(q.dtype, double_backward); });
  const LoadedKernel& keys = load(device, ReferenceKernel::bwd_keys, q.dtype, double_backward,
                                  [&] { return render_attention_reference_bwd_keys(q.dtype, double_backward); });

  ReferenceAttentionBwdParams p;
  std::memset(&p, 0, sizeof p);
  p.q = q.data, p.k = k.data, p.v = v.data, p.d_o = d_o.data;
  set_strides(q, p.q_stride_b, p.q_stride_h, p.q_stride_n);
  set_strides(k, p.k_stride_b, p.k_stride_h, p.k_stride_n);
  set_strides(v, p.v_stride_b, p.v_stride_h, p.v_stride_n);
  set_strides(d_o, p.do_stride_b, p.do_stride_h, p.do_stride_n);
  if (double_backward) {
    if (g->gq) p.gq = g->gq->data, set_strides(*g->gq, p.gq_stride_b, p.gq_stride_h, p.gq_stride_n);
    if (g->gk) p.gk = g->gk->data, set_strides(*g->gk, p.gk_stride_b, p.gk_stride_h, p.gk_stride_n);
    if (g->gv) p.gv = g->gv->data, set_strides(*g->gv, p.gv_stride_b, p.gv_stride_h, p.gv_stride_n);
  }
  p.q_out = q_out, p.k_out = k_out, p.v_out = v_out, p.do_out = do_out;
  p.batch = int(b), p.heads_q = int(hq), p.heads_kv = int(hkv), p.n_q = int(nq), p.n_k = int(nk), p.head_dim = int(d);
  p.head_group = int(hq / hkv);
  p.causal = causal ? 1 : 0;
  p.scale = scale > 0 ? scale : 1.0 / std::sqrt(double(d));

  std::vector<std::pair<int, int>> todo = groups;
  if (todo.empty())
    for (int ib = 0; ib < p.batch; ++ib)
      for (int h = 0; h < p.heads_kv; ++h) todo.emplace_back(ib, h);
  const unsigned row_blocks = unsigned(p.head_group) * unsigned(p.n_q);
  if (row_blocks == 0 || p.n_k == 0 || todo.empty()) return;
  const DevicePtr stats = gpu.alloc(sizeof(double) * 4 * row_blocks, "backward reference stats allocation");
  p.stats = reinterpret_cast<double*>(stats);
  const GpuStream s = stream;
  try {
    for (auto [ib, h] : todo) {
      require(ib >= 0 && ib < p.batch && h >= 0 && h < p.heads_kv, "group out of range");
      p.batch_index = ib, p.kv_head_index = h;
      launch_kernel(rows, {row_blocks, 1, 1}, &p, s, "launch(backward reference rows)");
      launch_kernel(keys, {unsigned(p.n_k), 1, 1}, &p, s, "launch(backward reference keys)");
    }
    gpu.synchronize(s, "backward reference kernels");
  } catch (...) {
    try {
      gpu.synchronize(s, "backward reference kernels");
    } catch (...) {
    }
    gpu.free(stats);
    throw;
  }
  gpu.free(stats);
}

}  // namespace

void attention_backward_reference_gpu(const TensorView& q, const TensorView& k, const TensorView& v,
                                      const TensorView& d_o, float* dq, float* dk, float* dv, bool causal,
                                      double scale, void* stream, const std::vector<std::pair<int, int>>& groups) {
  run_backward_reference(q, k, v, d_o, nullptr, dq, dk, dv, nullptr, causal, scale, stream, groups);
}

void attention_double_backward_reference_gpu(const TensorView& q, const TensorView& k, const TensorView& v,
                                             const TensorView& d_o, const TensorView* gq, const TensorView* gk,
                                             const TensorView* gv, float* q_bar, float* k_bar, float* v_bar,
                                             float* do_bar, bool causal, double scale, void* stream,
                                             const std::vector<std::pair<int, int>>& groups) {
  const Cotangents g{gq, gk, gv};
  run_backward_reference(q, k, v, d_o, &g, q_bar, k_bar, v_bar, do_bar, causal, scale, stream, groups);
}

}  // namespace kgen
