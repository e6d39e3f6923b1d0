#include "check/reference_cpu.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace kgen {

AttentionForwardReference attention_forward_cpu(const AttentionProblem& p, const ReferenceVariant* variant) {
  const int d = p.head_dim;
  const double scale = p.scale > 0 ? p.scale : 1.0 / std::sqrt(double(d));
  const double neg_inf = -std::numeric_limits<double>::infinity();
  const int group = p.heads_q / p.heads_kv;
  AttentionForwardReference r;
  r.o.assign(std::size_t(p.batch) * p.heads_q * p.n_q * d, 0.0);
  r.lse.assign(std::size_t(p.batch) * p.heads_q * p.n_q, neg_inf);
  std::vector<double> s(p.n_k);
  for (int b = 0; b < p.batch; ++b)
    for (int h = 0; h < p.heads_q; ++h) {
      const int hk = h / group;
      const double* q = &p.q[((std::size_t(b) * p.heads_q + h) * p.n_q) * d];
      const double* k = &p.k[((std::size_t(b) * p.heads_kv + hk) * p.n_k) * d];
      const double* v = &p.v[((std::size_t(b) * p.heads_kv + hk) * p.n_k) * d];
      double* o = &r.o[((std::size_t(b) * p.heads_q + h) * p.n_q) * d];
      double* lse = &r.lse[(std::size_t(b) * p.heads_q + h) * p.n_q];
      const bool has_sink = variant && !variant->sinks.empty();
      const double sink = has_sink ? variant->sinks[h] : neg_inf;
      for (int i = 0; i < p.n_q; ++i) {
        double m = neg_inf;
        for (int j = 0; j < p.n_k; ++j) {
          bool masked = p.causal && j > i + (p.n_k - p.n_q);
          const VariantIndex at{b, h, i, j, p.n_q, p.n_k};
          if (variant && variant->variant && !masked) masked = !variant->variant->mask(variant->values, at);
          double dot = 0;
          for (int c = 0; c < d; ++c) dot += q[std::size_t(i) * d + c] * k[std::size_t(j) * d + c];
          s[j] = masked ? neg_inf : scale * dot;
          if (variant && variant->variant && !masked) s[j] = variant->variant->score(variant->values, s[j], at);
          m = std::max(m, s[j]);
        }
        if (has_sink) {  // the sink joins the denominator and carries no value
          const double top = std::max(m, sink);
          double l = std::exp(sink - top);
          for (int j = 0; j < p.n_k; ++j) {
            const double e = s[j] == neg_inf ? 0.0 : std::exp(s[j] - top);
            l += e;
            for (int c = 0; c < d; ++c) o[std::size_t(i) * d + c] += e * v[std::size_t(j) * d + c];
          }
          for (int c = 0; c < d; ++c) o[std::size_t(i) * d + c] /= l;
          lse[i] = top + std::log(l);
          continue;
        }
        if (m == neg_inf) continue;  // fully masked row: o = 0, lse = -inf
        double l = 0;
        for (int j = 0; j < p.n_k; ++j) {
          double e = s[j] == neg_inf ? 0.0 : std::exp(s[j] - m);
          l += e;
          for (int c = 0; c < d; ++c) o[std::size_t(i) * d + c] += e * v[std::size_t(j) * d + c];
        }
        for (int c = 0; c < d; ++c) o[std::size_t(i) * d + c] /= l;
        lse[i] = m + std::log(l);
      }
    }
  return r;
}

namespace {

// A dense row-major fp64 matrix: one head's (n, d) slice or an (n_q, n_k) score-shaped term.
struct Mat {
  int rows = 0, cols = 0;
  std::vector<double> a;
  Mat(int r, int c) : rows(r), cols(c), a(std::size_t(r) * c, 0.0) {}
  double& operator()(int i, int j) { return a[std::size_t(i) * cols + j]; }
  double operator()(int i, int j) const { return a[std::size_t(i) * cols + j]; }
};

// x·y, x·yᵀ and xᵀ·y.
Mat mul(const Mat& x, const Mat& y) {
  Mat z(x.rows, y.cols);
  for (int i = 0; i < x.rows; ++i)
    for (int l = 0; l < x.cols; ++l)
      for (int j = 0; j < y.cols; ++j) z(i, j) += x(i, l) * y(l, j);
  return z;
}
Mat mul_nt(const Mat& x, const Mat& y) {
  Mat z(x.rows, y.rows);
  for (int i = 0; i < x.rows; ++i)
    for (int j = 0; j < y.rows; ++j)
      for (int l = 0; l < x.cols; ++l) z(i, j) += x(i, l) * y(j, l);
  return z;
}
Mat mul_tn(const Mat& x, const Mat& y) {
  Mat z(x.cols, y.cols);
  for (int l = 0; l < x.rows; ++l)
    for (int i = 0; i < x.cols; ++i)
      for (int j = 0; j < y.cols; ++j) z(i, j) += x(l, i) * y(l, j);
  return z;
}
// alpha·x + beta·y, elementwise.
Mat lin(double alpha, const Mat& x, double beta, const Mat& y) {
  Mat z(x.rows, x.cols);
  for (std::size_t e = 0; e < z.a.size(); ++e) z.a[e] = alpha * x.a[e] + beta * y.a[e];
  return z;
}
Mat scaled(double alpha, Mat x) {
  for (double& e : x.a) e *= alpha;
  return x;
}
// Σ_j x_ij·y_ij for every row i.
std::vector<double> row_dot(const Mat& x, const Mat& y) {
  std::vector<double> r(x.rows, 0.0);
  for (int i = 0; i < x.rows; ++i)
    for (int j = 0; j < x.cols; ++j) r[i] += x(i, j) * y(i, j);
  return r;
}

// One head's (n, d) slice of a contiguous (b, heads, n, d) tensor; zeros when `t` is empty.
Mat head_slice(const std::vector<double>& t, int b, int h, int heads, int n, int d) {
  Mat m(n, d);
  if (!t.empty()) std::copy_n(t.begin() + std::ptrdiff_t((std::size_t(b) * heads + h) * n * d), m.a.size(), m.a.begin());
  return m;
}
// Adds `m` into that slice (GQA: several query heads add into one kv head).
void add_slice(std::vector<double>& t, const Mat& m, int b, int h, int heads) {
  double* out = &t[(std::size_t(b) * heads + h) * m.a.size()];
  for (std::size_t e = 0; e < m.a.size(); ++e) out[e] += m.a[e];
}

void require_size(const std::vector<double>& t, std::size_t n, bool may_be_empty, const char* name) {
  if (t.size() != n && !(may_be_empty && t.empty()))
    throw std::invalid_argument(std::string("reference: ") + name + " has " + std::to_string(t.size()) +
                                " elements, expected " + std::to_string(n));
}

// What the first-order backward of one (batch, query head) computes, kept for the second order.
struct HeadBackward {
  Mat q, k, v, d_o;
  Mat p, dp, ds;          // P, dP = dO·vᵀ, dS = P∘(dP − D·1ᵀ); (n_q, n_k)
  std::vector<double> d;  // D_i = Σ_j P_ij·dP_ij = dO_i·O_i
  // With a variant: the scaled scores s (before f), G = P∘(dP − D·1ᵀ) (before f'), each row's
  // sink probability.
  Mat s, g;
  std::vector<double> p_sink;
};

// The variant's rows of head (b, h): P from f(s) under the mask and the sink, then dS = G∘f'(s).
void variant_head_backward(const AttentionProblem& p, const ReferenceVariant& var, int b, int h, HeadBackward& r) {
  const double neg_inf = -std::numeric_limits<double>::infinity();
  const double sink = var.sinks.empty() ? neg_inf : var.sinks[h];
  r.p_sink.assign(p.n_q, 0.0);
  std::vector<double> sm(p.n_k);
  for (int i = 0; i < p.n_q; ++i) {
    double m = sink;
    for (int j = 0; j < p.n_k; ++j) {
      const VariantIndex at{b, h, i, j, p.n_q, p.n_k};
      bool masked = p.causal && j > i + (p.n_k - p.n_q);
      if (var.variant && !masked) masked = !var.variant->mask(var.values, at);
      sm[j] = masked ? neg_inf : var.variant ? var.variant->score(var.values, r.s(i, j), at) : r.s(i, j);
      m = std::max(m, sm[j]);
    }
    if (m == neg_inf) continue;  // fully masked, no sink: P row = 0
    double l = sink == neg_inf ? 0.0 : std::exp(sink - m);
    for (int j = 0; j < p.n_k; ++j) l += (r.p(i, j) = sm[j] == neg_inf ? 0.0 : std::exp(sm[j] - m));
    for (int j = 0; j < p.n_k; ++j) r.p(i, j) /= l;
    if (sink != neg_inf) r.p_sink[i] = std::exp(sink - m) / l;
  }
  r.dp = mul_nt(r.d_o, r.v);
  r.d = row_dot(r.p, r.dp);
  r.g = r.p;
  for (int i = 0; i < p.n_q; ++i)
    for (int j = 0; j < p.n_k; ++j) r.g(i, j) *= r.dp(i, j) - r.d[i];
  r.ds = r.g;
  if (var.variant)
    for (int i = 0; i < p.n_q; ++i)
      for (int j = 0; j < p.n_k; ++j)
        if (r.p(i, j) != 0) r.ds(i, j) *= var.variant->dscore(var.values, r.s(i, j), {b, h, i, j, p.n_q, p.n_k});
}

HeadBackward head_backward(const AttentionProblem& p, const std::vector<double>& d_o, int b, int h, ReferenceFault fault,
                           const ReferenceVariant* var = nullptr) {
  const int d = p.head_dim, hk = h / (p.heads_q / p.heads_kv);
  HeadBackward r{head_slice(p.q, b, h, p.heads_q, p.n_q, d), head_slice(p.k, b, hk, p.heads_kv, p.n_k, d),
                 head_slice(p.v, b, hk, p.heads_kv, p.n_k, d), head_slice(d_o, b, h, p.heads_q, p.n_q, d),
                 Mat(p.n_q, p.n_k), Mat(0, 0), Mat(0, 0), {}, Mat(0, 0), Mat(0, 0), {}};
  const double scale = p.scale > 0 ? p.scale : 1.0 / std::sqrt(double(d));
  const Mat s = mul_nt(r.q, r.k);
  if (var) {
    r.s = scaled(scale, s);
    variant_head_backward(p, *var, b, h, r);
    return r;
  }
  for (int i = 0; i < p.n_q; ++i) {
    const int visible = p.causal ? std::min(p.n_k, i + (p.n_k - p.n_q) + 1) : p.n_k;
    if (visible <= 0) continue;  // fully masked row: P row = 0
    double m = -std::numeric_limits<double>::infinity(), l = 0;
    for (int j = 0; j < visible; ++j) m = std::max(m, scale * s(i, j));
    for (int j = 0; j < visible; ++j) l += (r.p(i, j) = std::exp(scale * s(i, j) - m));
    for (int j = 0; j < visible; ++j) r.p(i, j) /= l;
  }
  r.dp = mul_nt(r.d_o, r.v);
  r.d = row_dot(r.p, r.dp);
  r.ds = r.p;
  for (int i = 0; i < p.n_q; ++i)
    for (int j = 0; j < p.n_k; ++j) r.ds(i, j) *= r.dp(i, j) - (fault == ReferenceFault::drop_d_term ? 0.0 : r.d[i]);
  return r;
}

template <class F>
void for_each_head(const AttentionProblem& p, F f) {
  if (p.heads_kv <= 0 || p.heads_q % p.heads_kv != 0) throw std::invalid_argument("reference: heads_q % heads_kv != 0");
  for (int b = 0; b < p.batch; ++b)
    for (int h = 0; h < p.heads_q; ++h) f(b, h, h / (p.heads_q / p.heads_kv));
}

}  // namespace

AttentionBackwardReference attention_backward_cpu(const AttentionProblem& p, const std::vector<double>& d_o,
                                                  ReferenceFault fault, const ReferenceVariant* variant) {
  const double scale = p.scale > 0 ? p.scale : 1.0 / std::sqrt(double(p.head_dim));
  require_size(d_o, p.q.size(), false, "d_o");
  AttentionBackwardReference r;
  r.dq.assign(p.q.size(), 0.0), r.dk.assign(p.k.size(), 0.0), r.dv.assign(p.v.size(), 0.0);
  r.d.assign(std::size_t(p.batch) * p.heads_q * p.n_q, 0.0);
  if (variant) {
    r.sinks_grad.assign(variant->sinks.size(), 0.0);
    if (variant->variant) {
      r.tensor_grads.resize(variant->values.tensors.size());
      for (std::size_t t = 0; t < r.tensor_grads.size(); ++t)
        if (variant->variant->decl().tensors[t].learnable) {
          std::int64_t extent = 1;
          const VariantTensorValue& tv = variant->values.tensors[t];
          for (int dim = 0; dim < variant->variant->decl().tensors[t].rank; ++dim)
            extent += (tv.shape[dim] - 1) * tv.strides[dim];
          r.tensor_grads[t].assign(static_cast<std::size_t>(extent), 0.0);
        }
    }
  }
  for_each_head(p, [&](int b, int h, int hk) {
    const HeadBackward hb = head_backward(p, d_o, b, h, fault, variant);
    if (variant) {
      for (int i = 0; i < p.n_q; ++i) {
        if (!r.sinks_grad.empty()) r.sinks_grad[h] -= hb.p_sink[i] * hb.d[i];
        if (!variant->variant || !variant->variant->has_learnable_tensors()) continue;
        for (int j = 0; j < p.n_k; ++j)
          if (hb.p(i, j) != 0)
            variant->variant->tensor_partials(variant->values, hb.s(i, j), {b, h, i, j, p.n_q, p.n_k},
                                              [&](int t, std::int64_t e, double partial) {
                                                r.tensor_grads[t][static_cast<std::size_t>(e)] += hb.g(i, j) * partial;
                                              });
      }
    }
    add_slice(r.dq, scaled(scale, mul(hb.ds, hb.k)), b, h, p.heads_q);
    add_slice(r.dk, scaled(scale, mul_tn(hb.ds, hb.q)), b, hk, p.heads_kv);
    add_slice(r.dv, mul_tn(hb.p, hb.d_o), b, hk, p.heads_kv);
    std::copy(hb.d.begin(), hb.d.end(), r.d.begin() + std::ptrdiff_t((std::size_t(b) * p.heads_q + h) * p.n_q));
  });
  return r;
}

AttentionDoubleBackwardReference attention_double_backward_cpu(const AttentionProblem& p,
                                                               const std::vector<double>& d_o,
                                                               const std::vector<double>& gq,
                                                               const std::vector<double>& gk,
                                                               const std::vector<double>& gv,
                                                               ReferenceFault fault) {
  const int d = p.head_dim;
  const double scale = p.scale > 0 ? p.scale : 1.0 / std::sqrt(double(d));
  require_size(d_o, p.q.size(), false, "d_o");
  require_size(gq, p.q.size(), true, "gq");
  require_size(gk, p.k.size(), true, "gk");
  require_size(gv, p.v.size(), true, "gv");
  AttentionDoubleBackwardReference r;
  r.q_bar.assign(p.q.size(), 0.0), r.do_bar.assign(p.q.size(), 0.0);
  r.k_bar.assign(p.k.size(), 0.0), r.v_bar.assign(p.v.size(), 0.0);
  r.r.assign(std::size_t(p.batch) * p.heads_q * p.n_q, 0.0), r.c = r.r;
  for_each_head(p, [&](int b, int h, int hk) {
    const HeadBackward hb = head_backward(p, d_o, b, h, ReferenceFault::none);
    const Mat g_q = head_slice(gq, b, h, p.heads_q, p.n_q, d);
    const Mat g_k = head_slice(gk, b, hk, p.heads_kv, p.n_k, d);
    const Mat g_v = head_slice(gv, b, hk, p.heads_kv, p.n_k, d);
    // G = s·(gQ·Kᵀ + Q·gKᵀ), the cotangent of dS; r_i = Σ_j P_ij·G_ij.
    const Mat g = lin(scale, mul_nt(g_q, hb.k), scale, mul_nt(hb.q, g_k));
    const std::vector<double> rr = row_dot(hb.p, g);
    // H = P∘(G − r·1ᵀ), the cotangent of dP; P̄ = dO·gVᵀ + G∘(dP − D·1ᵀ) − r∘dP.
    Mat hm = g, pbar = mul_nt(hb.d_o, g_v);
    for (int i = 0; i < p.n_q; ++i)
      for (int j = 0; j < p.n_k; ++j) {
        hm(i, j) = hb.p(i, j) * (g(i, j) - (fault == ReferenceFault::drop_r_term ? 0.0 : rr[i]));
        pbar(i, j) += g(i, j) * (hb.dp(i, j) - hb.d[i]) - rr[i] * hb.dp(i, j);
      }
    // c_i = Σ_j P_ij·P̄_ij; S̄ = P∘(P̄ − c·1ᵀ), the cotangent of S.
    const std::vector<double> cc = row_dot(hb.p, pbar);
    Mat sbar(p.n_q, p.n_k);
    if (fault != ReferenceFault::p_constant)
      for (int i = 0; i < p.n_q; ++i)
        for (int j = 0; j < p.n_k; ++j) sbar(i, j) = hb.p(i, j) * (pbar(i, j) - cc[i]);
    // Q̄ = s·(dS·gK + S̄·K); K̄ = s·(dSᵀ·gQ + S̄ᵀ·Q); V̄ = Hᵀ·dO; dŌ = P·gV + H·V.
    add_slice(r.q_bar, lin(scale, mul(hb.ds, g_k), scale, mul(sbar, hb.k)), b, h, p.heads_q);
    add_slice(r.k_bar, lin(scale, mul_tn(hb.ds, g_q), scale, mul_tn(sbar, hb.q)), b, hk, p.heads_kv);
    add_slice(r.v_bar, mul_tn(hm, hb.d_o), b, hk, p.heads_kv);
    add_slice(r.do_bar, lin(1, mul(hb.p, g_v), 1, mul(hm, hb.v)), b, h, p.heads_q);
    const std::ptrdiff_t row0 = std::ptrdiff_t((std::size_t(b) * p.heads_q + h) * p.n_q);
    std::copy(rr.begin(), rr.end(), r.r.begin() + row0);
    std::copy(cc.begin(), cc.end(), r.c.begin() + row0);
  });
  return r;
}

}  // namespace kgen
