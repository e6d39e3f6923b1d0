#include "runtime/reference_cpu.h"

#include <cmath>
#include <limits>

namespace kgen {

AttentionForwardReference attention_forward_cpu(const AttentionProblem& p) {
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
      for (int i = 0; i < p.n_q; ++i) {
        double m = neg_inf;
        for (int j = 0; j < p.n_k; ++j) {
          bool masked = p.causal && j > i + (p.n_k - p.n_q);
          double dot = 0;
          for (int c = 0; c < d; ++c) dot += q[std::size_t(i) * d + c] * k[std::size_t(j) * d + c];
          s[j] = masked ? neg_inf : scale * dot;
          m = std::max(m, s[j]);
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

}  // namespace kgen
