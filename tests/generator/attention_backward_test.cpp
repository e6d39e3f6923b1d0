// attention_bwd generator rules: the Hopper wgmma key-major kernel next to fa2 and simt.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "generator/attention_backward.h"
#include "kgen_device/attention/backward_cols_config.h"
#include "kgen_device/attention/backward_config.h"
#include "kgen_device/attention/backward_wide_config.h"
#include "test_targets.h"

namespace kgen {
namespace {

using test_targets::sm80;
using test_targets::sm90a;

// Every config of the backward's and the double backward's spaces, for every target kgen knows,
// every dtype, head dim and mask (and the grouped forms), prints a text that parses back to the
// same config and prints the same text; its explanation spells the text field by field.
TEST(AttentionBackwardConfig, EveryConfigOfEverySpaceRoundTripsOnEveryTarget) {
  int configs = 0;
  for (const char* arch : {"sm_80", "sm_86", "sm_89", "sm_90", "sm_90a", "sm_100a", "sm_103a", "sm_120", "sm_121",
                           "gfx90a", "gfx942", "gfx950"}) {
    const Target target = *parse_target(arch);
    for (DType t : {DType::f16, DType::bf16, DType::f32})
      for (int d = 8; d <= 256; d += 8)
        for (bool causal : {false, true}) {
          const AttentionBackwardSpec spec{t, d, causal};
          auto round_trip = [&](const AttentionBackwardConfig& c, auto parse) {
            const std::string text = to_string(c);
            const auto again = parse(text);
            ASSERT_TRUE(again) << arch << " " << text;
            EXPECT_EQ(*again, c) << arch << " " << text;
            EXPECT_EQ(to_string(*again), text) << arch;
            std::string spelled;
            for (const ConfigField& f : explain(c)) spelled += (spelled.empty() ? "" : ":") + f.text;
            EXPECT_EQ(spelled, text) << arch;
            ++configs;
          };
          for (const auto& c : attention_backward_config_space(spec, target, 8))
            round_trip(c, parse_attention_backward_config);
          for (const auto& c : attention_double_backward_config_space(spec, target))
            round_trip(c, parse_attention_double_backward_config);
        }
  }
  EXPECT_GT(configs, 10000);
}

// The text of each form, as kgen has always written it (cache keys, the tuning database and the
// replay table hold these), and the fields each one fills.
TEST(AttentionBackwardConfig, TextFormsAndTheirFields) {
  for (const char* text : {"fa2:bm64:bn128:w8", "fa2:bm32:bn64:w4", "wg:bm64:bn128", "wg:bm64:bn64", "wg:bm64:bn64:c2",
                           "wg:bm64:bn128:a1", "wg:bm64:bn128:a2:t", "wg:bm64:bn128:a2:t:l", "wg:bm128:bn128:a2:l:w",
                           "wg:bm64:bn128:a2:t:l:w:p", "wg:bm64:bn128:a2:t:l:w:p:g8", "wg:bm64:bn128:a1:t:l:g2",
                           "mfma:bm32:bn64:w2", "mfma:bm32:bn64:w2:c2", "simt:w4:dmax128", "simt:w8:dmax32"}) {
    const auto c = parse_attention_backward_config(text);
    ASSERT_TRUE(c) << text;
    EXPECT_EQ(to_string(*c), text);
  }
  EXPECT_EQ(parse_attention_backward_config("fa2:bm32:bn64:w4"),
            AttentionBackwardConfig(BackwardFa2Config{.query_rows = 32, .keys = 64, .warps = 4}));
  EXPECT_EQ(parse_attention_backward_config("wg:bm128:bn128:a1:t:l:w:g4"),
            AttentionBackwardConfig(BackwardWgmmaConfig{.query_rows = 128, .async_wgs = 1, .tma_dq = true, .tma_loads = true,
                                                        .warp_specialised = true, .group_splits = 4}));
  EXPECT_EQ(parse_attention_backward_config("wg:bm64:bn64:c2"),
            AttentionBackwardConfig(BackwardWgmmaConfig{.keys = 64, .column_splits = 2}));
  EXPECT_EQ(parse_attention_backward_config("mfma:bm32:bn64:w2:c2"),
            AttentionBackwardConfig(BackwardMfmaConfig{.query_rows = 32, .keys = 64, .waves = 2, .column_splits = 2}));
  EXPECT_EQ(parse_attention_backward_config("simt:w8:dmax64"),
            AttentionBackwardConfig(BackwardSimtConfig{.warps = 8, .max_head_dim = 64}));
  // The double backward reads fa2: and plain wg: texts as its own forms, the rest as the backward's.
  EXPECT_EQ(parse_attention_double_backward_config("fa2:bm64:bn32:w4"),
            AttentionBackwardConfig(DoubleBackwardFa2Config{.rows = 64, .tile = 32, .warps = 4}));
  EXPECT_EQ(parse_attention_double_backward_config("wg:bm32:bn64:c2"),
            AttentionBackwardConfig(DoubleBackwardWgmmaConfig{.tile = 32, .rows = 64, .column_splits = 2}));
  EXPECT_EQ(parse_attention_double_backward_config("simt:w4:dmax128"), parse_attention_backward_config("simt:w4:dmax128"));
  const auto decoupled = parse_attention_double_backward_config("wg:bm64:bn128:a2:t");
  ASSERT_TRUE(decoupled);
  EXPECT_TRUE(decoupled->as<BackwardWgmmaConfig>());
  auto why = check_attention_double_backward_config({DType::bf16, 128, false}, *decoupled, sm90a());
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("no decoupled"), std::string::npos) << *why;
  // Each op refuses the other's forms.
  EXPECT_TRUE(check_attention_backward_config({DType::bf16, 64, false}, *parse_attention_double_backward_config("fa2:bm64:bn32:w4"),
                                              sm80()));
  EXPECT_TRUE(check_attention_double_backward_config({DType::bf16, 64, false}, *parse_attention_backward_config("fa2:bm64:bn32:w4"),
                                                     sm80()));
}

// `kgen inspect --explain`: each path's own fields and meanings.
TEST(AttentionBackwardConfig, ExplainNamesEachPathsOwnFields) {
  auto meanings = [](const AttentionBackwardConfig& c) {
    std::string out;
    for (const ConfigField& f : explain(c)) out += f.text + "=" + f.meaning + "\n";
    return out;
  };
  const std::string simt = meanings(*parse_attention_backward_config("simt:w4:dmax128"));
  EXPECT_NE(simt.find("w4=4 warps per block"), std::string::npos) << simt;
  const std::string fa2 = meanings(*parse_attention_backward_config("fa2:bm64:bn128:w8"));
  EXPECT_NE(fa2.find("w8=8 warps, 16 keys each"), std::string::npos) << fa2;
  const std::string mfma = meanings(*parse_attention_backward_config("mfma:bm32:bn64:w2:c2"));
  EXPECT_NE(mfma.find("w2=2 waves"), std::string::npos) << mfma;
  EXPECT_NE(mfma.find("c2=2 blocks share a key block"), std::string::npos) << mfma;
  const std::string wg = meanings(*parse_attention_backward_config("wg:bm64:bn128:a2:t:l:w:p:g2"));
  for (const char* field : {"a2=", "t=", "l=", "w=a producer warpgroup", "p=persistent", "g2="})
    EXPECT_NE(wg.find(field), std::string::npos) << field << "\n" << wg;
  const std::string dbl = meanings(*parse_attention_double_backward_config("wg:bm32:bn64:c2"));
  EXPECT_NE(dbl.find("bm32=score tiles 32 wide"), std::string::npos) << dbl;
  EXPECT_NE(dbl.find("bn64=64 rows per block"), std::string::npos) << dbl;
  const std::string dbl_fa2 = meanings(*parse_attention_double_backward_config("fa2:bm64:bn32:w4"));
  EXPECT_NE(dbl_fa2.find("bm64=64 rows per block"), std::string::npos) << dbl_fa2;
}

TEST(AttentionBackwardConfig, WgmmaTextRoundTripsAndRejectsMalformed) {
  auto c = parse_attention_backward_config("wg:bm64:bn128");
  ASSERT_TRUE(c);
  ASSERT_TRUE(c->as<BackwardWgmmaConfig>());
  EXPECT_EQ(c->path(), BackwardPath::wgmma);
  EXPECT_EQ(c->as<BackwardWgmmaConfig>()->query_rows, 64);
  EXPECT_EQ(c->as<BackwardWgmmaConfig>()->keys, 128);
  EXPECT_EQ(c->as<BackwardWgmmaConfig>()->warpgroups(), 2);
  EXPECT_EQ(to_string(*c), "wg:bm64:bn128");
  for (const char* bad : {"wg:bm64", "wg:bm64:bn128:w8", "wg:bmx:bn128", "wgmma:bm64:bn128"})
    EXPECT_FALSE(parse_attention_backward_config(bad)) << bad;
}

TEST(AttentionBackwardConfig, WgmmaOnlyOnSm90aForSixteenBitD64AndD128) {
  const AttentionBackwardConfig wg = BackwardWgmmaConfig{};
  EXPECT_FALSE(check_attention_backward_config({DType::bf16, 128, true}, wg, sm90a()));
  EXPECT_FALSE(check_attention_backward_config({DType::f16, 64, false}, wg, sm90a()));
  auto why = check_attention_backward_config({DType::bf16, 128, false}, wg, sm80());
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("sm_90a"), std::string::npos) << *why;
  why = check_attention_backward_config({DType::f32, 128, false}, wg, sm90a());
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("fp16 or bf16"), std::string::npos) << *why;
  EXPECT_FALSE(check_attention_backward_config({DType::bf16, 96, false}, wg, sm90a()));  // the padded tile
  why = check_attention_backward_config({DType::bf16, 136, false}, wg, sm90a());
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("head_dim=136"), std::string::npos) << *why;
  EXPECT_TRUE(check_attention_backward_config({DType::bf16, 128, false}, BackwardWgmmaConfig{.query_rows = 32}, sm90a()));
  EXPECT_TRUE(check_attention_backward_config({DType::bf16, 128, false}, BackwardWgmmaConfig{.keys = 192}, sm90a()));
}

// The wgmma double backward: 64 rows per warpgroup (64 or 128 per block), score tiles 32 or 64
// wide (32 where D = 128 would not fit the registers), sm_90a, 16-bit, up to 128 columns.
TEST(AttentionBackwardConfig, DoubleBackwardWgmmaRulesSpaceGridAndRender) {
  const AttentionBackwardConfig bm32 = DoubleBackwardWgmmaConfig{.tile = 32, .rows = 64},
                                bm64 = DoubleBackwardWgmmaConfig{.tile = 64, .rows = 128};
  EXPECT_FALSE(check_attention_double_backward_config({DType::bf16, 128, true}, bm32, sm90a()));
  EXPECT_FALSE(check_attention_double_backward_config({DType::f16, 64, false}, bm64, sm90a()));
  EXPECT_FALSE(check_attention_double_backward_config({DType::f16, 80, false}, bm32, sm90a()));  // padded to 128
  auto why = check_attention_double_backward_config({DType::bf16, 128, false}, bm64, sm90a());
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("register"), std::string::npos) << *why;
  why = check_attention_double_backward_config({DType::bf16, 64, false}, bm32, sm80());
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("sm_90a"), std::string::npos) << *why;
  why = check_attention_double_backward_config({DType::f32, 64, false}, bm32, sm90a());
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("fp16 or bf16"), std::string::npos) << *why;
  why = check_attention_double_backward_config({DType::bf16, 160, false}, bm32, sm90a());
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("head_dim=160"), std::string::npos) << *why;
  EXPECT_TRUE(check_attention_double_backward_config({DType::bf16, 64, false}, DoubleBackwardWgmmaConfig{.tile = 16, .rows = 64}, sm90a()));
  EXPECT_TRUE(check_attention_double_backward_config({DType::bf16, 64, false}, DoubleBackwardWgmmaConfig{.tile = 32, .rows = 192}, sm90a()));

  int wg90 = 0, wg80 = 0;
  for (const auto& c : attention_double_backward_config_space({DType::bf16, 128, false}, sm90a())) wg90 += c.path() == BackwardPath::wgmma;
  for (const auto& c : attention_double_backward_config_space({DType::bf16, 128, false}, sm80())) wg80 += c.path() == BackwardPath::wgmma;
  EXPECT_EQ(wg90, 2);  // bm32 on one or two warpgroups
  int c2 = 0;
  for (const auto& c : attention_double_backward_config_space({DType::bf16, 200, true}, sm90a()))
    c2 += c.as<DoubleBackwardWgmmaConfig>() && c.as<DoubleBackwardWgmmaConfig>()->column_splits == 2;
  EXPECT_EQ(c2, 1);
  const AttentionBackwardConfig wide = DoubleBackwardWgmmaConfig{.tile = 32, .rows = 64, .column_splits = 2};
  EXPECT_FALSE(check_attention_double_backward_config({DType::f16, 136, false}, wide, sm90a()));
  why = check_attention_double_backward_config({DType::f16, 128, false}, wide, sm90a());
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("above 128"), std::string::npos) << *why;
  const KernelSource wide_fused = render_attention_double_backward({DType::bf16, 160, false}, wide, DoubleBackwardKernel::fused);
  for (const char* part : {"/*D=*/256", "/*WGs=*/2", "/*HeadDim=*/160", "/*Splits=*/2"})
    EXPECT_NE(wide_fused.source.find(part), std::string::npos) << part << "\n" << wide_fused.source;
  EXPECT_EQ(wide_fused.threads, 256);
  const KernelSource wide_stats = render_attention_double_backward({DType::bf16, 160, false}, wide, DoubleBackwardKernel::q_stats);
  EXPECT_EQ(wide_stats.threads, 128);
  EXPECT_EQ(wide_stats.source.find("Splits"), std::string::npos) << wide_stats.source;
  EXPECT_EQ(attention_double_backward_grid(wide, DoubleBackwardKernel::fused, {1, 1, 1, 8192, 8192}, 132, false, 160).x, 256u);
  EXPECT_EQ(wg80, 0);

  // Both passes take `rows` rows per block; the r/c pass splits its key tiles (`tile` wide).
  const AttentionShape one{1, 1, 1, 8192, 8192};
  EXPECT_EQ(attention_double_backward_stats_splits(bm32, one, 132), 4);
  EXPECT_EQ(attention_double_backward_grid(bm32, DoubleBackwardKernel::q_stats, one, 132, false, 128).x, 128u * 4);
  EXPECT_EQ(attention_double_backward_grid(bm32, DoubleBackwardKernel::fused, one, 132, false, 128).x, 256u);
  EXPECT_EQ(attention_double_backward_grid(bm64, DoubleBackwardKernel::fused, one, 132, true, 64).x, 128u);

  const KernelSource fused = render_attention_double_backward({DType::bf16, 80, true}, bm32, DoubleBackwardKernel::fused);
  for (const char* part : {"attention_double_backward_wgmma_fused<", "/*D=*/128", "/*Tile=*/32", "/*WGs=*/1", "/*HeadDim=*/80"})
    EXPECT_NE(fused.source.find(part), std::string::npos) << part << "\n" << fused.source;
  EXPECT_EQ(fused.threads, 128);
  const KernelSource stats = render_attention_double_backward({DType::f16, 64, false}, bm64, DoubleBackwardKernel::q_stats);
  EXPECT_NE(stats.source.find("DoubleBackwardRowPass::stats"), std::string::npos) << stats.source;
  EXPECT_EQ(stats.threads, 256);
  EXPECT_EQ(stats.smem_bytes, attention_bwd::wgmma_dbl_q_smem_bytes(64, 2, 64));
}

TEST(AttentionBackwardConfig, SpaceHasWgmmaOnlyOnSm90aAndDefaultsToItThere) {
  for (int d : {64, 128})
    for (bool causal : {false, true}) {
      const AttentionBackwardSpec spec{DType::bf16, d, causal};
      int wg90 = 0, wg80 = 0;
      for (const auto& c : attention_backward_config_space(spec, sm90a())) wg90 += c.path() == BackwardPath::wgmma;
      for (const auto& c : attention_backward_config_space(spec, sm80())) wg80 += c.path() == BackwardPath::wgmma;
      // bn128, bn64, bn128:a1, bn128:a2, each decoupled one with :t, :l, :t:l and :t:l:w, and
      // a2:t:l:w:p; at d = 64 also bm128:bn128:a1 and a2, each without :l, with :l, with :l:w
      // and with :t:l:w.
      EXPECT_EQ(wg90, d == 64 ? 21 : 13) << d;
      EXPECT_EQ(wg80, 0) << d;
      const AttentionShape big{4, 16, 16, 4096, 4096};
      // Decoupled warpgroups with a producer warpgroup, the loads and dQ by TMA: 128-row query
      // tiles on the 64-column tile (unstaggered with a mask), 64-row ones on the 128-column
      // tile; on the 64-column tile from 1k keys.
      const char* wide = causal ? "wg:bm128:bn128:a1:t:l:w" : "wg:bm128:bn128:a2:t:l:w";
      EXPECT_EQ(to_string(attention_backward_default_config(spec, big, sm90a(), 132)),
                d == 64 ? wide : "wg:bm64:bn128:a2:t:l:w:p");
      if (d == 64) {
        EXPECT_EQ(to_string(attention_backward_default_config(spec, {16, 16, 16, 1024, 1024}, sm90a(), 132)), wide);
        EXPECT_EQ(to_string(attention_backward_default_config(spec, {32, 16, 16, 512, 512}, sm90a(), 132)),
                  causal ? "wg:bm128:bn128:a2:l" : "wg:bm128:bn128:a2");
      }
      // Short sequences keep the decoupled kernel on the 128-column tile (TMA loads except with a
      // mask) up to 512 keys; from 1k the persistent warp-specialised one.
      if (d == 128) {
        EXPECT_EQ(to_string(attention_backward_default_config(spec, {64, 16, 16, 512, 512}, sm90a(), 132)),
                  causal ? "wg:bm64:bn128:a2:t" : "wg:bm64:bn128:a2:t:l");
        EXPECT_EQ(to_string(attention_backward_default_config(spec, {16, 16, 16, 1024, 1024}, sm90a(), 132)),
                  "wg:bm64:bn128:a2:t:l:w:p");
      }
      EXPECT_EQ(attention_backward_default_config(spec, big, sm80(), 108).path(), BackwardPath::fa2);
      // Too few key blocks to fill the machine: one warpgroup per block.
      EXPECT_EQ(to_string(attention_backward_default_config(spec, {1, 1, 1, 2048, 2048}, sm90a(), 132)), "wg:bm64:bn64");
    }
  EXPECT_EQ(to_string(attention_backward_default_config({DType::bf16, 80, false}, {4, 16, 16, 4096, 4096}, sm90a(), 132)),
            "wg:bm64:bn128:a2:t:l:w:p");
  // d = 32 on sm_90a: the padded wgmma tile (64-key fa2 blocks with a mask in small grids); sm_80 as before.
  const AttentionShape d32_big{4, 64, 64, 4096, 4096};
  EXPECT_EQ(to_string(attention_backward_default_config({DType::bf16, 32, false}, d32_big, sm90a(), 132)), "wg:bm128:bn128:a1:l");
  EXPECT_EQ(to_string(attention_backward_default_config({DType::bf16, 32, true}, d32_big, sm90a(), 132)), "wg:bm128:bn128:a2:l");
  EXPECT_EQ(to_string(attention_backward_default_config({DType::bf16, 32, true}, {1, 1, 1, 2048, 2048}, sm90a(), 132)),
            "fa2:bm64:bn64:w4");
  EXPECT_EQ(to_string(attention_backward_default_config({DType::bf16, 32, true}, d32_big, sm80(), 108)), "fa2:bm64:bn128:w8");
  EXPECT_EQ(attention_backward_default_config({DType::bf16, 24, false}, d32_big, sm90a(), 132).path(), BackwardPath::fa2);
  // Above 128 columns: on sm_90a the warp-specialised wide kernel (96-key blocks up to 192, 48-key
  // blocks above), fa2 with column splits elsewhere.
  for (int d : {136, 160, 192, 200, 256}) {
    const AttentionBackwardSpec spec{DType::bf16, d, false};
    const char* want = d <= 192 ? "wg:bm64:bn96:a1:t:l:w" : "wg:bm64:bn48:a1:t:l:w";
    EXPECT_EQ(to_string(attention_backward_default_config(spec, {4, 16, 16, 4096, 4096}, sm90a(), 132)), want) << d;
    EXPECT_EQ(to_string(attention_backward_default_config(spec, {1, 1, 1, 128, 128}, sm90a(), 132)), want) << d;
    EXPECT_EQ(attention_backward_default_config(spec, {4, 16, 16, 4096, 4096}, sm80(), 108).path(), BackwardPath::fa2) << d;
  }
}

TEST(AttentionBackwardConfig, DecoupledWarpgroupsTextRulesRenderAndSpillFreeDefaults) {
  for (const char* text : {"wg:bm64:bn128:a1", "wg:bm64:bn128:a2", "wg:bm64:bn128:a1:t", "wg:bm64:bn128:a2:t"}) {
    auto c = parse_attention_backward_config(text);
    ASSERT_TRUE(c) << text;
    EXPECT_EQ(to_string(*c), text);
    EXPECT_FALSE(check_attention_backward_config({DType::bf16, 96, true}, *c, sm90a())) << text;
    EXPECT_TRUE(check_attention_backward_config({DType::bf16, 96, true}, *c, sm80())) << text;
    EXPECT_TRUE(check_attention_backward_config({DType::f32, 96, true}, *c, sm90a())) << text;
  }
  for (const char* bad : {"wg:bm64:bn128:a0", "wg:bm64:bn128:ax", "wg:bm64:bn128:a1:c2", "wg:bm64:bn128:t",
                          "wg:bm64:bn128:a2:x", "wg:bm64:bn128:a2:t:t", "wg:bm64:bn64:c2:t"})
    EXPECT_FALSE(parse_attention_backward_config(bad)) << bad;
  for (const char* text : {"wg:bm64:bn128:a3", "wg:bm64:bn64:a1", "wg:bm64:bn64:c2"}) {
    auto c = parse_attention_backward_config(text);
    ASSERT_TRUE(c) << text;
    EXPECT_TRUE(check_attention_backward_config({DType::bf16, 128, false}, *c, sm90a())) << text;
  }
  // The atomic kernel is the decoupled one (256 threads, its own shared memory); the deterministic
  // mode's key-major kernel is the block-synchronous one.
  const auto c = *parse_attention_backward_config("wg:bm64:bn128:a2");
  const KernelSource atomic = render_attention_backward({DType::bf16, 80, true}, c, BackwardKernel::kv_atomic);
  EXPECT_NE(atomic.source.find("attention_backward_wgmma_kv_async</*T=*/kgen::bfloat16_t, /*D=*/128, /*BM=*/64, "
                               "/*Causal=*/true, /*Stagger=*/true, /*HeadDim=*/80>"),
            std::string::npos)
      << atomic.source;
  EXPECT_EQ(atomic.threads, 256);
  EXPECT_EQ(atomic.smem_bytes, attention_bwd::wgmma_kv_async_smem_bytes(128, 64));
  EXPECT_LE(atomic.smem_bytes, sm90a().max_smem_per_block);
  const KernelSource plain = render_attention_backward({DType::bf16, 80, true}, c, BackwardKernel::kv);
  EXPECT_NE(plain.source.find("attention_backward_wgmma_kv<"), std::string::npos) << plain.source;
  // dQ by TMA: the map comes in a __grid_constant__ parameter struct, the staging tile takes the
  // third dSᵀ tile's room at D = 128 and fits beside all three at D = 64.
  const auto t = *parse_attention_backward_config("wg:bm64:bn128:a2:t");
  EXPECT_TRUE(t.as<BackwardWgmmaConfig>()->tma_dq);
  const KernelSource tma = render_attention_backward({DType::bf16, 80, true}, t, BackwardKernel::kv_atomic);
  EXPECT_NE(tma.source.find("(const __grid_constant__ kgen::AttentionBackwardTmaParams p)"), std::string::npos) << tma.source;
  EXPECT_NE(tma.source.find("attention_backward_wgmma_kv_async_tma</*T=*/kgen::bfloat16_t, /*D=*/128,"), std::string::npos)
      << tma.source;
  EXPECT_EQ(tma.smem_bytes, attention_bwd::wgmma_kv_async_smem_bytes(128, 64, true));
  EXPECT_LE(tma.smem_bytes, sm90a().max_smem_per_block);
  EXPECT_EQ(attention_bwd::wgmma_kv_async_ds_bufs(128, 64, true), 2);
  EXPECT_EQ(attention_bwd::wgmma_kv_async_ds_bufs(64, 64, true), 3);
  EXPECT_EQ(attention_bwd::wgmma_kv_async_ds_bufs(64, 128, false), 2);
  // The deterministic mode's key-major kernel is the same (only the variant comment names :t).
  const std::string t_plain = render_attention_backward({DType::bf16, 80, true}, t, BackwardKernel::kv).source;
  EXPECT_EQ(t_plain.substr(t_plain.find("extern")), plain.source.substr(plain.source.find("extern")));
  auto why = check_attention_backward_config({DType::bf16, 96, false}, BackwardWgmmaConfig{.tma_dq = true}, sm90a());
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("decoupled"), std::string::npos) << *why;
  // Defaults on sm_90a in grids that fill the machine; the exceptions where a decoupled kernel spills.
  const AttentionShape big{4, 16, 16, 4096, 4096};
  auto dflt = [&](int d, bool causal) {
    return to_string(attention_backward_default_config({DType::bf16, d, causal}, big, sm90a(), 132));
  };
  EXPECT_EQ(dflt(64, false), "wg:bm128:bn128:a2:t:l:w");
  EXPECT_EQ(dflt(56, false), "wg:bm128:bn128:a2:t:l:w");
  EXPECT_EQ(dflt(48, false), "wg:bm128:bn128:a1:l");
  EXPECT_EQ(dflt(48, true), "wg:bm128:bn128:a2:l");
  EXPECT_EQ(dflt(64, true), "wg:bm128:bn128:a1:t:l:w");
  EXPECT_EQ(dflt(40, false), "wg:bm128:bn128:a1:l");
  EXPECT_EQ(dflt(96, true), "wg:bm64:bn128:a2:t:l:w:p");
  EXPECT_EQ(dflt(104, true), "wg:bm64:bn128:a1:t:l:w");
  EXPECT_EQ(dflt(112, true), "wg:bm64:bn128:a1:t:l:w");
  EXPECT_EQ(dflt(112, false), "wg:bm64:bn128:a2:t:l:w:p");
  EXPECT_EQ(dflt(120, true), "wg:bm64:bn128:a2:t:l:w:p");
  EXPECT_EQ(dflt(128, true), "wg:bm64:bn128:a2:t:l:w:p");
  // Grouped heads with a mask at d = 128: with the producer warpgroup (from 1k keys), the
  // group's query heads split over as many blocks as it has heads (up to 8) when it is even
  // from 4; below 1k keys unstaggered, with TMA loads, over two blocks; not without a mask, nor
  // in groups of 2.
  auto grouped = [&](int d, bool causal, AttentionShape s) {
    return to_string(attention_backward_default_config({DType::bf16, d, causal}, s, sm90a(), 132));
  };
  EXPECT_EQ(grouped(128, true, {1, 64, 8, 4096, 4096}), "wg:bm64:bn128:a2:t:l:w:g8");
  EXPECT_EQ(grouped(128, true, {1, 64, 8, 16384, 16384}), "wg:bm64:bn128:a2:t:l:w:g8");
  EXPECT_EQ(grouped(128, true, {1, 32, 8, 4096, 4096}), "wg:bm64:bn128:a2:t:l:w:g4");
  EXPECT_EQ(grouped(128, true, {1, 96, 16, 4096, 4096}), "wg:bm64:bn128:a2:t:l:w:g2");
  EXPECT_EQ(grouped(128, true, {1, 128, 8, 4096, 4096}), "wg:bm64:bn128:a2:t:l:w:g8");
  EXPECT_EQ(grouped(128, true, {16, 64, 8, 512, 512}), "wg:bm64:bn128:a1:t:l:g2");
  EXPECT_EQ(to_string(attention_backward_default_config({DType::bf16, 128, true}, {1, 48, 16, 4096, 4096}, sm90a(), 132)),
            "wg:bm64:bn128:a1:t:l:w");
  EXPECT_EQ(to_string(attention_backward_default_config({DType::bf16, 128, true}, {1, 32, 16, 4096, 4096}, sm90a(), 132)),
            "wg:bm64:bn128:a1:t:l:w");
  EXPECT_EQ(to_string(attention_backward_default_config({DType::bf16, 128, false}, {1, 64, 8, 4096, 4096}, sm90a(), 132)),
            "wg:bm64:bn128:a2:t:l:w:p");
  // On the 128-column tile below d = 120 as well (d = 104-112 keep a1). On the 64-column tile
  // over four blocks with the producer warpgroup (from 4k keys), in groups of a multiple of 4.
  EXPECT_EQ(grouped(96, true, {1, 64, 8, 4096, 4096}), "wg:bm64:bn128:a2:t:l:w:g4");
  EXPECT_EQ(grouped(112, true, {1, 64, 8, 4096, 4096}), "wg:bm64:bn128:a1:t:l:w:g4");
  EXPECT_EQ(grouped(64, true, {1, 64, 8, 4096, 4096}), "wg:bm128:bn128:a2:l:w:g4");
  EXPECT_EQ(grouped(64, true, {1, 32, 8, 16384, 16384}), "wg:bm128:bn128:a2:l:w:g4");
  EXPECT_EQ(grouped(64, true, {1, 48, 8, 4096, 4096}), "wg:bm128:bn128:a1:t:l:w");
  EXPECT_EQ(grouped(64, false, {1, 64, 8, 4096, 4096}), "wg:bm128:bn128:a2:t:l:w");
  EXPECT_EQ(grouped(64, true, {16, 64, 8, 512, 512}), "wg:bm128:bn128:a2:l");
  EXPECT_EQ(grouped(64, false, {1, 64, 8, 2048, 2048}), "wg:bm128:bn128:a2:l:w:g4");
  EXPECT_EQ(grouped(64, false, {1, 64, 8, 4096, 4096}), "wg:bm128:bn128:a2:t:l:w");
  EXPECT_EQ(grouped(48, true, {1, 64, 8, 4096, 4096}), "wg:bm128:bn128:a2:l");
  // Small grids: split, the blocks of a grouped call fill the machine (1k keys, b = 1, 8 K/V
  // heads: 64 K/V blocks), where they took the one-warpgroup kernel before.
  EXPECT_EQ(grouped(128, false, {1, 64, 8, 1024, 1024}), "wg:bm64:bn128:a2:t:l:w:g2");
  // Eight blocks only from about two waves of K/V blocks (256 at b = 1, 4k keys).
  EXPECT_EQ(grouped(128, true, {1, 64, 8, 1024, 1024}), "wg:bm64:bn128:a2:t:l:w:g4");
  EXPECT_EQ(grouped(128, true, {1, 64, 8, 2048, 2048}), "wg:bm64:bn128:a2:t:l:w:g4");
  EXPECT_EQ(grouped(128, true, {2, 64, 8, 2048, 2048}), "wg:bm64:bn128:a2:t:l:w:g8");
  EXPECT_EQ(grouped(128, false, {1, 64, 8, 2048, 2048}), "wg:bm64:bn128:a2:t:l:w:p");
  EXPECT_EQ(grouped(64, true, {1, 64, 8, 1024, 1024}), "wg:bm128:bn128:a2:l:w:g4");
  EXPECT_EQ(grouped(128, false, {1, 16, 16, 1024, 1024}), "wg:bm64:bn64");
}

// Key pairs (":x2", clusters of two key blocks summing dQ before the reduce-adds; removed) are no
// config: the text does not parse, and no rendered decoupled kernel is launched in clusters.
TEST(AttentionBackwardConfig, KeyPairsAreNoConfig) {
  using K = BackwardKernel;
  for (const char* bad : {"wg:bm64:bn128:a1:t:x2", "wg:bm64:bn128:a2:t:x2", "wg:bm64:bn128:a2:t:l:x2", "wg:bm64:bn128:a2:t:x1",
                          "wg:bm64:bn128:a2:t:l:w:x2", "wg:bm64:bn128:a2:t:x2:g2"})
    EXPECT_FALSE(parse_attention_backward_config(bad)) << bad;
  for (const auto& c : attention_backward_config_space({DType::bf16, 128, true}, sm90a())) {
    const K kernel = attention_backward_kernels(c, false)[1];  // kv_atomic, or simt_dkdv
    const KernelSource k = render_attention_backward({DType::bf16, 128, true}, c, kernel);
    EXPECT_EQ(k.source.find("__cluster_dims__"), std::string::npos) << to_string(c);
  }
}

TEST(AttentionBackwardConfig, TmaLoadsTextRulesAndRender) {
  for (const char* text : {"wg:bm64:bn128:a1:l", "wg:bm64:bn128:a2:t:l"}) {
    auto c = parse_attention_backward_config(text);
    ASSERT_TRUE(c) << text;
    EXPECT_TRUE(c->as<BackwardWgmmaConfig>()->tma_loads);
    EXPECT_EQ(to_string(*c), text);
    EXPECT_FALSE(check_attention_backward_config({DType::bf16, 96, true}, *c, sm90a())) << text;
    EXPECT_FALSE(check_attention_backward_config({DType::f16, 64, false}, *c, sm90a())) << text;
    EXPECT_TRUE(check_attention_backward_config({DType::bf16, 96, true}, *c, sm80())) << text;
    EXPECT_TRUE(check_attention_double_backward_config({DType::bf16, 64, true}, *c, sm90a())) << text;
  }
  for (const char* bad : {"wg:bm64:bn128:l", "wg:bm64:bn128:a2:l:t", "wg:bm64:bn128:a2:l:l", "wg:bm64:bn64:c2:l"})
    EXPECT_FALSE(parse_attention_backward_config(bad)) << bad;
  // Only the decoupled kernels load by TMA.
  AttentionBackwardConfig sync = *parse_attention_backward_config("wg:bm64:bn128");
  sync.as<BackwardWgmmaConfig>()->tma_loads = true;
  auto why = check_attention_backward_config({DType::bf16, 128, false}, sync, sm90a());
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("(l)"), std::string::npos) << *why;
  // The general entry with the maps, the same shared memory as without the loads; the
  // deterministic mode's kernel is the block-synchronous one, unchanged.
  const auto l = *parse_attention_backward_config("wg:bm64:bn128:a1:l");
  const KernelSource k = render_attention_backward({DType::f16, 64, false}, l, BackwardKernel::kv_atomic);
  EXPECT_NE(k.source.find("attention_backward_wgmma_kv_async_maps</*T=*/kgen::half_t, /*D=*/64, /*BM=*/64, "
                          "/*Causal=*/false, /*Stagger=*/false, /*TmaDQ=*/false, /*TmaLoads=*/true>"),
            std::string::npos)
      << k.source;
  EXPECT_NE(k.source.find("(const __grid_constant__ kgen::AttentionBackwardTmaParams p)"), std::string::npos);
  EXPECT_EQ(k.source.find("__cluster_dims__"), std::string::npos);
  EXPECT_EQ(k.smem_bytes, attention_bwd::wgmma_kv_async_smem_bytes(64, 64));
  const std::string det = render_attention_backward({DType::f16, 64, false}, l, BackwardKernel::kv).source;
  EXPECT_NE(det.find("attention_backward_wgmma_kv<"), std::string::npos) << det;
  // The default form of dQ by TMA keeps its own entry.
  const KernelSource t = render_attention_backward({DType::bf16, 128, false}, *parse_attention_backward_config("wg:bm64:bn128:a2:t"),
                                                   BackwardKernel::kv_atomic);
  EXPECT_NE(t.source.find("attention_backward_wgmma_kv_async_tma<"), std::string::npos) << t.source;
}

// 128-row query tiles: the decoupled kernel on the 64-column tile, dQ by red_add2; two dSᵀ slots
// so the ring fits; the deterministic mode's kernel takes the same tiles; TMA boxes of 128 rows.
TEST(AttentionBackwardConfig, WideQueryTilesRulesSpaceAndRender) {
  for (const char* text : {"wg:bm128:bn128:a1", "wg:bm128:bn128:a2:l"}) {
    auto c = parse_attention_backward_config(text);
    ASSERT_TRUE(c) << text;
    EXPECT_EQ(c->as<BackwardWgmmaConfig>()->query_rows, 128);
    EXPECT_EQ(to_string(*c), text);
    for (int d : {8, 40, 64})
      for (bool causal : {false, true})
        EXPECT_FALSE(check_attention_backward_config({DType::bf16, d, causal}, *c, sm90a())) << text << " " << d;
    EXPECT_TRUE(check_attention_backward_config({DType::bf16, 64, false}, *c, sm80())) << text;
  }
  // Not on the 128-column tile (Sᵀ, dPᵀ, dK and dV would take 256 registers), not block-synchronous,
  // not with dQ by TMA; the text names the rule.
  for (const char* bad : {"wg:bm128:bn128:a1 d72", "wg:bm128:bn128 d64", "wg:bm128:bn64 d64",
                          "wg:bm128:bn128:a2:t d64"}) {
    const std::string text(bad);
    const auto c = parse_attention_backward_config(text.substr(0, text.find(' ')));
    ASSERT_TRUE(c) << bad;
    const int d = std::stoi(text.substr(text.find(" d") + 2));
    auto why = check_attention_backward_config({DType::f16, d, false}, *c, sm90a());
    ASSERT_TRUE(why) << bad;
    EXPECT_NE(why->find("bm128"), std::string::npos) << *why;
  }
  // The tuner's space has them at d <= 64 only.
  auto has = [](const std::vector<AttentionBackwardConfig>& space, const char* text) {
    for (const auto& c : space)
      if (to_string(c) == text) return true;
    return false;
  };
  EXPECT_TRUE(has(attention_backward_config_space({DType::bf16, 64, true}, sm90a()), "wg:bm128:bn128:a1:l"));
  EXPECT_TRUE(has(attention_backward_config_space({DType::f16, 32, false}, sm90a()), "wg:bm128:bn128:a2"));
  EXPECT_FALSE(has(attention_backward_config_space({DType::bf16, 128, true}, sm90a()), "wg:bm128:bn128:a1:l"));
  // Rendered: the decoupled kernel with BM = 128, shared memory with two dSᵀ slots (under the
  // limit, where three would not be); the deterministic mode's key-major kernel with BM = 128.
  const auto l = *parse_attention_backward_config("wg:bm128:bn128:a1:l");
  const KernelSource k = render_attention_backward({DType::f16, 64, true}, l, BackwardKernel::kv_atomic);
  EXPECT_NE(k.source.find("attention_backward_wgmma_kv_async_maps</*T=*/kgen::half_t, /*D=*/64, /*BM=*/128, "),
            std::string::npos)
      << k.source;
  EXPECT_EQ(k.smem_bytes, attention_bwd::wgmma_kv_async_smem_bytes(64, 128));
  EXPECT_LE(k.smem_bytes, sm90a().max_smem_per_block);
  EXPECT_GT(k.smem_bytes + 128 * 128 * 2, sm90a().max_smem_per_block);
  const std::string det = render_attention_backward({DType::f16, 64, true}, l, BackwardKernel::kv).source;
  EXPECT_NE(det.find("attention_backward_wgmma_kv</*T=*/kgen::half_t, /*D=*/64, /*BM=*/128, /*WGs=*/2,"),
            std::string::npos)
      << det;
}

// Warp specialisation (":w"): with the loads by TMA and, in 64-row tiles, dQ by TMA; group
// splits allowed; 384 threads (a producer warpgroup) and, with TMA dQ, four more
// mbarriers; the deterministic mode keeps the block-synchronous kernel.
TEST(AttentionBackwardConfig, WarpSpecialisedTextRulesAndRender) {
  for (const char* text : {"wg:bm64:bn128:a2:t:l:w", "wg:bm64:bn128:a1:t:l:w", "wg:bm64:bn128:a1:t:l:w:g2",
                           "wg:bm128:bn128:a2:l:w", "wg:bm128:bn128:a1:l:w", "wg:bm128:bn128:a2:t:l:w",
                           "wg:bm128:bn128:a1:t:l:w:g2"}) {
    auto c = parse_attention_backward_config(text);
    ASSERT_TRUE(c) << text;
    EXPECT_TRUE(c->as<BackwardWgmmaConfig>()->warp_specialised);
    EXPECT_EQ(to_string(*c), text);
    for (int d : {128, 80, 64, 40}) {
      const bool fits = c->as<BackwardWgmmaConfig>()->query_rows == 64 || d <= 64;  // 128-row tiles: the 64-column tile only
      EXPECT_EQ(!check_attention_backward_config({DType::bf16, d, true}, *c, sm90a()), fits) << text << " " << d;
    }
    EXPECT_TRUE(check_attention_backward_config({DType::bf16, 64, true}, *c, sm80())) << text;
  }
  for (const char* bad : {"wg:bm64:bn128:w", "wg:bm64:bn128:a2:w:t:l", "wg:bm64:bn128:a2:t:l:w:w"})
    EXPECT_FALSE(parse_attention_backward_config(bad)) << bad;
  for (const char* text : {"wg:bm64:bn128:a2:t:w", "wg:bm64:bn128:a2:l:w", "wg:bm128:bn128:a2:w"}) {
    const auto c = parse_attention_backward_config(text);
    ASSERT_TRUE(c) << text;
    auto why = check_attention_backward_config({DType::bf16, 64, false}, *c, sm90a());
    ASSERT_TRUE(why) << text;
  }
  const auto w = *parse_attention_backward_config("wg:bm64:bn128:a2:t:l:w");
  using K = BackwardKernel;
  const KernelSource k = render_attention_backward({DType::bf16, 96, true}, w, K::kv_atomic);
  EXPECT_EQ(k.threads, 384);
  EXPECT_NE(k.source.find("kgen_device/attention/backward_ws.cuh"), std::string::npos);
  EXPECT_NE(k.source.find("attention_backward_wgmma_kv_ws</*T=*/kgen::bfloat16_t, /*D=*/128, /*BM=*/64, "
                          "/*Causal=*/true, /*Stagger=*/true, /*HeadDim=*/96, /*GroupSplit=*/1>"),
            std::string::npos)
      << k.source;
  EXPECT_EQ(k.smem_bytes, attention_bwd::wgmma_kv_async_smem_bytes(128, 64, true) + 4 * 8);
  EXPECT_LE(k.smem_bytes, sm90a().max_smem_per_block);
  const auto w128 = *parse_attention_backward_config("wg:bm128:bn128:a2:l:w");
  const KernelSource k128 = render_attention_backward({DType::bf16, 64, false}, w128, K::kv_atomic);
  EXPECT_EQ(k128.threads, 384);
  EXPECT_NE(k128.source.find("attention_backward_wgmma_kv_ws</*T=*/kgen::bfloat16_t, /*D=*/64, /*BM=*/128, "
                             "/*Causal=*/false, /*Stagger=*/true, /*HeadDim=*/64, /*GroupSplit=*/1>"),
            std::string::npos)
      << k128.source;
  EXPECT_EQ(k128.smem_bytes, attention_bwd::wgmma_kv_async_smem_bytes(64, 128));  // no dQ writer barriers
  // 128-row tiles with dQ by TMA: the staging tile and the writer's barriers on a two-stage ring,
  // under the limit where three stages would not be.
  const auto t128 = *parse_attention_backward_config("wg:bm128:bn128:a2:t:l:w");
  const KernelSource kt = render_attention_backward({DType::bf16, 64, false}, t128, K::kv_atomic);
  EXPECT_NE(kt.source.find("attention_backward_wgmma_kv_ws</*T=*/kgen::bfloat16_t, /*D=*/64, /*BM=*/128, "
                           "/*Causal=*/false, /*Stagger=*/true, /*HeadDim=*/64, /*GroupSplit=*/1, /*TmaDQ=*/true>"),
            std::string::npos)
      << kt.source;
  EXPECT_EQ(attention_bwd::wgmma_kv_async_stages(128, true), 2);
  EXPECT_EQ(kt.smem_bytes, attention_bwd::wgmma_kv_async_smem_bytes(64, 128, true) + 4 * 8);
  EXPECT_LE(kt.smem_bytes, sm90a().max_smem_per_block);
  EXPECT_GT(kt.smem_bytes + 2 * 128 * 64 * 2 + 2 * 128 * 4 + 16, sm90a().max_smem_per_block);
  const KernelSource det = render_attention_backward({DType::bf16, 96, true}, w, K::kv);
  EXPECT_EQ(det.threads, 256);
  EXPECT_NE(det.source.find("attention_backward_wgmma_kv</*T=*/kgen::bfloat16_t"), std::string::npos) << det.source;
}

// Persistent grids (":p"): the warp-specialised kernel only, between w and x/g in the text; at
// most one block per SM over every key block (atomic mode); the deterministic mode keeps its
// block-synchronous kernel and grid; the default from 1k keys on the 128-column tile.
TEST(AttentionBackwardConfig, PersistentTextRulesGridRenderAndDefaults) {
  for (const char* text : {"wg:bm64:bn128:a2:t:l:w:p", "wg:bm64:bn128:a2:t:l:w:p:g8", "wg:bm128:bn128:a2:t:l:w:p"}) {
    const auto c = parse_attention_backward_config(text);
    ASSERT_TRUE(c) << text;
    EXPECT_TRUE(c->as<BackwardWgmmaConfig>()->persistent);
    EXPECT_EQ(to_string(*c), text);
    EXPECT_FALSE(check_attention_backward_config({DType::bf16, c->as<BackwardWgmmaConfig>()->query_rows == 128 ? 64 : 128, true}, *c, sm90a())) << text;
  }
  for (const char* bad : {"wg:bm64:bn128:a2:t:l:w:g8:p", "wg:bm64:bn128:a2:t:l:w:p:p", "wg:bm64:bn128:p"})
    EXPECT_FALSE(parse_attention_backward_config(bad)) << bad;
  const auto unspecialised = parse_attention_backward_config("wg:bm64:bn128:a2:t:l:p");
  ASSERT_TRUE(unspecialised);
  const auto why = check_attention_backward_config({DType::bf16, 128, false}, *unspecialised, sm90a());
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("(p)"), std::string::npos) << *why;

  using K = BackwardKernel;
  const auto p = *parse_attention_backward_config("wg:bm64:bn128:a2:t:l:w:p");
  const AttentionShape s{2, 16, 16, 4096, 4096};  // 32 key blocks × 16 heads × 2
  EXPECT_EQ(attention_backward_kernels(p, false), (std::vector<K>{K::preprocess, K::kv_atomic, K::dq_convert}));
  for (auto [sm_count, x] : {std::pair{132, 132u}, {2000, 1024u}, {0, 1u}}) {
    const LaunchGrid g = attention_backward_grid(p, K::kv_atomic, s, 128, sm_count);
    EXPECT_EQ(g.x, x) << sm_count;
    EXPECT_EQ(g.y, 1u);
    EXPECT_EQ(g.z, 1u);
  }
  EXPECT_EQ(attention_backward_grid(p, K::kv_atomic, {1, 1, 1, 100, 100}, 128, 132).x, 1u);
  const LaunchGrid det = attention_backward_grid(p, K::kv, s, 128, 132);  // deterministic: one block per key block
  EXPECT_EQ(det.x, 32u);
  EXPECT_EQ(det.y, 16u);
  EXPECT_EQ(det.z, 2u);
  const auto pg = *parse_attention_backward_config("wg:bm64:bn128:a2:t:l:w:p:g8");
  EXPECT_EQ(attention_backward_grid(pg, K::kv_atomic, {1, 64, 8, 1024, 1024}, 128, 132).x, 132u);  // 8 · 8 · 8 items
  EXPECT_EQ(attention_backward_grid(pg, K::kv_atomic, {1, 64, 8, 1024, 256}, 128, 132).x, 128u);   // 2 · 8 · 8

  const KernelSource k = render_attention_backward({DType::bf16, 96, true}, p, K::kv_atomic);
  EXPECT_EQ(k.threads, 384);
  EXPECT_NE(k.source.find("attention_backward_wgmma_kv_ws_persistent</*T=*/kgen::bfloat16_t, /*D=*/128, /*BM=*/64, "
                          "/*Causal=*/true, /*Stagger=*/true, /*HeadDim=*/96, /*GroupSplit=*/1>"),
            std::string::npos)
      << k.source;
  EXPECT_EQ(k.smem_bytes, attention_bwd::wgmma_kv_async_smem_bytes(128, 64, true) + 4 * 8);
  EXPECT_NE(render_attention_backward({DType::bf16, 96, true}, p, K::kv).source.find("attention_backward_wgmma_kv</*T=*/"),
            std::string::npos);
  // Distinct kernels, distinct names: the one-block-per-key-block kernel keeps its entry.
  const auto w = *parse_attention_backward_config("wg:bm64:bn128:a2:t:l:w");
  EXPECT_EQ(render_attention_backward({DType::bf16, 96, true}, w, K::kv_atomic).source.find("_ws_persistent"),
            std::string::npos);

  auto texts = [](const std::vector<AttentionBackwardConfig>& space) {
    std::vector<std::string> out;
    for (const auto& c : space) out.push_back(to_string(c));
    return out;
  };
  const auto space = texts(attention_backward_config_space({DType::bf16, 128, true}, sm90a()));
  EXPECT_EQ(std::count(space.begin(), space.end(), "wg:bm64:bn128:a2:t:l:w:p"), 1);
  EXPECT_EQ(std::count(space.begin(), space.end(), "wg:bm64:bn128:a1:t:l:w:p"), 0);
  const auto grouped = texts(attention_backward_config_space({DType::bf16, 128, true}, sm90a(), 8));
  EXPECT_EQ(std::count(grouped.begin(), grouped.end(), "wg:bm64:bn128:a2:t:l:w:p:g8"), 1);

  // Defaults: the 128-column tile from 1k keys without group splits; short rows, the 64-column
  // tile, group splits and the a1 forms keep one block per key block.
  const auto def = [](int d, bool causal, AttentionShape shape) {
    return to_string(attention_backward_default_config({DType::bf16, d, causal}, shape, sm90a(), 132));
  };
  for (bool causal : {false, true}) {
    EXPECT_EQ(def(128, causal, {16, 16, 16, 1024, 1024}), "wg:bm64:bn128:a2:t:l:w:p") << causal;
    EXPECT_EQ(def(128, causal, {1, 16, 16, 16384, 16384}), "wg:bm64:bn128:a2:t:l:w:p") << causal;
    EXPECT_EQ(def(96, causal, {8, 16, 16, 4096, 4096}), "wg:bm64:bn128:a2:t:l:w:p") << causal;
    EXPECT_EQ(def(128, causal, {64, 16, 16, 512, 512}).find(":p"), std::string::npos) << causal;
    EXPECT_EQ(def(64, causal, {8, 16, 16, 4096, 4096}).find(":p"), std::string::npos) << causal;
  }
  EXPECT_EQ(def(112, true, {8, 16, 16, 4096, 4096}), "wg:bm64:bn128:a1:t:l:w");
  EXPECT_EQ(def(128, true, {1, 64, 8, 8192, 8192}).find(":p"), std::string::npos);  // a group split
  EXPECT_EQ(def(128, false, {1, 64, 8, 4096, 4096}), "wg:bm64:bn128:a2:t:l:w:p");
}

// Group splits (":g2"): decoupled kernels only; the atomic mode adds a dK/dV
// conversion and doubles the key-major grid's y; the general entry with GroupSplit.
TEST(AttentionBackwardConfig, GroupSplitsTextRulesGridAndRender) {
  for (const char* text : {"wg:bm64:bn128:a2:t:l:g2", "wg:bm64:bn128:a1:g2", "wg:bm128:bn128:a2:l:g2"}) {
    auto c = parse_attention_backward_config(text);
    ASSERT_TRUE(c) << text;
    EXPECT_EQ(c->as<BackwardWgmmaConfig>()->group_splits, 2);
    EXPECT_EQ(to_string(*c), text);
    EXPECT_FALSE(check_attention_backward_config({DType::bf16, c->as<BackwardWgmmaConfig>()->query_rows == 128 ? 64 : 128, true}, *c, sm90a())) << text;
  }
  for (const char* text : {"wg:bm64:bn128:a2:t:l:w:g4", "wg:bm64:bn128:a1:t:l:g8", "wg:bm128:bn128:a2:l:w:g4"}) {
    auto c = parse_attention_backward_config(text);
    ASSERT_TRUE(c) << text;
    EXPECT_EQ(c->as<BackwardWgmmaConfig>()->group_splits, text[std::string(text).size() - 1] - '0');
    EXPECT_EQ(to_string(*c), text);
    EXPECT_FALSE(check_attention_backward_config({DType::bf16, c->as<BackwardWgmmaConfig>()->query_rows == 128 ? 64 : 128, true}, *c, sm90a())) << text;
  }
  for (const char* bad : {"wg:bm64:bn128:g2", "wg:bm64:bn128:a2:g2:l", "wg:bm64:bn128:a2:g2:g2", "wg:bm64:bn128:a2:g1"})
    EXPECT_FALSE(parse_attention_backward_config(bad)) << bad;
  for (const char* text : {"wg:bm64:bn128:a2:g3", "wg:bm64:bn128:a2:g6", "wg:bm64:bn128:a2:g16"}) {
    auto why = check_attention_backward_config({DType::bf16, 128, true}, *parse_attention_backward_config(text), sm90a());
    ASSERT_TRUE(why) << text;
    EXPECT_NE(why->find("g2"), std::string::npos) << *why;
  }
  // The tuner's space for grouped heads: the space, plus its ":w" forms split where the split
  // divides the group.
  auto texts = [](const std::vector<AttentionBackwardConfig>& space) {
    std::vector<std::string> out;
    for (const auto& c : space) out.push_back(to_string(c));
    return out;
  };
  const AttentionBackwardSpec s128{DType::bf16, 128, true};
  const auto base = texts(attention_backward_config_space(s128, sm90a()));
  const auto g8 = texts(attention_backward_config_space(s128, sm90a(), 8));
  const auto g4 = texts(attention_backward_config_space(s128, sm90a(), 4));
  const auto g6 = texts(attention_backward_config_space(s128, sm90a(), 6));
  const auto count = [](const std::vector<std::string>& v, const char* text) { return std::count(v.begin(), v.end(), text); };
  EXPECT_EQ(std::vector<std::string>(g8.begin(), g8.begin() + base.size()), base);
  for (const char* text : {"wg:bm64:bn128:a2:t:l:w:g2", "wg:bm64:bn128:a1:t:l:w:g4", "wg:bm64:bn128:a2:t:l:w:g8"})
    EXPECT_EQ(count(g8, text), 1) << text;
  EXPECT_EQ(count(g4, "wg:bm64:bn128:a2:t:l:w:g4"), 1);
  EXPECT_EQ(count(g4, "wg:bm64:bn128:a2:t:l:w:g8"), 0);
  EXPECT_EQ(count(g6, "wg:bm64:bn128:a2:t:l:w:g2"), 1);
  EXPECT_EQ(count(g6, "wg:bm64:bn128:a2:t:l:w:g4"), 0);
  EXPECT_EQ(count(g8, "wg:bm64:bn128:a2:t:l:g2"), 0);  // only the producer forms
  EXPECT_EQ(texts(attention_backward_config_space(s128, sm90a(), 1)), base);
  EXPECT_EQ(count(texts(attention_backward_config_space({DType::bf16, 64, true}, sm90a(), 8)), "wg:bm128:bn128:a2:l:w:g4"), 1);
  const auto g = *parse_attention_backward_config("wg:bm64:bn128:a2:t:l:g2");
  using K = BackwardKernel;
  EXPECT_EQ(attention_backward_kernels(g, false), (std::vector<K>{K::preprocess, K::kv_atomic, K::dq_convert, K::dkv_convert}));
  EXPECT_EQ(attention_backward_kernels(g, true), (std::vector<K>{K::preprocess, K::kv, K::dq}));
  const AttentionShape s{2, 64, 8, 4096, 1000};
  const LaunchGrid kv = attention_backward_grid(g, K::kv_atomic, s, 128, 132);
  EXPECT_EQ(kv.x, 8u);
  EXPECT_EQ(kv.y, 16u);
  EXPECT_EQ(kv.z, 2u);
  EXPECT_EQ(attention_backward_grid(g, K::kv, s, 128, 132).y, 8u);  // deterministic: unsplit
  const LaunchGrid conv = attention_backward_grid(g, K::dkv_convert, s, 128, 132);
  EXPECT_EQ(conv.x, (1000u + attention_bwd::row_block_rows(4, 128) - 1) / attention_bwd::row_block_rows(4, 128));
  EXPECT_EQ(conv.y, 8u);
  const KernelSource k = render_attention_backward({DType::bf16, 128, true}, g, K::kv_atomic);
  EXPECT_NE(k.source.find("attention_backward_wgmma_kv_async_maps</*T=*/kgen::bfloat16_t, /*D=*/128, /*BM=*/64, "
                          "/*Causal=*/true, /*Stagger=*/true, /*TmaDQ=*/true, /*TmaLoads=*/true, "
                          "/*HeadDim=*/128, /*GroupSplit=*/2>"),
            std::string::npos)
      << k.source;
  const KernelSource convert = render_attention_backward({DType::f16, 80, false}, g, K::dkv_convert);
  EXPECT_EQ(convert.variant, "attention_bwd.fp16.dkv_convert");
  EXPECT_NE(convert.source.find("attention_backward_dkv_convert</*T=*/kgen::half_t"), std::string::npos) << convert.source;
}

// Views without tensor maps (a zero stride in q or d_o): the cp.async form of a `:l` config,
// except at d = 112 with a mask, where the decoupled forms spill without TMA loads and the
// block-synchronous kernel serves the call.
TEST(AttentionBackwardConfig, ViewsWithoutTensorMapsKeepTheKernelOrGoBlockSynchronous) {
  const AttentionShape big{8, 16, 16, 4096, 4096};
  for (int d : {40, 64, 96, 104, 112, 128})
    for (bool causal : {false, true}) {
      const AttentionBackwardSpec spec{DType::bf16, d, causal};
      const auto chosen = attention_backward_default_config(spec, big, sm90a(), 132);
      // Every default here loads by TMA.
      ASSERT_TRUE(chosen.as<BackwardWgmmaConfig>()->tma_loads)
          << d << " " << causal << " " << to_string(chosen);
      const auto without = attention_backward_config_without_tma_loads(spec, chosen);
      EXPECT_FALSE(without.as<BackwardWgmmaConfig>()->tma_loads);
      EXPECT_FALSE(check_attention_backward_config(spec, without, sm90a())) << to_string(without);
      if (d == 112 && causal) {
        EXPECT_EQ(to_string(without), "wg:bm64:bn128");
      } else {
        auto expected = chosen;
        expected.as<BackwardWgmmaConfig>()->tma_loads = false;
        expected.as<BackwardWgmmaConfig>()->warp_specialised = false, expected.as<BackwardWgmmaConfig>()->persistent = false;
        BackwardWgmmaConfig& e = *expected.as<BackwardWgmmaConfig>();
        if (e.query_rows == 128 && e.tma_dq) e.tma_dq = false, e.async_wgs = 2;  // :t: only with :w
        EXPECT_EQ(to_string(without), to_string(expected)) << d << " " << causal;
      }
    }
  // 128-row tiles at d = 49-56 with a mask take the 64-row cp.async form.
  for (int d : {56, 64, 48})
    EXPECT_EQ(to_string(attention_backward_config_without_tma_loads({DType::bf16, d, true},
                                                                   attention_backward_default_config({DType::bf16, d, true}, big, sm90a(), 132))),
              d == 56 ? "wg:bm64:bn128:a2" : "wg:bm128:bn128:a2")
        << d;
  // A config without TMA loads is its own answer.
  const auto t = *parse_attention_backward_config("wg:bm64:bn128:a1:t");
  EXPECT_EQ(to_string(attention_backward_config_without_tma_loads({DType::f16, 112, true}, t)), "wg:bm64:bn128:a1:t");
}

// The row-wise helper kernels: dq_convert takes one lane per 4 columns, a power of 2 up to 32,
// and 32 / that rows per warp; preprocess one lane per 8 columns and kPreprocessRows rows per
// lane. Their grids cover n_q rows with blocks of that many.
TEST(AttentionBackwardRender, RowKernelsTakeOneLanePerFourColumns) {
  const std::pair<int, int> lanes[] = {{1, 1}, {4, 1}, {8, 2}, {33, 16}, {40, 16}, {64, 16}, {80, 32}, {128, 32}, {256, 32}};
  for (auto [d, expected] : lanes) EXPECT_EQ(attention_bwd::row_lanes(d), expected) << d;
  EXPECT_EQ(attention_bwd::row_block_rows(4, 64), 8);
  EXPECT_EQ(attention_bwd::row_block_rows(4, 256), 4);
  EXPECT_EQ(attention_bwd::row_block_rows(4, 8), 64);
  const std::pair<int, int> pre_lanes[] = {{1, 1}, {8, 1}, {9, 2}, {40, 8}, {64, 8}, {80, 16}, {128, 16}, {256, 32}, {512, 32}};
  for (auto [d, expected] : pre_lanes) EXPECT_EQ(attention_bwd::preprocess_lanes(d), expected) << d;
  static_assert(attention_bwd::kPreprocessRows == 4);
  EXPECT_EQ(attention_bwd::preprocess_block_rows(4, 64), 64);
  EXPECT_EQ(attention_bwd::preprocess_block_rows(4, 128), 32);
  EXPECT_EQ(attention_bwd::preprocess_block_rows(4, 256), 16);
  const AttentionBackwardConfig c = BackwardWgmmaConfig{};
  const AttentionShape shape{2, 8, 4, 1000, 1337};
  for (BackwardKernel k : {BackwardKernel::preprocess, BackwardKernel::dq_convert}) {
    const LaunchGrid g = attention_backward_grid(c, k, shape, 64, 132);
    const bool pre = k == BackwardKernel::preprocess;
    EXPECT_EQ(g.x, pre ? 16u : 125u);  // ceil(1000 / 64), ceil(1000 / 8)
    EXPECT_EQ(g.y, 8u);
    EXPECT_EQ(g.z, 2u);
    EXPECT_EQ(attention_backward_grid(c, k, shape, 128, 132).x, pre ? 32u : 250u);
  }
  EXPECT_EQ(attention_double_backward_grid(c, DoubleBackwardKernel::preprocess, shape, 132, false, 40).x, 16u);
}

TEST(AttentionBackwardConfig, ColumnShareTextRulesAndRender) {
  auto c = parse_attention_backward_config("wg:bm64:bn64:c2");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->as<BackwardWgmmaConfig>()->column_splits, 2);
  EXPECT_EQ(c->as<BackwardWgmmaConfig>()->warpgroups(), 2);
  EXPECT_EQ(to_string(*c), "wg:bm64:bn64:c2");
  for (const char* bad : {"wg:bm64:bn64:c1", "wg:bm64:bn64:cx", "wg:bm64:bn64:c2:s2"})
    EXPECT_FALSE(parse_attention_backward_config(bad)) << bad;
  // Only above 128 columns, only 64 keys, only sm_90a and 16-bit inputs.
  EXPECT_FALSE(check_attention_backward_config({DType::bf16, 256, true}, *c, sm90a()));
  EXPECT_FALSE(check_attention_backward_config({DType::f16, 136, false}, *c, sm90a()));
  auto why = check_attention_backward_config({DType::bf16, 128, false}, *c, sm90a());
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("above 128"), std::string::npos) << *why;
  EXPECT_TRUE(check_attention_backward_config({DType::bf16, 256, false}, BackwardWgmmaConfig{.keys = 128, .column_splits = 2}, sm90a()));
  EXPECT_TRUE(check_attention_backward_config({DType::bf16, 256, false}, *c, sm80()));
  EXPECT_TRUE(check_attention_backward_config({DType::f32, 256, false}, *c, sm90a()));
  why = check_attention_backward_config({DType::bf16, 256, false}, BackwardWgmmaConfig{}, sm90a());
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("c2"), std::string::npos) << *why;
  // The space holds it and the wide kernels (c3 up to 192 columns and the warp-specialised form of
  // the tile) beside fa2 above 128 columns, and the wg kernels below.
  for (int d : {192, 256}) {
    int c2 = 0, c3 = 0, wide_ws = 0, wg = 0;
    for (const auto& e : attention_backward_config_space({DType::bf16, d, true}, sm90a())) {
      const auto* w = e.as<BackwardWgmmaConfig>();
      c2 += w && w->column_splits == 2, c3 += w && w->column_splits == 3, wg += e.path() == BackwardPath::wgmma;
      wide_ws += w && w->warp_specialised && w->keys == (d <= 192 ? 96 : 48);
    }
    EXPECT_EQ(c2, 1) << d;
    EXPECT_EQ(c3, d <= 192 ? 1 : 0) << d;
    EXPECT_EQ(wide_ws, 1) << d;
    EXPECT_EQ(wg, c2 + c3 + wide_ws) << d;
  }
  // Rendered: 256 threads, one grid block per 64 keys, D the 192-column tile, HeadDim the
  // tensors'. The atomic mode there adds dQ by TMA (its own entry, with the maps); the
  // deterministic mode and the 256-column tile's atomic mode take plain params.
  for (bool deterministic : {false, true}) {
    const auto kernels = attention_backward_kernels(*c, deterministic);
    const KernelSource kv = render_attention_backward({DType::bf16, 160, true}, *c, kernels[1]);
    const std::string entry = deterministic ? "attention_backward_wgmma_kv_cols</*T=*/kgen::bfloat16_t, /*D=*/192, "
                                              "/*BM=*/64, /*Causal=*/true, /*AtomicDQ=*/false, /*HeadDim=*/160>"
                                            : "attention_backward_wgmma_kv_cols_tma</*T=*/kgen::bfloat16_t, /*D=*/192, "
                                              "/*BM=*/64, /*Causal=*/true, /*HeadDim=*/160>";
    EXPECT_NE(kv.source.find(entry), std::string::npos) << kv.source;
    EXPECT_EQ(kv.source.find("AttentionBackwardTmaParams") != std::string::npos, !deterministic) << kv.source;
    EXPECT_EQ(kv.threads, 256);
    EXPECT_EQ(kv.smem_bytes, attention_bwd::wgmma_cols_smem_bytes(192, 64, !deterministic));
    EXPECT_EQ(attention_backward_dq_by_tma({DType::bf16, 160, true}, *c), true);
    EXPECT_EQ(attention_backward_grid(*c, kernels[1], {2, 8, 4, 1000, 1337}, 160, 132).x, 21u);
  }
  // The 256-column tile's atomic mode adds dQ by TMA too, its boxes in the finished stage's Q
  // and dO tiles: the same shared memory as without.
  const KernelSource k256 = render_attention_backward({DType::bf16, 256, true}, *c, BackwardKernel::kv_atomic);
  EXPECT_NE(k256.source.find("attention_backward_wgmma_kv_cols_tma</*T=*/kgen::bfloat16_t, /*D=*/256, "
                             "/*BM=*/64, /*Causal=*/true>"),
            std::string::npos)
      << k256.source;
  EXPECT_TRUE(attention_backward_dq_by_tma({DType::bf16, 256, true}, *c));
  EXPECT_EQ(k256.smem_bytes, attention_bwd::wgmma_cols_smem_bytes(256, 64));
  EXPECT_EQ(attention_bwd::wgmma_cols_smem_bytes(256, 64, true), attention_bwd::wgmma_cols_smem_bytes(256, 64));
  const KernelSource k256d = render_attention_backward({DType::bf16, 256, true}, *c, BackwardKernel::kv);
  EXPECT_NE(k256d.source.find("/*AtomicDQ=*/false>"), std::string::npos) << k256d.source;
  // Below 256 columns on that tile, dQ by red_add2.
  const KernelSource k232 = render_attention_backward({DType::f16, 232, false}, *c, BackwardKernel::kv_atomic);
  EXPECT_NE(k232.source.find("attention_backward_wgmma_kv_cols</*T=*/kgen::half_t, /*D=*/256, "), std::string::npos)
      << k232.source;
  EXPECT_NE(k232.source.find("/*AtomicDQ=*/true, /*HeadDim=*/232>"), std::string::npos) << k232.source;
  EXPECT_FALSE(attention_backward_dq_by_tma({DType::f16, 232, false}, *c));
  EXPECT_EQ(attention_bwd::wgmma_cols_smem_bytes(256, 64), 215040);  // within sm_90a's 227 KiB
  EXPECT_EQ(attention_bwd::wgmma_cols_smem_bytes(192, 64, true), 215040);
}

TEST(AttentionBackwardConfig, WideHeadDimTextRulesAndRender) {
  auto c = parse_attention_backward_config("wg:bm64:bn96:c3");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->as<BackwardWgmmaConfig>()->warpgroups(), 3);
  EXPECT_EQ(to_string(*c), "wg:bm64:bn96:c3");
  // Head dims 136-192 (the 192-column tile), 96 keys, 64-row query tiles, sm_90a, 16-bit inputs.
  for (int d : {136, 160, 184, 192}) EXPECT_FALSE(check_attention_backward_config({DType::bf16, d, true}, *c, sm90a())) << d;
  for (int d : {128, 200, 256}) {
    auto why = check_attention_backward_config({DType::bf16, d, false}, *c, sm90a());
    ASSERT_TRUE(why) << d;
    EXPECT_NE(why->find("136-192"), std::string::npos) << *why;
  }
  for (const char* bad : {"wg:bm64:bn64:c3", "wg:bm64:bn128:c3"}) {
    auto why = check_attention_backward_config({DType::bf16, 192, false}, *parse_attention_backward_config(bad), sm90a());
    ASSERT_TRUE(why) << bad;
    EXPECT_NE(why->find("c3"), std::string::npos) << *why;
  }
  EXPECT_TRUE(check_attention_backward_config({DType::bf16, 192, false}, *parse_attention_backward_config("wg:bm128:bn96:c3"), sm90a()));
  EXPECT_TRUE(check_attention_backward_config({DType::bf16, 192, false}, *c, sm80()));
  EXPECT_TRUE(check_attention_backward_config({DType::f32, 192, false}, *c, sm90a()));
  auto variant = check_attention_backward_config({DType::bf16, 192, false, "softcap(30)"}, *c, sm90a());
  ASSERT_TRUE(variant);
  // Rendered: 384 threads, one grid block per 96 keys, its shared memory; the atomic mode adds dQ
  // by TMA (the maps), the deterministic mode computes none.
  for (bool deterministic : {false, true}) {
    const auto kernels = attention_backward_kernels(*c, deterministic);
    const KernelSource kv = render_attention_backward({DType::bf16, 160, true}, *c, kernels[1]);
    const std::string entry = std::string(deterministic ? "attention_backward_wgmma_kv_wide<" : "attention_backward_wgmma_kv_wide_tma<") +
                              "/*T=*/kgen::bfloat16_t, /*D=*/192, /*BM=*/64, /*Causal=*/true, /*HeadDim=*/160, /*HeadDimV=*/160>";
    EXPECT_NE(kv.source.find(entry), std::string::npos) << kv.source;
    EXPECT_EQ(kv.source.find("AttentionBackwardTmaParams") != std::string::npos, !deterministic) << kv.source;
    EXPECT_EQ(kv.threads, 384);
    EXPECT_EQ(kv.smem_bytes, attention_bwd::kWideSmemBytes);
    EXPECT_EQ(attention_backward_grid(*c, kernels[1], {2, 8, 4, 1000, 1337}, 160, 132).x, 14u);  // ceil(1337 / 96)
  }
  EXPECT_TRUE(attention_backward_dq_by_tma({DType::bf16, 160, true}, *c));
}

TEST(AttentionBackwardConfig, WideWarpSpecialisedTextRulesAndRender) {
  auto c = parse_attention_backward_config("wg:bm64:bn96:a1:t:l:w");
  ASSERT_TRUE(c);
  EXPECT_EQ(to_string(*c), "wg:bm64:bn96:a1:t:l:w");
  // Head dims 136-192 (the 192-column tile), any v up to q's, 16-bit inputs, sm_90a.
  for (int d : {136, 160, 184, 192}) EXPECT_FALSE(check_attention_backward_config({DType::bf16, d, true}, *c, sm90a())) << d;
  for (int d : {128, 200, 256}) {
    auto why = check_attention_backward_config({DType::bf16, d, false}, *c, sm90a());
    ASSERT_TRUE(why) << d;
    EXPECT_NE(why->find(d == 128 ? "136-256" : "bn"), std::string::npos) << *why;
  }
  // The other block shapes and flags are refused naming the field or the one form.
  for (auto [bad, field] : {std::pair{"wg:bm64:bn128:a2:t:l:w", "bn"}, {"wg:bm128:bn96:a1:t:l:w", "bm"},
                            {"wg:bm64:bn96:a2:t:l:w", "a1:t:l:w"}, {"wg:bm64:bn96:a1:t:l:w:p", "a1:t:l:w"}}) {
    auto why = check_attention_backward_config({DType::bf16, 192, false}, *parse_attention_backward_config(bad), sm90a());
    ASSERT_TRUE(why) << bad;
    EXPECT_NE(why->find(field), std::string::npos) << bad << ": " << *why;
  }
  EXPECT_TRUE(check_attention_backward_config({DType::bf16, 192, false}, *c, sm80()));
  EXPECT_TRUE(check_attention_backward_config({DType::f32, 192, false}, *c, sm90a()));
  auto variant = check_attention_backward_config({DType::bf16, 192, false, "softcap(30)"}, *c, sm90a());
  ASSERT_TRUE(variant);
  EXPECT_NE(variant->find("warp-specialised"), std::string::npos) << *variant;
  // Rendered: the atomic mode on its own entry with the maps (384 threads, its shared memory for
  // v's head dim), the deterministic mode on the wide kernel without dQ; one block per 96 keys.
  for (int dv : {0, 128}) {
    AttentionBackwardSpec spec{DType::bf16, 160, true};
    spec.head_dim_v = dv;
    const KernelSource kv = render_attention_backward(spec, *c, BackwardKernel::kv_atomic);
    const std::string args = dv ? "/*HeadDim=*/160, /*HeadDimV=*/128>" : "/*HeadDim=*/160, /*HeadDimV=*/160>";
    EXPECT_NE(kv.source.find("attention_backward_wgmma_kv_wide_ws</*T=*/kgen::bfloat16_t, /*D=*/192, /*BM=*/64, "
                             "/*Causal=*/true, " + args),
              std::string::npos)
        << kv.source;
    EXPECT_NE(kv.source.find("AttentionBackwardTmaParams"), std::string::npos);
    EXPECT_EQ(kv.threads, 384);
    EXPECT_EQ(kv.smem_bytes, attention_bwd::wide_ws_smem_bytes(dv ? dv : 160));
    const KernelSource det = render_attention_backward(spec, *c, BackwardKernel::kv);
    EXPECT_NE(det.source.find("attention_backward_wgmma_kv_wide<"), std::string::npos) << det.source;
    EXPECT_EQ(det.smem_bytes, attention_bwd::kWideSmemBytes);
  }
  EXPECT_EQ(attention_backward_grid(*c, BackwardKernel::kv_atomic, {2, 8, 4, 1000, 1337}, 160, 132).x, 14u);
  EXPECT_TRUE(attention_backward_dq_by_tma({DType::bf16, 160, true}, *c));
  // Without tensor maps (a zero-stride view) its cp.async form is the wide kernel.
  EXPECT_EQ(to_string(attention_backward_config_without_tma_loads({DType::bf16, 160, true}, *c)), "wg:bm64:bn96:c3");
  // Within sm_90a's 227 KiB: dO on one stage and one dSᵀ tile at v's 192 columns, two of each up to 128.
  EXPECT_EQ(attention_bwd::wide_ws_smem_bytes(192), 223312);
  EXPECT_EQ(attention_bwd::wide_ws_smem_bytes(128), 231520);
}

TEST(AttentionBackwardConfig, WideWarpSpecialisedAtTwoHundredFiftySixColumns) {
  auto c = parse_attention_backward_config("wg:bm64:bn48:a1:t:l:w");
  ASSERT_TRUE(c);
  EXPECT_EQ(to_string(*c), "wg:bm64:bn48:a1:t:l:w");
  // Head dims 200-256 (the 256-column tile), any v up to q's, 16-bit inputs, sm_90a.
  for (int d : {200, 232, 256}) EXPECT_FALSE(check_attention_backward_config({DType::bf16, d, true}, *c, sm90a())) << d;
  for (int d : {128, 160, 192}) {
    auto why = check_attention_backward_config({DType::bf16, d, false}, *c, sm90a());
    ASSERT_TRUE(why) << d;
    EXPECT_NE(why->find(d == 128 ? "136-256" : "bn"), std::string::npos) << d << ": " << *why;
  }
  auto why = check_attention_backward_config({DType::bf16, 256, false}, *parse_attention_backward_config("wg:bm64:bn48:a2:t:l:w"),
                                             sm90a());
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("wg:bm64:bn48:a1:t:l:w"), std::string::npos) << *why;
  EXPECT_TRUE(check_attention_backward_config({DType::bf16, 256, false}, *c, sm80()));
  EXPECT_TRUE(check_attention_backward_config({DType::f32, 256, false}, *c, sm90a()));
  // Rendered: the atomic mode on the warp-specialised kernel's entry with D = 256 (384 threads,
  // 227,408 bytes of shared memory at v = 256); its deterministic mode the column-share kernel's
  // without dQ; one block per 48 keys.
  for (int dv : {0, 128}) {
    AttentionBackwardSpec spec{DType::f16, 232, false};
    spec.head_dim_v = dv;
    const KernelSource kv = render_attention_backward(spec, *c, BackwardKernel::kv_atomic);
    const std::string args = dv ? "/*HeadDim=*/232, /*HeadDimV=*/128>" : "/*HeadDim=*/232, /*HeadDimV=*/232>";
    EXPECT_NE(kv.source.find("attention_backward_wgmma_kv_wide_ws</*T=*/kgen::half_t, /*D=*/256, /*BM=*/64, "
                             "/*Causal=*/false, " + args),
              std::string::npos)
        << kv.source;
    EXPECT_EQ(kv.threads, 384);
    EXPECT_EQ(kv.smem_bytes, attention_bwd::wide_ws_smem_bytes(dv ? dv : 232, 256));
    EXPECT_LE(kv.smem_bytes, 232448);
    const KernelSource det = render_attention_backward(spec, *c, BackwardKernel::kv);
    EXPECT_NE(det.source.find("attention_backward_wgmma_kv_cols</*T=*/kgen::half_t, /*D=*/256, "), std::string::npos)
        << det.source;
    EXPECT_NE(det.source.find("/*AtomicDQ=*/false"), std::string::npos) << det.source;
  }
  EXPECT_EQ(attention_bwd::wide_ws_smem_bytes(256, 256), 227408);
  EXPECT_EQ(attention_backward_grid(*c, BackwardKernel::kv_atomic, {2, 8, 4, 1000, 1337}, 256, 132).x, 28u);
  EXPECT_TRUE(attention_backward_dq_by_tma({DType::bf16, 256, true}, *c));
  EXPECT_EQ(to_string(attention_backward_config_without_tma_loads({DType::bf16, 256, true}, *c)), "wg:bm64:bn64:c2");
}

TEST(AttentionBackwardRender, AboveOneHundredTwentyEightTheKeyMajorKernelSplitsItsColumns) {
  // d = 256: two blocks per key block, each with 128 dK/dV columns; d = 200 on a 224 tile.
  const AttentionBackwardConfig c = BackwardFa2Config{.query_rows = 32, .keys = 64, .warps = 4};
  const auto k256 = render_attention_backward({DType::bf16, 256, true}, c, BackwardKernel::kv_atomic);
  EXPECT_NE(k256.source.find("/*Splits=*/2"), std::string::npos) << k256.source;
  EXPECT_EQ(attention_backward_grid(c, BackwardKernel::kv_atomic, {2, 8, 4, 1000, 1000}, 256, 132).x, 2u * 16u);
  EXPECT_EQ(attention_backward_grid(c, BackwardKernel::kv_atomic, {2, 8, 4, 1000, 1000}, 128, 132).x, 16u);
  const auto k200 = render_attention_backward({DType::bf16, 200, false}, c, BackwardKernel::kv);
  EXPECT_NE(k200.source.find("/*D=*/224"), std::string::npos) << k200.source;
  EXPECT_NE(k200.source.find("/*HeadDim=*/200"), std::string::npos) << k200.source;
  const auto k128 = render_attention_backward({DType::bf16, 128, false}, c, BackwardKernel::kv);
  EXPECT_EQ(k128.source.find("Splits"), std::string::npos) << k128.source;
}

TEST(AttentionBackwardRender, WgmmaKernelsUseTheWarpgroupTemplate) {
  const AttentionBackwardConfig wg = BackwardWgmmaConfig{};
  for (bool deterministic : {false, true}) {
    const auto kernels = attention_backward_kernels(wg, deterministic);
    ASSERT_EQ(kernels.size(), 3u);
    const KernelSource kv = render_attention_backward({DType::bf16, 128, true}, wg, kernels[1]);
    EXPECT_NE(kv.source.find("attention_backward_wgmma_kv</*T=*/kgen::bfloat16_t, /*D=*/128, /*BM=*/64, /*WGs=*/2, "
                             "/*Causal=*/true, /*AtomicDQ=*/" + std::string(deterministic ? "false" : "true") + ">"),
              std::string::npos)
        << kv.source;
    EXPECT_EQ(kv.threads, 256);
    EXPECT_EQ(kv.smem_bytes, attention_bwd::wgmma_kv_smem_bytes(128, 64, 2, !deterministic));
    EXPECT_EQ(attention_backward_grid(wg, kernels[1], {2, 8, 4, 1000, 1337}, 128, 132).x, 11u);
  }
}

}  // namespace
}  // namespace kgen

namespace kgen {
namespace {

TEST(AttentionDoubleBackwardConfig, SmallGridsTake32RowQueryTiles) {
  const Target sm80 = *parse_target("sm_80"), sm90a = *parse_target("sm_90a");
  for (int d : {64, 128}) {
    const AttentionBackwardSpec spec{DType::bf16, d, false};
    // b = h = 1, n = 2048: 32 tiles of 64 rows on 132 SMs.
    const auto small = attention_double_backward_default_config(spec, {1, 1, 1, 2048, 2048}, sm80, 132);
    ASSERT_TRUE(small.as<DoubleBackwardFa2Config>()) << to_string(small);
    EXPECT_EQ(small.as<DoubleBackwardFa2Config>()->rows, 32) << d;
    EXPECT_EQ(small.as<DoubleBackwardFa2Config>()->warps, 2) << d;
    EXPECT_FALSE(check_attention_double_backward_config(spec, small, sm80)) << to_string(small);
    const auto big = attention_double_backward_default_config(spec, {1, 16, 16, 8192, 8192}, sm80, 132);
    EXPECT_EQ(big.as<DoubleBackwardFa2Config>()->rows, 64) << d;
    // b = h = 1, n = 8192: 128 tiles of 64 rows keep them (more K/V reuse beats a fuller grid).
    EXPECT_EQ(attention_double_backward_default_config(spec, {1, 1, 1, 8192, 8192}, sm80, 132).as<DoubleBackwardFa2Config>()->rows, 64) << d;
    EXPECT_EQ(big, attention_double_backward_default_config(spec, sm80));
    // Hopper: the wgmma kernels at every shape, 64-wide score tiles at d = 64 and 32 at d = 128.
    for (const AttentionShape& shape : {AttentionShape{1, 1, 1, 2048, 2048}, AttentionShape{1, 16, 16, 8192, 8192}})
      EXPECT_EQ(to_string(attention_double_backward_default_config(spec, shape, sm90a, 132)),
                d == 64 ? "wg:bm64:bn64" : "wg:bm32:bn64");
  }
  // d = 32 runs the padded 64-column tile (measured faster); below 32, fa2.
  EXPECT_EQ(to_string(attention_double_backward_default_config({DType::bf16, 32, true}, sm90a)), "wg:bm64:bn64");
  EXPECT_EQ(attention_double_backward_default_config({DType::bf16, 24, true}, sm90a).path(), BackwardPath::fa2);
  EXPECT_EQ(to_string(attention_double_backward_default_config({DType::f16, 80, true}, sm90a)), "wg:bm32:bn64");
  // Above 128 columns: two warpgroups splitting the 256-column tile's columns.
  for (int d : {136, 160, 192, 256})
    EXPECT_EQ(to_string(attention_double_backward_default_config({DType::bf16, d, false}, sm90a)), "wg:bm32:bn64:c2") << d;
  EXPECT_EQ(attention_double_backward_default_config({DType::bf16, 256, false}, sm80).path(), BackwardPath::fa2);
  auto why = check_attention_double_backward_config({DType::bf16, 64, false}, DoubleBackwardFa2Config{.rows = 16, .tile = 32, .warps = 1}, sm90a);
  ASSERT_TRUE(why);
  EXPECT_EQ(*why, "fa2 bm must be 32, 64 or 128, got bm16");
}

}  // namespace
}  // namespace kgen

namespace kgen {
namespace {

TEST(AttentionDoubleBackwardConfig, StatsPassSplitsKeysOnlyForSmallGrids) {
  const AttentionBackwardConfig bm32 = DoubleBackwardFa2Config{.rows = 32, .tile = 16, .warps = 2};
  // b = h = 1, n = 8192: 256 blocks of 32 rows -> two key ranges each (512 blocks).
  EXPECT_EQ(attention_double_backward_stats_splits(bm32, {1, 1, 1, 8192, 8192}, 132), 2);
  EXPECT_EQ(attention_double_backward_grid(bm32, DoubleBackwardKernel::q_stats, {1, 1, 1, 8192, 8192}, 132, false, 128).x, 512u);
  // The same grid already fills about four blocks per SM of a 64-SM device: no split.
  EXPECT_EQ(attention_double_backward_stats_splits(bm32, {1, 1, 1, 8192, 8192}, 64), 1);
  // Few rows, long keys: up to four ranges; short keys: no split below two tiles per range.
  EXPECT_EQ(attention_double_backward_stats_splits(bm32, {1, 1, 1, 64, 8192}, 132), 4);
  // Deterministic calls: one range (no order-dependent atomic sums).
  EXPECT_EQ(attention_double_backward_stats_splits(bm32, {1, 1, 1, 64, 8192}, 132, true), 1);
  EXPECT_EQ(attention_double_backward_grid(bm32, DoubleBackwardKernel::q_stats, {1, 1, 1, 8192, 8192}, 132, true, 128).x, 256u);
  EXPECT_EQ(attention_double_backward_stats_splits(bm32, {1, 1, 1, 64, 64}, 132), 1);
  // Large grids and the general path: none.
  EXPECT_EQ(attention_double_backward_stats_splits(DoubleBackwardFa2Config{.rows = 64, .tile = 16, .warps = 4}, {1, 16, 16, 8192, 8192}, 132), 1);
  EXPECT_EQ(attention_double_backward_stats_splits(BackwardSimtConfig{.warps = 4, .max_head_dim = 128}, {1, 1, 1, 8192, 8192}, 132), 1);
}

// Packed batches on the warp-specialised kernels: the compact grid (packed_tile) of ⌊rows / tile⌋
// + sequences blocks per head, which holds every sequence's tiles whatever the lengths (sequence i
// owns ⌊cu[i] / tile⌋ + i onwards); the other kernels keep the grid over the longest sequence.
TEST(AttentionPackedGrid, CompactGridsCoverEverySequencesTiles) {
  // The tiles the grid must hold per head: the start of the slot past the last sequence.
  auto slots = [](const std::vector<int>& cu, int tile) {
    return cu.back() / tile + static_cast<int>(cu.size()) - 1;
  };
  const std::vector<std::vector<int>> batches = {
      {0, 128, 256}, {0, 1, 129, 130, 385}, {0, 0, 0, 5000}, {0, 4096}, {0, 127, 254, 381, 508, 635}};
  using K = BackwardKernel;
  const auto ws = *parse_attention_backward_config("wg:bm64:bn128:a2:t:l:w");
  const auto forward = *parse_attention_forward_config("ws:bm128:bn128:s2:pp1");
  for (const auto& cu : batches) {
    const int sequences = static_cast<int>(cu.size()) - 1;
    long long needed = 0;  // Σ ⌈n / 128⌉: the tiles with work
    for (int i = 0; i < sequences; ++i) needed += (cu[i + 1] - cu[i] + 127) / 128;
    const LaunchGrid f = attention_forward_packed_grid(forward, cu.back(), sequences, 16);
    const auto b = attention_backward_packed_grid(ws, K::kv_atomic, cu.back(), sequences, 4);
    ASSERT_TRUE(b);
    for (const LaunchGrid& g : {f, *b}) {
      EXPECT_EQ(g.x, static_cast<unsigned>(slots(cu, 128)));
      EXPECT_GE(g.x, needed);
      EXPECT_LE(g.x, needed + sequences);  // at most one idle block per sequence and head
      EXPECT_EQ(g.z, 1u);
    }
    EXPECT_EQ(f.y, 16u);
    EXPECT_EQ(b->y, 4u);
  }
  // No sequences: no blocks (the launch is skipped); one empty sequence: one block per head.
  EXPECT_EQ(attention_forward_packed_grid(forward, 100, 0, 8).x, 0u);
  EXPECT_EQ(attention_backward_packed_grid(ws, K::kv_atomic, 100, 0, 8)->x, 0u);
  EXPECT_EQ(attention_forward_packed_grid(forward, 0, 1, 8).x, 1u);
  // The kernels of the grid over the longest sequence.
  EXPECT_FALSE(attention_backward_packed_grid(ws, K::preprocess, 4096, 2, 4));
  EXPECT_FALSE(attention_backward_packed_grid(*parse_attention_backward_config("wg:bm64:bn128:a2:t:l:w:p"),
                                              K::kv_atomic, 4096, 2, 4));
  EXPECT_FALSE(attention_backward_packed_grid(*parse_attention_backward_config("fa2:bm64:bn128:w8"), K::kv_atomic,
                                              4096, 2, 4));
}

// A packed batch alone keeps the plain defaults' persistent forward grid (the producer's warp walks
// the compact grid's indices, at most one block per SM); beside a variant or sinks it runs one
// block per tile, and no packed batch splits keys.
TEST(AttentionPackedGrid, ForwardDefaultsKeepThePersistentGrid) {
  AttentionForwardSpec spec{DType::bf16, 128, true};
  spec.packed = true;
  for (int n : {512, 2048, 4096}) {
    const auto c = attention_forward_default_config(spec, {16, 16, 16, n, n}, sm90a(), 132);
    EXPECT_EQ(c.path, ForwardPath::ws) << n;
    EXPECT_TRUE(c.persistent) << to_string(c);
    EXPECT_FALSE(c.stream_k) << to_string(c);
    EXPECT_FALSE(check_attention_forward_config(spec, c, sm90a())) << to_string(c);
  }
  AttentionForwardSpec full = spec;
  full.causal = false;
  EXPECT_TRUE(attention_forward_default_config(full, {4, 16, 16, 16384, 16384}, sm90a(), 132).persistent);
  // Causal rows past 4k keys: one block per tile, as dense batches.
  EXPECT_FALSE(attention_forward_default_config(spec, {2, 16, 16, 16384, 16384}, sm90a(), 132).persistent);
  AttentionForwardSpec sinks = spec, window = spec;
  sinks.sinks = true;
  window.variant = "window(128,0)";
  const auto persist = *parse_attention_forward_config("ws:bm128:bn128:s2:pp1:persist");
  EXPECT_FALSE(check_attention_forward_config(spec, persist, sm90a()));
  EXPECT_TRUE(check_attention_forward_config(sinks, persist, sm90a()));
  EXPECT_TRUE(check_attention_forward_config(window, persist, sm90a()));
  EXPECT_FALSE(attention_forward_default_config(sinks, {16, 16, 16, 2048, 2048}, sm90a(), 132).persistent);
  EXPECT_TRUE(check_attention_forward_config(spec, *parse_attention_forward_config("ws:bm128:bn128:s2:pp1:split"),
                                             sm90a()));
  // The persistent grid: the compact grid's blocks ((⌊rows / 128⌋ + sequences) · heads), at most
  // one per SM, in x.
  EXPECT_EQ(attention_forward_packed_grid(persist, 4096, 2, 16, 132).x, 132u);
  EXPECT_EQ(attention_forward_packed_grid(persist, 300, 3, 2, 132).x, 10u);
  EXPECT_EQ(attention_forward_packed_grid(persist, 300, 3, 2, 132).y, 1u);
  EXPECT_EQ(attention_forward_packed_grid(persist, 100, 0, 8, 132).x, 0u);
  // Its blocks draw their tiles from a counter in the stream-K params' flags.
  EXPECT_NE(render_attention_forward(spec, persist).source.find("AttentionForwardStreamParams"), std::string::npos);
  EXPECT_EQ(render_attention_forward(spec, *parse_attention_forward_config("ws:bm128:bn128:s2:pp1"))
                .source.find("AttentionForwardStreamParams"),
            std::string::npos);
}

// Packed batches (and variants) under 1k keys on sm_90a: the warp-specialised kernel that the plain
// default takes from 1k keys, not sm_80's fa2 rule; grids too small to fill the machine keep theirs.
TEST(AttentionPackedGrid, RowsUnder1kKeysTakeTheWarpSpecialisedKernel) {
  AttentionBackwardSpec spec{DType::bf16, 128, true};
  spec.packed = true;
  for (int n : {256, 512, 1000}) {
    const auto c = attention_backward_default_config(spec, {32, 16, 16, n, n}, sm90a(), 132);
    const auto* wg = c.as<BackwardWgmmaConfig>();
    ASSERT_TRUE(wg) << to_string(c);
    EXPECT_TRUE(wg->warp_specialised && wg->tma_dq && !wg->persistent) << to_string(c);
    EXPECT_EQ(wg->query_rows, 64);
    EXPECT_TRUE(attention_backward_packed_grid(c, BackwardKernel::kv_atomic, 32LL * n, 32, 16)) << to_string(c);
  }
  EXPECT_FALSE(attention_backward_default_config(spec, {1, 1, 1, 128, 128}, sm90a(), 132).as<BackwardWgmmaConfig>());
}

}  // namespace
}  // namespace kgen
