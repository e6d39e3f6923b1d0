// The FP8 (E4M3) attention forward's spec text, validity rules, config space, default and
// rendering (the kernels' compiles and machine code are the replay table's rows).
#include <gtest/gtest.h>

#include <string>

#include "generator/attention_forward.h"
#include "kgen_device/attention/fp8_params.h"
#include "test_targets.h"

namespace kgen {
namespace {

using test_targets::sm80;
using test_targets::sm90a;

AttentionForwardSpec fp8(DType out, int d, bool causal) {
  AttentionForwardSpec s{out, d, causal};
  s.fp8 = true;
  return s;
}

std::string why(const AttentionForwardSpec& s, const AttentionForwardConfig& c, const Target& t) {
  auto r = check_attention_forward_config(s, c, t);
  return r ? *r : "valid";
}

TEST(AttentionFp8Spec, TextRoundTripsAndKeepsTheSixteenBitTexts) {
  const AttentionForwardSpec s = fp8(DType::bf16, 128, true);
  EXPECT_EQ(to_string(s), "attention_fwd.bf16.d128.causal.fp8");
  EXPECT_EQ(parse_attention_forward_spec(to_string(s)), s);
  EXPECT_EQ(to_string(AttentionForwardSpec{DType::bf16, 128, true}), "attention_fwd.bf16.d128.causal");
  EXPECT_FALSE(parse_attention_forward_spec("attention_fwd.bf16.d128.fp8"));
}

TEST(AttentionFp8Spec, RefusalsNameTheArgument) {
  EXPECT_FALSE(check_attention_forward_spec(fp8(DType::bf16, 128, false)));
  EXPECT_FALSE(check_attention_forward_spec(fp8(DType::f16, 256, true)));
  auto spec_why = [](const AttentionForwardSpec& s) { return check_attention_forward_spec(s).value_or("valid"); };
  EXPECT_EQ(spec_why(fp8(DType::bf16, 64, false)).rfind("q: head_dim=64", 0), 0u) << spec_why(fp8(DType::bf16, 64, false));
  EXPECT_EQ(spec_why(fp8(DType::f32, 128, false)).rfind("o: dtype fp32", 0), 0u);
  AttentionForwardSpec windowed = fp8(DType::bf16, 128, false);
  windowed.variant = "w";  // any variant text: the FP8 rule comes first
  EXPECT_NE(spec_why(windowed).find("plain or causal"), std::string::npos);
  AttentionForwardSpec mla = fp8(DType::bf16, 128, false);
  mla.head_dim_v = 64;
  EXPECT_NE(spec_why(mla).find("v"), std::string::npos);
}

TEST(AttentionFp8Config, OnlyWsOnSm90aWith128KeyTilesOnThePlainGrid) {
  const AttentionForwardSpec s = fp8(DType::bf16, 128, false);
  const AttentionForwardConfig ws{.path = ForwardPath::ws, .block_m = 128, .block_n = 128, .warps = 8, .ping_pong = 1};
  EXPECT_EQ(why(s, ws, sm90a()), "valid");
  EXPECT_NE(why(s, ws, sm80()).find("sm_90a"), std::string::npos);
  EXPECT_NE(why(s, {.path = ForwardPath::fa2, .block_m = 128, .block_n = 64, .warps = 4}, sm90a()).find("ws configs"),
            std::string::npos);
  AttentionForwardConfig bn64 = ws, split = ws, persist = ws;
  bn64.block_n = 64, split.split_keys = true, persist.persistent = true;
  for (const auto& c : {bn64, split, persist}) EXPECT_NE(why(s, c, sm90a()).find("bn128"), std::string::npos) << to_string(c);
  // 192-key tiles at d = 128 (their transposed V in 64-byte-swizzled blocks), not at 256.
  AttentionForwardConfig bn192 = ws;
  bn192.block_n = 192;
  EXPECT_EQ(why(s, bn192, sm90a()), "valid");
  EXPECT_NE(why(fp8(DType::bf16, 256, false), bn192, sm90a()).find("bn192 at head_dim=128"), std::string::npos);
  EXPECT_EQ(attention_fwd::fp8_vt_row_bytes(128), 128);
  EXPECT_EQ(attention_fwd::fp8_vt_row_bytes(192), 64);
  // d = 256: two stages fit in shared memory, three do not.
  AttentionForwardConfig s3 = ws;
  s3.stages = 3;
  EXPECT_EQ(why(fp8(DType::bf16, 256, false), ws, sm90a()), "valid");
  EXPECT_NE(why(fp8(DType::bf16, 256, false), s3, sm90a()).find("shared memory"), std::string::npos);
  EXPECT_EQ(why(s, s3, sm90a()), "valid");
}

TEST(AttentionFp8Config, SpaceAndDefaultAreValidAndTheDefaultIsWs) {
  for (DType t : {DType::f16, DType::bf16})
    for (int d : {128, 256})
      for (bool causal : {false, true}) {
        const AttentionForwardSpec s = fp8(t, d, causal);
        const auto space = attention_forward_config_space(s, sm90a());
        EXPECT_EQ(space.size(), d == 128 ? 12u : 2u) << to_string(s);
        for (const auto& c : space) EXPECT_EQ(why(s, c, sm90a()), "valid") << to_string(c);
        const AttentionForwardConfig c = attention_forward_default_config(s, {1, 16, 16, 4096, 4096}, sm90a(), 132);
        EXPECT_EQ(to_string(c), d == 128 ? "ws:bm128:bn192:s3:pp1" : "ws:bm128:bn128:s2:pp1");
        EXPECT_TRUE(attention_forward_config_space(s, sm80()).empty());
      }
}

TEST(AttentionFp8Render, TwoKernelsTheTranspositionFirst) {
  const AttentionForwardSpec s = fp8(DType::f16, 256, true);
  const auto c = attention_forward_default_config(s, {1, 8, 8, 4096, 4096}, sm90a(), 132);
  const auto kernels = render_attention_forward_kernels(s, c);
  ASSERT_EQ(kernels.size(), 2u);
  EXPECT_EQ(kernels[0].entry, "kgen_attention_fp8_v_transpose");
  EXPECT_NE(kernels[0].source.find("attention_fp8_v_transpose<"), std::string::npos);
  EXPECT_NE(kernels[1].source.find("kgen::E4m3In<kgen::half_t>"), std::string::npos) << kernels[1].source;
  EXPECT_NE(kernels[1].source.find("AttentionForwardFp8Params"), std::string::npos);
  EXPECT_EQ(kernels[1].smem_bytes, attention_fwd::fp8_ws_smem_bytes(256, 2));
  EXPECT_LE(kernels[1].smem_bytes, sm90a().max_smem_per_block);
}

TEST(AttentionFp8Render, OneNineTwoKeyTileCountsItsSharedMemory) {
  const AttentionForwardSpec s = fp8(DType::bf16, 128, false);
  const AttentionForwardConfig c{.path = ForwardPath::ws, .block_m = 128, .block_n = 192, .stages = 2, .warps = 8,
                                 .ping_pong = 1};
  const auto kernels = render_attention_forward_kernels(s, c);
  ASSERT_EQ(kernels.size(), 2u);
  EXPECT_NE(kernels[1].source.find("/*BN=*/192, /*Stages=*/2"), std::string::npos) << kernels[1].source;
  EXPECT_EQ(kernels[1].smem_bytes, attention_fwd::fp8_ws_smem_bytes(128, 2, 192));
  EXPECT_EQ(attention_fwd::fp8_ws_smem_bytes(128, 2, 192) - attention_fwd::fp8_ws_smem_bytes(128, 2), 2 * 2 * 64 * 128);
}

TEST(AttentionFp8Render, TranspositionGridCoversThePaddedKeys) {
  EXPECT_EQ(attention_fp8_keys_padded(1), 128);
  EXPECT_EQ(attention_fp8_keys_padded(128), 128);
  EXPECT_EQ(attention_fp8_keys_padded(129), 256);
  const LaunchGrid g = attention_fp8_v_transpose_grid({2, 8, 2, 100, 300}, 256);
  EXPECT_EQ(g.x, 384u / 32);
  EXPECT_EQ(g.y, 2u);
  EXPECT_EQ(g.z, 4u);
}

}  // namespace
}  // namespace kgen
