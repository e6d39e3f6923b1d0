#include "check/reference_lrpe.h"

#include <algorithm>
#include <cmath>
#include <cstddef>

namespace kgen {
namespace {

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// Indexing of (batch, heads, n, width) tensors.
struct Index {
  const LrpeProblem& p;
  std::size_t row(int b, int h, int s) const { return (std::size_t(b) * p.heads + h) * p.n + s; }
};

// Softmax of the `count` values at v[0], v[stride], ... in place.
void softmax(double* v, int count, std::size_t stride) {
  double mx = -INFINITY, sum = 0;
  for (int i = 0; i < count; ++i) mx = std::max(mx, v[i * stride]);
  for (int i = 0; i < count; ++i) sum += (v[i * stride] = std::exp(v[i * stride] - mx));
  for (int i = 0; i < count; ++i) v[i * stride] /= sum;
}

// act(x), (batch, heads, n, d).
std::vector<double> activate(const LrpeProblem& p) {
  std::vector<double> xb = p.x;
  const std::size_t d = p.d;
  switch (p.act) {
    case LrpeAct::none: break;
    case LrpeAct::relu: for (double& v : xb) v = std::max(v, 0.0); break;
    case LrpeAct::sigmoid: for (double& v : xb) v = sigmoid(v); break;
    case LrpeAct::silu: for (double& v : xb) v = v * sigmoid(v); break;
    case LrpeAct::softmax:
      for (std::size_t r = 0; r < xb.size() / d; ++r) softmax(&xb[r * d], p.d, 1);
      break;
    case LrpeAct::softmax_seq:
      for (std::size_t bh = 0; bh < std::size_t(p.batch) * p.heads; ++bh)
        for (std::size_t k = 0; k < d; ++k) softmax(&xb[bh * p.n * d + k], p.n, d);
      break;
  }
  return xb;
}

}  // namespace

std::vector<double> lrpe_angles_cpu(const LrpeProblem& p) {
  std::vector<double> a(std::size_t(p.heads) * p.n * p.d);
  const int m = static_cast<int>(p.grid.size());
  for (int h = 0; h < p.heads; ++h)
    for (int s = 0; s < p.n; ++s)
      for (int k = 0; k < p.d; ++k) {
        double pos = static_cast<double>(p.offset + s);
        int freq = k;
        if (p.md) {
          const int dim = k / p.e;
          freq = k - dim * p.e;
          pos = 0;
          if (s >= p.extra) {
            long long r = s - p.extra;  // coordinates, the last dim fastest
            for (int j = m - 1; j >= 0; --j) {
              if (j == dim) pos = static_cast<double>(r % p.grid[j]);
              r /= p.grid[j];
            }
          }
        }
        const double theta = p.theta[std::size_t(p.theta_heads == 1 ? 0 : h) * p.theta_width + (p.theta_width == 1 ? 0 : freq)];
        a[(std::size_t(h) * p.n + s) * p.d + k] = pos * theta;
      }
  return a;
}

std::vector<double> lrpe_forward_cpu(const LrpeProblem& p) {
  const std::vector<double> xb = activate(p), angle = lrpe_angles_cpu(p);
  const Index at{p};
  std::vector<double> o(xb.size() * 2);
  for (int b = 0; b < p.batch; ++b)
    for (int h = 0; h < p.heads; ++h)
      for (int s = 0; s < p.n; ++s)
        for (int k = 0; k < p.d; ++k) {
          const double v = xb[at.row(b, h, s) * p.d + k];
          const double a = angle[(std::size_t(h) * p.n + s) * p.d + k];
          o[at.row(b, h, s) * 2 * p.d + k] = v * std::cos(a);
          o[at.row(b, h, s) * 2 * p.d + p.d + k] = v * std::sin(a);
        }
  return o;
}

std::vector<double> lrpe_backward_cpu(const LrpeProblem& p, const std::vector<double>& d_o) {
  const std::vector<double> angle = lrpe_angles_cpu(p);
  const Index at{p};
  const std::size_t d = p.d;
  // g = ∂L/∂xb.
  std::vector<double> g(p.x.size());
  for (int b = 0; b < p.batch; ++b)
    for (int h = 0; h < p.heads; ++h)
      for (int s = 0; s < p.n; ++s)
        for (std::size_t k = 0; k < d; ++k) {
          const double a = angle[(std::size_t(h) * p.n + s) * d + k];
          const std::size_t r = at.row(b, h, s);
          g[r * d + k] = d_o[r * 2 * d + k] * std::cos(a) + d_o[r * 2 * d + d + k] * std::sin(a);
        }
  std::vector<double> dx(g.size());
  if (p.act == LrpeAct::softmax || p.act == LrpeAct::softmax_seq) {
    // dx = p·(g − Σ p·g) along the softmax axis.
    const std::vector<double> prob = activate(p);
    const bool rows = p.act == LrpeAct::softmax;
    const std::size_t groups = rows ? g.size() / d : std::size_t(p.batch) * p.heads * d;
    const int count = rows ? p.d : p.n;
    const std::size_t stride = rows ? 1 : d;
    for (std::size_t grp = 0; grp < groups; ++grp) {
      const std::size_t base = rows ? grp * d : (grp / d) * p.n * d + grp % d;
      double dot = 0;
      for (int i = 0; i < count; ++i) dot += prob[base + i * stride] * g[base + i * stride];
      for (int i = 0; i < count; ++i) dx[base + i * stride] = prob[base + i * stride] * (g[base + i * stride] - dot);
    }
    return dx;
  }
  for (std::size_t i = 0; i < g.size(); ++i) {
    const double x = p.x[i];
    double grad = 1;
    if (p.act == LrpeAct::relu) grad = x >= 0 ? 1 : 0;
    if (p.act == LrpeAct::sigmoid) grad = sigmoid(x) * (1 - sigmoid(x));
    if (p.act == LrpeAct::silu) grad = sigmoid(x) * (1 + x * (1 - sigmoid(x)));
    dx[i] = grad * g[i];
  }
  return dx;
}

}  // namespace kgen
