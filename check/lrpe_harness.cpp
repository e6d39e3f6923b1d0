#include "check/lrpe_harness.h"
#include "check/harness_benches.h"
#include "ops/lrpe_tuning.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <sstream>
#include <thread>

#include "kgen/kgen.hpp"
#include "driver/device.h"
#include "check/reference_lrpe.h"

namespace kgen {
namespace {

// Elements above which only a few (b, h) slices are checked against the CPU reference.
constexpr double kFullCheckElements = 1 << 22;
constexpr int kSampledSlices = 4;

int spatial_dims(const LrpeCase& c) { return static_cast<int>(c.grid.size()); }

// Frequencies per row of theta: d (1-D) or e (md).
int theta_width(const LrpeCase& c) {
  if (c.op == LrpeOp::cosine) return c.d;
  if (c.e > 0) return c.e;
  const int m = std::max(1, spatial_dims(c));
  return (c.d + m - 1) / m;
}

// fill_random on all cores: the benchmark shapes hold up to ~10^9 elements, ~20 s on one
// core. Each (b, h) slice draws from its own generator seeded from `rng`: deterministic for a
// given seed whatever the number of threads.
std::vector<double> fill_random_parallel(HostTensor& t, std::mt19937_64& rng, float scale = 1.f) {
  const std::size_t slices = std::size_t(t.b) * t.h, slice = std::size_t(t.n) * t.d;
  std::vector<std::uint64_t> seeds(slices);
  for (auto& s : seeds) s = rng();
  std::vector<double> logical(slices * slice);
  auto fill = [&](std::size_t first, std::size_t last) {
    std::normal_distribution<float> normal(0.f, 1.f);
    for (std::size_t bh = first; bh < last; ++bh) {
      std::mt19937_64 local(seeds[bh]);
      const int ib = static_cast<int>(bh / t.h), ih = static_cast<int>(bh % t.h);
      double* out = logical.data() + bh * slice;
      for (int in = 0; in < t.n; ++in)
        for (int id = 0; id < t.d; ++id) {
          const std::size_t off = t.offset(ib, ih, in, id);
          t.set(off, scale * normal(local));
          *out++ = t.get(off);
        }
    }
  };
  const std::size_t workers = std::clamp<std::size_t>(std::thread::hardware_concurrency(), 1, std::max<std::size_t>(1, slices));
  std::vector<std::thread> threads;
  for (std::size_t w = 0; w < workers; ++w) threads.emplace_back(fill, slices * w / workers, slices * (w + 1) / workers);
  for (auto& th : threads) th.join();
  return logical;
}

TensorView squeeze_heads(TensorView t) {
  t.ndim = 3;
  t.shape[1] = t.shape[2], t.shape[2] = t.shape[3];
  t.strides[1] = t.strides[2], t.strides[2] = t.strides[3];
  return t;
}

// One set of inputs and outputs on the device; the first set also keeps its host copies.
struct Set {
  HostTensor x, d_o, out;
  std::vector<double> x64, d_o64;
  DeviceBuffer dx_buf, d_o_buf, out_buf, angles_buf, scratch_o;
  bool angles_filled = false;
  Set(const LrpeCase& c, std::mt19937_64& rng)
      : x(make_host(c.batch, c.heads, c.n, c.d, c.layout, c.dtype)),
        d_o(make_host(c.batch, c.heads, c.n, c.direction == LrpeDirection::backward ? 2 * c.d : 1, c.layout, c.dtype)),
        out(make_host(c.batch, c.heads, c.n, c.direction == LrpeDirection::forward ? 2 * c.d : c.d, c.layout, c.dtype)),
        x64(fill_random_parallel(x, rng, static_cast<float>(c.x_scale))),
        d_o64(c.direction == LrpeDirection::backward ? fill_random_parallel(d_o, rng) : std::vector<double>{}),
        dx_buf(x.bytes.size()), d_o_buf(d_o.bytes.size()), out_buf(out.bytes.size()),
        angles_buf(c.cache ? std::size_t(c.heads) * c.n * c.d * 4 : 16),
        scratch_o(c.cache && c.direction == LrpeDirection::backward ? x.bytes.size() * 2 : 16) {
    dx_buf.upload(x.bytes.data());
    if (c.direction == LrpeDirection::backward) d_o_buf.upload(d_o.bytes.data());
  }
  std::size_t bytes() const { return x.bytes.size() + d_o.bytes.size() + out.bytes.size(); }
};

// A (batch, heads, n, d) view with `data` standing in: for size queries only.
TensorView x_shape_view(const LrpeCase& c, void* data, int device) {
  const std::int64_t shape[4] = {c.batch, c.heads, c.n, c.d};
  return make_contiguous_view(data, c.dtype, 4, shape, device);
}

TensorView view_of(const LrpeCase& c, const HostTensor& t, const DeviceBuffer& buf, int device) {
  TensorView v = t.view(buf.get(), device);
  return c.three_dim ? squeeze_heads(v) : v;
}

}  // namespace

std::string to_string(const LrpeCase& c) {
  std::ostringstream s;
  s << lrpe_op_name(c.op) << (c.direction == LrpeDirection::forward ? " fwd " : " bwd ") << dtype_name(c.dtype)
    << " act=" << lrpe_act_name(c.act) << " b" << c.batch << " h" << c.heads << " n" << c.n << " d" << c.d
    << (c.layout == Layout::bnhd ? " bnhd" : " bhnd") << (c.three_dim ? " 3d-x" : "") << " theta"
    << (c.theta_kind == 0 ? "(h,w)" : c.theta_kind == 1 ? "(h,1)" : "(1,w)");
  if (c.op == LrpeOp::cosine) {
    if (c.offset) s << " offset" << c.offset;
  } else {
    s << " grid";
    for (std::size_t j = 0; j < c.grid.size(); ++j) s << (j ? "x" : "") << c.grid[j];
    s << " l" << c.extra << " e" << theta_width(c) << (c.cache ? " cache" : "");
  }
  if (c.x_scale != 1) s << " x~N(0," << c.x_scale << "²)";
  if (!c.config.empty()) s << " " << c.config;
  return s.str();
}

double lrpe_floor_bytes(const LrpeCase& c) {
  const double elements = double(c.batch) * c.heads * c.n * c.d;
  const double e = dtype_bytes(c.dtype);
  const bool fwd = c.direction == LrpeDirection::forward;
  const bool seq = c.act == LrpeAct::softmax_seq;
  double per = fwd ? (seq ? 4 : 3) * e : (seq ? 7 : c.act == LrpeAct::none ? 3 : 4) * e;
  if (c.cache) per += fwd ? 4.0 / c.batch : (seq ? 8 : 4);
  return elements * per;
}

std::size_t lrpe_footprint_bytes(const LrpeCase& c, int device) {
  const std::size_t x = std::size_t(c.batch) * c.heads * c.n * c.d * dtype_bytes(c.dtype);
  const std::size_t theta = std::size_t(c.theta_kind == 2 ? 1 : c.heads) * (c.theta_kind == 1 ? 1 : theta_width(c)) * 4;
  const bool fwd = c.direction == LrpeDirection::forward;
  std::size_t bytes = x + theta + (fwd ? 2 * x : 2 * x + x);  // fwd: o; bwd: dO and dx
  if (c.cache) bytes += std::size_t(c.heads) * c.n * c.d * 4;
  bytes += lrpe_workspace_bytes(x_shape_view(c, reinterpret_cast<void*>(16), device), c.act, !fwd);
  return bytes;
}

LrpeTheta make_lrpe_theta(const LrpeCase& c, std::mt19937_64& rng) {
  LrpeTheta t;
  t.rows = c.theta_kind == 2 ? 1 : c.heads;
  t.cols = c.theta_kind == 1 ? 1 : theta_width(c);
  std::uniform_real_distribution<float> jitter(0.5f, 1.0f);
  t.values.resize(std::size_t(t.rows) * t.cols);
  for (int h = 0; h < t.rows; ++h)
    for (int i = 0; i < t.cols; ++i)
      t.values[std::size_t(h) * t.cols + i] =
          jitter(rng) * static_cast<float>(std::pow(10000.0, -double(i) / std::max(1, theta_width(c))));
  return t;
}

LrpeReference lrpe_reference_cpu(const LrpeCase& c, const LrpeTheta& theta, const std::vector<double>& x,
                                 const std::vector<double>& d_o) {
  LrpeReference ref;
  const int pairs = c.batch * c.heads;
  if (double(pairs) * c.n * c.d <= kFullCheckElements) {
    for (int i = 0; i < pairs; ++i) ref.slices.emplace_back(i / c.heads, i % c.heads);
    ref.description = "cpu-fp64 every (b, h)";
  } else {
    for (int i : {0, pairs / 3, (2 * pairs) / 3, pairs - 1})
      if (ref.slices.empty() || ref.slices.back() != std::make_pair(i / c.heads, i % c.heads))
        ref.slices.emplace_back(i / c.heads, i % c.heads);
    ref.description = "cpu-fp64 " + std::to_string(ref.slices.size()) + " sampled (b, h) of " + std::to_string(pairs);
  }
  const std::size_t row = std::size_t(c.n) * c.d;
  for (auto [b, h] : ref.slices) {
    LrpeProblem p;
    p.batch = 1, p.heads = 1, p.n = c.n, p.d = c.d, p.act = c.act;
    p.theta_heads = 1, p.theta_width = theta.cols;
    const int th = theta.rows == 1 ? 0 : h;
    p.theta.assign(theta.values.begin() + std::size_t(th) * theta.cols,
                   theta.values.begin() + std::size_t(th + 1) * theta.cols);
    p.offset = c.offset;
    p.md = c.op == LrpeOp::md_cosine, p.grid = c.grid, p.extra = c.extra, p.e = theta_width(c);
    const std::size_t slice = std::size_t(b) * c.heads + h;
    p.x.assign(x.begin() + slice * row, x.begin() + (slice + 1) * row);
    std::vector<double> r;
    if (c.direction == LrpeDirection::forward) {
      r = lrpe_forward_cpu(p);
    } else {
      std::vector<double> g(d_o.begin() + slice * 2 * row, d_o.begin() + (slice + 1) * 2 * row);
      r = lrpe_backward_cpu(p, g);
    }
    ref.out.insert(ref.out.end(), r.begin(), r.end());
    if (c.cache && c.direction == LrpeDirection::forward)
      for (double a : lrpe_angles_cpu(p)) ref.angles.push_back(std::cos(a)), ref.angles.push_back(std::sin(a));
  }
  return ref;
}

HarnessCheck compare_lrpe_outputs(const LrpeCase& c, const HostTensor& out, const std::vector<float>& angles,
                                  const LrpeReference& ref) {
  std::vector<double> got;
  got.reserve(ref.out.size());
  for (auto [b, h] : ref.slices)
    for (int i = 0; i < c.n; ++i)
      for (int k = 0; k < out.d; ++k) got.push_back(out.get(out.offset(b, h, i, k)));
  // Rows in (slice, position) order.
  auto row_name = [&](std::size_t r) {
    const auto [b, h] = ref.slices[r / c.n];
    return bhi_name(b, h, int(r % c.n));
  };
  HarnessCheck check;
  check.reference = ref.description;
  check.add(c.direction == LrpeDirection::forward ? "o" : "dx", compare(got, ref.out, tolerance_for(c.dtype), out.d),
            row_name);
  if (!ref.angles.empty()) {
    // A written angle buffer of the wrong size compares as a size mismatch.
    std::vector<double> trig;
    const std::size_t plane = std::size_t(c.n) * c.d;
    if (angles.size() == plane * c.heads)
      for (auto [b, h] : ref.slices)
        for (std::size_t i = 0; i < plane; ++i) {
          const double a = angles[std::size_t(h) * plane + i];
          trig.push_back(std::cos(a)), trig.push_back(std::sin(a));
        }
    // The angles are fp32 whatever the dtype: fp32 bounds. A cos, sin pair per feature.
    check.add("angles", compare(trig, ref.angles, tolerance_for(DType::f32), 2 * std::size_t(c.d)), row_name);
  }
  check.finish();
  return check;
}

struct LrpeBench::Impl {
  LrpeCase problem;
  int device;
  Stream stream;
  std::mt19937_64 rng;
  LrpeTheta theta;
  DeviceBuffer theta_buf;
  std::size_t work_bytes;
  DeviceBuffer work;
  std::vector<std::unique_ptr<Set>> sets;
  std::optional<LrpeReference> reference;  // of set 0

  Impl(const LrpeCase& c, int dev)
      : problem(c), device(dev), rng(c.seed), theta(make_lrpe_theta(c, rng)), theta_buf(theta.values.size() * 4),
        work_bytes(lrpe_workspace_bytes(x_shape_view(c, theta_buf.get(), dev), c.act,
                                        c.direction == LrpeDirection::backward)),
        work(std::max<std::size_t>(work_bytes, 16)) {
    theta_buf.upload(theta.values.data());
    sets.push_back(std::make_unique<Set>(c, rng));
  }

  TensorView theta_view() const {
    TensorView t;
    t.data = theta_buf.get(), t.dtype = DType::f32, t.ndim = 2, t.device = device;
    t.shape[0] = theta.rows, t.shape[1] = theta.cols, t.strides[0] = theta.cols, t.strides[1] = 1;
    return t;
  }
  TensorView angles_view(const Set& s) const {
    const std::int64_t shape[3] = {problem.heads, problem.n, problem.d};
    return make_contiguous_view(s.angles_buf.get(), DType::f32, 3, shape, device);
  }
  MdLrpeOptions md_options(const std::string& config, LrpeAct act) const {
    MdLrpeOptions o;
    o.act = act, o.dims = spatial_dims(problem), o.extra = problem.extra, o.config = config;
    for (int j = 0; j < o.dims; ++j) o.grid[j] = problem.grid[j];
    o.workspace = work.get(), o.workspace_bytes = work_bytes;
    return o;
  }

  // The md cache backward reads angles a forward wrote: run one (default config) per set.
  void fill_angles(Set& s) {
    if (!problem.cache || problem.direction == LrpeDirection::forward || s.angles_filled) return;
    const TensorView a = angles_view(s);
    // A view description only: no host copy of o is needed.
    const HostTensor o{problem.batch, problem.heads, problem.n, 2 * problem.d, problem.layout, problem.dtype, {}};
    md_lrpe_cosine_forward(view_of(problem, s.x, s.dx_buf, device), theta_view(), view_of(problem, o, s.scratch_o, device),
                           &a, md_options("", problem.act == LrpeAct::softmax_seq ? LrpeAct::none : problem.act),
                           stream.s);
    s.angles_filled = true;
  }

  void run(Set& s, const std::string& config) {
    const LrpeCase& c = problem;
    const TensorView x = view_of(c, s.x, s.dx_buf, device), out = view_of(c, s.out, s.out_buf, device);
    const bool fwd = c.direction == LrpeDirection::forward;
    if (c.op == LrpeOp::cosine) {
      LrpeOptions o;
      o.act = c.act, o.offset = c.offset, o.config = config, o.workspace = work.get(), o.workspace_bytes = work_bytes;
      if (fwd) lrpe_cosine_forward(x, theta_view(), out, o, stream.s);
      else lrpe_cosine_backward(x, theta_view(), view_of(c, s.d_o, s.d_o_buf, device), out, o, stream.s);
      return;
    }
    fill_angles(s);
    const TensorView a = angles_view(s);
    const TensorView* angles = c.cache ? &a : nullptr;
    if (fwd) md_lrpe_cosine_forward(x, theta_view(), out, angles, md_options(config, c.act), stream.s);
    else md_lrpe_cosine_backward(x, theta_view(), view_of(c, s.d_o, s.d_o_buf, device), out, angles,
                                 md_options(config, c.act), stream.s);
  }
};

LrpeBench::LrpeBench(const LrpeCase& c, int device) {
  use_primary_context(device);
  impl_ = std::make_unique<Impl>(c, device);
}

LrpeBench::~LrpeBench() = default;

const LrpeCase& LrpeBench::problem() const { return impl_->problem; }

HarnessCheck LrpeBench::check(const std::string& config) {
  Impl& m = *impl_;
  const LrpeCase& c = m.problem;
  use_primary_context(m.device);
  Set& s = *m.sets[0];
  if (!m.reference) m.reference = lrpe_reference_cpu(c, m.theta, s.x64, s.d_o64);
  s.out_buf.poison(c.dtype);
  const bool angles = c.cache && c.direction == LrpeDirection::forward;
  if (angles) s.angles_buf.poison(DType::f32);
  m.run(s, config);
  gpu_driver().synchronize(m.stream.s, "kernel execution");
  s.out_buf.download(s.out.bytes.data());
  std::vector<float> written(angles ? std::size_t(c.heads) * c.n * c.d : 0);
  if (angles) s.angles_buf.download(written.data());
  HarnessCheck r = compare_lrpe_outputs(c, s.out, written, *m.reference);
  r.config = config;
  return r;
}

Timing LrpeBench::time(const std::string& config, int warmup, int reps) {
  Impl& m = *impl_;
  use_primary_context(m.device);
  while (m.sets.size() < 8 && m.sets.size() * m.sets[0]->bytes() < 2 * std::size_t(device_info(m.device).l2_bytes))
    m.sets.push_back(std::make_unique<Set>(m.problem, m.rng));
  for (auto& s : m.sets) m.fill_angles(*s);
  return time_runs([&](int r) { m.run(*m.sets[r % m.sets.size()], config); }, warmup, reps, m.stream.s);
}

HarnessCheck check_lrpe(const LrpeCase& c, int device) {
  LrpeBench bench(c, device);
  return bench.check(c.config);
}

double measure_copy_bandwidth(std::size_t bytes, int device, int reps) {
  use_primary_context(device);
  DeviceBuffer src(bytes), dst(bytes);
  Stream stream;
  const GpuDriver& gpu = gpu_driver();
  Timing t = time_runs(
      [&](int) {
        gpu.copy_async(reinterpret_cast<DevicePtr>(dst.get()), reinterpret_cast<DevicePtr>(src.get()), bytes, stream.s);
      },
      3, reps, stream.s);
  return 2.0 * double(bytes) / (t.median_ms * 1e-3);
}

namespace {

// The tuner benches of lrpe_cosine and md_lrpe_cosine (check/harness_benches.h): GB/s of the bytes
// a call must move.
bool install_lrpe_tuner_bench(LrpeOp op) {
  return install_harness_bench(
      lrpe_op_name(op),
      [](const TuningProblem& p, int device) -> std::unique_ptr<HarnessBench> {
        return std::make_unique<LrpeBench>(described_case(lrpe_case_of(p), p), device);
      },
      [](const TuningProblem& p, double ms) { return lrpe_floor_bytes(described_case(lrpe_case_of(p), p)) / (ms * 1e-3) / 1e9; });
}

const bool lrpe_tuner_benches = install_lrpe_tuner_bench(LrpeOp::cosine) && install_lrpe_tuner_bench(LrpeOp::md_cosine);

}  // namespace

}  // namespace kgen
