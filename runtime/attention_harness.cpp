#include "runtime/attention_harness.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <memory>
#include <optional>
#include <cmath>
#include <random>
#include <sstream>

#include "kgen/kgen.hpp"
#include "runtime/cuda_driver.h"
#include "runtime/device.h"
#include "runtime/host_convert.h"
#include "runtime/reference_cpu.h"
#include "runtime/reference_gpu.h"

namespace kgen {
namespace {

// Reference work (multiply-adds) above which only sampled rows are checked on the CPU.
constexpr double kFullCheckWork = 4e8;
constexpr int kSampledRowsPerHead = 48;

class DeviceBuffer {
 public:
  explicit DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
    cuda_check(cuda_driver().cuMemAlloc(&ptr_, std::max<std::size_t>(bytes, 16)), "cuMemAlloc");
  }
  ~DeviceBuffer() {
    if (ptr_) cuda_driver().cuMemFree(ptr_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return reinterpret_cast<void*>(ptr_); }
  std::size_t bytes() const { return bytes_; }
  void upload(const void* host) { cuda_check(cuda_driver().cuMemcpyHtoD(ptr_, host, bytes_), "cuMemcpyHtoD"); }
  void download(void* host) const { cuda_check(cuda_driver().cuMemcpyDtoH(host, ptr_, bytes_), "cuMemcpyDtoH"); }
  // Fills with a NaN pattern of the element type, so skipped stores fail the check.
  void poison(DType t) {
    unsigned pattern = t == DType::f32 ? 0x7fc00000u : t == DType::f16 ? 0x7e007e00u : 0x7fc07fc0u;
    cuda_check(cuda_driver().cuMemsetD32(ptr_, pattern, bytes_ / 4), "cuMemsetD32");
  }

 private:
  CUdeviceptr ptr_ = 0;
  std::size_t bytes_;
};

// One (b, h, n, d) tensor's host copy in its memory layout, and its view description.
struct HostTensor {
  int b, h, n, d;
  Layout layout;
  DType dtype;
  std::vector<std::uint8_t> bytes;
  std::size_t offset(int ib, int ih, int in, int id) const {
    std::size_t e = layout == Layout::bhnd ? ((std::size_t(ib) * h + ih) * n + in) * d + id
                                           : ((std::size_t(ib) * n + in) * h + ih) * d + id;
    return e * dtype_bytes(dtype);
  }
  void set(std::size_t byte_off, float v) {
    if (dtype == DType::f32) {
      std::memcpy(&bytes[byte_off], &v, 4);
    } else {
      std::uint16_t bits = dtype == DType::f16 ? float_to_half_bits(v) : float_to_bf16_bits(v);
      std::memcpy(&bytes[byte_off], &bits, 2);
    }
  }
  double get(std::size_t byte_off) const {
    if (dtype == DType::f32) {
      float f;
      std::memcpy(&f, &bytes[byte_off], 4);
      return f;
    }
    std::uint16_t bits;
    std::memcpy(&bits, &bytes[byte_off], 2);
    return dtype == DType::f16 ? half_bits_to_float(bits) : bf16_bits_to_float(bits);
  }
  TensorView view(void* data, int device) const {
    TensorView t;
    t.data = data;
    t.dtype = dtype;
    t.ndim = 4;
    t.device = device;
    t.shape[0] = b, t.shape[1] = h, t.shape[2] = n, t.shape[3] = d;
    if (layout == Layout::bhnd) {
      t.strides[0] = std::int64_t(h) * n * d, t.strides[1] = std::int64_t(n) * d, t.strides[2] = d;
    } else {
      t.strides[0] = std::int64_t(n) * h * d, t.strides[1] = d, t.strides[2] = std::int64_t(h) * d;
    }
    t.strides[3] = 1;
    return t;
  }
};

HostTensor make_host(int b, int h, int n, int d, Layout layout, DType dtype) {
  HostTensor t{b, h, n, d, layout, dtype, {}};
  t.bytes.resize(std::size_t(b) * h * n * d * dtype_bytes(dtype));
  return t;
}

// Fills with random normal values rounded to the dtype and returns them in fp64, (b, h, n, d).
std::vector<double> fill_random(HostTensor& t, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<double> logical(std::size_t(t.b) * t.h * t.n * t.d);
  std::size_t i = 0;
  for (int ib = 0; ib < t.b; ++ib)
    for (int ih = 0; ih < t.h; ++ih)
      for (int in = 0; in < t.n; ++in)
        for (int id = 0; id < t.d; ++id, ++i) {
          std::size_t off = t.offset(ib, ih, in, id);
          t.set(off, normal(rng));
          logical[i] = t.get(off);
        }
  return logical;
}

struct InputSet {
  HostTensor q, k, v;
  std::vector<double> q64, k64, v64;
  DeviceBuffer dq, dk, dv, dout, dlse;
  InputSet(const AttentionCase& c, std::mt19937_64& rng)
      : q(make_host(c.batch, c.heads_q, c.n_q, c.head_dim, c.layout, c.dtype)),
        k(make_host(c.batch, c.heads_kv, c.n_k, c.head_dim, c.layout, c.dtype)),
        v(make_host(c.batch, c.heads_kv, c.n_k, c.head_dim, c.layout, c.dtype)),
        q64(fill_random(q, rng)), k64(fill_random(k, rng)), v64(fill_random(v, rng)),
        dq(q.bytes.size()), dk(k.bytes.size()), dv(v.bytes.size()), dout(q.bytes.size()),
        dlse(std::size_t(c.batch) * c.heads_q * c.n_q * 4) {
    dq.upload(q.bytes.data());
    dk.upload(k.bytes.data());
    dv.upload(v.bytes.data());
  }
  void run(const AttentionCase& c, int device, CUstream stream) {
    TensorView lse = make_contiguous_view(dlse.get(), DType::f32, 3,
                                          std::array<std::int64_t, 3>{c.batch, c.heads_q, c.n_q}.data(), device);
    AttentionOptions opt{c.scale, c.causal, c.config};
    attention_forward(q.view(dq.get(), device), k.view(dk.get(), device), v.view(dv.get(), device),
                      q.view(dout.get(), device), &lse, opt, stream);
  }
};

std::vector<int> rows_to_check(const AttentionCase& c) {
  double work = double(c.batch) * c.heads_q * c.n_q * c.n_k * c.head_dim;
  std::vector<int> rows;
  if (work <= kFullCheckWork || c.n_q <= kSampledRowsPerHead) {
    for (int i = 0; i < c.n_q; ++i) rows.push_back(i);
    return rows;
  }
  for (int s = 0; s < kSampledRowsPerHead; ++s)
    rows.push_back(int((long long)(c.n_q - 1) * s / (kSampledRowsPerHead - 1)));
  return rows;
}

// The reference for one input set, on the rows a check compares: (b, h, i) triples.
struct ReferenceRows {
  std::vector<std::array<int, 3>> rows;
  std::vector<double> o, lse;
  std::string description;
};

ReferenceRows compute_reference(const AttentionCase& c, InputSet& in, int device, CUstream stream) {
  ReferenceRows ref;
  std::vector<int> rows = rows_to_check(c);
  const bool sampled = rows.size() != std::size_t(c.n_q);
  if (sampled) {
    // Every row of a few heads against the GPU reference (first, last and two between)...
    std::vector<std::pair<int, int>> heads;
    const int pairs = c.batch * c.heads_q;
    for (int s : {0, pairs / 3, (2 * pairs) / 3, pairs - 1})
      if (heads.empty() || heads.back() != std::make_pair(s / c.heads_q, s % c.heads_q))
        heads.emplace_back(s / c.heads_q, s % c.heads_q);
    DeviceBuffer ro(std::size_t(c.batch) * c.heads_q * c.n_q * c.head_dim * 4), rl(std::size_t(c.batch) * c.heads_q * c.n_q * 4);
    attention_forward_reference_gpu(in.q.view(in.dq.get(), device), in.k.view(in.dk.get(), device),
                                    in.v.view(in.dv.get(), device), static_cast<float*>(ro.get()),
                                    static_cast<float*>(rl.get()), c.causal, c.scale, stream, heads);
    std::vector<float> gpu_o(ro.bytes() / 4), gpu_l(rl.bytes() / 4);
    ro.download(gpu_o.data());
    rl.download(gpu_l.data());
    for (auto [b, h] : heads)
      for (int i = 0; i < c.n_q; ++i) {
        const std::size_t row = (std::size_t(b) * c.heads_q + h) * c.n_q + i;
        ref.o.insert(ref.o.end(), gpu_o.begin() + row * c.head_dim, gpu_o.begin() + (row + 1) * c.head_dim);
        ref.lse.push_back(gpu_l[row]);
        ref.rows.push_back({b, h, i});
      }
    ref.description = "gpu-fp64 all rows of " + std::to_string(heads.size()) + " heads + cpu-fp64 sampled rows of all heads";
  } else {
    ref.description = "cpu-fp64 all rows";
  }
  // ...and the chosen rows of every head against the fp64 CPU reference.
  const int group = c.heads_q / c.heads_kv;
  for (int b = 0; b < c.batch; ++b)
    for (int h = 0; h < c.heads_q; ++h) {
      const std::size_t d = c.head_dim;
      const std::size_t kv_base = (std::size_t(b) * c.heads_kv + h / group) * c.n_k * d;
      const std::size_t q_base = (std::size_t(b) * c.heads_q + h) * c.n_q * d;
      for (int i : rows) {
        // Row i of the full problem is a one-row problem over the keys it may see.
        const int visible = c.causal ? std::min(c.n_k, i + (c.n_k - c.n_q) + 1) : c.n_k;
        if (visible <= 0) {
          ref.o.insert(ref.o.end(), d, 0.0);
          ref.lse.push_back(-INFINITY);
        } else {
          AttentionProblem row;
          row.n_q = 1, row.n_k = visible, row.head_dim = c.head_dim, row.scale = c.scale;
          row.q.assign(in.q64.begin() + q_base + i * d, in.q64.begin() + q_base + (i + 1) * d);
          row.k.assign(in.k64.begin() + kv_base, in.k64.begin() + kv_base + visible * d);
          row.v.assign(in.v64.begin() + kv_base, in.v64.begin() + kv_base + visible * d);
          auto r = attention_forward_cpu(row);
          ref.o.insert(ref.o.end(), r.o.begin(), r.o.end());
          ref.lse.push_back(r.lse[0]);
        }
        ref.rows.push_back({b, h, i});
      }
    }
  return ref;
}

// Runs `c` (its config) once on NaN-poisoned outputs and compares the reference rows.
AttentionCheck run_and_compare(const AttentionCase& c, InputSet& in, const ReferenceRows& ref, int device,
                               CUstream stream) {
  in.dout.poison(c.dtype);
  in.dlse.poison(DType::f32);
  in.run(c, device, stream);
  cuda_check(cuda_driver().cuStreamSynchronize(stream), "kernel execution (cuStreamSynchronize)");
  HostTensor o = make_host(c.batch, c.heads_q, c.n_q, c.head_dim, c.layout, c.dtype);
  in.dout.download(o.bytes.data());
  std::vector<float> lse(std::size_t(c.batch) * c.heads_q * c.n_q);
  in.dlse.download(lse.data());
  std::vector<double> out_o, out_l;
  out_o.reserve(ref.o.size());
  for (auto [b, h, i] : ref.rows) {
    for (int x = 0; x < c.head_dim; ++x) out_o.push_back(o.get(o.offset(b, h, i, x)));
    out_l.push_back(lse[(std::size_t(b) * c.heads_q + h) * c.n_q + i]);
  }
  AttentionCheck check;
  check.config = c.config;
  check.reference = ref.description;
  Tolerance tol = tolerance_for(c.dtype);
  check.o = compare(out_o, ref.o, tol);
  // LSE is fp32 whatever the input dtype; its error follows the scores' precision.
  check.lse = compare(out_l, ref.lse, tol);
  check.pass = check.o.pass && check.lse.pass;
  return check;
}

struct Stream {
  CUstream s = nullptr;
  Stream() { cuda_check(cuda_driver().cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate"); }
  ~Stream() { cuda_driver().cuStreamDestroy(s); }
};

}  // namespace

std::string to_string(const AttentionCase& c) {
  std::ostringstream s;
  s << dtype_name(c.dtype) << " b" << c.batch << " hq" << c.heads_q << " hkv" << c.heads_kv << " nq" << c.n_q
    << " nk" << c.n_k << " d" << c.head_dim << (c.causal ? " causal" : "") << (c.layout == Layout::bnhd ? " bnhd" : " bhnd");
  if (!c.config.empty()) s << " " << c.config;
  return s.str();
}

double attention_forward_flops(const AttentionCase& c) {
  double f = 4.0 * c.batch * c.heads_q * double(c.n_q) * c.n_k * c.head_dim;
  return c.causal ? f / 2 : f;
}

struct AttentionForwardBench::Impl {
  AttentionCase problem;
  int device;
  Stream stream;
  std::mt19937_64 rng;
  std::vector<std::unique_ptr<InputSet>> sets;
  std::optional<ReferenceRows> reference;
  Impl(const AttentionCase& c, int dev) : problem(c), device(dev), rng(c.seed) {
    sets.push_back(std::make_unique<InputSet>(c, rng));
  }
  AttentionCase with_config(const std::string& config) const {
    AttentionCase c = problem;
    c.config = config;
    return c;
  }
};

AttentionForwardBench::AttentionForwardBench(const AttentionCase& c, int device) {
  use_primary_context(device);
  impl_ = std::make_unique<Impl>(c, device);
}

AttentionForwardBench::~AttentionForwardBench() = default;

const AttentionCase& AttentionForwardBench::problem() const { return impl_->problem; }

AttentionCheck AttentionForwardBench::check(const std::string& config) {
  Impl& m = *impl_;
  use_primary_context(m.device);
  if (!m.reference) m.reference = compute_reference(m.problem, *m.sets[0], m.device, m.stream.s);
  return run_and_compare(m.with_config(config), *m.sets[0], *m.reference, m.device, m.stream.s);
}

Timing AttentionForwardBench::time(const std::string& config, int warmup, int reps) {
  Impl& m = *impl_;
  use_primary_context(m.device);
  const AttentionCase c = m.with_config(config);
  std::size_t set_bytes = m.sets[0]->dq.bytes() * 2 + m.sets[0]->dk.bytes() * 2;
  while (m.sets.size() < 8 && m.sets.size() * set_bytes < 2 * std::size_t(device_info(m.device).l2_bytes))
    m.sets.push_back(std::make_unique<InputSet>(m.problem, m.rng));
  const CudaDriver& cu = cuda_driver();
  for (int i = 0; i < warmup; ++i) m.sets[i % m.sets.size()]->run(c, m.device, m.stream.s);
  std::vector<CUevent> events(2 * reps);
  for (auto& e : events) cuda_check(cu.cuEventCreate(&e, CU_EVENT_DEFAULT), "cuEventCreate");
  for (int r = 0; r < reps; ++r) {
    cu.cuEventRecord(events[2 * r], m.stream.s);
    m.sets[r % m.sets.size()]->run(c, m.device, m.stream.s);
    cu.cuEventRecord(events[2 * r + 1], m.stream.s);
  }
  CUresult sync = cu.cuStreamSynchronize(m.stream.s);
  std::vector<double> ms(reps);
  for (int r = 0; r < reps && sync == CUDA_SUCCESS; ++r) {
    float t = 0;
    cu.cuEventElapsedTime(&t, events[2 * r], events[2 * r + 1]);
    ms[r] = t;
  }
  for (auto& e : events) cu.cuEventDestroy(e);
  cuda_check(sync, "timed runs");
  std::sort(ms.begin(), ms.end());
  double mean = 0, var = 0;
  for (double x : ms) mean += x / reps;
  for (double x : ms) var += (x - mean) * (x - mean) / std::max(1, reps - 1);
  Timing t;
  t.median_ms = ms[ms.size() / 2], t.p20_ms = ms[ms.size() / 5], t.p80_ms = ms[(ms.size() * 4) / 5];
  t.mean_ms = mean, t.std_ms = std::sqrt(var), t.reps = reps;
  return t;
}

AttentionCheck check_attention_forward(const AttentionCase& c, int device) {
  AttentionForwardBench bench(c, device);
  return bench.check(c.config);
}

AttentionCheck check_reference_gpu_against_cpu(const AttentionCase& c, int device) {
  use_primary_context(device);
  std::mt19937_64 rng(c.seed);
  InputSet in(c, rng);
  Stream stream;
  const std::size_t rows = std::size_t(c.batch) * c.heads_q * c.n_q;
  DeviceBuffer ro(rows * c.head_dim * 4), rl(rows * 4);
  ro.poison(DType::f32);
  rl.poison(DType::f32);
  attention_forward_reference_gpu(in.q.view(in.dq.get(), device), in.k.view(in.dk.get(), device),
                                  in.v.view(in.dv.get(), device), static_cast<float*>(ro.get()),
                                  static_cast<float*>(rl.get()), c.causal, c.scale, stream.s);
  std::vector<float> gpu_o(rows * c.head_dim), gpu_l(rows);
  ro.download(gpu_o.data());
  rl.download(gpu_l.data());
  AttentionProblem p;
  p.batch = c.batch, p.heads_q = c.heads_q, p.heads_kv = c.heads_kv, p.n_q = c.n_q, p.n_k = c.n_k;
  p.head_dim = c.head_dim, p.causal = c.causal, p.scale = c.scale;
  p.q = in.q64, p.k = in.k64, p.v = in.v64;
  AttentionForwardReference ref = attention_forward_cpu(p);
  AttentionCheck check;
  check.reference = "cpu-fp64 all rows";
  // The GPU reference accumulates in fp64 and stores fp32: fp32 rounding is the only error.
  Tolerance tol = tolerance_for(DType::f32);
  check.o = compare(std::vector<double>(gpu_o.begin(), gpu_o.end()), ref.o, tol);
  check.lse = compare(std::vector<double>(gpu_l.begin(), gpu_l.end()), ref.lse, tol);
  check.pass = check.o.pass && check.lse.pass;
  return check;
}


}  // namespace kgen
