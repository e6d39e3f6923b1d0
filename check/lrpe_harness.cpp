#include "check/lrpe_harness.h"

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

// θ[h, i] = base^(−i / width) spread over heads: the usual LRPE frequencies, scaled per head
// and perturbed so that no two heads or features share a value.
std::vector<float> make_theta(const LrpeCase& c, int rows, int cols, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> jitter(0.5f, 1.0f);
  std::vector<float> theta(std::size_t(rows) * cols);
  for (int h = 0; h < rows; ++h)
    for (int i = 0; i < cols; ++i)
      theta[std::size_t(h) * cols + i] =
          jitter(rng) * static_cast<float>(std::pow(10000.0, -double(i) / std::max(1, theta_width(c))));
  return theta;
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

struct LrpeBench::Impl {
  LrpeCase problem;
  int device;
  Stream stream;
  std::mt19937_64 rng;
  int theta_rows, theta_cols;
  std::vector<float> theta;
  DeviceBuffer theta_buf;
  std::size_t work_bytes;
  DeviceBuffer work;
  std::vector<std::unique_ptr<Set>> sets;
  // Reference of set 0 on the checked slices: (b, h) pairs, outputs in (s, k) order.
  std::vector<std::pair<int, int>> slices;
  std::vector<double> ref_out, ref_angles;
  std::string ref_description;

  Impl(const LrpeCase& c, int dev)
      : problem(c), device(dev), rng(c.seed), theta_rows(c.theta_kind == 2 ? 1 : c.heads),
        theta_cols(c.theta_kind == 1 ? 1 : theta_width(c)), theta(make_theta(c, theta_rows, theta_cols, rng)),
        theta_buf(theta.size() * 4),
        work_bytes(lrpe_workspace_bytes(x_shape_view(c, theta_buf.get(), dev), c.act,
                                        c.direction == LrpeDirection::backward)),
        work(std::max<std::size_t>(work_bytes, 16)) {
    theta_buf.upload(theta.data());
    sets.push_back(std::make_unique<Set>(c, rng));
  }

  TensorView theta_view() const {
    TensorView t;
    t.data = theta_buf.get(), t.dtype = DType::f32, t.ndim = 2, t.device = device;
    t.shape[0] = theta_rows, t.shape[1] = theta_cols, t.strides[0] = theta_cols, t.strides[1] = 1;
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

  void compute_reference() {
    const LrpeCase& c = problem;
    const Set& s = *sets[0];
    const int pairs = c.batch * c.heads;
    if (double(pairs) * c.n * c.d <= kFullCheckElements) {
      for (int i = 0; i < pairs; ++i) slices.emplace_back(i / c.heads, i % c.heads);
      ref_description = "cpu-fp64 every (b, h)";
    } else {
      for (int i : {0, pairs / 3, (2 * pairs) / 3, pairs - 1})
        if (slices.empty() || slices.back() != std::make_pair(i / c.heads, i % c.heads))
          slices.emplace_back(i / c.heads, i % c.heads);
      ref_description = "cpu-fp64 " + std::to_string(slices.size()) + " sampled (b, h) of " + std::to_string(pairs);
    }
    const std::size_t row = std::size_t(c.n) * c.d;
    for (auto [b, h] : slices) {
      LrpeProblem p;
      p.batch = 1, p.heads = 1, p.n = c.n, p.d = c.d, p.act = c.act;
      p.theta_heads = 1, p.theta_width = theta_cols;
      const int th = theta_rows == 1 ? 0 : h;
      p.theta.assign(theta.begin() + std::size_t(th) * theta_cols, theta.begin() + std::size_t(th + 1) * theta_cols);
      p.offset = c.offset;
      p.md = c.op == LrpeOp::md_cosine, p.grid = c.grid, p.extra = c.extra, p.e = theta_width(c);
      const std::size_t slice = std::size_t(b) * c.heads + h;
      p.x.assign(s.x64.begin() + slice * row, s.x64.begin() + (slice + 1) * row);
      std::vector<double> r;
      if (c.direction == LrpeDirection::forward) {
        r = lrpe_forward_cpu(p);
      } else {
        std::vector<double> g(s.d_o64.begin() + slice * 2 * row, s.d_o64.begin() + (slice + 1) * 2 * row);
        r = lrpe_backward_cpu(p, g);
      }
      ref_out.insert(ref_out.end(), r.begin(), r.end());
      if (c.cache && c.direction == LrpeDirection::forward)
        for (double a : lrpe_angles_cpu(p)) ref_angles.push_back(std::cos(a)), ref_angles.push_back(std::sin(a));
    }
  }
};

LrpeBench::LrpeBench(const LrpeCase& c, int device) {
  use_primary_context(device);
  impl_ = std::make_unique<Impl>(c, device);
}

LrpeBench::~LrpeBench() = default;

const LrpeCase& LrpeBench::problem() const { return impl_->problem; }

LrpeCheck LrpeBench::check(const std::string& config) {
  Impl& m = *impl_;
  const LrpeCase& c = m.problem;
  use_primary_context(m.device);
  if (m.slices.empty()) m.compute_reference();
  Set& s = *m.sets[0];
  s.out_buf.poison(c.dtype);
  if (c.cache && c.direction == LrpeDirection::forward) s.angles_buf.poison(DType::f32);
  m.run(s, config);
  cuda_check(cuda_driver().cuStreamSynchronize(m.stream.s), "kernel execution (cuStreamSynchronize)");
  s.out_buf.download(s.out.bytes.data());
  std::vector<double> got;
  got.reserve(m.ref_out.size());
  for (auto [b, h] : m.slices)
    for (int i = 0; i < c.n; ++i)
      for (int k = 0; k < s.out.d; ++k) got.push_back(s.out.get(s.out.offset(b, h, i, k)));
  LrpeCheck r;
  r.config = config;
  r.reference = m.ref_description;
  r.out = compare(got, m.ref_out, tolerance_for(c.dtype));
  r.pass = r.out.pass;
  if (!m.ref_angles.empty()) {
    std::vector<float> angles(std::size_t(c.heads) * c.n * c.d);
    s.angles_buf.download(angles.data());
    std::vector<double> trig;
    for (auto [b, h] : m.slices)
      for (std::size_t i = 0; i < std::size_t(c.n) * c.d; ++i) {
        const double a = angles[std::size_t(h) * c.n * c.d + i];
        trig.push_back(std::cos(a)), trig.push_back(std::sin(a));
      }
    // The angles are fp32 whatever the dtype: fp32 bounds.
    r.angles = compare(trig, m.ref_angles, tolerance_for(DType::f32));
    r.pass = r.pass && r.angles.pass;
  }
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

LrpeCheck check_lrpe(const LrpeCase& c, int device) {
  LrpeBench bench(c, device);
  return bench.check(c.config);
}

double measure_copy_bandwidth(std::size_t bytes, int device, int reps) {
  use_primary_context(device);
  DeviceBuffer src(bytes), dst(bytes);
  Stream stream;
  const CudaDriver& cu = cuda_driver();
  Timing t = time_runs(
      [&](int) {
        cuda_check(cu.cuMemcpyDtoDAsync(reinterpret_cast<CUdeviceptr>(dst.get()), reinterpret_cast<CUdeviceptr>(src.get()),
                                        bytes, stream.s),
                   "cuMemcpyDtoDAsync");
      },
      3, reps, stream.s);
  return 2.0 * double(bytes) / (t.median_ms * 1e-3);
}

}  // namespace kgen
