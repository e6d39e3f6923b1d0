// The operator registry's defaults (`kgen warm --defaults`, `kgen demo` without a GPU): every
// default kernel is one `kgen warm` builds too, and the set for sm_80 and sm_90a stays small
// enough to compile in minutes on a small machine.
#include <gtest/gtest.h>

#include <set>

#include "generator/registry.h"

namespace kgen {
namespace {

// The most kernels `kgen warm --defaults` (and `kgen demo` without a GPU) may build for sm_80 and
// sm_90a together: these kernels take about 0.4 s of one core each to compile on average, so
// the main job stays under five minutes on two cores even when another job holds one of them.
// The paged append's 12 (a copy loop each, about 0.1 s) come on top.
constexpr std::size_t kDefaultWarmBudget = 464;

TEST(Registry, DefaultVariantsAreVariantsThatWarmBuildsAndStayWithinTheBudget) {
  std::size_t total = 0;
  for (const char* arch : {"sm_80", "sm_90a"}) {
    const Target target = *parse_target(arch);
    for (const OperatorInfo& op : operators()) {
      std::set<std::string> all;
      for (const KernelSource& k : op.all_variants(target)) all.insert(k.variant);
      const auto defaults = op.default_variants(target);
      EXPECT_FALSE(defaults.empty()) << op.name << " " << arch;
      std::set<std::string> seen;
      for (const KernelSource& k : defaults) {
        EXPECT_TRUE(all.contains(k.variant)) << k.variant << " " << arch << " is not one of all_variants";
        EXPECT_TRUE(seen.insert(k.variant).second) << k.variant << " " << arch << " twice";
      }
      std::printf("%s %s: %zu defaults of %zu variants\n", std::string(op.name).c_str(), arch, defaults.size(), all.size());
      total += defaults.size();
    }
  }
  EXPECT_LE(total, kDefaultWarmBudget);
}

}  // namespace
}  // namespace kgen

namespace kgen {
namespace {

// `kgen inspect --explain`: every config of every operator's space, on each vendor's targets,
// is explained field by field, the fields spelling the config back in order; a non-config is
// refused.
TEST(Registry, ExplainedConfigsSpellThemselvesFieldByField) {
  const std::vector<std::pair<std::string, std::string>> variants = {
      {"attention_fwd", "attention_fwd.bf16.d128.causal"},   {"attention_fwd", "attention_fwd.fp32.d80.full"},
      {"attention_bwd", "attention_bwd.bf16.d128.causal"},   {"attention_bwd", "attention_bwd.fp16.d64.full.deterministic"},
      {"attention_double_bwd", "attention_double_bwd.bf16.d64.full"},
      {"lrpe_cosine", "lrpe_cosine.fwd.bf16.softmax_seq"},  {"md_lrpe_cosine", "md_lrpe_cosine.bwd.bf16.none.cache"},
      {"paged_append", "paged_append.fp16.rotary.cos_fp32"}};
  int explained = 0;
  for (const auto& [name, variant] : variants) {
    const OperatorInfo* op = find_operator(name);
    ASSERT_TRUE(op) << name;
    for (const char* arch : {"sm_80", "sm_90a", "gfx942"}) {
      const ConfigSpace space = op->config_space(variant, *parse_target(arch));
      ASSERT_TRUE(space.error.empty()) << variant << ": " << space.error;
      for (const std::string& config : space.configs) {
        const auto fields = op->explain_config(config);
        ASSERT_TRUE(fields) << name << " " << config;
        std::string spelled;
        for (const ConfigField& f : *fields) {
          EXPECT_FALSE(f.meaning.empty()) << config << " " << f.text;
          spelled += (spelled.empty() ? "" : ":") + f.text;
        }
        EXPECT_EQ(spelled, config) << name;
        ++explained;
      }
    }
    EXPECT_FALSE(op->explain_config("fast")) << name;
  }
  EXPECT_GT(explained, 100);
}

}  // namespace
}  // namespace kgen

namespace kgen {
namespace {

// `kgen inspect` without --variant: an operator whose variant dtype, head dim and mask name gives
// the key its spec prints, and the reason for a head dim it does not serve; the others need
// --variant. Every variant key `kgen inspect --help` shows is one of its operator's.
TEST(Registry, ShapeVariantsAndHelpExamplesAreTheOperatorsOwn) {
  int with_shape = 0;
  for (const OperatorInfo& op : operators()) {
    if (op.shape_variant) {
      ++with_shape;
      std::string why;
      const std::string key = op.shape_variant(DType::bf16, 128, true, &why);
      EXPECT_TRUE(why.empty()) << op.name << ": " << why;
      EXPECT_TRUE(key.starts_with(std::string(op.name) + ".")) << key;
      EXPECT_TRUE(op.config_kernels(key, "", *parse_target("sm_90a")).error.empty()) << key;
      EXPECT_EQ(op.shape_variant(DType::bf16, 100000, false, &why), "") << op.name;
      EXPECT_FALSE(why.empty()) << op.name;
    }
    if (!op.help_variant.empty()) {
      const std::string key(op.help_variant);
      EXPECT_TRUE(op.config_kernels(key, "", *parse_target("sm_90a")).error.empty()) << key;
    }
  }
  EXPECT_GE(with_shape, 1);
}

}  // namespace
}  // namespace kgen
