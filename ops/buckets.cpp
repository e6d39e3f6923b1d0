#include "ops/buckets.h"

#include <algorithm>

#include "tuning/tuning_db.h"

namespace kgen {

std::string attention_bucket(const AttentionShape& s) {
  long long heads_q = std::max(s.heads_q, 1), heads_kv = std::max(s.heads_kv, 1);
  long long group = std::max(heads_q / heads_kv, 1LL);
  long long bh = static_cast<long long>(std::max(s.batch, 1)) * heads_q;
  return "nq" + std::to_string(next_pow2(s.n_q)) + ".nk" + std::to_string(next_pow2(s.n_k)) + ".g" +
         std::to_string(group) + ".bh" + std::to_string(next_pow2(bh));
}

std::string lrpe_bucket(const LrpeShape& s, int md_dims) {
  const long long bh = static_cast<long long>(std::max(s.batch, 1)) * std::max(s.heads, 1);
  std::string b = "n" + std::to_string(next_pow2(s.n)) + ".bh" + std::to_string(next_pow2(bh)) + ".d" +
                  std::to_string(std::max(s.d, 1));
  return md_dims > 0 ? b + ".m" + std::to_string(md_dims) : b;
}

}  // namespace kgen
