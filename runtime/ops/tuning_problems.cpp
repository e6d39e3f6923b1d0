#include "ops/buckets.h"
#include "ops/tuning_problems.h"

#include <algorithm>
#include <utility>

#include "generator/attention_backward.h"
#include "generator/attention_forward.h"
#include "generator/lrpe.h"
#include "ops/buckets.h"

namespace kgen {
namespace {

// Config texts through a parser and printer pair: canonical text or nullopt.
template <class Parse>
std::optional<std::string> canonical(Parse parse, const std::string& text) {
  auto c = parse(text);
  if (!c) return std::nullopt;
  return to_string(*c);
}

template <class Config>
std::vector<std::string> texts(const std::vector<Config>& configs) {
  std::vector<std::string> out;
  for (const auto& c : configs) out.push_back(to_string(c));
  return out;
}

// What the attention-family problems share: the case, its shape and bucket, TFLOPS.
class AttentionFamilyTuning : public TuningProblem {
 public:
  explicit AttentionFamilyTuning(const AttentionCase& c) : c_(c) {}
  std::string bucket() const override { return attention_bucket({c_.batch, c_.heads_q, c_.heads_kv, c_.n_q, c_.n_k}).text(); }
  std::string shape_text() const override {
    return "b=" + std::to_string(c_.batch) + " h=" + std::to_string(c_.heads_q) + " h_kv=" + std::to_string(c_.heads_kv) +
           " n_q=" + std::to_string(c_.n_q) + " n_k=" + std::to_string(c_.n_k);
  }
  std::optional<std::string> check_problem() const override {
    if (c_.head_dim < 1 || c_.head_dim > kMaxHeadDim)
      return "head_dim=" + std::to_string(c_.head_dim) + " is unsupported: kgen serves 1.." + std::to_string(kMaxHeadDim);
    if (c_.heads_kv < 1 || c_.heads_q % c_.heads_kv)
      return "heads_kv=" + std::to_string(c_.heads_kv) + " does not divide heads=" + std::to_string(c_.heads_q);
    return std::nullopt;
  }
  std::string_view rate_unit() const override { return "TFLOPS"; }
  const AttentionCase& attention_case() const { return c_; }

 protected:
  AttentionCase c_;
};

class ForwardTuning final : public AttentionFamilyTuning {
 public:
  explicit ForwardTuning(const AttentionCase& c) : AttentionFamilyTuning(c), spec_{c.dtype, c.head_dim, c.causal} {}
  std::string_view op() const override { return "attention_fwd"; }
  std::string variant_key() const override { return to_string(spec_); }
  std::optional<std::string> parse_config(const std::string& text) const override {
    return canonical(parse_attention_forward_config, text);
  }
  std::vector<std::string> config_space(const Target& target) const override {
    return texts(attention_forward_config_space(spec_, target));
  }
  std::optional<std::string> check_config(const std::string& text, const Target& target) const override {
    auto c = parse_attention_forward_config(text);
    if (!c) return "cannot parse '" + text + "'";
    return check_attention_forward_config(spec_, *c, target);
  }
  std::vector<KernelSource> kernels(const std::string& text) const override {
    return render_attention_forward_kernels(spec_, parse_attention_forward_config(text).value());
  }

 private:
  AttentionForwardSpec spec_;
};

// attention_bwd (either mode) and attention_double_bwd: one config type, one harness family.
class GradientTuning final : public AttentionFamilyTuning {
 public:
  GradientTuning(const AttentionCase& c, bool double_backward, bool deterministic)
      : AttentionFamilyTuning(c), spec_{c.dtype, c.head_dim, c.causal}, dbl_(double_backward), det_(deterministic) {}
  std::string_view op() const override { return dbl_ ? "attention_double_bwd" : "attention_bwd"; }
  std::string variant_key() const override {
    return dbl_ ? double_backward_variant_key(spec_) : attention_backward_variant_key(spec_, det_);
  }
  std::optional<std::string> parse_config(const std::string& text) const override {
    return canonical(parse_attention_backward_config, text);
  }
  std::vector<std::string> config_space(const Target& target) const override {
    if (dbl_) return texts(attention_double_backward_config_space(spec_, target));
    if (det_) return texts(attention_backward_config_space(spec_, target));  // no group splits there
    return texts(attention_backward_config_space(spec_, target, c_.heads_q / std::max(c_.heads_kv, 1)));
  }
  std::optional<std::string> check_config(const std::string& text, const Target& target) const override {
    auto c = parse_attention_backward_config(text);
    if (!c) return "cannot parse '" + text + "'";
    return dbl_ ? check_attention_double_backward_config(spec_, *c, target) : check_attention_backward_config(spec_, *c, target);
  }
  std::vector<KernelSource> kernels(const std::string& text) const override {
    const AttentionBackwardConfig c = parse_attention_backward_config(text).value();
    std::vector<KernelSource> out;
    if (dbl_)
      for (DoubleBackwardKernel k : attention_double_backward_kernels(c)) out.push_back(render_attention_double_backward(spec_, c, k));
    else
      for (BackwardKernel k : attention_backward_kernels(c, det_)) out.push_back(render_attention_backward(spec_, c, k));
    return out;
  }
  bool deterministic() const { return det_; }

 private:
  AttentionBackwardSpec spec_;
  bool dbl_, det_;
};

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
    return canonical(parse_lrpe_config, text);
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

std::unique_ptr<TuningProblem> attention_forward_tuning(const AttentionCase& problem) {
  return std::make_unique<ForwardTuning>(problem);
}

std::unique_ptr<TuningProblem> attention_backward_tuning(const AttentionCase& problem, bool deterministic) {
  return std::make_unique<GradientTuning>(problem, false, deterministic);
}

std::unique_ptr<TuningProblem> attention_double_backward_tuning(const AttentionCase& problem) {
  return std::make_unique<GradientTuning>(problem, true, false);
}

std::unique_ptr<TuningProblem> lrpe_tuning(const LrpeCase& problem) { return std::make_unique<LrpeTuning>(problem); }

const AttentionCase* attention_case_of(const TuningProblem& problem) {
  auto* p = dynamic_cast<const AttentionFamilyTuning*>(&problem);
  return p ? &p->attention_case() : nullptr;
}

bool deterministic_of(const TuningProblem& problem) {
  auto* p = dynamic_cast<const GradientTuning*>(&problem);
  return p && p->deterministic();
}

const LrpeCase* lrpe_case_of(const TuningProblem& problem) {
  auto* p = dynamic_cast<const LrpeTuning*>(&problem);
  return p ? &p->lrpe_case() : nullptr;
}

}  // namespace kgen
