#include "ops/buckets.h"

#include <algorithm>

#include "tuning/tuning_db.h"

namespace kgen {

std::string ShapeBucket::text() const {
  std::string t;
  for (std::size_t i = 0; i < names.size() && names[i]; ++i) {
    if (i) t += '.';
    t += names[i];
    t += std::to_string(values[i]);
  }
  return t;
}

ShapeBucket attention_bucket(const AttentionShape& s) {
  const long long heads_q = std::max(s.heads_q, 1), heads_kv = std::max(s.heads_kv, 1);
  const long long bh = static_cast<long long>(std::max(s.batch, 1)) * heads_q;
  return {{"nq", "nk", "g", "bh"},
          {next_pow2(s.n_q), next_pow2(s.n_k), std::max(heads_q / heads_kv, 1LL), next_pow2(bh)}};
}

ShapeBucket lrpe_bucket(const LrpeShape& s, int md_dims) {
  const long long bh = static_cast<long long>(std::max(s.batch, 1)) * std::max(s.heads, 1);
  ShapeBucket b{{"n", "bh", "d", nullptr}, {next_pow2(s.n), next_pow2(bh), std::max(s.d, 1), 0}};
  if (md_dims > 0) b.names[3] = "m", b.values[3] = md_dims;
  return b;
}

}  // namespace kgen
