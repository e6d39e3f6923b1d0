#include "runtime/reference_gpu.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>

#include "generator/attention_reference.h"
#include "kgen/reference/params.h"
#include "runtime/cuda_driver.h"
#include "runtime/device.h"
#include "runtime/kernel_builder.h"

namespace kgen {
namespace {

// Scratch of one launch pair: rows · n_k doubles, at most this many bytes.
constexpr std::size_t kScratchBytes = std::size_t(1) << 29;

LoadedKernel load(int device, const KernelSource& src) {
  static std::mutex mutex;
  static std::map<std::pair<int, std::string>, LoadedKernel> loaded;
  std::lock_guard lock(mutex);
  auto key = std::make_pair(device, src.variant);
  if (auto it = loaded.find(key); it != loaded.end()) return it->second;
  BuildOutcome b = KernelBuilder::global().build(src, device_info(device).target);
  return loaded[key] = load_kernel(device, b.image, src.entry, src.threads, src.smem_bytes);
}

}  // namespace

void attention_forward_reference_gpu(const TensorView& q, const TensorView& k, const TensorView& v, float* o,
                                     float* lse, bool causal, double scale, void* stream,
                                     const std::vector<std::pair<int, int>>& heads) {
  const int device = q.device;
  use_primary_context(device);
  const CudaDriver& cu = cuda_driver();
  LoadedKernel scores = load(device, render_attention_reference_scores(q.dtype));
  LoadedKernel softmax = load(device, render_attention_reference_softmax_pv(q.dtype));

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
  CUdeviceptr scratch = 0;
  cuda_check(cu.cuMemAlloc(&scratch, sizeof(double) * std::size_t(std::min(chunk, p.n_q)) * p.n_k), "cuMemAlloc(reference scratch)");
  p.scores = reinterpret_cast<double*>(scratch);
  std::vector<std::pair<int, int>> todo = heads;
  if (todo.empty())
    for (int b = 0; b < p.batch; ++b)
      for (int h = 0; h < p.heads_q; ++h) todo.emplace_back(b, h);
  auto s = static_cast<CUstream>(stream);
  try {
    for (auto [b, h] : todo)
      for (int row0 = 0; row0 < p.n_q; row0 += chunk) {
        p.batch_index = b, p.head_index = h, p.row0 = row0, p.rows = std::min(chunk, p.n_q - row0);
        void* args[] = {&p};
        unsigned gx = unsigned((p.n_k + scores.threads - 1) / scores.threads);
        cuda_check(cu.cuLaunchKernel(scores.function, gx, unsigned(p.rows), 1, scores.threads, 1, 1, 0, s, args, nullptr),
                   "cuLaunchKernel(reference scores)");
        cuda_check(cu.cuLaunchKernel(softmax.function, unsigned(p.rows), 1, 1, softmax.threads, 1, 1, 0, s, args, nullptr),
                   "cuLaunchKernel(reference softmax_pv)");
      }
    cuda_check(cu.cuStreamSynchronize(s), "reference kernels");
  } catch (...) {
    cu.cuMemFree(scratch);
    throw;
  }
  cu.cuMemFree(scratch);
}

}  // namespace kgen
