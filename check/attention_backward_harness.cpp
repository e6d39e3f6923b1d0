#include "check/attention_backward_harness.h"
#include "check/harness_benches.h"
#include "ops/attention_tuning.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <optional>
#include <span>
#include <sstream>
#include <stdexcept>

#include "driver/device.h"
#include "check/harness_support.h"
#include "check/reference_cpu.h"
#include "check/reference_gpu.h"

namespace kgen {
namespace {


// b·h_q·n_q·n_k·d up to which the fp64 CPU reference checks every element (its dense double
// backward does ~20 such products: about a second of CPU at the bound).
constexpr double kCpuReferenceWork = 2e7;
// Above it, the GPU reference covers every group while b·h_q·n_q·n_k·d stays under this (about
// a second on an H100/H200), else evenly spread groups that fit it.
constexpr double kGpuReferenceWork = 2e11;

// Rows shaped like q, (b, h_q, n_q), or like k, (b, h_kv, n_k).
enum class Side { q, k };

struct OutputSpec {
  const char* name;
  Side side;
};
constexpr std::array<OutputSpec, 3> kBackwardOutputs = {{{"dq", Side::q}, {"dk", Side::k}, {"dv", Side::k}}};
constexpr std::array<OutputSpec, 4> kDoubleBackwardOutputs = {
    {{"q_bar", Side::q}, {"k_bar", Side::k}, {"v_bar", Side::k}, {"do_bar", Side::q}}};

std::vector<OutputSpec> outputs_of(bool double_backward) {
  if (double_backward) return {kDoubleBackwardOutputs.begin(), kDoubleBackwardOutputs.end()};
  return {kBackwardOutputs.begin(), kBackwardOutputs.end()};
}

int heads_of(const AttentionCase& c, Side side) { return side == Side::q ? c.heads_q : c.heads_kv; }
int rows_of(const AttentionCase& c, Side side) { return side == Side::q ? c.n_q : c.n_k; }

// One input of the problem: host copy in the case's layout, fp64 logical values, and its device
// buffer (null for an absent cotangent).
struct Tensor {
  HostTensor host;
  std::vector<double> logical;
  std::unique_ptr<DeviceBuffer> dev;
  bool rows_expanded = false;  // viewed with a zero stride along n: every row is row 0
  bool present() const { return dev != nullptr; }
  TensorView view(int device) const {
    TensorView t = host.view(dev ? dev->get() : nullptr, device);
    if (rows_expanded) t.strides[2] = 0;
    return t;
  }
  // From now on a zero-stride view of each (batch, head)'s row 0, which the logical values repeat.
  void expand_rows() {
    rows_expanded = true;
    const std::size_t row = host.d, rows = host.n;
    for (std::size_t bh = 0; bh < std::size_t(host.b) * host.h; ++bh)
      for (std::size_t r = 1; r < rows; ++r)
        std::copy_n(&logical[bh * rows * row], row, &logical[(bh * rows + r) * row]);
  }
};

Tensor make_tensor(const AttentionCase& c, Side side, bool present, std::mt19937_64& rng) {
  Tensor t{make_host(c.batch, heads_of(c, side), rows_of(c, side), c.head_dim, c.layout, c.dtype), {}, nullptr};
  if (!present) return t;
  t.dev = std::make_unique<DeviceBuffer>(t.host.bytes.size());
  t.logical = fill_random(t.host, rng);
  t.dev->upload(t.host.bytes.data());
  return t;
}

// The inputs and outputs of one run, on the device.
struct GradientSet {
  Tensor q, k, v, d_o, gq, gk, gv;
  DeviceBuffer o, lse;
  // The outputs in outputs_of() order, dtype and layout of the inputs: host copies and device buffers.
  std::vector<HostTensor> out_host;
  std::vector<std::unique_ptr<DeviceBuffer>> out_dev;
  std::unique_ptr<DeviceBuffer> workspace;

  GradientSet(const AttentionCase& c, bool dbl, const BackwardBenchOptions& opt, std::mt19937_64& rng, int device,
              GpuStream stream, bool run_forward = true)
      : q(make_tensor(c, Side::q, true, rng)), k(make_tensor(c, Side::k, true, rng)),
        v(make_tensor(c, Side::k, true, rng)), d_o(make_tensor(c, Side::q, true, rng)),
        gq(make_tensor(c, Side::q, dbl && opt.gq, rng)), gk(make_tensor(c, Side::k, dbl && opt.gk, rng)),
        gv(make_tensor(c, Side::k, dbl && opt.gv, rng)), o(q.host.bytes.size()),
        lse(std::size_t(c.batch) * c.heads_q * c.n_q * 4) {
    if (opt.expand_d_o) d_o.expand_rows();
    for (const OutputSpec& s : outputs_of(dbl)) {
      out_host.push_back(make_host(c.batch, heads_of(c, s.side), rows_of(c, s.side), c.head_dim, c.layout, c.dtype));
      out_dev.push_back(std::make_unique<DeviceBuffer>(out_host.back().bytes.size()));
    }
    if (!run_forward) return;
    // o and lse: kgen's forward with its default config (the backward's inputs, not under test).
    AttentionOptions fwd{c.scale, c.causal, ""};
    TensorView l = lse_view(c, device);
    attention_forward(q.view(device), k.view(device), v.view(device), q.host.view(o.get(), device), &l, fwd, stream);
    gpu_driver().synchronize(stream, "forward for the backward's inputs");
  }

  GradientInputs inputs() const {
    return {q.logical, k.logical, v.logical, d_o.logical, gq.logical, gk.logical, gv.logical};
  }

  TensorView out_view(std::size_t a, int device) const { return out_host[a].view(out_dev[a]->get(), device); }

  TensorView lse_view(const AttentionCase& c, int device) const {
    return make_contiguous_view(lse.get(), DType::f32, 3, std::array<std::int64_t, 3>{c.batch, c.heads_q, c.n_q}.data(),
                                device);
  }

  // The options of a run; with an external workspace, grows it to the size kgen asks for.
  AttentionBackwardOptions options(const AttentionCase& c, bool dbl, const BackwardBenchOptions& opt,
                                   const std::string& config, int device) {
    AttentionBackwardOptions o;
    o.scale = c.scale, o.causal = c.causal, o.deterministic = opt.deterministic, o.config = config;
    if (!opt.external_workspace) return o;
    const std::size_t bytes = dbl ? attention_double_backward_workspace_bytes(q.view(device), o)
                                  : attention_backward_workspace_bytes(q.view(device), o);
    if (!workspace || workspace->bytes() < bytes) workspace = std::make_unique<DeviceBuffer>(bytes);
    o.workspace = workspace->get(), o.workspace_bytes = workspace->bytes();
    return o;
  }

  void run(const AttentionCase& c, bool dbl, const AttentionBackwardOptions& o, int device, GpuStream stream) {
    const TensorView l = lse_view(c, device), ov = q.host.view(this->o.get(), device);
    if (!dbl) {
      attention_backward(q.view(device), k.view(device), v.view(device), ov, l, d_o.view(device), out_view(0, device),
                         out_view(1, device), out_view(2, device), o, stream);
      return;
    }
    const TensorView gqv = gq.view(device), gkv = gk.view(device), gvv = gv.view(device);
    attention_double_backward(q.view(device), k.view(device), v.view(device), ov, l, d_o.view(device),
                              gq.present() ? &gqv : nullptr, gk.present() ? &gkv : nullptr,
                              gv.present() ? &gvv : nullptr, out_view(0, device), out_view(1, device),
                              out_view(2, device), out_view(3, device), o, stream);
  }

  void poison(const AttentionCase& c) {
    for (auto& buf : out_dev) buf->poison(c.dtype);
    if (workspace) workspace->poison(DType::f32);
  }
};

std::vector<std::pair<int, int>> all_groups(const AttentionCase& c) {
  std::vector<std::pair<int, int>> g;
  for (int b = 0; b < c.batch; ++b)
    for (int h = 0; h < c.heads_kv; ++h) g.emplace_back(b, h);
  return g;
}

// The values of the rows a check compares, in (group, head, row, column) order: the query heads
// of each group for q-side outputs, its kv head for k-side ones; at(b, h, i, x) reads one.
template <class At>
std::vector<double> gather(const AttentionCase& c, Side side, const std::vector<std::pair<int, int>>& groups, At at) {
  const int group = c.heads_q / c.heads_kv, n = rows_of(c, side);
  std::vector<double> values;
  for (auto [b, hk] : groups) {
    const int h0 = side == Side::q ? hk * group : hk, h1 = side == Side::q ? h0 + group : h0 + 1;
    for (int h = h0; h < h1; ++h)
      for (int i = 0; i < n; ++i)
        for (int x = 0; x < c.head_dim; ++x) values.push_back(at(b, h, i, x));
  }
  return values;
}

// Gathers from a contiguous (b, heads, n, d) array of the side's shape (fp64 or fp32).
template <class V>
std::vector<double> gather_contiguous(const AttentionCase& c, Side side, const std::vector<std::pair<int, int>>& groups,
                                      const std::vector<V>& t) {
  const int heads = heads_of(c, side), n = rows_of(c, side);
  return gather(c, side, groups, [&](int b, int h, int i, int x) {
    return double(t[((std::size_t(b) * heads + h) * n + i) * c.head_dim + x]);
  });
}

// The naive GPU reference over `groups` (fp32 outputs of fp64 sums), gathered over them.
std::vector<std::vector<double>> gpu_reference(const AttentionCase& c, bool dbl, const GradientSet& in,
                                               const std::vector<std::pair<int, int>>& groups, int device,
                                               GpuStream stream) {
  const std::vector<OutputSpec> specs = outputs_of(dbl);
  std::vector<std::unique_ptr<DeviceBuffer>> bufs;
  for (const OutputSpec& s : specs) {
    bufs.push_back(std::make_unique<DeviceBuffer>(std::size_t(c.batch) * heads_of(c, s.side) * rows_of(c, s.side) *
                                                  c.head_dim * sizeof(float)));
    bufs.back()->poison(DType::f32);
  }
  auto f = [&](std::size_t a) { return static_cast<float*>(bufs[a]->get()); };
  if (!dbl) {
    attention_backward_reference_gpu(in.q.view(device), in.k.view(device), in.v.view(device), in.d_o.view(device), f(0),
                                     f(1), f(2), c.causal, c.scale, stream, groups);
  } else {
    const TensorView gqv = in.gq.view(device), gkv = in.gk.view(device), gvv = in.gv.view(device);
    attention_double_backward_reference_gpu(in.q.view(device), in.k.view(device), in.v.view(device),
                                            in.d_o.view(device), in.gq.present() ? &gqv : nullptr,
                                            in.gk.present() ? &gkv : nullptr, in.gv.present() ? &gvv : nullptr, f(0),
                                            f(1), f(2), f(3), c.causal, c.scale, stream, groups);
  }
  std::vector<std::vector<double>> values;
  for (std::size_t a = 0; a < specs.size(); ++a) {
    std::vector<float> host(bufs[a]->bytes() / sizeof(float));
    bufs[a]->download(host.data());
    values.push_back(gather_contiguous(c, specs[a].side, groups, host));
  }
  return values;
}

GradientReference compute_reference(const AttentionCase& c, bool dbl, const GradientSet& in, int device, GpuStream stream) {
  const double work = double(c.batch) * c.heads_q * c.n_q * c.n_k * c.head_dim;
  if (work <= kCpuReferenceWork) return attention_gradient_reference_cpu(c, dbl, in.inputs());
  GradientReference ref;
  ref.groups = all_groups(c);
  if (work > kGpuReferenceWork) {  // evenly spread groups, the first and the last among them
    const std::size_t all = ref.groups.size();
    const std::size_t keep = std::max<std::size_t>(2, std::size_t(double(all) * kGpuReferenceWork / work));
    std::vector<std::pair<int, int>> spread;
    for (std::size_t s = 0; s < keep && s < all; ++s) {
      const auto g = ref.groups[keep > 1 ? (all - 1) * s / (keep - 1) : 0];
      if (spread.empty() || spread.back() != g) spread.push_back(g);
    }
    ref.groups = spread;
  }
  ref.values = gpu_reference(c, dbl, in, ref.groups, device, stream);
  ref.description = "gpu-fp64 all elements of " + std::to_string(ref.groups.size()) + "/" +
                    std::to_string(all_groups(c).size()) + " (batch, kv head) groups";
  return ref;
}

// Downloads every output of the last run (raw bytes, in the case's layout).
std::vector<std::vector<std::uint8_t>> download_outputs(GradientSet& in) {
  std::vector<std::vector<std::uint8_t>> raw;
  for (std::size_t a = 0; a < in.out_host.size(); ++a) {
    in.out_dev[a]->download(in.out_host[a].bytes.data());
    raw.push_back(in.out_host[a].bytes);
  }
  return raw;
}

// compare(), except for an exactly-zero reference: rel_l2 has no scale there and compare()
// takes the absolute ‖out‖ instead, which fp32 rounding noise exceeds over many elements where
// the exact gradient vanishes by cancellation (e.g. every output of a one-key softmax but dŌ).
// Such an output passes when every element is finite and within atol·√m of 0, m being the
// number of terms each element sums (rounding errors of m cancelling terms add up like a random
// walk): n_k for the query side's rows, n_q · (h_q / h_kv) for the key side's. On an H200 the
// fp32 double backward's K̄ at n_k = 1, n_q = 63, GQA 8 (m = 504) reached 1.55e-5 against
// atol = 1e-5; the bound is 2.2e-4 there, and any output of the wrong size still fails.
Comparison compare_gradient(std::span<const double> out, std::span<const double> ref, const Tolerance& tol,
                            std::size_t row_length, long long summed_terms) {
  Comparison c = compare(out, ref, tol, row_length);
  if (c.failed == Comparison::Failure::rel_l2 && c.ref_norm == 0 &&
      c.max_abs <= tol.atol * std::sqrt(double(std::max(summed_terms, 1LL)))) {
    c.pass = true;
    c.failed = Comparison::Failure::none;
    c.why.clear();
  }
  return c;
}

// The number of terms an element of `side`'s gradient rows sums (see compare_gradient).
long long summed_terms(const AttentionCase& c, Side side) {
  return side == Side::q ? c.n_k : 1LL * c.n_q * (c.heads_q / c.heads_kv);
}

// The (b, h, i) of row `r` of the values gather() collects for `side` over `groups`.
std::string gathered_row_name(const AttentionCase& c, Side side, const std::vector<std::pair<int, int>>& groups,
                              std::size_t r) {
  const int heads_per_group = side == Side::q ? c.heads_q / c.heads_kv : 1, n = rows_of(c, side);
  const std::size_t per_group = std::size_t(heads_per_group) * n;
  const auto [b, hk] = groups[r / per_group];
  const int h0 = side == Side::q ? hk * heads_per_group : hk;
  return bhi_name(b, h0 + int(r % per_group / n), int(r % n));
}

// Every output's comparison against the reference, named; got(a) gives output a's gathered values.
template <class Got>
HarnessCheck compare_gradients(const AttentionCase& c, bool dbl, const Got& got, const GradientReference& ref,
                               const Tolerance& tol) {
  HarnessCheck check;
  check.reference = ref.description;
  const std::vector<OutputSpec> specs = outputs_of(dbl);
  for (std::size_t a = 0; a < specs.size(); ++a)
    check.add(specs[a].name, compare_gradient(got(a), ref.values[a], tol, c.head_dim, summed_terms(c, specs[a].side)),
              [&](std::size_t r) { return gathered_row_name(c, specs[a].side, ref.groups, r); });
  check.finish();
  return check;
}

// Runs `config` on NaN-poisoned outputs and workspace, compares, and in deterministic mode runs
// again (re-poisoned) and requires the same bits.
HarnessCheck run_and_compare(const AttentionCase& c, bool dbl, const BackwardBenchOptions& opt,
                              const std::string& config, GradientSet& in, const GradientReference& ref, int device,
                              GpuStream stream) {
  const AttentionBackwardOptions o = in.options(c, dbl, opt, config, device);
  in.poison(c);
  in.run(c, dbl, o, device, stream);
  gpu_driver().synchronize(stream, "kernel execution");
  const auto first = download_outputs(in);
  HarnessCheck check = compare_attention_gradient_outputs(c, dbl, in.out_host, ref);
  check.config = config;
  if (opt.deterministic) {
    in.poison(c);
    in.run(c, dbl, o, device, stream);
    gpu_driver().synchronize(stream, "kernel execution");
    check.determinism_checked = true;
    check.bitwise_equal = download_outputs(in) == first;
    check.finish();
  }
  return check;
}

}  // namespace

std::string to_string(const BackwardBenchOptions& o, bool double_backward) {
  std::string s = o.deterministic ? "deterministic" : "atomics-allowed";
  s += o.external_workspace ? " external-workspace" : " kgen-workspace";
  if (o.expand_d_o) s += " expanded-d_o";
  if (double_backward) {
    s += std::string(" cotangents:") + (o.gq ? " gq" : "") + (o.gk ? " gk" : "") + (o.gv ? " gv" : "");
    if (!o.gq && !o.gk && !o.gv) s += " none";
  }
  return s;
}

std::vector<std::string> attention_gradient_output_names(bool double_backward) {
  std::vector<std::string> names;
  for (const OutputSpec& s : outputs_of(double_backward)) names.push_back(s.name);
  return names;
}

GradientReference attention_gradient_reference_cpu(const AttentionCase& c, bool dbl, const GradientInputs& in,
                                                   const std::vector<std::pair<int, int>>& groups) {
  AttentionProblem p;
  p.batch = c.batch, p.heads_q = c.heads_q, p.heads_kv = c.heads_kv, p.n_q = c.n_q, p.n_k = c.n_k;
  p.head_dim = c.head_dim, p.causal = c.causal, p.scale = c.scale;
  p.q = in.q, p.k = in.k, p.v = in.v;
  std::vector<const std::vector<double>*> full;
  std::optional<AttentionBackwardReference> b;
  std::optional<AttentionDoubleBackwardReference> d;
  if (!dbl) {
    b = attention_backward_cpu(p, in.d_o);
    full = {&b->dq, &b->dk, &b->dv};
  } else {
    d = attention_double_backward_cpu(p, in.d_o, in.gq, in.gk, in.gv);
    full = {&d->q_bar, &d->k_bar, &d->v_bar, &d->do_bar};
  }
  GradientReference ref;
  ref.groups = groups.empty() ? all_groups(c) : groups;
  ref.description = groups.empty() ? "cpu-fp64 all elements"
                                   : "cpu-fp64 all elements of " + std::to_string(ref.groups.size()) + " groups";
  const std::vector<OutputSpec> specs = outputs_of(dbl);
  for (std::size_t a = 0; a < specs.size(); ++a)
    ref.values.push_back(gather_contiguous(c, specs[a].side, ref.groups, *full[a]));
  return ref;
}

HarnessCheck compare_attention_gradient_outputs(const AttentionCase& c, bool dbl, const std::vector<HostTensor>& outputs,
                                                const GradientReference& ref) {
  const std::vector<OutputSpec> specs = outputs_of(dbl);
  if (outputs.size() != specs.size())
    throw Error(Status::internal, "compare_attention_gradient_outputs: " + std::to_string(outputs.size()) +
                                      " outputs, expected " + std::to_string(specs.size()));
  auto got = [&](std::size_t a) {
    const HostTensor& h = outputs[a];
    return gather(c, specs[a].side, ref.groups, [&](int b, int hh, int i, int x) { return h.get(h.offset(b, hh, i, x)); });
  };
  return compare_gradients(c, dbl, got, ref, dbl ? second_order_tolerance_for(c.dtype) : tolerance_for(c.dtype));
}

double attention_backward_flops(const AttentionCase& c) { return 2.5 * attention_forward_flops(c); }

double attention_double_backward_flops(const AttentionCase& c, int matmuls) {
  // attention_forward_flops counts 2 matmuls of 2·n_q·n_k·d each (halved for causal).
  return attention_forward_flops(c) * matmuls / 2.0;
}

std::string attention_double_backward_flops_convention(int matmuls) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "double backward FLOPs = %d n×n×d matmuls × 2·b·h_q·n_q·n_k·d (%.1f× forward), halved for causal",
                matmuls, matmuls / 2.0);
  return buf;
}

struct AttentionGradientBench::Impl {
  AttentionCase problem;
  BackwardBenchOptions options;
  bool dbl;
  int device;
  Stream stream;
  std::mt19937_64 rng;
  std::vector<std::unique_ptr<GradientSet>> sets;
  std::optional<GradientReference> reference;
  Impl(const AttentionCase& c, const BackwardBenchOptions& o, bool double_backward, int dev)
      : problem(c), options(o), dbl(double_backward), device(dev), rng(c.seed) {
    sets.push_back(std::make_unique<GradientSet>(c, dbl, o, rng, device, stream.s));
  }
};

AttentionGradientBench::AttentionGradientBench(const AttentionCase& c, const BackwardBenchOptions& o,
                                               bool double_backward, int device) {
  use_primary_context(device);
  impl_ = std::make_unique<Impl>(c, o, double_backward, device);
}

AttentionGradientBench::~AttentionGradientBench() = default;

const AttentionCase& AttentionGradientBench::problem() const { return impl_->problem; }
const BackwardBenchOptions& AttentionGradientBench::options() const { return impl_->options; }
bool AttentionGradientBench::double_backward() const { return impl_->dbl; }

HarnessCheck AttentionGradientBench::check(const std::string& config) {
  Impl& m = *impl_;
  use_primary_context(m.device);
  if (!m.reference) m.reference = compute_reference(m.problem, m.dbl, *m.sets[0], m.device, m.stream.s);
  return run_and_compare(m.problem, m.dbl, m.options, config, *m.sets[0], *m.reference, m.device, m.stream.s);
}

Timing AttentionGradientBench::time(const std::string& config, int warmup, int reps) {
  Impl& m = *impl_;
  use_primary_context(m.device);
  std::size_t set_bytes = m.sets[0]->o.bytes() * 2;  // o and d_o read; q, k, v, outputs below
  for (const Tensor* t : {&m.sets[0]->q, &m.sets[0]->k, &m.sets[0]->v}) set_bytes += t->host.bytes.size();
  for (const HostTensor& t : m.sets[0]->out_host) set_bytes += t.bytes.size();
  while (m.sets.size() < 8 && m.sets.size() * set_bytes < 2 * std::size_t(device_info(m.device).l2_bytes))
    m.sets.push_back(std::make_unique<GradientSet>(m.problem, m.dbl, m.options, m.rng, m.device, m.stream.s));
  std::vector<AttentionBackwardOptions> opts;
  for (auto& s : m.sets) opts.push_back(s->options(m.problem, m.dbl, m.options, config, m.device));
  return time_runs(
      [&](int i) {
        const std::size_t s = i % m.sets.size();
        m.sets[s]->run(m.problem, m.dbl, opts[s], m.device, m.stream.s);
      },
      warmup, reps, m.stream.s);
}

HarnessCheck check_attention_backward(const AttentionCase& c, const BackwardBenchOptions& o, int device) {
  AttentionBackwardBench bench(c, o, device);
  return bench.check(c.config);
}

HarnessCheck check_attention_double_backward(const AttentionCase& c, const BackwardBenchOptions& o, int device) {
  AttentionDoubleBackwardBench bench(c, o, device);
  return bench.check(c.config);
}

HarnessCheck check_backward_reference_gpu_against_cpu(const AttentionCase& c, bool double_backward,
                                                       const BackwardBenchOptions& o,
                                                       const std::vector<std::pair<int, int>>& groups, int device) {
  use_primary_context(device);
  std::mt19937_64 rng(c.seed);
  Stream stream;
  GradientSet in(c, double_backward, o, rng, device, stream.s, /*run_forward=*/false);
  const GradientReference ref = attention_gradient_reference_cpu(c, double_backward, in.inputs(), groups);
  const auto gpu = gpu_reference(c, double_backward, in, ref.groups, device, stream.s);
  // The GPU reference sums in fp64 and stores fp32: fp32 rounding is its only expected error.
  return compare_gradients(c, double_backward, [&](std::size_t a) { return gpu[a]; }, ref, tolerance_for(DType::f32));
}

namespace {

// The tuner benches of attention_bwd (either mode) and attention_double_bwd (check/harness_benches.h).
std::unique_ptr<HarnessBench> gradient_tuner_bench(const TuningProblem& p, int device, bool double_backward) {
  BackwardBenchOptions o;
  o.deterministic = deterministic_of(p);
  const AttentionCase& c = described_case(attention_case_of(p), p);
  if (double_backward) return std::make_unique<AttentionDoubleBackwardBench>(c, o, device);
  return std::make_unique<AttentionBackwardBench>(c, o, device);
}

const bool backward_tuner_bench = install_harness_bench(
    "attention_bwd", [](const TuningProblem& p, int device) { return gradient_tuner_bench(p, device, false); },
    [](const TuningProblem& p, double ms) { return tflops_of(attention_backward_flops(described_case(attention_case_of(p), p)), ms); });

const bool double_backward_tuner_bench = install_harness_bench(
    "attention_double_bwd", [](const TuningProblem& p, int device) { return gradient_tuner_bench(p, device, true); },
    [](const TuningProblem& p, double ms) {
      return tflops_of(attention_double_backward_flops(described_case(attention_case_of(p), p)), ms);
    });

}  // namespace

}  // namespace kgen
