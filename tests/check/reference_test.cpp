// The fp64 CPU reference and the correctness metrics: they must be able to fail.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "check/metrics.h"
#include "check/reference_cpu.h"

namespace kgen {
namespace {

AttentionProblem random_problem(int hq, int hkv, int nq, int nk, int d, bool causal, unsigned seed) {
  AttentionProblem p;
  p.heads_q = hq, p.heads_kv = hkv, p.n_q = nq, p.n_k = nk, p.head_dim = d, p.causal = causal;
  std::mt19937 rng(seed);
  std::normal_distribution<double> n;
  for (auto* v : {&p.q, &p.k, &p.v}) v->resize(std::size_t(v == &p.q ? hq * nq : hkv * nk) * d);
  for (auto* v : {&p.q, &p.k, &p.v})
    for (auto& x : *v) x = n(rng);
  return p;
}

TEST(ReferenceCpu, SingleKeyReturnsItsValue) {
  auto p = random_problem(1, 1, 5, 1, 8, false, 1);
  auto r = attention_forward_cpu(p);
  for (int i = 0; i < 5; ++i)
    for (int c = 0; c < 8; ++c) EXPECT_DOUBLE_EQ(r.o[i * 8 + c], p.v[c]);
}

TEST(ReferenceCpu, ZeroQueryAveragesValuesAndLseIsLogN) {
  auto p = random_problem(1, 1, 3, 10, 4, false, 2);
  std::fill(p.q.begin(), p.q.end(), 0.0);
  auto r = attention_forward_cpu(p);
  for (int c = 0; c < 4; ++c) {
    double mean = 0;
    for (int j = 0; j < 10; ++j) mean += p.v[j * 4 + c] / 10;
    EXPECT_NEAR(r.o[c], mean, 1e-14);
  }
  EXPECT_NEAR(r.lse[0], std::log(10.0), 1e-14);
}

TEST(ReferenceCpu, CausalIsBottomRightAlignedAndFullyMaskedRowsAreZero) {
  // n_q = 5 > n_k = 3: rows 0 and 1 see no key (j > i - 2 for all j >= 0 when i < 2).
  auto p = random_problem(1, 1, 5, 3, 4, true, 3);
  auto r = attention_forward_cpu(p);
  for (int i = 0; i < 2; ++i) {
    EXPECT_TRUE(std::isinf(r.lse[i]) && r.lse[i] < 0);
    for (int c = 0; c < 4; ++c) EXPECT_EQ(r.o[i * 4 + c], 0.0);
  }
  // Row 2 sees only key 0: its output is v[0].
  for (int c = 0; c < 4; ++c) EXPECT_NEAR(r.o[2 * 4 + c], p.v[c], 1e-14);
  // n_q < n_k: the last row sees every key, equal to the non-causal result.
  auto q = random_problem(1, 1, 2, 6, 4, true, 4);
  auto full = q;
  full.causal = false;
  auto rc = attention_forward_cpu(q), rf = attention_forward_cpu(full);
  for (int c = 0; c < 4; ++c) EXPECT_NEAR(rc.o[4 + c], rf.o[4 + c], 1e-14);
  EXPECT_GT(std::abs(rc.o[0] - rf.o[0]), 1e-6);  // the first row sees only 5 of 6 keys
}

TEST(ReferenceCpu, GroupedQueryHeadsShareTheirKvHead) {
  auto p = random_problem(4, 2, 3, 5, 8, false, 5);
  auto r = attention_forward_cpu(p);
  for (int h = 0; h < 4; ++h) {
    AttentionProblem one;
    one.n_q = 3, one.n_k = 5, one.head_dim = 8;
    one.q.assign(p.q.begin() + h * 24, p.q.begin() + (h + 1) * 24);
    one.k.assign(p.k.begin() + (h / 2) * 40, p.k.begin() + (h / 2 + 1) * 40);
    one.v.assign(p.v.begin() + (h / 2) * 40, p.v.begin() + (h / 2 + 1) * 40);
    auto ro = attention_forward_cpu(one);
    for (int x = 0; x < 24; ++x) EXPECT_DOUBLE_EQ(r.o[h * 24 + x], ro.o[x]);
  }
}

TEST(Metrics, PassesCloseOutputsAndFailsEveryBadKind) {
  std::vector<double> ref = {1.0, -2.0, 3.0, 0.5, -INFINITY};
  Tolerance tol = tolerance_for(DType::bf16);
  EXPECT_TRUE(compare(std::vector<double>{1.001, -2.001, 3.0, 0.5, -INFINITY}, ref, tol, 1).pass);
  // Right up to a factor α: cos ≈ 1, rel_l2 ≈ |1 − α|.
  auto scaled = compare(std::vector<double>{1.1, -2.2, 3.3, 0.55, -INFINITY}, ref, tol, 1);
  EXPECT_FALSE(scaled.pass);
  EXPECT_NEAR(scaled.rel_l2, 0.1, 1e-9);
  EXPECT_NEAR(scaled.cosine, 1.0, 1e-12);
  EXPECT_FALSE(compare(std::vector<double>{0, 0, 0, 0, -INFINITY}, ref, tol, 1).pass);           // unwritten zeros
  EXPECT_FALSE(compare(std::vector<double>{NAN, -2.0, 3.0, 0.5, -INFINITY}, ref, tol, 1).pass);  // poisoned element
  EXPECT_FALSE(compare(std::vector<double>{1.0, -2.0, 3.0, 0.5, 0.0}, ref, tol, 1).pass);        // -inf LSE lost
  EXPECT_FALSE(compare(std::vector<double>{1.0, -2.0, 3.0}, ref, tol, 1).pass);
  EXPECT_LT(tolerance_for(DType::f32).rel_l2, tolerance_for(DType::f16).rel_l2);
}

}  // namespace
}  // namespace kgen
