// Deviceless NVRTC compiles for the Blackwell targets (sm_100a, sm_103a, sm_120, sm_121), which
// kgen compiles for but has not run on: the fa2 forward, backward and double backward and the simt
// forward and backward of the defaults, and one default kernel of every operator, each without
// spills or stack (LRPE's occupancy-capped configs within ReplayDefaults' allowance); the CUBIN carries the target's SM, so the cache serves it again. The replay
// table holds every default `kgen warm --defaults` builds for sm_100a, sm_103a and sm_120.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "generator/attention_backward.h"
#include "generator/attention_forward.h"
#include "generator/registry.h"
#include "jit/kernel_builder.h"

namespace kgen {
namespace {

// The SM of a CUBIN (ELF ABI version 8: e_flags bits 8–15).
int cubin_sm(const std::vector<std::byte>& image) {
  if (image.size() < 52 || std::to_integer<int>(image[8]) != 8) return -1;
  return std::to_integer<int>(image[49]);
}

std::vector<KernelSource> fa2_and_simt_kernels(const Target& target) {
  const AttentionShape shape{8, 16, 16, 4096, 4096};
  std::vector<KernelSource> out;
  for (AttentionForwardSpec f : {AttentionForwardSpec{DType::bf16, 128, true}, AttentionForwardSpec{DType::f32, 64, false}}) {
    const AttentionForwardConfig c = attention_forward_default_config(f, shape, target, 148);
    EXPECT_EQ(c.path, f.dtype == DType::f32 ? ForwardPath::simt : ForwardPath::fa2) << to_string(c);
    out.push_back(render_attention_forward(f, c));
  }
  for (AttentionBackwardSpec b : {AttentionBackwardSpec{DType::f16, 64, true}, AttentionBackwardSpec{DType::f32, 64, false}}) {
    const AttentionBackwardConfig c = attention_backward_default_config(b, shape, target, 148);
    EXPECT_EQ(c.path(), b.dtype == DType::f32 ? BackwardPath::simt : BackwardPath::fa2) << to_string(c);
    for (BackwardKernel k : attention_backward_kernels(c, /*deterministic=*/false)) out.push_back(render_attention_backward(b, c, k));
  }
  const AttentionBackwardSpec dbl{DType::bf16, 64, false};
  const AttentionBackwardConfig c = attention_double_backward_default_config(dbl, shape, target, 148);
  EXPECT_EQ(c.path(), BackwardPath::fa2) << to_string(c);
  for (DoubleBackwardKernel k : attention_double_backward_kernels(c))
    if (k != DoubleBackwardKernel::preprocess) out.push_back(render_attention_double_backward(dbl, c, k));
  for (const OperatorInfo& op : operators()) out.push_back(op.default_variants(target).front());
  std::vector<KernelSource> distinct;  // the backward's preprocess kernel serves several specs
  for (KernelSource& k : out)
    if (std::none_of(distinct.begin(), distinct.end(), [&](const KernelSource& d) { return d.variant == k.variant; }))
      distinct.push_back(std::move(k));
  return distinct;
}

TEST(CompileBlackwell, DefaultFa2AndSimtKernelsCompileWithoutSpillsForTheTargetsSm) {
  const std::filesystem::path cache = std::filesystem::path(KGEN_TEST_CACHE_DIR) / "blackwell";
  std::filesystem::remove_all(cache);
  for (const char* arch : {"sm_100a", "sm_103a", "sm_120", "sm_121"}) {
    const Target target = *parse_target(arch);
    const std::vector<KernelSource> sources = fa2_and_simt_kernels(target);
    EXPECT_GE(sources.size(), 12u);
    for (const KernelSource& src : sources) {
      SCOPED_TRACE(std::string(arch) + " " + src.variant);
      EXPECT_EQ(src.source.find("_wgmma.cuh"), std::string::npos);
      KernelBuilder builder(cache);
      const BuildOutcome built = builder.build(src, target);
      ASSERT_TRUE(built.resources.parsed) << built.log;
      EXPECT_FALSE(built.from_cache);
      // A config that caps registers for occupancy (LRPE's ":o<k>") may spill a little, as in
      // ReplayDefaults' rule for LRPE.
      const bool capped = src.variant.find(":o") != std::string::npos;
      EXPECT_LE(built.resources.spill_stores + built.resources.spill_loads, capped ? 2 * 128 : 0);
      EXPECT_LE(built.resources.stack_frame, capped ? 128 : 0);
      EXPECT_EQ(cubin_sm(built.image), target.sm);
      // A second builder serves the entry: its CUBIN passed the cache's check against the target.
      KernelBuilder again(cache);
      const BuildOutcome served = again.build(src, target);
      EXPECT_TRUE(served.from_cache);
      EXPECT_EQ(served.image, built.image);
    }
  }
  std::filesystem::remove_all(cache);
}

}  // namespace
}  // namespace kgen
