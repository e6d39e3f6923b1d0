#include "ops/lrpe_tuning.h"

#include <algorithm>

#include "generator/lrpe.h"
#include "ops/buckets.h"
#include "ops/tuning_support.h"
#include "tuning/tuning_db.h"

namespace kgen {
namespace {

class LrpeTuning final : public TuningProblem {
 public:
  explicit LrpeTuning(const LrpeCase& c) : c_(c), spec_{c.op, c.direction, c.dtype, c.act} {}
  std::string_view op() const override { return lrpe_op_name(c_.op); }
  std::string variant_key() const override { return lrpe_variant_key(spec_, c_.cache); }
  std::string bucket() const override {
    return lrpe_bucket(shape(), c_.op == LrpeOp::md_cosine ? static_cast<int>(c_.grid.size()) : 0).text();
  }
  std::string shape_text() const override {
    std::string s = "b=" + std::to_string(c_.batch) + " h=" + std::to_string(c_.heads) + " n=" + std::to_string(c_.n) +
                    " d=" + std::to_string(c_.d);
    if (c_.op != LrpeOp::md_cosine) return s;
    s += " grid=";
    for (std::size_t j = 0; j < c_.grid.size(); ++j) s += (j ? "x" : "") + std::to_string(c_.grid[j]);
    return s + " l=" + std::to_string(c_.extra) + (c_.cache ? " cache" : "");
  }
  std::optional<std::string> check_problem() const override {
    if (c_.d < 1 || c_.d > kLrpeMaxHeadDim)
      return "d=" + std::to_string(c_.d) + " is unsupported: kgen serves 1.." + std::to_string(kLrpeMaxHeadDim);
    if (c_.cache && c_.op != LrpeOp::md_cosine) return std::string("the angle cache exists for md_lrpe_cosine only");
    if (c_.op == LrpeOp::md_cosine && (c_.grid.empty() || c_.grid.size() > 3))
      return "the md grid must have 1, 2 or 3 dims, got " + std::to_string(c_.grid.size());
    return std::nullopt;
  }
  std::optional<std::string> parse_config(const std::string& text) const override {
    return canonical_config(parse_lrpe_config, text);
  }
  std::vector<std::string> config_space(const Target&) const override {
    std::vector<std::string> out;
    for (const auto& c : lrpe_config_space(spec_, c_.cache))
      if (!check_lrpe_config_for_shape(spec_, c, shape())) out.push_back(to_string(c));
    return out;
  }
  std::optional<std::string> check_config(const std::string& text, const Target&) const override {
    auto c = parse_lrpe_config(text);
    if (!c) return "cannot parse '" + text + "'";
    if (c->cache != c_.cache) return std::string(c_.cache ? "the problem uses the angle cache, the config does not" : "the config uses the angle cache, the problem does not");
    return check_lrpe_config_for_shape(spec_, *c, shape());
  }
  std::vector<KernelSource> kernels(const std::string& text) const override {
    return {render_lrpe(spec_, parse_lrpe_config(text).value())};
  }
  std::string_view rate_unit() const override { return "GB/s"; }

  const LrpeCase& lrpe_case() const { return c_; }

 private:
  LrpeShape shape() const { return {c_.batch, c_.heads, c_.n, c_.d}; }
  LrpeCase c_;
  LrpeSpec spec_;
};

}  // namespace

ShapeBucket lrpe_bucket(const LrpeShape& s, int md_dims) {
  const long long bh = static_cast<long long>(std::max(s.batch, 1)) * std::max(s.heads, 1);
  ShapeBucket b{{"n", "bh", "d", nullptr}, {next_pow2(s.n), next_pow2(bh), std::max(s.d, 1), 0}};
  if (md_dims > 0) b.names[3] = "m", b.values[3] = md_dims;
  return b;
}

std::unique_ptr<TuningProblem> lrpe_tuning(const LrpeCase& problem) { return std::make_unique<LrpeTuning>(problem); }

const LrpeCase* lrpe_case_of(const TuningProblem& problem) {
  auto* p = problem_as<LrpeTuning>(problem);
  return p ? &p->lrpe_case() : nullptr;
}

}  // namespace kgen
