#include "ops/attention_tuning.h"

#include <algorithm>

#include "generator/attention_backward.h"
#include "generator/attention_forward.h"
#include "ops/attention_forward.h"
#include "ops/buckets.h"
#include "ops/tuning_support.h"
#include "tuning/tuning_db.h"

namespace kgen {
namespace {

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

// The forward's tuning case as the launch runs it: a decode-like grouped-query case with its
// group's query heads packed into the rows of one problem per K/V head (pack_query_heads), so the
// tuner times what the launch runs and records it under the bucket the launch looks up.
AttentionCase packed_forward_case(AttentionCase c) {
  if (!query_heads_pack(c.heads_q, c.heads_kv, c.n_q, c.causal)) return c;
  c.n_q *= c.heads_q / c.heads_kv;
  c.heads_q = c.heads_kv;
  c.causal = false;
  return c;
}

class ForwardTuning final : public AttentionFamilyTuning {
 public:
  explicit ForwardTuning(const AttentionCase& c)
      : AttentionFamilyTuning(packed_forward_case(c)), spec_{c_.dtype, c_.head_dim, c_.causal}, asked_(c) {}
  std::string shape_text() const override {
    const std::string packed = AttentionFamilyTuning::shape_text();
    if (asked_.heads_q == c_.heads_q) return packed;
    return packed + " (h=" + std::to_string(asked_.heads_q) + " n_q=" + std::to_string(asked_.n_q) +
           (asked_.causal ? " causal" : "") + " with its query heads packed)";
  }
  std::string_view op() const override { return "attention_fwd"; }
  std::string variant_key() const override { return to_string(spec_); }
  std::optional<std::string> parse_config(const std::string& text) const override {
    return canonical_config(parse_attention_forward_config, text);
  }
  std::vector<std::string> config_space(const Target& target) const override {
    return config_texts(attention_forward_config_space(spec_, target));
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
  AttentionCase asked_;  // the case as given, before packing
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
    return canonical_config(dbl_ ? parse_attention_double_backward_config : parse_attention_backward_config, text);
  }
  std::vector<std::string> config_space(const Target& target) const override {
    if (dbl_) return config_texts(attention_double_backward_config_space(spec_, target));
    if (det_) return config_texts(attention_backward_config_space(spec_, target));  // no group splits there
    return config_texts(attention_backward_config_space(spec_, target, c_.heads_q / std::max(c_.heads_kv, 1)));
  }
  std::optional<std::string> check_config(const std::string& text, const Target& target) const override {
    auto c = parse(text);
    if (!c) return "cannot parse '" + text + "'";
    return dbl_ ? check_attention_double_backward_config(spec_, *c, target) : check_attention_backward_config(spec_, *c, target);
  }
  std::vector<KernelSource> kernels(const std::string& text) const override {
    const AttentionBackwardConfig c = parse(text).value();
    std::vector<KernelSource> out;
    if (dbl_)
      for (DoubleBackwardKernel k : attention_double_backward_kernels(c)) out.push_back(render_attention_double_backward(spec_, c, k));
    else
      for (BackwardKernel k : attention_backward_kernels(c, det_)) out.push_back(render_attention_backward(spec_, c, k));
    return out;
  }
  bool deterministic() const { return det_; }

 private:
  // The op's reading of a config's text.
  std::optional<AttentionBackwardConfig> parse(const std::string& text) const {
    return dbl_ ? parse_attention_double_backward_config(text) : parse_attention_backward_config(text);
  }
  AttentionBackwardSpec spec_;
  bool dbl_, det_;
};

}  // namespace

ShapeBucket attention_bucket(const AttentionShape& s) {
  const long long heads_q = std::max(s.heads_q, 1), heads_kv = std::max(s.heads_kv, 1);
  const long long bh = static_cast<long long>(std::max(s.batch, 1)) * heads_q;
  return {{"nq", "nk", "g", "bh"},
          {next_pow2(s.n_q), next_pow2(s.n_k), std::max(heads_q / heads_kv, 1LL), next_pow2(bh)}};
}

std::unique_ptr<TuningProblem> attention_forward_tuning(const AttentionCase& problem) {
  return std::make_unique<ForwardTuning>(problem);
}

std::unique_ptr<TuningProblem> attention_backward_tuning(const AttentionCase& problem, bool deterministic) {
  return std::make_unique<GradientTuning>(problem, false, deterministic);
}

std::unique_ptr<TuningProblem> attention_double_backward_tuning(const AttentionCase& problem) {
  return std::make_unique<GradientTuning>(problem, true, false);
}

const AttentionCase* attention_case_of(const TuningProblem& problem) {
  auto* p = problem_as<AttentionFamilyTuning>(problem);
  return p ? &p->attention_case() : nullptr;
}

bool deterministic_of(const TuningProblem& problem) {
  auto* p = problem_as<GradientTuning>(problem);
  return p && p->deterministic();
}

}  // namespace kgen
