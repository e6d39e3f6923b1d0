// The comparison step of every operator's harness, without a device: the fp64 CPU reference,
// rounded to the op's dtype as a kernel would store it, passes; the same outputs with one row
// zeroed fail, naming the output and the row. The cases have enough rows that the zeroed one
// moves rel_l2 by less than its bound (asserted), so only the row rule can catch it.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "check/attention_backward_harness.h"
#include "check/attention_harness.h"
#include "check/host_tensor.h"
#include "check/lrpe_harness.h"
#include "check/reference_lrpe.h"

namespace kgen {
namespace {

// A (b, h, n, d) host tensor in `layout` and `dtype` holding `values` (contiguous (b, h, n, d)).
HostTensor host_of(const std::vector<double>& values, int b, int h, int n, int d, Layout layout, DType dtype) {
  HostTensor t = make_host(b, h, n, d, layout, dtype);
  std::size_t i = 0;
  for (int ib = 0; ib < b; ++ib)
    for (int ih = 0; ih < h; ++ih)
      for (int in = 0; in < n; ++in)
        for (int id = 0; id < d; ++id) t.set(t.offset(ib, ih, in, id), static_cast<float>(values[i++]));
  return t;
}

void zero_row(HostTensor& t, int b, int h, int i) {
  for (int x = 0; x < t.d; ++x) t.set(t.offset(b, h, i, x), 0.f);
}

// A check that must fail on `output` at row (b, h, i), by the row rule alone.
void expect_row_failure(const HarnessCheck& r, const std::string& output, int b, int h, int i) {
  EXPECT_FALSE(r.pass) << to_string(r);
  ASSERT_TRUE(r.has(output)) << to_string(r);
  const Comparison& c = r.get(output);
  EXPECT_LE(c.rel_l2, c.row_bound / kRowErrorMultiple) << output << ": rel_l2 alone would catch it; use more rows";
  EXPECT_EQ(c.failed, Comparison::Failure::row) << to_string(r);
  const std::string failure = r.failure(), row = bhi_name(b, h, i);
  EXPECT_EQ(failure.rfind(output + ": ", 0), 0u) << failure;
  EXPECT_NE(failure.find(row), std::string::npos) << "the failure does not name " << row << ": " << failure;
}

std::vector<double> random_values(HostTensor& t, std::mt19937_64& rng) { return fill_random(t, rng); }

// Random q, k, v, d_o (and with `dbl` the cotangents of dq, dk, dv) for `c`, in its dtype.
GradientInputs random_gradient_inputs(const AttentionCase& c, bool dbl, std::mt19937_64& rng) {
  GradientInputs in;
  auto input = [&](int heads, int n) {
    HostTensor t = make_host(c.batch, heads, n, c.head_dim, c.layout, c.dtype);
    return random_values(t, rng);
  };
  in.q = input(c.heads_q, c.n_q), in.k = input(c.heads_kv, c.n_k), in.v = input(c.heads_kv, c.n_k);
  in.d_o = input(c.heads_q, c.n_q);
  if (dbl) in.gq = input(c.heads_q, c.n_q), in.gk = input(c.heads_kv, c.n_k), in.gv = input(c.heads_kv, c.n_k);
  return in;
}

TEST(HarnessRowRule, AttentionForward) {
  // Causal with n_q > n_k: the first 32 rows of every head are fully masked (o = 0, lse = −inf).
  AttentionCase c;
  c.dtype = DType::bf16, c.batch = 2, c.heads_q = 64, c.heads_kv = 16, c.n_q = 160, c.n_k = 128, c.head_dim = 64;
  c.causal = true, c.layout = Layout::bnhd;
  std::mt19937_64 rng(11);
  HostTensor q = make_host(c.batch, c.heads_q, c.n_q, c.head_dim, c.layout, c.dtype);
  HostTensor k = make_host(c.batch, c.heads_kv, c.n_k, c.head_dim, c.layout, c.dtype);
  HostTensor v = make_host(c.batch, c.heads_kv, c.n_k, c.head_dim, c.layout, c.dtype);
  const auto q64 = random_values(q, rng), k64 = random_values(k, rng), v64 = random_values(v, rng);
  std::vector<int> rows(c.n_q);
  for (int i = 0; i < c.n_q; ++i) rows[i] = i;
  AttentionReferenceRows ref;
  ref.description = "cpu-fp64 all rows";
  append_attention_forward_cpu_rows(c, q64, k64, v64, rows, ref);
  ASSERT_EQ(ref.lse.size(), std::size_t(c.batch) * c.heads_q * c.n_q);

  AttentionForwardOutputs out{host_of(ref.o, c.batch, c.heads_q, c.n_q, c.head_dim, c.layout, c.dtype), {}};
  for (double l : ref.lse) out.lse.push_back(static_cast<float>(l));
  const HarnessCheck good = compare_attention_forward_outputs(c, out, ref);
  EXPECT_TRUE(good.pass) << to_string(good);
  EXPECT_LT(good.get("o").worst_row_error, good.get("o").row_bound / 4);

  AttentionForwardOutputs bad = out;
  zero_row(bad.o, 1, 37, c.n_q - 1);
  expect_row_failure(compare_attention_forward_outputs(c, bad, ref), "o", 1, 37, c.n_q - 1);
  // One row's lse off by 0.5 (its softmax scaled by e^0.5).
  bad = out;
  bad.lse[(std::size_t(0) * c.heads_q + 5) * c.n_q + 100] += 0.5f;
  expect_row_failure(compare_attention_forward_outputs(c, bad, ref), "lse", 0, 5, 100);
}

// Backward or double backward: every output passes rounded, then each fails with one row zeroed.
void check_gradient_rows(bool dbl) {
  AttentionCase c;
  c.dtype = DType::bf16, c.batch = 1, c.heads_q = 128, c.heads_kv = 128, c.n_q = 128, c.n_k = 128, c.head_dim = 32;
  c.causal = true, c.layout = Layout::bhnd;
  std::mt19937_64 rng(dbl ? 13 : 12);
  const GradientInputs in = random_gradient_inputs(c, dbl, rng);
  const GradientReference ref = attention_gradient_reference_cpu(c, dbl, in);
  const std::vector<std::string> names = attention_gradient_output_names(dbl);
  ASSERT_EQ(ref.values.size(), names.size());
  // Every group compared: the gathered values are the contiguous (b, h, n, d) tensors.
  std::vector<HostTensor> outputs;
  for (const auto& values : ref.values) {
    const int n = int(values.size() / (std::size_t(c.batch) * c.heads_q * c.head_dim));
    outputs.push_back(host_of(values, c.batch, c.heads_q, n, c.head_dim, c.layout, c.dtype));
  }
  const HarnessCheck good = compare_attention_gradient_outputs(c, dbl, outputs, ref);
  EXPECT_TRUE(good.pass) << to_string(good);
  for (std::size_t a = 0; a < names.size(); ++a) {
    // Row 64 of head 70: a query that sees 65 keys, a key seen by 64 queries.
    std::vector<HostTensor> bad = outputs;
    zero_row(bad[a], 0, 70, 64);
    expect_row_failure(compare_attention_gradient_outputs(c, dbl, bad, ref), names[a], 0, 70, 64);
  }
}

TEST(HarnessRowRule, AttentionBackward) { check_gradient_rows(false); }

TEST(HarnessRowRule, AttentionDoubleBackwardWithTheSecondOrderBound) { check_gradient_rows(true); }

// A one-key softmax: every second-order output but dŌ is exactly zero, and fp32 kernels leave
// rounding noise from cancelling sums there. The noise may reach atol·√m (m: the terms an element
// sums, n_q · group = 504 for K̄ here, n_k = 1 for Q̄), no more.
TEST(HarnessZeroReference, NoiseBoundScalesWithTheTermsSummed) {
  AttentionCase c;
  c.dtype = DType::f32, c.batch = 1, c.heads_q = 8, c.heads_kv = 1, c.n_q = 63, c.n_k = 1, c.head_dim = 64;
  c.layout = Layout::bhnd;
  std::mt19937_64 rng(21);
  const GradientInputs in = random_gradient_inputs(c, true, rng);
  const GradientReference ref = attention_gradient_reference_cpu(c, true, in);
  const std::vector<std::string> names = attention_gradient_output_names(true);
  ASSERT_EQ(names[0], "q_bar");
  ASSERT_EQ(names[1], "k_bar");
  for (std::size_t a = 0; a < 3; ++a)
    for (double v : ref.values[a]) ASSERT_EQ(v, 0.0) << names[a] << " is not exactly zero with one key";
  auto outputs_with = [&](std::size_t a, double noise) {
    std::vector<HostTensor> out;
    for (std::size_t o = 0; o < ref.values.size(); ++o) {
      std::vector<double> values = ref.values[o];
      if (o == a)
        for (std::size_t i = 0; i < values.size(); ++i) values[i] += i % 3 == 0 ? noise : -noise / 2;
      const int heads = o == 1 || o == 2 ? c.heads_kv : c.heads_q, n = o == 1 || o == 2 ? c.n_k : c.n_q;
      out.push_back(host_of(values, c.batch, heads, n, c.head_dim, c.layout, c.dtype));
    }
    return compare_attention_gradient_outputs(c, true, out, ref);
  };
  const HarnessCheck exact = outputs_with(0, 0);
  EXPECT_TRUE(exact.pass) << to_string(exact);
  const HarnessCheck k_noise = outputs_with(1, 1.5e-5);  // what the fp32 kernel left on an H200
  EXPECT_TRUE(k_noise.pass) << to_string(k_noise);
  const HarnessCheck k_wrong = outputs_with(1, 1e-3);  // above 1e-5 · √504
  EXPECT_FALSE(k_wrong.pass) << to_string(k_wrong);
  EXPECT_EQ(k_wrong.get("k_bar").failed, Comparison::Failure::rel_l2);
  const HarnessCheck q_noise = outputs_with(0, 2e-5);  // Q̄ sums one term: atol alone
  EXPECT_FALSE(q_noise.pass) << to_string(q_noise);
  EXPECT_EQ(q_noise.get("q_bar").failed, Comparison::Failure::rel_l2);
}

// lrpe_cosine or md_lrpe_cosine, one direction: the output rounded passes, one row zeroed fails;
// the md cache forward also compares the angles it wrote.
void check_lrpe_rows(LrpeCase c) {
  std::mt19937_64 rng(c.seed);
  const LrpeTheta theta = make_lrpe_theta(c, rng);
  HostTensor x = make_host(c.batch, c.heads, c.n, c.d, c.layout, c.dtype);
  const std::vector<double> x64 = random_values(x, rng);
  std::vector<double> d_o64;
  const bool fwd = c.direction == LrpeDirection::forward;
  if (!fwd) {
    HostTensor d_o = make_host(c.batch, c.heads, c.n, 2 * c.d, c.layout, c.dtype);
    d_o64 = random_values(d_o, rng);
  }
  const LrpeReference ref = lrpe_reference_cpu(c, theta, x64, d_o64);
  ASSERT_EQ(ref.slices.size(), std::size_t(c.batch) * c.heads) << "every slice must be compared";
  const int width = fwd ? 2 * c.d : c.d;
  const HostTensor out = host_of(ref.out, c.batch, c.heads, c.n, width, c.layout, c.dtype);
  // The md cache: the angles as the kernel stores them, fp32 (heads, n, d), from batch 0.
  std::vector<float> angles;
  if (!ref.angles.empty()) {
    LrpeProblem p;
    p.heads = c.heads, p.n = c.n, p.d = c.d, p.theta_heads = theta.rows, p.theta_width = theta.cols;
    p.theta.assign(theta.values.begin(), theta.values.end());
    p.md = true, p.grid = c.grid, p.extra = c.extra, p.e = theta.cols;
    for (double a : lrpe_angles_cpu(p)) angles.push_back(static_cast<float>(a));
  }
  const HarnessCheck good = compare_lrpe_outputs(c, out, angles, ref);
  EXPECT_TRUE(good.pass) << to_string(good);
  EXPECT_EQ(good.has("angles"), !angles.empty());

  const std::string name = fwd ? "o" : "dx";
  HostTensor bad = out;
  zero_row(bad, 1, 2, c.n / 2);
  expect_row_failure(compare_lrpe_outputs(c, bad, angles, ref), name, 1, 2, c.n / 2);
  if (!angles.empty()) {
    // One position's angles lost (0: cos 1, sin 0), in head 3. The fp32 bound's rel_l2 already
    // catches one such row of thousands.
    std::vector<float> lost = angles;
    for (int k = 0; k < c.d; ++k) lost[(std::size_t(3) * c.n + c.n - 1) * c.d + k] = 0.f;
    const HarnessCheck r = compare_lrpe_outputs(c, out, lost, ref);
    EXPECT_FALSE(r.pass);
    EXPECT_EQ(r.failure().rfind("angles: ", 0), 0u) << r.failure();
  }
}

LrpeCase lrpe_case(LrpeOp op, LrpeDirection dir, LrpeAct act) {
  LrpeCase c;
  c.op = op, c.direction = dir, c.act = act, c.dtype = DType::bf16;
  c.batch = 2, c.heads = 4, c.d = 64, c.layout = Layout::bnhd, c.seed = 21;
  if (op == LrpeOp::cosine) {
    c.n = 4096, c.offset = 777;
  } else {
    c.grid = {64, 64}, c.extra = 10, c.n = 10 + 64 * 64;
  }
  return c;
}

TEST(HarnessRowRule, LrpeCosineForwardRowsOfTwoD) {
  check_lrpe_rows(lrpe_case(LrpeOp::cosine, LrpeDirection::forward, LrpeAct::none));
}

TEST(HarnessRowRule, LrpeCosineBackward) {
  check_lrpe_rows(lrpe_case(LrpeOp::cosine, LrpeDirection::backward, LrpeAct::silu));
}

TEST(HarnessRowRule, MdLrpeCosineForwardWithTheAngleCache) {
  LrpeCase c = lrpe_case(LrpeOp::md_cosine, LrpeDirection::forward, LrpeAct::none);
  c.cache = true;
  check_lrpe_rows(c);
}

TEST(HarnessRowRule, MdLrpeCosineBackwardSoftmaxOverTheSequence) {
  check_lrpe_rows(lrpe_case(LrpeOp::md_cosine, LrpeDirection::backward, LrpeAct::softmax_seq));
}

}  // namespace
}  // namespace kgen
