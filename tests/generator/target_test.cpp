// Targets: parsing and printing of NVIDIA and AMD target strings, and the per-vendor config spaces
// (NVIDIA-only families are invalid on AMD targets, with the reason; AMD defaults are mfma for
// fp16/bf16 at d = 64 and 128, else simt).
#include <gtest/gtest.h>

#include "generator/attention_backward.h"
#include "generator/attention_forward.h"
#include "generator/registry.h"

namespace kgen {
namespace {

TEST(Target, AmdTargetsKeepTheirExactStringAndFeatures) {
  for (const char* arch : {"gfx90a", "gfx942", "gfx950", "gfx90a:xnack+", "gfx942:sramecc+:xnack-", "gfx950:sramecc-"}) {
    auto t = parse_target(arch);
    ASSERT_TRUE(t) << arch;
    EXPECT_EQ(t->arch, arch);
    EXPECT_EQ(t->vendor, Vendor::amd);
    EXPECT_EQ(t->wave_size, 64);
    EXPECT_EQ(t->sm, 0);
  }
  EXPECT_EQ(parse_target("gfx942:sramecc+:xnack-")->processor(), "gfx942");
  EXPECT_EQ(parse_target("gfx90a")->max_smem_per_block, 64 * 1024);
  EXPECT_EQ(parse_target("gfx950")->max_smem_per_block, 160 * 1024);
  EXPECT_EQ(parse_target("sm_90a")->vendor, Vendor::nvidia);
  EXPECT_EQ(parse_target("sm_90a")->processor(), "sm_90a");
  EXPECT_NE(*parse_target("gfx90a"), *parse_target("gfx90a:xnack+"));
}

TEST(Target, RejectsUnknownProcessorsAndMalformedFeatures) {
  for (const char* bad : {"gfx", "gfx908", "gfx1100", "gfx9420", "gfx942:", "gfx942:xnack", "gfx942:xnack*",
                          "gfx942:xnack+:sramecc+", "gfx942:xnack+:xnack-", "gfx942:sramecc+:sramecc+",
                          "gfx942:wavefrontsize64+", "gfx942:xnack+:", "sm_70", "GFX942"})
    EXPECT_FALSE(parse_target(bad)) << bad;
}

std::vector<Target> amd_targets() { return {*parse_target("gfx90a"), *parse_target("gfx942"), *parse_target("gfx950")}; }

TEST(Target, NvidiaOnlyFamiliesAreInvalidOnAmdWithTheReason) {
  const Target gfx942 = *parse_target("gfx942");
  const AttentionForwardSpec fwd{DType::bf16, 128, false};
  auto why = check_attention_forward_config(fwd, {.path = ForwardPath::fa2, .block_m = 128, .warps = 4}, gfx942);
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("NVIDIA-only"), std::string::npos) << *why;
  EXPECT_NE(why->find("gfx942"), std::string::npos) << *why;
  EXPECT_TRUE(check_attention_forward_config(fwd, {.path = ForwardPath::wgmma, .block_m = 128, .block_n = 128, .warps = 8}, gfx942));
  const AttentionBackwardSpec bwd{DType::bf16, 128, false};
  EXPECT_TRUE(check_attention_backward_config(bwd, {.path = BackwardPath::fa2}, gfx942));
  EXPECT_TRUE(check_attention_backward_config(bwd, {.path = BackwardPath::wgmma}, gfx942));
  EXPECT_TRUE(check_attention_double_backward_config(bwd, {.path = BackwardPath::fa2, .block_n = 64, .warps = 4}, gfx942));
}

TEST(Target, AmdConfigSpacesAndDefaultsAreMfmaForFp16Bf16D64D128ElseSimt) {
  const AttentionShape shape{8, 16, 16, 4096, 4096};
  for (const Target& target : amd_targets())
    for (DType t : {DType::f16, DType::bf16, DType::f32})
      for (int d : {32, 64, 80, 128, 256}) {
        const bool mfma = t != DType::f32 && (d == 64 || d == 128);
        const bool mfma_bwd = mfma;  // gfx90a at d = 128 with two column splits
        const auto fwd_path = mfma ? ForwardPath::mfma : ForwardPath::simt;
        const auto bwd_path = mfma_bwd ? BackwardPath::mfma : BackwardPath::simt;
        const AttentionForwardSpec fwd{t, d, true};
        const auto fwd_space = attention_forward_config_space(fwd, target);
        ASSERT_FALSE(fwd_space.empty()) << target.arch;
        EXPECT_EQ(fwd_space.front().path, fwd_path) << target.arch << " d=" << d;
        for (const auto& c : fwd_space)
          EXPECT_TRUE(c.path == ForwardPath::mfma || c.path == ForwardPath::simt) << to_string(c);
        EXPECT_EQ(attention_forward_default_config(fwd, shape, target, 304).path, fwd_path) << target.arch << " d=" << d;
        const AttentionBackwardSpec bwd{t, d, true};
        const auto bwd_space = attention_backward_config_space(bwd, target);
        ASSERT_FALSE(bwd_space.empty()) << target.arch;
        EXPECT_EQ(bwd_space.front().path, bwd_path) << target.arch << " d=" << d;
        for (const auto& c : bwd_space)
          EXPECT_TRUE(c.path == BackwardPath::mfma || c.path == BackwardPath::simt) << to_string(c);
        for (const auto& c : attention_double_backward_config_space(bwd, target)) EXPECT_EQ(c.path, BackwardPath::simt);
        EXPECT_EQ(attention_backward_default_config(bwd, shape, target, 304).path, bwd_path) << target.arch << " d=" << d;
        EXPECT_EQ(attention_double_backward_default_config(bwd, shape, target, 304).path, BackwardPath::simt);
      }
}

TEST(Target, EveryOperatorHasAmdVariantsAndNoneUsesNvidiaOnlyHeaders) {
  for (const Target& target : amd_targets())
    for (const OperatorInfo& op : operators()) {
      const auto kernels = op.all_variants(target);
      EXPECT_FALSE(kernels.empty()) << op.name << " " << target.arch;
      for (const KernelSource& k : kernels)
        for (const char* header : {"_fa2.cuh", "_wgmma.cuh"})
          EXPECT_EQ(k.source.find(header), std::string::npos) << k.variant << " " << target.arch;
    }
}

}  // namespace
}  // namespace kgen
