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
constexpr std::size_t kDefaultWarmBudget = 460;

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
