// v head dims below q's and k's (MLA, docs/kernels/mla.md): the spec text and its parse, the
// checks that name v, the defaults (fa2, the general path), the rendered template arguments,
// and that specs of one head dim keep their text and kernels.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "generator/attention_backward.h"
#include "generator/attention_forward.h"
#include "kgen_device/attention/backward_wide_config.h"
#include "test_targets.h"

namespace kgen {
namespace {

using test_targets::sm80;
using test_targets::sm90a;

AttentionForwardSpec fwd(DType t, int d, int dv, bool causal) {
  AttentionForwardSpec s{t, d, causal};
  s.head_dim_v = dv;
  return s;
}

AttentionBackwardSpec bwd(DType t, int d, int dv, bool causal) {
  AttentionBackwardSpec s{t, d, causal};
  s.head_dim_v = dv;
  return s;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(AttentionMlaSpec, TextCarriesTheVHeadDimOnlyWhenItDiffers) {
  EXPECT_EQ(to_string(AttentionForwardSpec{DType::bf16, 128, true}), "attention_fwd.bf16.d128.causal");
  EXPECT_EQ(to_string(fwd(DType::bf16, 192, 128, true)), "attention_fwd.bf16.d192v128.causal");
  EXPECT_EQ(to_string(bwd(DType::f16, 64, 32, false)), "attention_bwd.fp16.d64v32.full");
  EXPECT_EQ(attention_backward_variant_key(bwd(DType::bf16, 192, 128, false), true),
            "attention_bwd.bf16.d192v128.full.deterministic");
  for (const AttentionForwardSpec& s : {fwd(DType::bf16, 192, 128, true), fwd(DType::f32, 100, 36, false)}) {
    auto p = parse_attention_forward_spec(to_string(s));
    ASSERT_TRUE(p) << to_string(s);
    EXPECT_EQ(*p, s);
  }
  auto b = parse_attention_backward_variant_key("attention_bwd.bf16.d192v128.causal.deterministic");
  ASSERT_TRUE(b);
  EXPECT_EQ(b->first, bwd(DType::bf16, 192, 128, true));
  EXPECT_TRUE(b->second);
  for (const char* bad : {"attention_fwd.bf16.d192v.full", "attention_fwd.bf16.d192v0.full", "attention_fwd.bf16.dv128.full",
                          "attention_fwd.bf16.d192vx.full", "attention_fwd.bf16.d192v-8.full"})
    EXPECT_FALSE(parse_attention_forward_spec(bad)) << bad;
}

TEST(AttentionMlaSpec, ChecksNameVAndRefuseWhatIsNotServed) {
  // d_v must be below d_qk.
  for (int dv : {192, 256, -8}) {
    auto why = check_attention_forward_spec(fwd(DType::bf16, 192, dv, false));
    ASSERT_TRUE(why) << dv;
    EXPECT_EQ(why->rfind("v: head dim", 0), 0u) << *why;
  }
  EXPECT_FALSE(check_attention_forward_spec(fwd(DType::bf16, 192, 128, false)));
  // Variants, sinks, packed batches and paged K/V are refused with d_v < d_qk.
  AttentionForwardSpec packed = fwd(DType::bf16, 192, 128, true);
  packed.packed = true;
  AttentionForwardSpec paged = fwd(DType::bf16, 192, 128, true);
  paged.paged = true;
  AttentionForwardSpec sinks = fwd(DType::bf16, 192, 128, true);
  sinks.sinks = true;
  for (const AttentionForwardSpec& s : {packed, paged, sinks}) {
    auto why = check_attention_forward_spec(s);
    ASSERT_TRUE(why) << to_string(s);
    EXPECT_TRUE(contains(*why, "v: head dim 128 differs from q's 192")) << *why;
  }
  // ws serves the pair on its plain grid; wg and AMD's families take one head dim; fa2 and ws
  // need multiples of 8, simt takes any.
  const AttentionForwardSpec mla = fwd(DType::bf16, 192, 128, false);
  EXPECT_FALSE(check_attention_forward_config(mla, *parse_attention_forward_config("ws:bm128:bn128:s2:pp1"), sm90a()));
  for (const char* text : {"wg:bm128:bn128:s2", "ws:bm128:bn128:s2:pp1:split", "ws:bm128:bn128:s2:pp1:persist"}) {
    auto why = check_attention_forward_config(mla, *parse_attention_forward_config(text), sm90a());
    ASSERT_TRUE(why) << text;
    EXPECT_TRUE(contains(*why, "v: head dim 128 differs from q's 192")) << *why;
  }
  auto odd_ws = check_attention_forward_config(fwd(DType::bf16, 64, 36, false),
                                               *parse_attention_forward_config("ws:bm128:bn128:s2:pp1"), sm90a());
  ASSERT_TRUE(odd_ws);
  EXPECT_TRUE(contains(*odd_ws, "not a multiple of 8, which ws needs")) << *odd_ws;
  EXPECT_FALSE(check_attention_forward_config(mla, *parse_attention_forward_config("fa2:bm128:bn32:w8:s2"), sm90a()));
  EXPECT_FALSE(check_attention_forward_config(mla, *parse_attention_forward_config("simt:bm4:bn32:dmax256"), sm80()));
  auto odd = check_attention_forward_config(fwd(DType::bf16, 64, 36, false),
                                            *parse_attention_forward_config("fa2:bm128:bn64:w4:s2"), sm80());
  ASSERT_TRUE(odd);
  EXPECT_TRUE(contains(*odd, "multiple of 8")) << *odd;
  EXPECT_FALSE(check_attention_forward_config(fwd(DType::bf16, 64, 36, false),
                                              *parse_attention_forward_config("simt:bm4:bn32:dmax64"), sm80()));
  // Backward: the column-share wgmma kernel (c2), fa2 and simt served, the other wgmma kernels
  // refused naming v; the double backward: wgmma refused, fa2 and simt served.
  const AttentionBackwardSpec g = bwd(DType::bf16, 192, 128, true);
  EXPECT_FALSE(check_attention_backward_config(g, *parse_attention_backward_config("wg:bm64:bn64:c2"), sm90a()));
  auto c2_odd = check_attention_backward_config(bwd(DType::bf16, 192, 36, true),
                                                *parse_attention_backward_config("wg:bm64:bn64:c2"), sm90a());
  ASSERT_TRUE(c2_odd);
  EXPECT_TRUE(contains(*c2_odd, "not a multiple of 8, which wg:c2 needs")) << *c2_odd;
  auto c3_odd = check_attention_backward_config(bwd(DType::bf16, 192, 36, true),
                                                *parse_attention_backward_config("wg:bm64:bn96:c3"), sm90a());
  ASSERT_TRUE(c3_odd);
  EXPECT_TRUE(contains(*c3_odd, "not a multiple of 8, which wg:c3 needs")) << *c3_odd;
  // The wide kernel (c3): head dims 136-192 with any v; 256 columns and other block shapes are
  // refused naming the field.
  const auto wide_config = *parse_attention_backward_config("wg:bm64:bn96:c3");
  for (auto [d, dv] : {std::pair{192, 128}, {136, 72}, {192, 160}, {192, 0}, {136, 0}})
    EXPECT_FALSE(check_attention_backward_config(bwd(DType::f16, d, dv, false), wide_config, sm90a())) << d << "/" << dv;
  auto wide = check_attention_backward_config(bwd(DType::bf16, 256, 128, true), wide_config, sm90a());
  ASSERT_TRUE(wide);
  EXPECT_TRUE(contains(*wide, "136-192")) << *wide;
  auto wide_bn = check_attention_backward_config(g, *parse_attention_backward_config("wg:bm64:bn64:c3"), sm90a());
  ASSERT_TRUE(wide_bn);
  EXPECT_TRUE(contains(*wide_bn, "bn")) << *wide_bn;
  EXPECT_TRUE(check_attention_backward_config(g, *parse_attention_backward_config("wg:bm64:bn96:c3"), sm80()));
  // Its warp-specialised form likewise, refusing v's odd head dims under the wide kernel's name.
  const auto wide_ws = *parse_attention_backward_config("wg:bm64:bn96:a1:t:l:w");
  for (auto [d, dv] : {std::pair{192, 128}, {136, 72}, {192, 160}, {192, 48}})
    EXPECT_FALSE(check_attention_backward_config(bwd(DType::bf16, d, dv, true), wide_ws, sm90a())) << d << "/" << dv;
  auto ws_odd = check_attention_backward_config(bwd(DType::bf16, 192, 36, true), wide_ws, sm90a());
  ASSERT_TRUE(ws_odd);
  EXPECT_TRUE(contains(*ws_odd, "not a multiple of 8, which wg:c3 needs")) << *ws_odd;
  const AttentionBackwardSpec narrow = bwd(DType::bf16, 128, 64, true);
  auto wg = check_attention_backward_config(narrow, *parse_attention_backward_config("wg:bm64:bn128:a2:t:l:w"), sm90a());
  ASSERT_TRUE(wg);
  EXPECT_EQ(wg->rfind("v: head dim 64", 0), 0u) << *wg;
  EXPECT_FALSE(check_attention_backward_config(g, *parse_attention_backward_config("fa2:bm32:bn64:w4"), sm90a()));
  EXPECT_FALSE(check_attention_backward_config(g, *parse_attention_backward_config("simt:w4:dmax256"), sm90a()));
  auto dbl = check_attention_double_backward_config(g, attention_double_backward_default_config(bwd(DType::bf16, 192, 0, true), sm90a()),
                                                    sm90a());
  ASSERT_TRUE(dbl);
  EXPECT_EQ(*dbl, "v: head dim 128 differs from q's 192; the wg kernels take one head dim, fa2:, simt:, the forward's "
                  "ws: and the backward's column-share wg (c2, c3; head dims above 128) serve d_v < d_qk");
  EXPECT_FALSE(check_attention_double_backward_config(g, *parse_attention_double_backward_config("fa2:bm64:bn16:w4"), sm90a()));
  EXPECT_FALSE(check_attention_double_backward_config(g, *parse_attention_double_backward_config("simt:w4:dmax256"), sm90a()));
  // A variant with v's own head dim: refused by the double backward as by the backward.
  AttentionBackwardSpec windowed = g;
  windowed.variant = "window(16,0)";
  auto var = check_attention_double_backward_config(windowed, *parse_attention_double_backward_config("fa2:bm64:bn16:w4"), sm90a());
  ASSERT_TRUE(var);
  EXPECT_EQ(var->rfind("v: head dim 128 differs from q's 192; attention_double_bwd serves that for plain", 0), 0u) << *var;
}

TEST(AttentionMlaDefaults, SixteenBitPairsRunTensorCoresAndTheRestTheGeneralPath) {
  const AttentionShape shapes[] = {{8, 16, 16, 4096, 4096}, {1, 1, 1, 128, 128}, {1, 64, 8, 4096, 4096}, {1, 8, 8, 4, 4096}};
  for (const Target& target : {sm80(), sm90a()})
    for (auto [d, dv] : {std::pair{192, 128}, {128, 64}, {64, 32}, {96, 64}, {256, 128}, {72, 40}})
      for (bool causal : {false, true})
        for (const AttentionShape& shape : shapes) {
          for (DType t : {DType::f16, DType::bf16}) {
            const AttentionForwardConfig f = attention_forward_default_config(fwd(t, d, dv, causal), shape, target, 132);
            // sm_90a: the ws kernel's plain grid where it fits.
            EXPECT_EQ(f.path, target.arch == "sm_90a" ? ForwardPath::ws : ForwardPath::fa2)
                << d << "/" << dv << " " << to_string(f);
            EXPECT_FALSE(check_attention_forward_config(fwd(t, d, dv, causal), f, target)) << to_string(f);
            const AttentionBackwardConfig b = attention_backward_default_config(bwd(t, d, dv, causal), shape, target, 132);
            // sm_90a above 128 columns: the warp-specialised wide kernel of the tile (V and dO
            // tiles of v's head dim).
            const bool wg = target.arch == "sm_90a" && d > 128;
            const char* want = d <= 192 ? "wg:bm64:bn96:a1:t:l:w" : "wg:bm64:bn48:a1:t:l:w";
            EXPECT_EQ(to_string(b), wg ? want : to_string(b)) << d << "/" << dv;
            EXPECT_EQ(b.path(), wg ? BackwardPath::wgmma : BackwardPath::fa2) << d << "/" << dv << " " << to_string(b);
            EXPECT_FALSE(check_attention_backward_config(bwd(t, d, dv, causal), b, target)) << to_string(b);
            const AttentionBackwardConfig g =
                attention_double_backward_default_config(bwd(t, d, dv, causal), shape, target, 132);
            EXPECT_TRUE(g.as<DoubleBackwardFa2Config>()) << d << "/" << dv << " " << to_string(g);
            EXPECT_FALSE(check_attention_double_backward_config(bwd(t, d, dv, causal), g, target)) << to_string(g);
          }
          EXPECT_TRUE(attention_double_backward_default_config(bwd(DType::f32, d, dv, causal), shape, target, 132)
                          .as<BackwardSimtConfig>());
          EXPECT_EQ(attention_forward_default_config(fwd(DType::f32, d, dv, causal), shape, target, 132).path,
                    ForwardPath::simt);
          EXPECT_EQ(attention_backward_default_config(bwd(DType::f32, d, dv, causal), shape, target, 132).path(),
                    BackwardPath::simt);
          // d_v not a multiple of 8: the general path, also for 16-bit inputs.
          EXPECT_EQ(attention_forward_default_config(fwd(DType::bf16, d, dv - 4, causal), shape, target, 132).path,
                    ForwardPath::simt);
          EXPECT_EQ(attention_backward_default_config(bwd(DType::bf16, d, dv - 4, causal), shape, target, 132).path(),
                    BackwardPath::simt);
        }
  // AMD targets: the general path.
  const Target gfx942 = *parse_target("gfx942");
  EXPECT_EQ(attention_forward_default_config(fwd(DType::bf16, 192, 128, true), shapes[0], gfx942, 304).path,
            ForwardPath::simt);
  EXPECT_EQ(attention_backward_default_config(bwd(DType::bf16, 192, 128, true), shapes[0], gfx942, 304).path(),
            BackwardPath::simt);
  EXPECT_TRUE(attention_double_backward_default_config(bwd(DType::bf16, 192, 128, true), shapes[0], gfx942, 304)
                  .as<BackwardSimtConfig>());
}

TEST(AttentionMlaRender, KernelsTakeHeadDimVAndOneHeadDimKernelsStayAsTheyWere) {
  const AttentionShape shape{8, 16, 16, 4096, 4096};
  const AttentionForwardSpec mla = fwd(DType::bf16, 192, 128, true);
  const KernelSource f = render_attention_forward(mla, attention_forward_default_config(mla, shape, sm80(), 132));
  EXPECT_TRUE(contains(f.source, "/*HeadDim=*/192, /*Variant=*/kgen::NoVariant, /*HeadDimV=*/128>")) << f.source;
  EXPECT_TRUE(contains(f.variant, "attention_fwd.bf16.d192v128.causal.fa2:")) << f.variant;
  // sm_90a: the ws kernel's plain grid, every tail argument named, then HeadDimV.
  const KernelSource ws = render_attention_forward(mla, attention_forward_default_config(mla, shape, sm90a(), 132));
  EXPECT_TRUE(contains(ws.source, "attention_forward_ws<")) << ws.source;
  EXPECT_TRUE(contains(ws.source, "/*StreamK=*/false, /*Variant=*/kgen::NoVariant, /*HeadDimV=*/128>")) << ws.source;
  EXPECT_TRUE(contains(ws.variant, "attention_fwd.bf16.d192v128.causal.ws:")) << ws.variant;
  const AttentionForwardSpec simt = fwd(DType::f32, 100, 36, false);
  const KernelSource s = render_attention_forward(simt, attention_forward_general_config(simt));
  EXPECT_TRUE(contains(s.source, "/*Variant=*/kgen::NoVariant, /*HeadDimV=*/36>")) << s.source;
  EXPECT_EQ(s.variant, "attention_fwd.fp32.d128v36.full.simt:bm4:bn32:dmax128");
  // The plain spec's kernels carry no HeadDimV.
  const AttentionForwardSpec plain{DType::bf16, 192, true};
  EXPECT_FALSE(contains(render_attention_forward(plain, attention_forward_default_config(plain, shape, sm80(), 132)).source,
                        "HeadDimV"));

  const AttentionBackwardSpec g = bwd(DType::bf16, 192, 128, false);
  const AttentionBackwardConfig c = attention_backward_default_config(g, shape, sm90a(), 132);
  const KernelSource pre = render_attention_backward(g, c, BackwardKernel::preprocess);
  EXPECT_EQ(pre.variant, "attention_bwd.bf16.dv128.preprocess");
  EXPECT_TRUE(contains(pre.source, "/*HeadDimV=*/128>")) << pre.source;
  // sm_90a: the wide wgmma kernel (dQ by TMA; the deterministic mode without dQ); sm_80: fa2 with
  // two column splits.
  const KernelSource kv = render_attention_backward(g, c, BackwardKernel::kv_atomic);
  EXPECT_EQ(kv.variant, "attention_bwd.bf16.d192v128.full.wg:bm64:bn96:a1:t:l:w.kv_atomic");
  EXPECT_TRUE(contains(kv.source, "attention_backward_wgmma_kv_wide_ws<")) << kv.source;
  EXPECT_TRUE(contains(kv.source, "/*HeadDim=*/192, /*HeadDimV=*/128>")) << kv.source;
  EXPECT_TRUE(contains(kv.source, "__launch_bounds__(384, 1)")) << kv.source;
  const KernelSource kv_det = render_attention_backward(g, c, BackwardKernel::kv);
  EXPECT_TRUE(contains(kv_det.source, "attention_backward_wgmma_kv_wide<")) << kv_det.source;
  EXPECT_TRUE(attention_backward_dq_by_tma(g, c));
  // The column-share kernel keeps its form for MLA pairs.
  const KernelSource c2 =
      render_attention_backward(g, *parse_attention_backward_config("wg:bm64:bn64:c2"), BackwardKernel::kv_atomic);
  EXPECT_TRUE(contains(c2.source, "attention_backward_wgmma_kv_cols_tma<")) << c2.source;  // dQ by TMA at 192 columns
  EXPECT_TRUE(contains(c2.source, "/*HeadDim=*/192, /*HeadDimV=*/128>")) << c2.source;
  const KernelSource kv80 =
      render_attention_backward(g, attention_backward_default_config(g, shape, sm80(), 132), BackwardKernel::kv_atomic);
  EXPECT_TRUE(contains(kv80.source, "/*HeadDim=*/192, /*Splits=*/2, /*Variant=*/kgen::NoVariant, /*HeadDimV=*/128>"))
      << kv80.source;
  const KernelSource dq = render_attention_backward(g, c, BackwardKernel::dq);
  EXPECT_TRUE(contains(dq.source, "/*HeadDimV=*/128>")) << dq.source;
  // dq_convert does not depend on d_v: the plain kernel.
  EXPECT_EQ(render_attention_backward(g, c, BackwardKernel::dq_convert).source,
            render_attention_backward(bwd(DType::bf16, 192, 0, false), c, BackwardKernel::dq_convert).source);
  const AttentionBackwardSpec gs = bwd(DType::f32, 192, 128, false);
  for (BackwardKernel k : {BackwardKernel::simt_dq, BackwardKernel::simt_dkdv}) {
    const KernelSource src = render_attention_backward(gs, attention_backward_general_config(gs), k);
    EXPECT_TRUE(contains(src.source, "/*HeadDimV=*/128>")) << src.source;
    EXPECT_TRUE(contains(src.variant, "attention_bwd.fp32.d256v128.full.simt:w4:dmax256")) << src.variant;
  }
  EXPECT_FALSE(contains(render_attention_backward(bwd(DType::bf16, 128, 0, false), c, BackwardKernel::preprocess).source,
                        "HeadDimV"));

  // The double backward: its fa2 kernels and the general path's take HeadDimV; its preprocess is
  // the backward's of d_v.
  const AttentionBackwardConfig dc = attention_double_backward_default_config(g, shape, sm90a(), 132);
  ASSERT_TRUE(dc.as<DoubleBackwardFa2Config>()) << to_string(dc);
  EXPECT_EQ(render_attention_double_backward(g, dc, DoubleBackwardKernel::preprocess).variant,
            "attention_bwd.bf16.dv128.preprocess");
  const KernelSource stats = render_attention_double_backward(g, dc, DoubleBackwardKernel::q_stats);
  EXPECT_TRUE(contains(stats.source, "/*HeadDim=*/192, /*Splits=*/1, /*Variant=*/kgen::NoVariant, /*HeadDimV=*/128>"))
      << stats.source;
  EXPECT_TRUE(contains(stats.variant, "attention_double_bwd.bf16.d192v128.full.fa2:")) << stats.variant;
  const KernelSource fused = render_attention_double_backward(g, dc, DoubleBackwardKernel::fused);
  EXPECT_TRUE(contains(fused.source, "/*HeadDim=*/192, /*Splits=*/2, /*Variant=*/kgen::NoVariant, /*HeadDimV=*/128>"))
      << fused.source;
  for (DoubleBackwardKernel k : {DoubleBackwardKernel::simt_q, DoubleBackwardKernel::simt_kv}) {
    const KernelSource src = render_attention_double_backward(gs, attention_backward_general_config(gs), k);
    EXPECT_TRUE(contains(src.source, "/*Variant=*/kgen::NoVariant, /*HeadDimV=*/128>")) << src.source;
    EXPECT_TRUE(contains(src.variant, "attention_double_bwd.fp32.d256v128.full.simt:w4:dmax256")) << src.variant;
  }
  const AttentionBackwardSpec plain_g = bwd(DType::bf16, 192, 0, false);
  EXPECT_FALSE(contains(render_attention_double_backward(plain_g, dc, DoubleBackwardKernel::fused).source, "HeadDimV"));
}

TEST(AttentionMlaWarm, TheWarmPairsDefaultsAreBuiltForNvidiaTargets) {
  for (const Target& target : {sm80(), sm90a()}) {
    const auto fwd_all = attention_forward_all_variants(target);
    const auto bwd_all = attention_backward_all_variants(target);
    const auto dbl_all = attention_double_backward_all_variants(target);
    for (auto [d, dv] : kAttentionWarmHeadDimPairs) {
      const std::string tag = ".d" + std::to_string(d) + "v" + std::to_string(dv) + ".";
      EXPECT_TRUE(std::ranges::any_of(fwd_all, [&](const KernelSource& k) { return contains(k.variant, "attention_fwd.bf16" + tag); }))
          << tag;
      EXPECT_TRUE(std::ranges::any_of(bwd_all, [&](const KernelSource& k) { return contains(k.variant, "attention_bwd.fp16" + tag); }))
          << tag;
      EXPECT_TRUE(std::ranges::any_of(bwd_all, [&](const KernelSource& k) {
        return k.variant == "attention_bwd.bf16.dv" + std::to_string(dv) + ".preprocess";
      })) << tag;
      // fp32's general-path kernels are named by their head-dim bucket.
      const std::string simt_tag = ".d" + std::to_string(attention_simt_bucket(d)) + "v" + std::to_string(dv) + ".";
      for (const std::string& name : {"attention_double_bwd.bf16" + tag, "attention_double_bwd.fp32" + simt_tag})
        EXPECT_TRUE(std::ranges::any_of(dbl_all, [&](const KernelSource& k) { return contains(k.variant, name); })) << name;
    }
  }
  for (const KernelSource& k : attention_forward_all_variants(*parse_target("gfx942")))
    EXPECT_FALSE(contains(k.variant, "v128.")) << k.variant;
}

}  // namespace
}  // namespace kgen
