// The attention_fwd spec, config space, validity rules, default heuristic and rendering.
#include <gtest/gtest.h>

#include <algorithm>

#include <fstream>
#include <sstream>

#include "generator/attention_forward.h"
#include "generator/embedded_templates.h"
#include "generator/registry.h"
#include "kgen_device/attention/forward_config.h"
#include "kgen_device/attention/forward_ws_config.h"
#include "test_targets.h"

namespace kgen {
namespace {

using test_targets::sm80;
using test_targets::sm90a;

TEST(AttentionForwardConfig, ParseRoundTripsEveryConfigInTheSpace) {
  for (DType t : {DType::f16, DType::bf16, DType::f32})
    for (int d : {32, 64, 80, 96, 128, 256})
      for (const auto& c : attention_forward_config_space({t, d, false}, sm90a())) {
        auto parsed = parse_attention_forward_config(to_string(c));
        ASSERT_TRUE(parsed) << to_string(c);
        EXPECT_EQ(*parsed, c) << to_string(c);
      }
}

TEST(AttentionForwardSpecText, RoundTripsAndRejectsMalformed) {
  for (AttentionForwardSpec s : {AttentionForwardSpec{DType::bf16, 128, true}, AttentionForwardSpec{DType::f32, 80, false}}) {
    auto p = parse_attention_forward_spec(to_string(s));
    ASSERT_TRUE(p) << to_string(s);
    EXPECT_EQ(*p, s);
  }
  for (const char* bad : {"", "attention_fwd", "attention_fwd.bf16.128.causal", "attention_fwd.bf8.d128.full",
                          "attention_fwd.bf16.d128.maybe", "attention_bwd.bf16.d128.full", "attention_fwd.bf16.dx.full"})
    EXPECT_FALSE(parse_attention_forward_spec(bad)) << bad;
}

TEST(AttentionForwardConfig, RejectsMalformedText) {
  for (const char* bad : {"", "fa2", "fa2:bm64:bn64", "fa2:bm64:bn64:s2", "fa3:bm64:bn64:w4:s2", "fa2:bm:bn64:w4:s2",
                          "fa2:bm64:bn64:w4:s2:x", "fa2:bm64x:bn64:w4:s2", "fa2:bm64:bn64:w:s2", "simt:bm4:bn32:s2"})
    EXPECT_FALSE(parse_attention_forward_config(bad)) << bad;
}

TEST(AttentionForwardConfig, SpaceIsValidAndNonEmptyForEveryServedSpec) {
  for (const Target& target : {sm80(), sm90a()})
    for (DType t : {DType::f16, DType::bf16, DType::f32})
      for (int d : {1, 7, 32, 33, 64, 80, 96, 128, 200, 256})
        for (bool causal : {false, true}) {
          AttentionForwardSpec spec{t, d, causal};
          auto space = attention_forward_config_space(spec, target);
          ASSERT_FALSE(space.empty()) << to_string(spec) << " " << target.arch;
          for (const auto& c : space) EXPECT_FALSE(check_attention_forward_config(spec, c, target)) << to_string(c);
        }
}

TEST(AttentionForwardConfig, TensorCorePathOnlyForSixteenBitTypesAndItsHeadDims) {
  auto has_fa2 = [](const AttentionForwardSpec& s) {
    for (const auto& c : attention_forward_config_space(s, *parse_target("sm_90a")))
      if (c.path == ForwardPath::fa2) return true;
    return false;
  };
  EXPECT_TRUE(has_fa2({DType::bf16, 128, false}));
  EXPECT_TRUE(has_fa2({DType::f16, 64, true}));
  EXPECT_FALSE(has_fa2({DType::f32, 128, false}));
  // Every multiple of 8 up to 256 has a tensor-core tile (padded past the head dim); others none.
  for (int d = 8; d <= 256; d += 8) EXPECT_TRUE(has_fa2({DType::bf16, d, false})) << d;
  EXPECT_FALSE(has_fa2({DType::bf16, 33, false}));
  EXPECT_FALSE(has_fa2({DType::bf16, 4, false}));
}

TEST(AttentionForwardRender, PaddedTilesNameTheTensorsHeadDim) {
  // d = 80: the fa2 tile is 96 columns wide and the wgmma tile 128; the exact head dim is passed
  // as HeadDim so the kernel zero-fills and never stores past it. Tile-sized head dims do not
  // pass it (their sources are those of before).
  const auto fa2 = render_attention_forward({DType::bf16, 80, false}, {.path = ForwardPath::fa2, .block_m = 128, .block_n = 32, .warps = 4});
  EXPECT_NE(fa2.source.find("/*D=*/96"), std::string::npos) << fa2.source;
  EXPECT_NE(fa2.source.find("/*HeadDim=*/80"), std::string::npos) << fa2.source;
  EXPECT_EQ(fa2.smem_bytes, attention_fwd::fa2_smem_bytes(96, 128, 32, 2));
  const auto wg = render_attention_forward({DType::bf16, 80, true}, {.path = ForwardPath::wgmma, .block_m = 128, .block_n = 128, .warps = 8});
  EXPECT_NE(wg.source.find("/*D=*/128"), std::string::npos) << wg.source;
  EXPECT_NE(wg.source.find("/*HeadDim=*/80"), std::string::npos) << wg.source;
  const auto exact = render_attention_forward({DType::bf16, 128, false}, {.path = ForwardPath::fa2, .block_m = 128, .warps = 4});
  EXPECT_EQ(exact.source.find("HeadDim"), std::string::npos) << exact.source;
}

TEST(AttentionForwardConfig, ValidityRulesNameTheReason) {
  AttentionForwardSpec spec{DType::bf16, 256, false};
  auto why = check_attention_forward_config(spec, {.path = ForwardPath::fa2, .block_m = 128, .block_n = 128, .warps = 8}, sm80());
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("register"), std::string::npos) << *why;
  auto smem = check_attention_forward_config({DType::f32, 256, false}, {.path = ForwardPath::simt, .block_m = 4, .stages = 1, .max_head_dim = 256},
                                             *parse_target("sm_86"));
  ASSERT_TRUE(smem);
  EXPECT_NE(smem->find("shared memory"), std::string::npos) << *smem;
  EXPECT_TRUE(check_attention_forward_spec({DType::bf16, 257, false}));
  EXPECT_TRUE(check_attention_forward_spec({DType::bf16, 0, false}));
  EXPECT_TRUE(check_attention_forward_config({DType::f32, 128, false}, {.path = ForwardPath::fa2, .warps = 4}, sm90a()));
}

TEST(AttentionForwardConfig, RegisterBudgetAdmitsD128With64KeyTilesOnFourWarps) {
  // FA2's own d = 128 tile: 32 rows per warp, 64-key tiles (the Q·Kᵀ k-loop stays rolled).
  for (DType t : {DType::f16, DType::bf16})
    for (const Target& target : {sm80(), sm90a()}) {
      EXPECT_FALSE(check_attention_forward_config({t, 128, true}, {.path = ForwardPath::fa2, .block_m = 128, .warps = 4}, target));
      EXPECT_TRUE(check_attention_forward_config({t, 128, true}, {.path = ForwardPath::fa2, .block_m = 128, .block_n = 128, .warps = 4}, target));
      EXPECT_TRUE(check_attention_forward_config({t, 96, true}, {.path = ForwardPath::fa2, .block_m = 128, .block_n = 128, .warps = 4}, target));
      EXPECT_TRUE(check_attention_forward_config({t, 256, true}, {.path = ForwardPath::fa2, .block_n = 128, .warps = 4}, target));
    }
}

TEST(AttentionForwardConfig, DefaultIsValidForEveryShape) {
  for (DType t : {DType::f16, DType::bf16, DType::f32})
    for (int d : {16, 32, 64, 100, 128, 256})
      for (AttentionShape shape : {AttentionShape{1, 1, 1, 1, 1}, AttentionShape{8, 16, 16, 4096, 4096},
                                   AttentionShape{1, 32, 8, 100000, 17}})
        for (const Target& target : {sm80(), sm90a(), *parse_target("sm_86")}) {
          AttentionForwardSpec spec{t, d, true};
          auto c = attention_forward_default_config(spec, shape, target, 132);
          EXPECT_FALSE(check_attention_forward_config(spec, c, target)) << to_string(spec) << " " << to_string(c);
        }
}

TEST(AttentionForwardConfig, DefaultUsesTensorCoresWhereTheyApply) {
  auto c = attention_forward_default_config({DType::bf16, 128, false}, {4, 16, 16, 4096, 4096}, sm80(), 108);
  EXPECT_EQ(c.path, ForwardPath::fa2);
  // A single small head cannot fill 108 SMs with 128-row tiles: the heuristic halves them.
  auto small = attention_forward_default_config({DType::bf16, 128, false}, {1, 1, 1, 256, 256}, sm80(), 108);
  EXPECT_EQ(small.block_m, 64);
}

TEST(AttentionForwardConfig, HopperDefaultIsTheWarpSpecialisedKernelForItsHeadDims) {
  for (int d : {64, 128})
    for (bool causal : {false, true}) {
      auto c = attention_forward_default_config({DType::bf16, d, causal}, {4, 16, 16, 4096, 4096}, sm90a(), 132);
      EXPECT_EQ(c.path, ForwardPath::ws) << d;
      // d = 64: three consumers (192 rows), persistent up to 2k keys without a mask; with one, one
      // block per query tile (in sections of heads).
      EXPECT_EQ(to_string(c), d == 64   ? "ws:bm192:bn128:s2:pp1"
                              : "ws:bm128:bn128:s2:pp1:persist");
      // Causal rows past 4k keys keep one block per query tile; from 8k keys (causal: past 4k)
      // d = 128 takes 176-key tiles, persistent without a mask.
      auto long_rows = attention_forward_default_config({DType::bf16, d, causal}, {1, 16, 16, 16384, 16384}, sm90a(), 132);
      EXPECT_EQ(long_rows.persistent, d == 128 && !causal) << d;
      EXPECT_EQ(long_rows.block_m, d == 64 ? 192 : 128) << d;
      EXPECT_EQ(long_rows.block_n, d == 64 ? 128 : 176) << d;
      auto rows_8k = attention_forward_default_config({DType::bf16, d, causal}, {2, 16, 16, 8192, 8192}, sm90a(), 132);
      EXPECT_EQ(rows_8k.block_n, d == 64 ? 128 : 176) << d;
    }
  // The 176-key tile serves the padded head dims of the 128-column tile as well, not split grids.
  EXPECT_EQ(to_string(attention_forward_default_config({DType::bf16, 96, true}, {1, 16, 16, 8192, 8192}, sm90a(), 132)),
            "ws:bm128:bn176:s2:pp1");
  EXPECT_EQ(to_string(attention_forward_default_config({DType::bf16, 128, false}, {1, 1, 1, 1, 16384}, sm90a(), 132)),
            "wg:bm64:bn128:s2:split");
  EXPECT_EQ(to_string(attention_forward_default_config({DType::bf16, 64, false}, {16, 16, 16, 1024, 1024}, sm90a(), 132)),
            "ws:bm192:bn128:s2:pp1:persist:sk");
  EXPECT_EQ(to_string(attention_forward_default_config({DType::bf16, 48, true}, {1, 16, 16, 8192, 8192}, sm90a(), 132)),
            "ws:bm192:bn128:s2:pp1");
  // Up to 128 columns from d = 40 the grid is persistent (causal: up to 4k keys), and on the
  // 64-column tile it has three consumers from 1k query rows (causal: above 2k keys), their
  // persistent grid without a mask in stream-K. Causal, up
  // to 1k keys, the one-warpgroup wgmma kernel (every head dim on the 64-column tile). Other head dims take the padded tile (40: 64 columns, 80 and
  // 96: 128, 136: 192 with 112-key tiles, one block per query tile, below); 32 joins from 4k keys or with three consumers and keeps the fa2
  // kernel otherwise, as do smaller head dims; sm_90 without the "a" has no wgmma.
  const AttentionShape big{4, 16, 16, 4096, 4096};
  EXPECT_EQ(to_string(attention_forward_default_config({DType::bf16, 64, false}, {8, 16, 16, 2048, 2048}, sm90a(), 132)),
            "ws:bm192:bn128:s2:pp1:persist:sk");
  // With a mask from 1k to 2k keys: no ping-pong turns (from 1k query rows; fewer keep them); at
  // 2k keys plain attention takes three consumers on one block per query tile, a variant (here
  // sinks) keeps two.
  EXPECT_EQ(to_string(attention_forward_default_config({DType::bf16, 64, true}, {8, 16, 16, 2048, 2048}, sm90a(), 132)),
            "ws:bm192:bn128:s2:pp1");
  EXPECT_EQ(to_string(attention_forward_default_config({DType::bf16, 64, true, "", true}, {8, 16, 16, 2048, 2048},
                                                       sm90a(), 132)),
            "ws:bm128:bn128:s2:pp0");
  EXPECT_EQ(to_string(attention_forward_default_config({DType::bf16, 64, true}, {8, 16, 16, 1536, 1536}, sm90a(), 132)),
            "ws:bm128:bn128:s2:pp0:persist");
  EXPECT_EQ(to_string(attention_forward_default_config({DType::bf16, 48, true}, {8, 16, 16, 1536, 1536}, sm90a(), 132)),
            "ws:bm128:bn128:s2:pp0:persist");
  EXPECT_EQ(to_string(attention_forward_default_config({DType::bf16, 64, true}, {8, 16, 16, 512, 2048}, sm90a(), 132)),
            "ws:bm128:bn128:s2:pp1:persist");
  EXPECT_EQ(to_string(attention_forward_default_config({DType::bf16, 128, true}, {8, 16, 16, 2048, 2048}, sm90a(), 132)),
            "ws:bm128:bn128:s2:pp1:persist");
  for (int d : {40, 64})
    for (int n : {256, 512, 1024}) {
      EXPECT_EQ(to_string(attention_forward_default_config({DType::bf16, d, true}, {64, 16, 16, n, n}, sm90a(), 132)),
                "wg:bm64:bn64:s2")
          << d << " " << n;
      // Decode-like rows without a mask: the persistent grid up to 512 keys, one warpgroup per
      // block from 1k (below).
      EXPECT_EQ(to_string(attention_forward_default_config({DType::bf16, d, false}, {64, 16, 16, 1, n}, sm90a(), 132)),
                n >= 1024 ? "wg:bm64:bn64:s2" : "ws:bm128:bn128:s2:pp1:persist")
          << d << " " << n;
    }
  // Decode (up to 64 query rows, 1k keys or more): one warpgroup of 64 rows per block, 64-key
  // tiles from two blocks per SM, else 128-key; grids of under half the SMs split the keys on it
  // up to 128 columns, on the warp-specialised kernel at 256; a query tile of more rows keeps
  // the warp-specialised kernel.
  for (int d : {64, 128, 256}) {
    EXPECT_EQ(to_string(attention_forward_default_config({DType::bf16, d, false}, {64, 8, 8, 4, 4096}, sm90a(), 132)),
              "wg:bm64:bn64:s2") << d;
    EXPECT_EQ(to_string(attention_forward_default_config({DType::bf16, d, true}, {64, 32, 32, 1, 32768}, sm90a(), 132)),
              "wg:bm64:bn64:s2") << d;
    EXPECT_EQ(to_string(attention_forward_default_config({DType::bf16, d, false}, {4, 8, 8, 4, 32768}, sm90a(), 132)),
              d == 256 ? "ws:bm128:bn64:s2:pp1:split" : "wg:bm64:bn128:s2:split")
        << d;
    EXPECT_NE(to_string(attention_forward_default_config({DType::bf16, d, false}, {64, 8, 8, 65, 4096}, sm90a(), 132)).rfind("ws:", 0),
              std::string::npos) << d;
  }
  EXPECT_EQ(to_string(attention_forward_default_config({DType::bf16, 128, false}, {16, 8, 8, 4, 32768}, sm90a(), 132)),
            "wg:bm64:bn128:s2");
  // Paged caches alike up to 128 columns (the copies gather their pages' rows); at 256 the
  // warp-specialised kernel keeps them.
  for (int d : {64, 128, 256}) {
    AttentionForwardSpec paged{DType::bf16, d, false};
    paged.paged = true;
    const std::string c = to_string(attention_forward_default_config(paged, {64, 8, 8, 4, 4096}, sm90a(), 132));
    if (d <= 128) EXPECT_EQ(c, "wg:bm64:bn64:s2") << d;
    else EXPECT_EQ(c.rfind("ws:", 0), 0u) << c;
    // One block per SM: the warp-specialised kernel.
    EXPECT_EQ(to_string(attention_forward_default_config(paged, {16, 8, 8, 4, 32768}, sm90a(), 132)).rfind("ws:", 0), 0u) << d;
    EXPECT_FALSE(check_attention_forward_config(paged, *parse_attention_forward_config("wg:bm64:bn64:s2"), sm90a())) << d;
  }
  {
    AttentionForwardSpec sinks{DType::bf16, 128, false};
    sinks.paged = sinks.sinks = true;  // a paged cache with another variant: not on the wg kernels
    EXPECT_TRUE(check_attention_forward_config(sinks, *parse_attention_forward_config("wg:bm64:bn64:s2"), sm90a()));
  }
  EXPECT_EQ(to_string(attention_forward_default_config({DType::bf16, 128, false}, {64, 16, 16, 512, 512}, sm90a(), 132)),
            "ws:bm128:bn128:s2:pp1:persist");
  EXPECT_EQ(to_string(attention_forward_default_config({DType::bf16, 40, false}, big, sm90a(), 132)),
            "ws:bm192:bn128:s2:pp1");
  EXPECT_EQ(to_string(attention_forward_default_config({DType::bf16, 80, false}, big, sm90a(), 132)),
            "ws:bm128:bn128:s2:pp1:persist");
  EXPECT_EQ(to_string(attention_forward_default_config({DType::bf16, 96, true}, big, sm90a(), 132)),
            "ws:bm128:bn128:s2:pp1:persist");
  EXPECT_EQ(to_string(attention_forward_default_config({DType::bf16, 32, false}, big, sm90a(), 132)), "ws:bm192:bn128:s2:pp1");
  // d = 32 below 4k keys: three consumers where they apply, else fa2.
  EXPECT_EQ(to_string(attention_forward_default_config({DType::bf16, 32, false}, {16, 16, 16, 1024, 1024}, sm90a(), 132)),
            "ws:bm192:bn128:s2:pp1:persist:sk");
  EXPECT_EQ(attention_forward_default_config({DType::bf16, 32, true}, {16, 16, 16, 2048, 2048}, sm90a(), 132).path,
            ForwardPath::fa2);
  EXPECT_EQ(attention_forward_default_config({DType::bf16, 24, false}, big, sm90a(), 132).path, ForwardPath::fa2);
  // The 192-column tile (d = 136–192): 112-key tiles for plain attention on one block per query
  // tile; split grids, variants and paged caches keep 64.
  for (int d : {136, 160, 192})
    for (bool causal : {false, true})
      EXPECT_EQ(to_string(attention_forward_default_config({DType::bf16, d, causal}, big, sm90a(), 132)),
                "ws:bm128:bn112:s2:pp1") << d;
  EXPECT_EQ(to_string(attention_forward_default_config({DType::bf16, 192, false}, {1, 8, 8, 1, 16384}, sm90a(), 132)),
            "ws:bm128:bn64:s2:pp1:split");
  {
    AttentionForwardSpec sinks{DType::bf16, 160, true};
    sinks.sinks = true;
    EXPECT_EQ(attention_forward_default_config(sinks, big, sm90a(), 132).block_n, 64);
    AttentionForwardSpec paged{DType::bf16, 192, false};
    paged.paged = true;
    EXPECT_EQ(attention_forward_default_config(paged, {16, 8, 8, 4, 32768}, sm90a(), 132).block_n, 64);
  }
  // The 256-column tile: 80-key tiles, except split-key grids, which keep 64; persistent (one
  // Q buffer) without a mask and with one up to 8k keys.
  EXPECT_EQ(to_string(attention_forward_default_config({DType::bf16, 256, true}, big, sm90a(), 132)),
            "ws:bm128:bn80:s2:pp1:persist");
  EXPECT_EQ(to_string(attention_forward_default_config({DType::bf16, 256, true}, {2, 8, 8, 8192, 8192}, sm90a(), 132)),
            "ws:bm128:bn80:s2:pp1:persist");
  EXPECT_EQ(to_string(attention_forward_default_config({DType::bf16, 256, true}, {1, 8, 8, 16384, 16384}, sm90a(), 132)),
            "ws:bm128:bn80:s2:pp1");
  EXPECT_EQ(to_string(attention_forward_default_config({DType::bf16, 200, false}, big, sm90a(), 132)),
            "ws:bm128:bn80:s2:pp1:persist");
  EXPECT_EQ(to_string(attention_forward_default_config({DType::bf16, 256, false}, {1, 8, 8, 1, 16384}, sm90a(), 132)),
            "ws:bm128:bn64:s2:pp1:split");
  EXPECT_EQ(attention_forward_default_config({DType::bf16, 128, false}, {4, 16, 16, 4096, 4096}, *parse_target("sm_90"), 132).path,
            ForwardPath::fa2);
}

TEST(AttentionForwardConfig, WsRulesNameTheOffendingFieldAndRoundTrip) {
  const AttentionForwardSpec spec{DType::bf16, 128, false};
  const AttentionForwardConfig ws{.path = ForwardPath::ws, .block_m = 128, .block_n = 128, .warps = 8, .ping_pong = 1};
  EXPECT_FALSE(check_attention_forward_config(spec, ws, sm90a()));
  EXPECT_EQ(parse_attention_forward_config(to_string(ws)), ws);
  EXPECT_EQ(parse_attention_forward_config("ws:bm128:bn128:s2:pp0")->ping_pong, 0);
  auto why = [&](AttentionForwardConfig c, const AttentionForwardSpec& sp, const Target& t) {
    auto r = check_attention_forward_config(sp, c, t);
    return r ? *r : std::string("valid");
  };
  EXPECT_NE(why(ws, spec, sm80()).find("sm_90a"), std::string::npos);
  EXPECT_NE(why(ws, {DType::f32, 128, false}, sm90a()).find("fp16 or bf16"), std::string::npos);
  auto bm64 = ws;
  bm64.block_m = 64;
  EXPECT_EQ(why(bm64, spec, sm90a()), "ws bm must be 128 or 192 (two or three consumer warpgroups), got bm64");
  auto bn192 = ws;
  bn192.block_n = 192;  // O, S and P of 128 columns and 192 keys exceed 240 registers
  EXPECT_NE(why(bn192, spec, sm90a()).find("register"), std::string::npos);
  auto s4 = ws;
  s4.stages = 4;  // 1 KiB + 32 KiB of Q + 4 x 64 KiB of K and V
  EXPECT_NE(why(s4, spec, sm90a()).find("shared memory"), std::string::npos);
  auto pp2 = ws;
  pp2.ping_pong = 2;
  EXPECT_NE(why(pp2, spec, sm90a()).find("pp"), std::string::npos);
  EXPECT_FALSE(parse_attention_forward_config("ws:bm128:bn128:s2"));
  // 176-key tiles: in the space on the 128-column tile; the three-consumer form needs the
  // 64-column tile and at most 128 keys. Persistent, two Q buffers and two 176-key stages would
  // pass 227 KiB, so the grid keeps one Q buffer.
  auto bn176 = ws;
  bn176.block_n = 176;
  EXPECT_EQ(why(bn176, spec, sm90a()), "valid");
  EXPECT_NE(render_attention_forward(spec, bn176).source.find("/*BN=*/176"), std::string::npos);
  auto bn176_persist = bn176;
  bn176_persist.persistent = true;
  EXPECT_EQ(attention_fwd::kWsMaxSmemBytes, sm90a().max_smem_per_block);
  EXPECT_EQ(attention_fwd::ws_q_buffers(128, 176, 2, 128, true), 1);
  EXPECT_EQ(attention_fwd::ws_q_buffers(128, 128, 2, 128, true), 2);
  EXPECT_EQ(attention_fwd::ws_q_buffers(128, 128, 2, 128, false), 1);
  EXPECT_EQ(why(bn176_persist, spec, sm90a()), "valid");
  EXPECT_EQ(render_attention_forward(spec, bn176_persist).smem_bytes, 1024 + (128 + 2 * 2 * 176) * 128 * 2 + 256);
  const auto space = attention_forward_config_space(spec, sm90a());
  EXPECT_NE(std::ranges::find(space, bn176), space.end());
  EXPECT_NE(std::ranges::find(space, bn176_persist), space.end());
  // Ping-pong off on the persistent grid: 128-key tiles only, both masks, no stream-K form.
  const auto pp0 = *parse_attention_forward_config("ws:bm128:bn128:s2:pp0:persist");
  for (int d : {64, 96, 128})
    for (bool causal : {false, true}) {
      const auto s = attention_forward_config_space({DType::bf16, d, causal}, sm90a());
      EXPECT_NE(std::ranges::find(s, pp0), s.end()) << d << causal;
      for (const auto& c : s)
        EXPECT_TRUE(c.ping_pong || !c.persistent || c == pp0) << to_string(c);
    }
  // d = 256: 80-key tiles in the space, persistent (one Q buffer) and not; the persistent grid
  // has no other tile there.
  const AttentionForwardConfig bn80{.path = ForwardPath::ws, .block_m = 128, .block_n = 80, .warps = 8, .ping_pong = 1};
  auto bn80_persist = bn80;
  bn80_persist.persistent = true;
  const auto space256 = attention_forward_config_space({DType::bf16, 256, true}, sm90a());
  EXPECT_NE(std::ranges::find(space256, bn80), space256.end());
  EXPECT_NE(std::ranges::find(space256, bn80_persist), space256.end());
  EXPECT_EQ(why(bn80_persist, {DType::bf16, 256, true}, sm90a()), "valid");
  for (const auto& c : space256) EXPECT_TRUE(!c.persistent || c == bn80_persist) << to_string(c);
  const auto space64 = attention_forward_config_space({DType::bf16, 64, false}, sm90a());
  EXPECT_EQ(std::ranges::find(space64, AttentionForwardConfig{.path = ForwardPath::ws, .block_m = 128, .block_n = 176, .warps = 8, .ping_pong = 1}), space64.end());
  auto bn160 = ws;
  bn160.block_n = 160;
  EXPECT_EQ(why(bn160, spec, sm90a()), "ws bn must be 64, 80, 96, 112, 128, 176 or 192 (keys per tile), got bn160");
  const AttentionForwardConfig three{.path = ForwardPath::ws, .block_m = 192, .block_n = 128, .warps = 12, .ping_pong = 1};
  EXPECT_EQ(why(three, {DType::bf16, 64, true}, sm90a()), "valid");
  EXPECT_EQ(parse_attention_forward_config("ws:bm192:bn128:s2:pp1"), three);
  EXPECT_EQ(render_attention_forward({DType::bf16, 64, true}, three).threads, 512);
  EXPECT_NE(render_attention_forward({DType::bf16, 64, true}, three).source.find("/*Consumers=*/3"), std::string::npos);
  EXPECT_NE(why(three, spec, sm90a()).find("bm192"), std::string::npos);
  auto three_bn192 = three;
  three_bn192.block_n = 192;
  EXPECT_NE(why(three_bn192, {DType::bf16, 64, false}, sm90a()).find("bn <= 128"), std::string::npos);
}

TEST(AttentionForwardConfig, NinetySixAndOneHundredTwelveKeyTilesServeTheWideTileOfPlainAttention) {
  auto why = [&](AttentionForwardConfig c, const AttentionForwardSpec& sp, const Target& t) {
    auto r = check_attention_forward_config(sp, c, t);
    return r ? *r : std::string("valid");
  };
  const auto ws = *parse_attention_forward_config("ws:bm128:bn112:s2:pp1");
  auto bn96 = ws;
  bn96.block_n = 96;
  for (int d : {136, 160, 192})
    for (bool causal : {false, true}) {
      EXPECT_EQ(why(ws, {DType::bf16, d, causal}, sm90a()), "valid") << d;
      EXPECT_EQ(why(bn96, {DType::f16, d, causal}, sm90a()), "valid") << d;
    }
  auto space = attention_forward_config_space({DType::bf16, 160, true}, sm90a());
  EXPECT_NE(std::find(space.begin(), space.end(), ws), space.end());
  EXPECT_NE(std::find(space.begin(), space.end(), bn96), space.end());
  // Other column tiles, variants, paged caches, v head dims of their own and other grids are refused.
  for (int d : {64, 128, 256})
    EXPECT_NE(why(ws, {DType::bf16, d, false}, sm90a()).find("serves head_dim 136..192"), std::string::npos) << d;
  AttentionForwardSpec sinks{DType::bf16, 160, true};
  sinks.sinks = true;
  EXPECT_NE(why(ws, sinks, sm90a()).find("with this spec"), std::string::npos);
  AttentionForwardSpec paged{DType::bf16, 160, false};
  paged.paged = true;
  EXPECT_NE(why(ws, paged, sm90a()), "valid");
  AttentionForwardSpec mla{DType::bf16, 192, false};
  mla.head_dim_v = 128;
  EXPECT_NE(why(ws, mla, sm90a()), "valid");
  for (const char* text : {"ws:bm128:bn112:s2:pp1:split", "ws:bm128:bn112:s2:pp1:persist"})
    EXPECT_NE(why(*parse_attention_forward_config(text), {DType::bf16, 160, false}, sm90a()).find("on this grid"),
              std::string::npos) << text;
  EXPECT_NE(why(*parse_attention_forward_config("ws:bm128:bn112:s3:pp1"), {DType::bf16, 192, false}, sm90a()), "valid");
  EXPECT_NE(why(*parse_attention_forward_config("ws:bm128:bn104:s2:pp1"), {DType::bf16, 192, false}, sm90a()).find("bn"),
            std::string::npos);
}

// A paged cache's key tile lies within one page or covers whole pages; otherwise the largest
// power of two below the tile, which does for every page size kgen takes.
TEST(AttentionForwardConfig, PagedKeyTilesDivideOrFillPages) {
  for (int page : {16, 32, 64, 128, 256})
    for (int bn : {64, 80, 96, 112, 128, 176, 192}) {
      const int tile = attention_forward_paged_key_tile(bn, page);
      EXPECT_TRUE(page % tile == 0 || tile % page == 0) << bn << " " << page;
      EXPECT_LE(tile, bn);
      if (page % bn == 0 || bn % page == 0) EXPECT_EQ(tile, bn) << bn << " " << page;
    }
  EXPECT_EQ(attention_forward_paged_key_tile(80, 16), 80);
  EXPECT_EQ(attention_forward_paged_key_tile(80, 64), 64);
  EXPECT_EQ(attention_forward_paged_key_tile(176, 32), 128);
  EXPECT_EQ(attention_forward_paged_key_tile(192, 64), 192);
  EXPECT_EQ(attention_forward_paged_key_tile(192, 256), 128);
}

TEST(AttentionForwardConfig, SplitKeysTextRulesDefaultsSplitsAndRender) {
  const AttentionForwardSpec spec{DType::bf16, 128, false};
  const AttentionForwardConfig split{.path = ForwardPath::ws, .block_m = 128, .block_n = 128, .warps = 8, .ping_pong = 1, .split_keys = true};
  EXPECT_EQ(to_string(split), "ws:bm128:bn128:s2:pp1:split");
  EXPECT_EQ(parse_attention_forward_config("ws:bm128:bn128:s2:pp1:split"), split);
  EXPECT_FALSE(parse_attention_forward_config("ws:bm128:bn128:s2:pp1:splat"));
  EXPECT_FALSE(parse_attention_forward_config("wg:bm64:bn64:s2:splat"));
  EXPECT_FALSE(parse_attention_forward_config("fa2:bm64:bn64:w4:s2:split"));
  EXPECT_FALSE(check_attention_forward_config(spec, split, sm90a()));
  // The one-warpgroup kernel splits keys too.
  const AttentionForwardConfig wg_split{.path = ForwardPath::wgmma, .block_m = 64, .block_n = 128, .stages = 2, .warps = 4, .split_keys = true};
  EXPECT_EQ(to_string(wg_split), "wg:bm64:bn128:s2:split");
  EXPECT_EQ(parse_attention_forward_config("wg:bm64:bn128:s2:split"), wg_split);
  EXPECT_FALSE(check_attention_forward_config(spec, wg_split, sm90a()));
  AttentionForwardConfig fa2_split{.path = ForwardPath::fa2, .block_m = 128, .warps = 4};
  fa2_split.split_keys = true;
  EXPECT_EQ(check_attention_forward_config(spec, fa2_split, sm90a()).value_or("valid"), "split applies to ws and wg configs only");
  const auto space = attention_forward_config_space(spec, sm90a());
  EXPECT_NE(std::ranges::find(space, split), space.end());
  EXPECT_NE(std::ranges::find(space, wg_split), space.end());

  // Shape classes at 132 SMs: 8 blocks of a decode call (b = 1, 8 packed K/V heads) with 4k keys
  // split; the same grid with 256 keys, or 64 sequences, does not.
  const AttentionShape decode{1, 8, 8, 4, 4096};
  EXPECT_EQ(attention_forward_shape_class(decode, 132), 2);
  EXPECT_EQ(attention_forward_shape_class({1, 8, 8, 4, 256}, 132), 1);
  EXPECT_EQ(attention_forward_shape_class({64, 8, 8, 4, 4096}, 132), 0);
  EXPECT_EQ(attention_forward_shape_class({1, 66, 66, 4, 4096}, 132), 2);
  EXPECT_EQ(attention_forward_shape_class({1, 67, 67, 4, 4096}, 132), 1);
  for (bool causal : {false, true})
    EXPECT_EQ(to_string(attention_forward_default_config({DType::bf16, 128, causal}, decode, sm90a(), 132)),
              "wg:bm64:bn128:s2:split");
  EXPECT_EQ(to_string(attention_forward_default_config({DType::bf16, 64, false}, decode, sm90a(), 132)),
            "wg:bm64:bn128:s2:split");
  // Paged caches keep the warp-specialised split kernel; so do more than 64 query rows.
  AttentionForwardSpec paged = spec;
  paged.paged = true;
  EXPECT_EQ(to_string(attention_forward_default_config(paged, decode, sm90a(), 132)), "ws:bm128:bn128:s2:pp1:split");
  EXPECT_EQ(to_string(attention_forward_default_config(spec, {1, 2, 2, 65, 4096}, sm90a(), 132)), "ws:bm128:bn128:s2:pp1:split");
  EXPECT_EQ(to_string(attention_forward_default_config({DType::bf16, 256, false}, decode, sm90a(), 132)),
            "ws:bm128:bn64:s2:pp1:split");
  EXPECT_FALSE(attention_forward_default_config(spec, {64, 8, 8, 4, 4096}, sm90a(), 132).split_keys);
  EXPECT_EQ(attention_forward_default_config(spec, decode, sm80(), 132).path, ForwardPath::fa2);

  // Ranges: enough blocks to fill the SMs once, at most one per key tile and kMaxKeySplits.
  EXPECT_EQ(attention_forward_key_splits(split, decode, 132), 16);
  EXPECT_EQ(attention_forward_key_splits(split, {1, 8, 8, 4, 1000}, 132), 8);
  EXPECT_EQ(attention_forward_key_splits(split, {1, 1, 1, 1, 1 << 20}, 132), 128);
  EXPECT_EQ(attention_forward_key_splits(split, {64, 8, 8, 4, 4096}, 132), 1);
  EXPECT_EQ(attention_forward_key_splits(split, {1, 2, 2, 300, 1337}, 132), 11);  // 3 query tiles x 2 heads
  EXPECT_EQ(attention_forward_key_splits({.path = ForwardPath::ws, .block_m = 128, .block_n = 128, .warps = 8, .ping_pong = 1}, decode, 132), 1);
  EXPECT_EQ(attention_forward_grid(split, {1, 2, 2, 300, 1337}, 11).x, 33u);
  EXPECT_EQ(attention_forward_combine_grid({3, 5, 5, 7, 9}).x, 2u);
  EXPECT_EQ(attention_forward_combine_grid({3, 5, 5, 7, 9}).y, 5u);

  // The launch runs the split forward, then the combine kernel of its dtype.
  const auto kernels = render_attention_forward_kernels(spec, split);
  ASSERT_EQ(kernels.size(), 2u);
  EXPECT_NE(kernels[0].source.find("AttentionForwardSplitParams"), std::string::npos);
  EXPECT_NE(kernels[0].source.find("/*SplitKeys=*/true"), std::string::npos);
  EXPECT_EQ(kernels[1].entry, "kgen_attention_fwd_combine");
  EXPECT_EQ(kernels[1].variant, "attention_fwd.bf16.combine");
  EXPECT_EQ(kernels[1].threads, 32 * attention_fwd::kCombineRows);
  EXPECT_EQ(render_attention_forward_kernels(spec, {.path = ForwardPath::ws, .block_m = 128, .block_n = 128, .warps = 8, .ping_pong = 1}).size(), 1u);
  // The one-warpgroup split kernel: its split params, HeadDim and SplitKeys named, the combine.
  const auto wg_kernels = render_attention_forward_kernels(spec, wg_split);
  ASSERT_EQ(wg_kernels.size(), 2u);
  EXPECT_NE(wg_kernels[0].source.find("AttentionForwardSplitParams"), std::string::npos);
  EXPECT_NE(wg_kernels[0].source.find("/*HeadDim=*/128, /*SplitKeys=*/true"), std::string::npos);
  EXPECT_EQ(wg_kernels[1].entry, "kgen_attention_fwd_combine");
  EXPECT_EQ(attention_forward_key_splits(wg_split, decode, 132), 16);
  EXPECT_EQ(attention_forward_grid(wg_split, decode, 16).x, 16u);
}

TEST(AttentionForwardConfig, CausalSectionsOfHeads) {
  // 2^s heads whose K and V rows fit kWsSectionBytes (16 MiB), 2^s dividing the heads; the query
  // heads of one kv head count once.
  EXPECT_EQ(attention_fwd::ws_causal_sections_log2(32, 1, 16384, 256), 2);   // d = 64 bf16: 4 MiB a head
  EXPECT_EQ(attention_fwd::ws_causal_sections_log2(16, 1, 16384, 512), 1);   // d = 128: 8 MiB
  EXPECT_EQ(attention_fwd::ws_causal_sections_log2(16, 1, 16384, 768), 0);   // d = 192: 12 MiB
  EXPECT_EQ(attention_fwd::ws_causal_sections_log2(64, 8, 16384, 512), 4);   // GQA 64/8: 1 MiB a query head
  EXPECT_EQ(attention_fwd::ws_causal_sections_log2(12, 1, 1024, 256), 2);    // 12 heads: 4 divides them, 8 not
  EXPECT_EQ(attention_fwd::ws_causal_sections_log2(5, 1, 1024, 256), 0);
  EXPECT_EQ(attention_fwd::ws_causal_sections_log2(16, 1, 0, 512), 4);       // no keys: every head

  const AttentionForwardSpec causal{DType::bf16, 128, true};
  const AttentionForwardConfig ws{.path = ForwardPath::ws, .block_m = 128, .block_n = 176, .warps = 8, .ping_pong = 1};
  const AttentionShape shape{2, 16, 16, 8192, 8192};
  LaunchGrid grid = attention_forward_grid(ws, shape);
  EXPECT_EQ(attention_forward_sections(ws, causal, shape, grid), 2);  // 4 MiB a head
  EXPECT_EQ(grid.x, 64u * 4);
  EXPECT_EQ(grid.y, 4u);
  EXPECT_EQ(grid.z, 2u);
  // Not without a mask, on a persistent or split grid, or with a variant: the grid stays.
  AttentionForwardConfig persistent = ws;
  persistent.persistent = true;
  for (const auto& [spec, config] : {std::pair{AttentionForwardSpec{DType::bf16, 128, false}, ws},
                                     std::pair{causal, persistent},
                                     std::pair{AttentionForwardSpec{DType::bf16, 128, true, "window(128,0)"}, ws}}) {
    const LaunchGrid plain = attention_forward_grid(config, shape);
    LaunchGrid g = plain;
    EXPECT_EQ(attention_forward_sections(config, spec, shape, g), 0);
    EXPECT_EQ(g.x, plain.x);
    EXPECT_EQ(g.y, plain.y);
  }
}

TEST(AttentionForwardConfig, PersistentTextRulesGridAndRender) {
  const AttentionForwardSpec spec{DType::bf16, 128, false};
  AttentionForwardConfig persist{.path = ForwardPath::ws, .block_m = 128, .block_n = 128, .warps = 8, .ping_pong = 1};
  persist.persistent = true;
  EXPECT_EQ(to_string(persist), "ws:bm128:bn128:s2:pp1:persist");
  EXPECT_EQ(parse_attention_forward_config("ws:bm128:bn128:s2:pp1:persist"), persist);
  EXPECT_FALSE(parse_attention_forward_config("ws:bm128:bn128:s2:pp1:persist:split"));
  EXPECT_FALSE(parse_attention_forward_config("wg:bm64:bn64:s2:persist"));
  EXPECT_FALSE(check_attention_forward_config(spec, persist, sm90a()));
  const auto space = attention_forward_config_space(spec, sm90a());
  EXPECT_NE(std::ranges::find(space, persist), space.end());
  auto why = [&](const AttentionForwardConfig& c, const AttentionForwardSpec& sp) {
    return check_attention_forward_config(sp, c, sm90a()).value_or("valid");
  };
  AttentionForwardConfig fa2{.path = ForwardPath::fa2, .block_m = 128, .warps = 4};
  fa2.persistent = true;
  EXPECT_EQ(why(fa2, spec), "persist applies to ws configs only");
  auto both = persist;
  both.split_keys = true;
  EXPECT_EQ(why(both, spec), "a ws config is split or persist, not both");
  // The second Q buffer: d = 256 with 64-key tiles fits only without it, so its persistent grid
  // keeps one Q buffer (128 KiB of K/V stages + 64 KiB of Q) and stays out of the space.
  auto d256 = persist;
  d256.block_n = 64;
  EXPECT_EQ(why({.path = ForwardPath::ws, .block_m = 128, .warps = 8, .ping_pong = 1}, {DType::bf16, 256, false}), "valid");
  EXPECT_EQ(attention_fwd::ws_q_buffers(256, 64, 2, 128, true), 1);
  EXPECT_EQ(why(d256, {DType::bf16, 256, false}), "valid");
  EXPECT_EQ(render_attention_forward({DType::bf16, 256, false}, d256).smem_bytes, attention_fwd::ws_smem_bytes(256, 64, 2, 1));
  // Three stages do not fit even with one Q buffer.
  auto d256_s3 = d256;
  d256_s3.stages = 3;
  EXPECT_NE(why(d256_s3, {DType::bf16, 256, false}).find("shared memory"), std::string::npos);
  EXPECT_EQ(attention_fwd::ws_smem_bytes(128, 128, 2, 2) - attention_fwd::ws_smem_bytes(128, 128, 2), 128 * 128 * 2);

  // One block per SM at most, over every query tile of every head and batch.
  EXPECT_EQ(attention_forward_grid(persist, {64, 16, 16, 256, 256}, 1, 132).x, 132u);
  EXPECT_EQ(attention_forward_grid(persist, {64, 16, 16, 256, 256}, 1, 132).y, 1u);
  EXPECT_EQ(attention_forward_grid(persist, {64, 16, 16, 256, 256}, 1, 132).z, 1u);
  EXPECT_EQ(attention_forward_grid(persist, {1, 3, 3, 300, 300}, 1, 132).x, 9u);  // 3 query tiles x 3 heads

  // The kernel takes the Persistent argument after SplitKeys, and the second Q buffer's bytes.
  const KernelSource k = render_attention_forward(spec, persist);
  EXPECT_NE(k.source.find("/*SplitKeys=*/false, /*Persistent=*/true"), std::string::npos);
  EXPECT_EQ(k.smem_bytes, attention_fwd::ws_smem_bytes(128, 128, 2, 2));
  EXPECT_EQ(render_attention_forward(spec, {.path = ForwardPath::ws, .block_m = 128, .block_n = 128, .warps = 8, .ping_pong = 1}).source.find("Persistent"),
            std::string::npos);
}

TEST(AttentionForwardConfig, StreamKTextRulesSpaceAndRender) {
  const AttentionForwardSpec spec{DType::bf16, 128, false}, causal{DType::bf16, 128, true};
  AttentionForwardConfig sk{.path = ForwardPath::ws, .block_m = 128, .block_n = 128, .warps = 8, .ping_pong = 1};
  sk.persistent = sk.stream_k = true;
  EXPECT_EQ(to_string(sk), "ws:bm128:bn128:s2:pp1:persist:sk");
  EXPECT_EQ(parse_attention_forward_config("ws:bm128:bn128:s2:pp1:persist:sk"), sk);
  EXPECT_FALSE(parse_attention_forward_config("ws:bm128:bn128:s2:pp1:sk"));
  EXPECT_FALSE(parse_attention_forward_config("ws:bm128:bn128:s2:pp1:split:sk"));
  EXPECT_FALSE(parse_attention_forward_config("ws:bm128:bn128:s2:pp1:persist:sk:sk"));
  auto why = [&](const AttentionForwardConfig& c, const AttentionForwardSpec& sp) {
    return check_attention_forward_config(sp, c, sm90a()).value_or("valid");
  };
  EXPECT_EQ(why(sk, spec), "valid");
  EXPECT_EQ(why(sk, causal), "sk applies to calls without a mask only");
  auto plain = sk;
  plain.persistent = false;
  EXPECT_EQ(why(plain, spec), "sk applies to persist configs only");
  // Every persistent form of a spec without a mask comes in stream-K too (but the one without
  // ping-pong turns); none with a mask.
  for (const auto& sp : {spec, causal, AttentionForwardSpec{DType::f16, 64, false}, AttentionForwardSpec{DType::bf16, 256, false}}) {
    const auto space = attention_forward_config_space(sp, sm90a());
    int persistent = 0, streamed = 0;
    for (const auto& c : space) {
      persistent += c.persistent && !c.stream_k && c.ping_pong;
      streamed += c.stream_k;
      if (c.stream_k) {
        auto base = c;
        base.stream_k = false;
        EXPECT_NE(std::ranges::find(space, base), space.end()) << to_string(c);
      }
    }
    EXPECT_GT(persistent, 0) << to_string(sp);
    EXPECT_EQ(streamed, sp.causal ? 0 : persistent) << to_string(sp);
  }
  // The kernel takes AttentionForwardStreamParams and StreamK after Consumers; the same shared
  // memory and grid as the plain persistent form.
  auto base = sk;
  base.stream_k = false;
  const KernelSource k = render_attention_forward(spec, sk);
  EXPECT_NE(k.source.find("AttentionForwardStreamParams"), std::string::npos);
  EXPECT_NE(k.source.find("/*Consumers=*/2, /*StreamK=*/true"), std::string::npos);
  EXPECT_EQ(k.smem_bytes, render_attention_forward(spec, base).smem_bytes);
  EXPECT_EQ(render_attention_forward(spec, base).source.find("StreamK"), std::string::npos);
  EXPECT_EQ(attention_forward_grid(sk, {64, 16, 16, 256, 256}, 1, 132).x, attention_forward_grid(base, {64, 16, 16, 256, 256}, 1, 132).x);
}

TEST(AttentionForwardConfig, WgmmaRulesNameTheOffendingField) {
  const AttentionForwardSpec spec{DType::bf16, 128, false};
  EXPECT_FALSE(check_attention_forward_config(spec, {.path = ForwardPath::wgmma, .block_m = 128, .block_n = 128, .warps = 8}, sm90a()));
  auto on_sm80 = check_attention_forward_config(spec, {.path = ForwardPath::wgmma, .block_m = 128, .block_n = 128, .warps = 8}, sm80());
  ASSERT_TRUE(on_sm80);
  EXPECT_NE(on_sm80->find("sm_90a"), std::string::npos) << *on_sm80;
  auto fp32 = check_attention_forward_config({DType::f32, 128, false}, {.path = ForwardPath::wgmma, .block_m = 128, .block_n = 128, .warps = 8}, sm90a());
  ASSERT_TRUE(fp32);
  EXPECT_NE(fp32->find("fp16 or bf16"), std::string::npos) << *fp32;
  EXPECT_FALSE(check_attention_forward_config({DType::bf16, 96, false}, {.path = ForwardPath::wgmma, .block_m = 128, .block_n = 128, .warps = 8}, sm90a()));
  auto d33 = check_attention_forward_config({DType::bf16, 33, false}, {.path = ForwardPath::wgmma, .block_m = 128, .block_n = 128, .warps = 8}, sm90a());
  ASSERT_TRUE(d33);
  EXPECT_NE(d33->find("head_dim=33"), std::string::npos) << *d33;
  // Three warpgroups leave 168 registers per thread: not enough for 128 keys at d = 128.
  auto regs = check_attention_forward_config(spec, {.path = ForwardPath::wgmma, .block_m = 192, .block_n = 128, .warps = 12}, sm90a());
  ASSERT_TRUE(regs);
  EXPECT_NE(regs->find("register budget"), std::string::npos) << *regs;
  EXPECT_TRUE(check_attention_forward_config(spec, {.path = ForwardPath::wgmma, .block_m = 96, .block_n = 128, .warps = 6}, sm90a()));
  EXPECT_FALSE(check_attention_forward_config(spec, {.path = ForwardPath::wgmma, .block_m = 128, .block_n = 128, .stages = 3, .warps = 8}, sm90a()));
  EXPECT_TRUE(check_attention_forward_config(spec, {.path = ForwardPath::wgmma, .block_m = 128, .block_n = 128, .stages = 4, .warps = 8}, sm90a()));
}

TEST(AttentionForwardConfig, WgmmaConfigTextRoundTrips) {
  auto c = parse_attention_forward_config("wg:bm192:bn64:s2");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->path, ForwardPath::wgmma);
  EXPECT_EQ(c->block_m, 192);
  EXPECT_EQ(c->block_n, 64);
  EXPECT_EQ(c->warps, 12);
  EXPECT_EQ(to_string(*c), "wg:bm192:bn64:s2");
  for (const char* bad : {"wg:bm128:bn64", "wg:bm128:bn64:w4:s2", "wg:bm128:bnx:s2"})
    EXPECT_FALSE(parse_attention_forward_config(bad)) << bad;
}

TEST(AttentionForwardRender, MatchesGoldenSources) {
  // Process replay: a refactor of the generator must render byte-identical sources.
  // Regenerate with KGEN_UPDATE_GOLDENS=1 when a change is intended.
  struct Golden { const char* file; AttentionForwardSpec spec; AttentionForwardConfig config; };
  const Golden goldens[] = {
      {"attention_fwd.bf16.d128.causal.fa2.cu", {DType::bf16, 128, true}, {.path = ForwardPath::fa2, .block_m = 128, .warps = 8}},
      {"attention_fwd.fp16.d64.full.fa2.cu", {DType::f16, 64, false}, {.path = ForwardPath::fa2, .block_n = 128, .warps = 4}},
      {"attention_fwd.fp32.d80.full.simt.cu", {DType::f32, 80, false}, {.path = ForwardPath::simt, .block_m = 4, .block_n = 32, .stages = 1, .max_head_dim = 128}},
      {"attention_fwd.bf16.d128.causal.wg.cu", {DType::bf16, 128, true}, {.path = ForwardPath::wgmma, .block_m = 128, .block_n = 128, .warps = 8}},
  };
  for (const auto& g : goldens) {
    std::string path = std::string(KGEN_GOLDEN_DIR) + "/" + g.file;
    std::string rendered = render_attention_forward(g.spec, g.config).source;
    if (std::getenv("KGEN_UPDATE_GOLDENS")) std::ofstream(path) << rendered;
    std::ifstream in(path);
    ASSERT_TRUE(in) << "missing golden " << path << " (run with KGEN_UPDATE_GOLDENS=1)";
    std::stringstream want;
    want << in.rdbuf();
    EXPECT_EQ(rendered, want.str()) << g.file;
  }
}

TEST(AttentionForwardRender, LaunchGeometryFollowsTheSharedTileFunctions) {
  auto k = render_attention_forward({DType::bf16, 128, false}, {.path = ForwardPath::fa2, .block_m = 128, .warps = 8});
  EXPECT_EQ(k.threads, attention_fwd::fa2_threads(8));
  EXPECT_EQ(k.smem_bytes, attention_fwd::fa2_smem_bytes(128, 128, 64, 2));
  EXPECT_NE(k.source.find("extern \"C\" __global__"), std::string::npos);
  EXPECT_NE(k.source.find(k.entry), std::string::npos);
  auto grid = attention_forward_grid({.path = ForwardPath::fa2, .block_m = 128, .warps = 8}, {3, 5, 1, 1000, 7});
  EXPECT_EQ(grid.x, 8u);
  EXPECT_EQ(grid.y, 5u);
  EXPECT_EQ(grid.z, 3u);
}

TEST(EmbeddedTemplates, EveryIncludedHeaderIsEmbedded) {
  auto names = generator::embedded_templates();
  auto has = [&](std::string_view n) {
    for (const auto& t : names)
      if (n == t.name) return true;
    return false;
  };
  EXPECT_TRUE(has("kgen_device/attention/params.h"));
  EXPECT_TRUE(has("kgen_device/attention/forward_fa2.cuh"));
  EXPECT_TRUE(has("kgen_device/attention/forward_simt.cuh"));
  EXPECT_TRUE(has("kgen_device/attention/forward_wgmma.cuh"));
  EXPECT_TRUE(has("kgen_device/core/wgmma.cuh"));
  EXPECT_EQ(generator::templates_digest().size(), 64u);
  for (const auto& t : names) {
    // Self-contained: no toolkit header may be needed at JIT time.
    // Only kgen's own headers ("kgen/...") may be included; no <system> or toolkit header.
    std::string_view text = t.text;
    EXPECT_EQ(text.find("#include <"), std::string_view::npos) << t.name << " includes a system header";
  }
}

TEST(Registry, KnowsAttentionForwardAndOnlyRealOperators) {
  ASSERT_NE(find_operator("attention_fwd"), nullptr);
  EXPECT_EQ(find_operator("nope"), nullptr);
  auto variants = find_operator("attention_fwd")->all_variants(sm90a());
  EXPECT_GT(variants.size(), 50u);
}

}  // namespace
}  // namespace kgen
