// The fp64 CPU references of the attention backward and double backward (docs/attention.md §3, §4),
// checked against central finite differences of O(1) scalar losses, and shown able to fail; and
// deviceless compiles of the naive GPU references (attention_bwd_naive.cuh).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <random>
#include <string>

#include "generator/attention_reference.h"
#include "kgen_device/reference/params.h"
#include "jit/kernel_builder.h"
#include "check/reference_cpu.h"

namespace kgen {
namespace {

struct Shape {
  int b, hq, hkv, nq, nk, d;
  bool causal;
  double scale = 0;
};

std::string name(const Shape& s) {
  return "b" + std::to_string(s.b) + " hq" + std::to_string(s.hq) + " hkv" + std::to_string(s.hkv) + " nq" +
         std::to_string(s.nq) + " nk" + std::to_string(s.nk) + " d" + std::to_string(s.d) +
         (s.causal ? " causal" : "") + (s.scale > 0 ? " scale " + std::to_string(s.scale) : "");
}

// Odd sizes, n_q != n_k both ways, causal with fully masked rows (n_q > n_k), GQA 2 and 4.
const Shape kShapes[] = {
    {1, 1, 1, 1, 1, 5, false},       // one query, one key
    {1, 1, 1, 3, 7, 8, true},        // causal n_q < n_k
    {1, 2, 1, 7, 3, 5, true},        // causal n_q > n_k: rows 0..3 fully masked; GQA 2
    {2, 4, 1, 7, 7, 8, false},       // GQA 4, batch 2
    {1, 4, 2, 3, 7, 5, true},        // GQA 2, causal n_q < n_k
    {1, 4, 1, 7, 3, 8, false},       // GQA 4, n_q > n_k
    {1, 2, 2, 7, 1, 5, true},        // n_k = 1, causal: only the last row sees its key
    {1, 1, 1, 7, 7, 5, true, 0.3},   // causal square, explicit scale
};

std::vector<double> randn(std::size_t n, std::mt19937_64& rng) {
  std::normal_distribution<double> normal;
  std::vector<double> x(n);
  for (double& e : x) e = normal(rng);
  return x;
}

AttentionProblem random_problem(const Shape& s, std::mt19937_64& rng) {
  AttentionProblem p;
  p.batch = s.b, p.heads_q = s.hq, p.heads_kv = s.hkv, p.n_q = s.nq, p.n_k = s.nk, p.head_dim = s.d;
  p.causal = s.causal, p.scale = s.scale;
  p.q = randn(std::size_t(s.b) * s.hq * s.nq * s.d, rng);
  p.k = randn(std::size_t(s.b) * s.hkv * s.nk * s.d, rng);
  p.v = randn(p.k.size(), rng);
  return p;
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) s += a[i] * b[i];
  return s;
}

double norm(const std::vector<double>& a) { return std::sqrt(dot(a, a)); }

// Central differences of f along every element of *x (restored afterwards).
std::vector<double> numeric_gradient(std::vector<double>* x, const std::function<double()>& f) {
  constexpr double h = 1e-5;
  std::vector<double> g(x->size());
  for (std::size_t e = 0; e < x->size(); ++e) {
    const double saved = (*x)[e];
    (*x)[e] = saved + h;
    const double plus = f();
    (*x)[e] = saved - h;
    const double minus = f();
    (*x)[e] = saved;
    g[e] = (plus - minus) / (2 * h);
  }
  return g;
}

// ‖analytic − numeric‖ / max(‖numeric‖, 1): relative for O(1) gradients, absolute for ~0 ones.
double gradient_error(const std::vector<double>& analytic, const std::vector<double>& numeric) {
  if (analytic.size() != numeric.size()) return INFINITY;
  std::vector<double> diff(analytic.size());
  for (std::size_t i = 0; i < diff.size(); ++i) diff[i] = analytic[i] - numeric[i];
  return norm(diff) / std::max(norm(numeric), 1.0);
}

// fp64 central differences with h = 1e-5 agree to ~1e-9 on these O(1) losses (measured: at
// most 1.1e-9 over every case here).
constexpr double kFdBound = 2e-8;
// A wrong formula misses by far more than this.
constexpr double kWrongBound = 1e-3;

struct Gradients {
  std::vector<double> q, k, v;
};

// ∂/∂(q, k, v) of L = Σ⟨R, attention_forward_cpu(p).o⟩ by central differences.
Gradients backward_by_differences(AttentionProblem p, const std::vector<double>& r) {
  auto loss = [&] { return dot(r, attention_forward_cpu(p).o); };
  return {numeric_gradient(&p.q, loss), numeric_gradient(&p.k, loss), numeric_gradient(&p.v, loss)};
}

TEST(ReferenceBackwardCpu, MatchesFiniteDifferencesOfTheForward) {
  std::mt19937_64 rng(11);
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(name(s));
    AttentionProblem p = random_problem(s, rng);
    const std::vector<double> r = randn(p.q.size(), rng);  // dO = ∂L/∂o = R
    const AttentionBackwardReference a = attention_backward_cpu(p, r);
    const Gradients fd = backward_by_differences(p, r);
    EXPECT_LT(gradient_error(a.dq, fd.q), kFdBound);
    EXPECT_LT(gradient_error(a.dk, fd.k), kFdBound);
    EXPECT_LT(gradient_error(a.dv, fd.v), kFdBound);
    // Non-trivial: dv is always non-zero; with a single key softmax is constant, so dq = dk = 0.
    EXPECT_GT(norm(a.dv), 0.1);
    if (s.nk >= 2) {
      EXPECT_GT(norm(a.dq), 1e-2);
      EXPECT_GT(norm(a.dk), 1e-2);
      // The same check fails on dS = P∘dP (the −D·1ᵀ term dropped).
      const AttentionBackwardReference wrong = attention_backward_cpu(p, r, ReferenceFault::drop_d_term);
      EXPECT_GT(gradient_error(wrong.dq, fd.q), kWrongBound);
      EXPECT_GT(gradient_error(wrong.dk, fd.k), kWrongBound);
    }
    // D_i = dO_i·O_i.
    const AttentionForwardReference f = attention_forward_cpu(p);
    for (std::size_t row = 0; row < a.d.size(); ++row) {
      double expect = 0;
      for (int c = 0; c < s.d; ++c) expect += r[row * s.d + c] * f.o[row * s.d + c];
      EXPECT_NEAR(a.d[row], expect, 1e-12);
    }
  }
}

TEST(ReferenceBackwardCpu, FullyMaskedRowsHaveZeroGradients) {
  std::mt19937_64 rng(12);
  AttentionProblem p = random_problem({1, 1, 1, 6, 2, 5, true}, rng);  // rows 0..3 see no key
  const std::vector<double> r = randn(p.q.size(), rng);
  const AttentionBackwardReference a = attention_backward_cpu(p, r);
  for (int i = 0; i < 4; ++i)
    for (int c = 0; c < 5; ++c) EXPECT_EQ(a.dq[i * 5 + c], 0.0);
  EXPECT_GT(norm(a.dq), 1e-2);
}

// Which cotangents of the outer loss are present.
struct Cotangents {
  bool q, k, v;
};

std::string name(const Cotangents& g) {
  return std::string("gq ") + (g.q ? "yes" : "no") + ", gk " + (g.k ? "yes" : "no") + ", gv " + (g.v ? "yes" : "no");
}

struct Second {
  std::vector<double> q, k, v, d_o;
};

// ∂/∂(q, k, v, d_o) of ℒ = ⟨gq, dq⟩ + ⟨gk, dk⟩ + ⟨gv, dv⟩ through attention_backward_cpu.
Second double_backward_by_differences(AttentionProblem p, std::vector<double> d_o, const std::vector<double>& gq,
                                      const std::vector<double>& gk, const std::vector<double>& gv) {
  auto loss = [&] {
    const AttentionBackwardReference b = attention_backward_cpu(p, d_o);
    return dot(gq, b.dq) + dot(gk, b.dk) + dot(gv, b.dv);  // an empty cotangent adds 0
  };
  return {numeric_gradient(&p.q, loss), numeric_gradient(&p.k, loss), numeric_gradient(&p.v, loss),
          numeric_gradient(&d_o, loss)};
}

TEST(ReferenceDoubleBackwardCpu, MatchesFiniteDifferencesOfTheBackwardForEveryCotangentSubset) {
  std::mt19937_64 rng(21);
  for (const Shape& s : kShapes)
    for (int mask = 0; mask < 8; ++mask) {
      const Cotangents present{(mask & 1) != 0, (mask & 2) != 0, (mask & 4) != 0};
      SCOPED_TRACE(name(s) + "; " + name(present));
      AttentionProblem p = random_problem(s, rng);
      const std::vector<double> d_o = randn(p.q.size(), rng);
      const std::vector<double> gq = present.q ? randn(p.q.size(), rng) : std::vector<double>{};
      const std::vector<double> gk = present.k ? randn(p.k.size(), rng) : std::vector<double>{};
      const std::vector<double> gv = present.v ? randn(p.v.size(), rng) : std::vector<double>{};
      const AttentionDoubleBackwardReference a = attention_double_backward_cpu(p, d_o, gq, gk, gv);
      const Second fd = double_backward_by_differences(p, d_o, gq, gk, gv);
      EXPECT_LT(gradient_error(a.q_bar, fd.q), kFdBound);
      EXPECT_LT(gradient_error(a.k_bar, fd.k), kFdBound);
      EXPECT_LT(gradient_error(a.v_bar, fd.v), kFdBound);
      EXPECT_LT(gradient_error(a.do_bar, fd.d_o), kFdBound);
      if (mask == 0) {  // no cotangent: everything is exactly zero
        EXPECT_EQ(norm(a.q_bar) + norm(a.k_bar) + norm(a.v_bar) + norm(a.do_bar), 0.0);
        continue;
      }
      if (present.v) {
        EXPECT_GT(norm(a.do_bar), 1e-2);  // P·gV
      }
      if (s.nk < 2) continue;  // a single key: constant softmax, most terms vanish
      // Non-trivial outputs: V̄ = Hᵀ·dO needs G ≠ 0 (gq or gk); the others need any cotangent.
      EXPECT_GT(norm(a.q_bar), 1e-2);
      EXPECT_GT(norm(a.k_bar), 1e-2);
      EXPECT_GT(norm(a.do_bar), 1e-2);
      if (present.q || present.k) {
        EXPECT_GT(norm(a.v_bar), 1e-2);
        // Dropping −r·1ᵀ from H changes V̄ and dŌ: the same check catches it.
        const auto wrong = attention_double_backward_cpu(p, d_o, gq, gk, gv, ReferenceFault::drop_r_term);
        EXPECT_GT(gradient_error(wrong.v_bar, fd.v), kWrongBound);
        EXPECT_GT(gradient_error(wrong.do_bar, fd.d_o), kWrongBound);
      } else {
        EXPECT_EQ(norm(a.v_bar), 0.0);
      }
      // P stored as a constant (a failure mode of docs/attention.md §5): Q̄ and K̄ are caught.
      const auto constant_p = attention_double_backward_cpu(p, d_o, gq, gk, gv, ReferenceFault::p_constant);
      EXPECT_GT(gradient_error(constant_p.q_bar, fd.q), kWrongBound);
      EXPECT_GT(gradient_error(constant_p.k_bar, fd.k), kWrongBound);
    }
}

// r_i = s·(gQ_i·(P·K)_i + Q_i·(P·gK)_i) (docs/attention.md §4's closed form, what a kernel's row pass
// computes), with P·X obtained from the forward reference with X in place of v.
TEST(ReferenceDoubleBackwardCpu, RowTermRMatchesItsClosedForm) {
  std::mt19937_64 rng(31);
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(name(s));
    AttentionProblem p = random_problem(s, rng);
    const std::vector<double> d_o = randn(p.q.size(), rng), gq = randn(p.q.size(), rng), gk = randn(p.k.size(), rng);
    const auto a = attention_double_backward_cpu(p, d_o, gq, gk, {});
    AttentionProblem pk = p, pgk = p;
    pk.v = p.k, pgk.v = gk;
    const std::vector<double> p_k = attention_forward_cpu(pk).o, p_gk = attention_forward_cpu(pgk).o;
    const double scale = s.scale > 0 ? s.scale : 1 / std::sqrt(double(s.d));
    for (std::size_t row = 0; row < a.r.size(); ++row) {
      double expect = 0;
      for (int c = 0; c < s.d; ++c) {
        const std::size_t e = row * s.d + c;
        expect += scale * (gq[e] * p_k[e] + p.q[e] * p_gk[e]);
      }
      EXPECT_NEAR(a.r[row], expect, 1e-12 * (1 + std::abs(expect)));
    }
  }
}

TEST(ReferenceDoubleBackwardCpu, RejectsMismatchedSizes) {
  std::mt19937_64 rng(41);
  AttentionProblem p = random_problem({1, 2, 1, 3, 4, 5, false}, rng);
  const std::vector<double> d_o = randn(p.q.size(), rng);
  EXPECT_THROW(attention_backward_cpu(p, randn(3, rng)), std::invalid_argument);
  EXPECT_THROW(attention_double_backward_cpu(p, d_o, {}, randn(p.q.size(), rng), {}), std::invalid_argument);
}

// The naive GPU references compile for sm_80 (every dtype, both orders) and sm_90a (bf16), with
// the entry points and block size the runtime launches them with (no GPU needed).
TEST(ReferenceBackwardCompile, NaiveKernelsCompileForEveryDtype) {
  KernelBuilder builder{std::filesystem::path(KGEN_TEST_CACHE_DIR)};
  for (const char* arch : {"sm_80", "sm_90a"})
    for (DType t : {DType::f16, DType::bf16, DType::f32})
      for (bool double_backward : {false, true}) {
        if (std::string(arch) == "sm_90a" && t != DType::bf16) continue;  // one dtype is enough there
        for (const KernelSource& src : {render_attention_reference_bwd_rows(t, double_backward),
                                        render_attention_reference_bwd_keys(t, double_backward)}) {
          SCOPED_TRACE(src.variant + " " + arch);
          EXPECT_NE(src.source.find(src.entry), std::string::npos);
          EXPECT_EQ(src.threads, kReferenceBwdThreads);
          BuildOutcome built = builder.build(src, *parse_target(arch));
          EXPECT_FALSE(built.image.empty());
          EXPECT_TRUE(built.resources.parsed) << built.log;  // spills are fine in a reference
        }
      }
  // Distinct variants: nothing shares a cache entry by accident.
  EXPECT_NE(render_attention_reference_bwd_rows(DType::bf16, false).variant,
            render_attention_reference_bwd_rows(DType::bf16, true).variant);
  EXPECT_NE(render_attention_reference_bwd_rows(DType::f16, true).variant,
            render_attention_reference_bwd_keys(DType::f16, true).variant);
}

}  // namespace
}  // namespace kgen
