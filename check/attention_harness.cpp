#include "check/attention_harness.h"
#include "check/harness_benches.h"
#include "ops/attention_tuning.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <memory>
#include <optional>
#include <cmath>
#include <random>
#include <sstream>

#include "kgen/kgen.hpp"
#include "driver/device.h"
#include "check/harness_support.h"
#include "check/host_convert.h"
#include "check/reference_cpu.h"
#include "check/reference_gpu.h"

namespace kgen {
namespace {

// Reference work (multiply-adds) above which only sampled rows are checked on the CPU.
constexpr double kFullCheckWork = 4e8;
constexpr int kSampledRowsPerHead = 48;

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
  void run(const AttentionCase& c, int device, GpuStream stream) {
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

AttentionReferenceRows compute_reference(const AttentionCase& c, InputSet& in, int device, GpuStream stream) {
  AttentionReferenceRows ref;
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
  append_attention_forward_cpu_rows(c, in.q64, in.k64, in.v64, rows, ref);
  return ref;
}

// Runs `c` (its config) once on NaN-poisoned outputs and compares the reference rows.
HarnessCheck run_and_compare(const AttentionCase& c, InputSet& in, const AttentionReferenceRows& ref, int device,
                             GpuStream stream) {
  in.dout.poison(c.dtype);
  in.dlse.poison(DType::f32);
  in.run(c, device, stream);
  gpu_driver().synchronize(stream, "kernel execution");
  AttentionForwardOutputs out{make_host(c.batch, c.heads_q, c.n_q, c.head_dim, c.layout, c.dtype),
                              std::vector<float>(std::size_t(c.batch) * c.heads_q * c.n_q)};
  in.dout.download(out.o.bytes.data());
  in.dlse.download(out.lse.data());
  return compare_attention_forward_outputs(c, out, ref);
}

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

void append_attention_forward_cpu_rows(const AttentionCase& c, const std::vector<double>& q64,
                                       const std::vector<double>& k64, const std::vector<double>& v64,
                                       const std::vector<int>& rows, AttentionReferenceRows& ref) {
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
          row.q.assign(q64.begin() + q_base + i * d, q64.begin() + q_base + (i + 1) * d);
          row.k.assign(k64.begin() + kv_base, k64.begin() + kv_base + visible * d);
          row.v.assign(v64.begin() + kv_base, v64.begin() + kv_base + visible * d);
          auto r = attention_forward_cpu(row);
          ref.o.insert(ref.o.end(), r.o.begin(), r.o.end());
          ref.lse.push_back(r.lse[0]);
        }
        ref.rows.push_back({b, h, i});
      }
    }
}

HarnessCheck compare_attention_forward_outputs(const AttentionCase& c, const AttentionForwardOutputs& out,
                                               const AttentionReferenceRows& ref) {
  std::vector<double> out_o, out_l;
  out_o.reserve(ref.o.size());
  for (auto [b, h, i] : ref.rows) {
    for (int x = 0; x < c.head_dim; ++x) out_o.push_back(out.o.get(out.o.offset(b, h, i, x)));
    out_l.push_back(out.lse[(std::size_t(b) * c.heads_q + h) * c.n_q + i]);
  }
  HarnessCheck check;
  check.config = c.config;
  check.reference = ref.description;
  const Tolerance tol = tolerance_for(c.dtype);
  auto row_name = [&](std::size_t r) { return bhi_name(ref.rows[r][0], ref.rows[r][1], ref.rows[r][2]); };
  check.add("o", compare(out_o, ref.o, tol, c.head_dim), row_name);
  // LSE is fp32 whatever the input dtype; its error follows the scores' precision. Each value is
  // one attention row's statistic: a row of its own.
  check.add("lse", compare(out_l, ref.lse, tol, 1), row_name);
  check.finish();
  return check;
}

struct AttentionForwardBench::Impl {
  AttentionCase problem;
  int device;
  Stream stream;
  std::mt19937_64 rng;
  std::vector<std::unique_ptr<InputSet>> sets;
  std::optional<AttentionReferenceRows> reference;
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

HarnessCheck AttentionForwardBench::check(const std::string& config) {
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
  return time_runs([&](int r) { m.sets[r % m.sets.size()]->run(c, m.device, m.stream.s); }, warmup, reps, m.stream.s);
}

HarnessCheck check_attention_forward(const AttentionCase& c, int device) {
  AttentionForwardBench bench(c, device);
  return bench.check(c.config);
}

HarnessCheck check_reference_gpu_against_cpu(const AttentionCase& c, int device) {
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
  HarnessCheck check;
  check.reference = "cpu-fp64 all rows";
  // The GPU reference accumulates in fp64 and stores fp32: fp32 rounding is the only error.
  Tolerance tol = tolerance_for(DType::f32);
  // Rows in (b, h, i) order, every one of them.
  auto row_name = [&](std::size_t r) {
    return bhi_name(int(r / (std::size_t(c.heads_q) * c.n_q)), int(r / c.n_q % c.heads_q), int(r % c.n_q));
  };
  check.add("o", compare(std::vector<double>(gpu_o.begin(), gpu_o.end()), ref.o, tol, c.head_dim), row_name);
  check.add("lse", compare(std::vector<double>(gpu_l.begin(), gpu_l.end()), ref.lse, tol, 1), row_name);
  check.finish();
  return check;
}

namespace {

// attention_fwd's tuner bench (check/harness_benches.h).
const bool forward_tuner_bench = install_harness_bench(
    "attention_fwd",
    [](const TuningProblem& p, int device) -> std::unique_ptr<HarnessBench> {
      return std::make_unique<AttentionForwardBench>(described_case(attention_case_of(p), p), device);
    },
    [](const TuningProblem& p, double ms) { return tflops_of(attention_forward_flops(described_case(attention_case_of(p), p)), ms); });

}  // namespace

}  // namespace kgen
