// Targets: parsing and printing of NVIDIA and AMD target strings, and the per-vendor config spaces
// (NVIDIA-only families are invalid on AMD targets, with the reason; AMD defaults are mfma for
// fp16/bf16 at d = 64 and 128, else simt). The Blackwell targets (compiled for, never run): no
// wgmma or ws there, with the reason, and sm_80-class defaults within each one's shared memory.
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
  EXPECT_TRUE(check_attention_backward_config(bwd, BackwardFa2Config{}, gfx942));
  EXPECT_TRUE(check_attention_backward_config(bwd, BackwardWgmmaConfig{}, gfx942));
  EXPECT_TRUE(check_attention_double_backward_config(bwd, DoubleBackwardFa2Config{.rows = 64, .tile = 64, .warps = 4}, gfx942));
}

TEST(Target, AmdConfigSpacesAndDefaultsAreMfmaForFp16Bf16D64D128ElseSimt) {
  const AttentionShape shape{8, 16, 16, 4096, 4096};
  for (const Target& target : amd_targets())
    for (DType t : {DType::f16, DType::bf16, DType::f32})
      for (int d : {32, 64, 80, 128, 256}) {
        const bool mfma = t != DType::f32 && (d == 64 || d == 128);
        const auto fwd_path = mfma ? ForwardPath::mfma : ForwardPath::simt;
        const auto bwd_path = mfma ? BackwardPath::mfma : BackwardPath::simt;
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
        EXPECT_EQ(bwd_space.front().path(), bwd_path) << target.arch << " d=" << d;
        for (const auto& c : bwd_space)
          EXPECT_TRUE(c.path() == BackwardPath::mfma || c.path() == BackwardPath::simt) << to_string(c);
        for (const auto& c : attention_double_backward_config_space(bwd, target)) EXPECT_EQ(c.path(), BackwardPath::simt);
        EXPECT_EQ(attention_backward_default_config(bwd, shape, target, 304).path(), bwd_path) << target.arch << " d=" << d;
        EXPECT_EQ(attention_double_backward_default_config(bwd, shape, target, 304).path(), BackwardPath::simt);
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

std::vector<Target> blackwell_targets() {
  return {*parse_target("sm_100a"), *parse_target("sm_103a"), *parse_target("sm_120"), *parse_target("sm_121")};
}

TEST(Target, BlackwellTargetsCarryTheirSmAndSharedMemory) {
  struct Expected {
    const char* arch;
    int sm, smem;
  };
  for (const Expected& e : {Expected{"sm_100a", 100, 232448}, Expected{"sm_103a", 103, 232448},
                            Expected{"sm_120", 120, 101376}, Expected{"sm_121", 121, 101376}}) {
    auto t = parse_target(e.arch);
    ASSERT_TRUE(t) << e.arch;
    EXPECT_EQ(t->arch, e.arch);
    EXPECT_EQ(t->vendor, Vendor::nvidia);
    EXPECT_EQ(t->sm, e.sm) << e.arch;
    EXPECT_EQ(t->max_smem_per_block, e.smem) << e.arch;
    EXPECT_EQ(t->wave_size, 32);
    EXPECT_FALSE(has_wgmma(*t)) << e.arch;
    EXPECT_NE(std::string(known_targets()).find(e.arch), std::string::npos) << known_targets();
  }
  // Only the forms kgen compiles for: the architecture-specific datacentre targets, the portable
  // RTX/GB10 ones; not Thor (sm_110) nor the family forms.
  for (const char* other : {"sm_100", "sm_103", "sm_100f", "sm_110", "sm_120a", "sm_121a", "sm_12", "sm_1000a"})
    EXPECT_FALSE(parse_target(other)) << other;
  EXPECT_TRUE(has_wgmma(*parse_target("sm_90a")));
  EXPECT_FALSE(has_wgmma(*parse_target("sm_90")));
}

TEST(Target, ComputeCapabilitiesMapToTheirTargets) {
  EXPECT_EQ(target_for_compute_capability(8, 0)->arch, "sm_80");
  EXPECT_EQ(target_for_compute_capability(9, 0)->arch, "sm_90a");
  EXPECT_EQ(target_for_compute_capability(10, 0)->arch, "sm_100a");
  EXPECT_EQ(target_for_compute_capability(10, 3)->arch, "sm_103a");
  EXPECT_EQ(target_for_compute_capability(12, 0)->arch, "sm_120");
  EXPECT_EQ(target_for_compute_capability(12, 1)->arch, "sm_121");
  EXPECT_FALSE(target_for_compute_capability(11, 0));
  EXPECT_FALSE(target_for_compute_capability(7, 5));
}

// The sentence names the target and says why: no wgmma on Blackwell, and what its tensor cores
// take instead (tcgen05 on sm_100a/sm_103a, mma.sync on sm_120/sm_121).
void expect_blackwell_reason(const std::optional<std::string>& why, const Target& target) {
  ASSERT_TRUE(why) << target.arch;
  EXPECT_NE(why->find("not " + target.arch + ": Blackwell has no wgmma"), std::string::npos) << *why;
  EXPECT_NE(why->find(target.sm < 120 ? "tcgen05 with tensor memory" : "no tcgen05"), std::string::npos) << *why;
}

TEST(Target, WgmmaAndWsAreRefusedOnBlackwellWithTheReason) {
  for (const Target& target : blackwell_targets()) {
    const AttentionForwardSpec fwd{DType::bf16, 128, false};
    expect_blackwell_reason(check_attention_forward_config(fwd, *parse_attention_forward_config("wg:bm128:bn128:s2"), target), target);
    expect_blackwell_reason(check_attention_forward_config(fwd, *parse_attention_forward_config("ws:bm128:bn128:s2:pp1"), target), target);
    const AttentionBackwardSpec bwd{DType::bf16, 64, true};
    expect_blackwell_reason(check_attention_backward_config(bwd, *parse_attention_backward_config("wg:bm64:bn128:a2:t"), target), target);
    expect_blackwell_reason(check_attention_double_backward_config(bwd, *parse_attention_double_backward_config("wg:bm32:bn128"), target), target);
    // The same configs are valid on sm_90a: only the target refuses them.
    const Target sm90a = *parse_target("sm_90a");
    EXPECT_FALSE(check_attention_forward_config(fwd, *parse_attention_forward_config("wg:bm128:bn128:s2"), sm90a));
    EXPECT_FALSE(check_attention_forward_config(fwd, *parse_attention_forward_config("ws:bm128:bn128:s2:pp1"), sm90a));
    EXPECT_FALSE(check_attention_backward_config(bwd, *parse_attention_backward_config("wg:bm64:bn128:a2:t"), sm90a));
    EXPECT_FALSE(check_attention_double_backward_config(bwd, *parse_attention_double_backward_config("wg:bm32:bn128"), sm90a));
    // No wgmma, ws or mfma config in any space.
    for (int d : {64, 128, 256})
      for (DType t : {DType::f16, DType::bf16}) {
        for (const auto& c : attention_forward_config_space({t, d, true}, target))
          EXPECT_TRUE(c.path == ForwardPath::fa2 || c.path == ForwardPath::simt) << to_string(c) << " " << target.arch;
        for (const auto& c : attention_backward_config_space({t, d, true}, target, 8))
          EXPECT_TRUE(c.path() == BackwardPath::fa2 || c.path() == BackwardPath::simt) << to_string(c) << " " << target.arch;
        for (const auto& c : attention_double_backward_config_space({t, d, true}, target))
          EXPECT_TRUE(c.path() == BackwardPath::fa2 || c.path() == BackwardPath::simt) << to_string(c) << " " << target.arch;
      }
  }
}

// The Blackwell defaults are sm_80's rules within the target's shared memory: fa2 for fp16/bf16
// where it has a specialisation that fits, simt for fp32 and head dims that are not a multiple of
// 8. On sm_120 and sm_121 they are sm_86's (the same 99 KiB), where the fa2 backward's tiles above
// 160 columns and the fa2 double backward's above 128 do not fit (the backward's dQ kernel alone
// needs 131,072 bytes at 256), so the general path runs; on sm_100a and sm_103a a tile that sm_80's 163 KiB halve may stay whole. Every default
// fits its target.
TEST(Target, BlackwellDefaultsAreSm80RulesWithinTheTargetsSharedMemory) {
  const Target sm86 = *parse_target("sm_86");
  int compared = 0;
  for (const Target& target : blackwell_targets()) {
    Target rules = *parse_target("sm_80");
    rules.max_smem_per_block = target.max_smem_per_block;
    const bool small_smem = target.max_smem_per_block == sm86.max_smem_per_block;
    for (DType t : {DType::f16, DType::bf16, DType::f32})
      for (int d : {16, 32, 40, 64, 96, 100, 128, 136, 160, 168, 192, 256})
        for (bool causal : {false, true})
          for (const AttentionShape& shape : {AttentionShape{8, 16, 16, 4096, 4096}, AttentionShape{1, 1, 1, 64, 64},
                                              AttentionShape{1, 32, 8, 4, 65536}}) {
            const bool fa2 = t != DType::f32 && d % 8 == 0;
            const AttentionForwardSpec fwd{t, d, causal};
            const auto f = attention_forward_default_config(fwd, shape, target, 148);
            EXPECT_EQ(f, attention_forward_default_config(fwd, shape, rules, 148)) << to_string(f) << " " << target.arch;
            EXPECT_EQ(f.path, fa2 ? ForwardPath::fa2 : ForwardPath::simt) << to_string(fwd) << " " << target.arch;
            EXPECT_FALSE(check_attention_forward_config(fwd, f, target)) << to_string(f) << " " << target.arch;
            const AttentionBackwardSpec bwd{t, d, causal};
            const auto b = attention_backward_default_config(bwd, shape, target, 148);
            EXPECT_EQ(b, attention_backward_default_config(bwd, shape, rules, 148)) << to_string(b) << " " << target.arch;
            EXPECT_EQ(b.path(), fa2 && !(small_smem && d > 160) ? BackwardPath::fa2 : BackwardPath::simt)
                << to_string(bwd) << " " << target.arch;
            EXPECT_FALSE(check_attention_backward_config(bwd, b, target)) << to_string(b) << " " << target.arch;
            const auto dd = attention_double_backward_default_config(bwd, shape, target, 148);
            EXPECT_EQ(dd, attention_double_backward_default_config(bwd, shape, rules, 148)) << to_string(dd) << " " << target.arch;
            EXPECT_EQ(dd.path(), fa2 && !(small_smem && d > 128) ? BackwardPath::fa2 : BackwardPath::simt)
                << to_string(bwd) << " " << target.arch;
            EXPECT_FALSE(check_attention_double_backward_config(bwd, dd, target)) << to_string(dd) << " " << target.arch;
            if (small_smem) {
              EXPECT_EQ(f, attention_forward_default_config(fwd, shape, sm86, 148)) << target.arch;
              EXPECT_EQ(b, attention_backward_default_config(bwd, shape, sm86, 148)) << target.arch;
              EXPECT_EQ(dd, attention_double_backward_default_config(bwd, shape, sm86, 148)) << target.arch;
            }
            ++compared;
          }
  }
  EXPECT_EQ(compared, 4 * 3 * 12 * 2 * 3);
}

// sm_120's 99 KiB refuse what fits sm_80's 163 KiB and sm_100a's 227 KiB, with the reason.
TEST(Target, Sm120RefusesConfigsBeyondItsSharedMemory) {
  const AttentionForwardSpec fwd{DType::bf16, 256, false};
  const auto wide = *parse_attention_forward_config("fa2:bm64:bn64:w4:s2");
  ASSERT_FALSE(check_attention_forward_config(fwd, wide, *parse_target("sm_100a")));
  for (const char* arch : {"sm_120", "sm_121"}) {
    auto why = check_attention_forward_config(fwd, wide, *parse_target(arch));
    ASSERT_TRUE(why) << arch;
    EXPECT_NE(why->find("bytes of shared memory, " + std::string(arch) + " allows 101376"), std::string::npos) << *why;
  }
}

TEST(Target, EveryOperatorHasBlackwellVariantsAndNoneUsesHopperOnlyHeaders) {
  for (const Target& target : {*parse_target("sm_100a"), *parse_target("sm_120")})
    for (const OperatorInfo& op : operators()) {
      const auto kernels = op.all_variants(target);
      EXPECT_FALSE(kernels.empty()) << op.name << " " << target.arch;
      for (const KernelSource& k : kernels)
        for (const char* header : {"_wgmma.cuh", "_ws.cuh", "_mfma.cuh"})
          EXPECT_EQ(k.source.find(header), std::string::npos) << k.variant << " " << target.arch;
    }
}

}  // namespace
}  // namespace kgen
