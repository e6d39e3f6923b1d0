// The fp64 LRPE references: the backward against central finite differences of the forward
// (every act, offsets, extra tokens, odd sizes, 1/2/3-d grids, every theta shape), and the
// forward against closed forms. Both must be able to fail.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <random>

#include "check/reference_lrpe.h"

namespace kgen {
namespace {

constexpr LrpeAct kActs[] = {LrpeAct::none, LrpeAct::relu, LrpeAct::sigmoid,
                             LrpeAct::silu, LrpeAct::softmax, LrpeAct::softmax_seq};

std::vector<double> random_vector(std::size_t n, std::mt19937& rng, double scale = 1.0) {
  std::normal_distribution<double> normal(0.0, scale);
  std::vector<double> v(n);
  for (double& x : v) x = normal(rng);
  return v;
}

// theta_kind: 0 = (H, width), 1 = (H, 1), 2 = (1, width).
LrpeProblem problem(int b, int h, int n, int d, LrpeAct act, int theta_kind, int width, unsigned seed) {
  std::mt19937 rng(seed);
  LrpeProblem p;
  p.batch = b, p.heads = h, p.n = n, p.d = d, p.act = act;
  p.theta_heads = theta_kind == 2 ? 1 : h;
  p.theta_width = theta_kind == 1 ? 1 : width;
  p.theta = random_vector(std::size_t(p.theta_heads) * p.theta_width, rng, 0.7);
  p.x = random_vector(std::size_t(b) * h * n * d, rng);
  // relu' is a step: keep x away from 0 so that the finite difference is well defined.
  if (act == LrpeAct::relu)
    for (double& v : p.x)
      if (std::abs(v) < 1e-3) v = 0.5;
  return p;
}

// max |dx − FD(L)| / max(1, max |dx|) with L = Σ o·dO.
double finite_difference_error(LrpeProblem p, unsigned seed) {
  std::mt19937 rng(seed);
  const std::vector<double> d_o = random_vector(p.x.size() * 2, rng);
  const std::vector<double> dx = lrpe_backward_cpu(p, d_o);
  auto loss = [&](const LrpeProblem& q) {
    auto o = lrpe_forward_cpu(q);
    return std::inner_product(o.begin(), o.end(), d_o.begin(), 0.0);
  };
  constexpr double kStep = 1e-6;
  double worst = 0, scale = 1;
  for (double v : dx) scale = std::max(scale, std::abs(v));
  for (std::size_t i = 0; i < p.x.size(); ++i) {
    const double saved = p.x[i];
    p.x[i] = saved + kStep;
    const double up = loss(p);
    p.x[i] = saved - kStep;
    const double down = loss(p);
    p.x[i] = saved;
    worst = std::max(worst, std::abs((up - down) / (2 * kStep) - dx[i]));
  }
  return worst / scale;
}

TEST(LrpeReference, BackwardMatchesFiniteDifferencesOneDim) {
  unsigned seed = 1;
  for (LrpeAct act : kActs)
    for (int theta_kind : {0, 1, 2})
      for (long long offset : {0LL, 37LL}) {
        LrpeProblem p = problem(2, 3, 7, 5, act, theta_kind, 5, seed++);
        p.offset = offset;
        EXPECT_LT(finite_difference_error(p, seed), 1e-7)
            << lrpe_act_name(act) << " theta kind " << theta_kind << " offset " << offset;
      }
}

TEST(LrpeReference, BackwardMatchesFiniteDifferencesMultiDim) {
  unsigned seed = 100;
  struct Grid {
    std::vector<int> sizes;
    int d, e;
  };
  // e = ceil(d / m) and a wider e (e·m > d: the last dim gets fewer features).
  const Grid grids[] = {{{5}, 5, 5}, {{3, 2}, 7, 4}, {{2, 3}, 7, 5}, {{2, 2, 3}, 5, 2}, {{3, 1, 2}, 9, 3}};
  for (LrpeAct act : kActs)
    for (const Grid& g : grids)
      for (int extra : {0, 2}) {
        int cells = 1;
        for (int s : g.sizes) cells *= s;
        LrpeProblem p = problem(2, 2, extra + cells, g.d, act, seed % 3, g.e, seed);
        ++seed;
        p.md = true, p.grid = g.sizes, p.extra = extra, p.e = g.e;
        EXPECT_LT(finite_difference_error(p, seed), 1e-7)
            << lrpe_act_name(act) << " m=" << g.sizes.size() << " d=" << g.d << " e=" << g.e << " l=" << extra;
      }
}

TEST(LrpeReference, AnglesFollowTheSpec) {
  LrpeProblem p = problem(1, 2, 6, 4, LrpeAct::none, 0, 4, 7);
  p.offset = 5;
  auto a = lrpe_angles_cpu(p);
  for (int h = 0; h < 2; ++h)
    for (int s = 0; s < 6; ++s)
      for (int k = 0; k < 4; ++k) EXPECT_DOUBLE_EQ(a[(h * 6 + s) * 4 + k], (5 + s) * p.theta[h * 4 + k]);

  // md, 2-d grid (2, 3) after l = 1: token 1 + r has coordinates (r / 3, r % 3); e = 2, d = 4:
  // features 0, 1 follow the first (slow) coordinate, 2, 3 the second.
  LrpeProblem q = problem(1, 1, 7, 4, LrpeAct::none, 0, 2, 8);
  q.md = true, q.grid = {2, 3}, q.extra = 1, q.e = 2;
  auto b = lrpe_angles_cpu(q);
  for (int k = 0; k < 4; ++k) EXPECT_EQ(b[k], 0.0);  // the extra token
  for (int r = 0; r < 6; ++r)
    for (int k = 0; k < 4; ++k) {
      const int coord = k < 2 ? r / 3 : r % 3;
      EXPECT_DOUBLE_EQ(b[(1 + r) * 4 + k], coord * q.theta[k % 2]) << "r=" << r << " k=" << k;
    }
}

TEST(LrpeReference, ForwardClosedForms) {
  // act none, theta = 0: o = [x, 0]. Softmax over the sequence: each column sums to one.
  LrpeProblem p = problem(2, 2, 5, 3, LrpeAct::none, 0, 3, 9);
  std::fill(p.theta.begin(), p.theta.end(), 0.0);
  auto o = lrpe_forward_cpu(p);
  for (std::size_t r = 0; r < p.x.size() / 3; ++r)
    for (int k = 0; k < 3; ++k) {
      EXPECT_EQ(o[r * 6 + k], p.x[r * 3 + k]);
      EXPECT_EQ(o[r * 6 + 3 + k], 0.0);
    }
  p.act = LrpeAct::softmax_seq;
  o = lrpe_forward_cpu(p);
  for (int bh = 0; bh < 4; ++bh)
    for (int k = 0; k < 3; ++k) {
      double sum = 0;
      for (int s = 0; s < 5; ++s) sum += o[(bh * 5 + s) * 6 + k];
      EXPECT_NEAR(sum, 1.0, 1e-12);
    }
  // Rotation preserves the norm of each (cos, sin) pair: |o_k|² + |o_{d+k}|² = xb².
  p.act = LrpeAct::silu;
  std::mt19937 rng(3);
  p.theta = random_vector(p.theta.size(), rng, 1.0);
  o = lrpe_forward_cpu(p);
  for (std::size_t r = 0; r < p.x.size() / 3; ++r)
    for (int k = 0; k < 3; ++k) {
      const double x = p.x[r * 3 + k], xb = x / (1 + std::exp(-x));
      EXPECT_NEAR(std::hypot(o[r * 6 + k], o[r * 6 + 3 + k]), std::abs(xb), 1e-12);
    }
}

// The kernels' angle reduction (templates/kgen_device/lrpe/rotate.cuh), emulated in fp32 on the host:
// within 5e-7 of the exact angle mod 2π for positions up to (offset + 32768) and θ up to 1.
TEST(LrpeReference, KernelAngleReductionIsAccurate) {
  const float two_pi_hi = 6.28318548202514648f, two_pi_lo = -1.74845560e-07f, inv_two_pi = 0.159154943091895336f;
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> theta_dist(1e-4f, 1.0f);
  double worst = 0;
  for (int trial = 0; trial < 200000; ++trial) {
    const float pos = static_cast<float>(rng() % (32768 + 4096));
    const float theta = theta_dist(rng);
    const float hi = pos * theta;
    const float lo = std::fma(pos, theta, -hi);
    const float turns = std::rint(hi * inv_two_pi);
    float r = std::fma(-turns, two_pi_hi, hi);
    r = std::fma(-turns, two_pi_lo, r);
    r += lo;
    const double exact = double(pos) * double(theta);
    const double err = std::remainder(exact - double(r), 2 * M_PI);
    worst = std::max(worst, std::abs(err));
  }
  EXPECT_LT(worst, 5e-7);
}

}  // namespace
}  // namespace kgen
