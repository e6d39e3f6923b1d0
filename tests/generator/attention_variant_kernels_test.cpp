// The attention kernels with a variant (docs/attention.md §8), deviceless: every family that
// serves variants renders and compiles for its targets (NVRTC for sm_80 and sm_90a, clang for an
// AMD target where it is installed), without spills, the double backward's too; the families
// that do not serve them refuse the config with a sentence; the variant spec's text round-trips.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "compiler/amd_compilers.h"
#include "compiler/compiler.h"
#include "generator/attention_backward.h"
#include "generator/attention_forward.h"
#include "generator/variant.h"
#include "generator/variant_ranges.h"
#include "kgen/types.hpp"

namespace kgen {
namespace {

// gpt-oss's composition (window, softcap, sinks) with ALiBi, and a learnable relative bias under
// a document mask: between them every hook of the score step (mask, modification with a slope,
// tensor reads and their gradients, sinks).
std::vector<std::pair<std::string, bool>> variants() {
  const VariantDecl presets = compose_variant({.window = true, .softcap = true, .alibi = true});
  VariantDecl bias;
  bias.score_mod = "score + bias[h][q - k + 4095]";
  bias.mask_mod = "doc[b][q] == doc[b][k]";
  bias.tensors = {{"bias", 2, VariantType::real, true}, {"doc", 2, VariantType::integer, false}};
  return {{Variant::parse(presets).canonical(), true}, {Variant::parse(bias).canonical(), false}};
}

// Compiles `k` for `arch`; its spills (stores plus loads, bytes) may not pass `max_spill`.
void expect_compiles(const KernelSource& k, const std::string& arch, int max_spill) {
  SCOPED_TRACE(arch + " " + k.variant);
  const Target target = *parse_target(arch);
  try {
    const CompiledBinary bin = compiler_for(target).compile(k, target);
    EXPECT_FALSE(bin.image.empty());
    EXPECT_LE(bin.resources.spill_stores + bin.resources.spill_loads, max_spill) << "spill bytes";
  } catch (const Error& e) {
    ADD_FAILURE() << e.what();
  }
}

// The widest explicit forms keep more of the variant's values than their registers hold; they
// compile and run (slower). The defaults (narrowed for variants) must not spill.
constexpr int kWideFormSpills = 4096;

// The range-table kernel (one for every variant) compiles for each vendor, without spills.
TEST(AttentionVariantKernels, RangeTableKernelCompiles) {
  const KernelSource k = render_variant_ranges();
  expect_compiles(k, "sm_80", 0);
  expect_compiles(k, "sm_90a", 0);
  if (amd_clang_description().find("unavailable") == std::string::npos) expect_compiles(k, "gfx942", 0);
}

TEST(AttentionVariantKernels, ForwardFamiliesCompileAndTheDefaultsDoNotSpill) {
  for (const auto& [canonical, sinks] : variants()) {
    const AttentionForwardSpec spec{DType::bf16, 128, true, canonical, sinks};
    std::vector<std::string> configs = {"fa2:bm128:bn64:w4:s2", "ws:bm128:bn128:s2:pp1", "ws:bm128:bn176:s2:pp1:persist",
                                        "simt:bm4:bn32:dmax128"};
    if (!sinks) configs.push_back("ws:bm128:bn64:s2:pp1:split");
    for (const std::string& text : configs) {
      const AttentionForwardConfig c = *parse_attention_forward_config(text);
      const std::string arch = c.path == ForwardPath::ws ? "sm_90a" : "sm_80";
      ASSERT_FALSE(check_attention_forward_config(spec, c, *parse_target(arch))) << text;
      for (const KernelSource& k : render_attention_forward_kernels(spec, c)) expect_compiles(k, arch, kWideFormSpills);
    }
    for (const char* arch : {"sm_80", "sm_90a"})
      for (int n : {1024, 4096, 16384}) {
        const AttentionForwardConfig c =
            attention_forward_default_config(spec, {4, 16, 16, n, n}, *parse_target(arch), 132);
        for (const KernelSource& k : render_attention_forward_kernels(spec, c)) expect_compiles(k, arch, 0);
      }
    // The general path is the AMD targets' variant kernel too (compile-verified).
    if (amd_clang_description().find("unavailable") == std::string::npos)
      expect_compiles(render_attention_forward(spec, *parse_attention_forward_config("simt:bm4:bn32:dmax128")),
                      "gfx942", kWideFormSpills);
  }
  // A mask of indices and scalars alone keeps 128-key tiles.
  const AttentionForwardSpec window{DType::bf16, 128, true, Variant::parse(compose_variant({.window = true})).canonical()};
  for (int n : {4096, 16384}) {
    const AttentionForwardConfig c =
        attention_forward_default_config(window, {4, 16, 16, n, n}, *parse_target("sm_90a"), 132);
    EXPECT_EQ(c.block_n, 128) << to_string(c);
    for (const KernelSource& k : render_attention_forward_kernels(window, c)) expect_compiles(k, "sm_90a", 0);
  }
}

// The backward's defaults for variants. On sm_90a up to d = 128 the atomic mode runs the
// warp-specialised wgmma kernel (64-row query tiles); the deterministic mode, wider head dims and
// sm_80 run the fa2 kernels narrowed to 32-row query tiles, which still spill a little at
// d >= 128 (ptxas: 4–88 bytes, the deterministic dQ kernel the most); the bound holds them there.
constexpr int kBackwardSpills = 96;

TEST(AttentionVariantKernels, BackwardFamiliesCompile) {
  const Target sm90 = *parse_target("sm_90a");
  for (const auto& [canonical, sinks] : variants()) {
    for (int d : {64, 128, 256}) {
      SCOPED_TRACE("d = " + std::to_string(d));
      const AttentionBackwardSpec spec{DType::bf16, d, false, canonical, sinks};
      const AttentionShape shape{2, 8, 8, 4096, 4096};
      const AttentionBackwardConfig c = attention_backward_default_config(spec, shape, sm90, 132);
      if (d <= 128) {
        const auto* wg = c.as<BackwardWgmmaConfig>();
        EXPECT_TRUE(wg && wg->warp_specialised && !wg->persistent && wg->query_rows == 64) << to_string(c);
        EXPECT_FALSE(check_attention_backward_config(spec, c, sm90)) << to_string(c);
        for (BackwardKernel kernel : attention_backward_kernels(c, false))
          expect_compiles(render_attention_backward(spec, c, kernel), "sm_90a", kBackwardSpills);
      }
      // The deterministic mode (and views without tensor maps) take the fa2 kernels.
      const AttentionBackwardConfig fa2 = attention_backward_variant_config(spec, c, shape, 132, true, true);
      EXPECT_EQ(fa2.path(), BackwardPath::fa2) << to_string(fa2);
      EXPECT_EQ(to_string(attention_backward_variant_config(spec, c, shape, 132, false, false)), to_string(fa2));
      for (bool deterministic : {false, true})
        for (BackwardKernel kernel : attention_backward_kernels(fa2, deterministic))
          expect_compiles(render_attention_backward(spec, fa2, kernel), "sm_80", d == 64 ? 0 : kBackwardSpills);
      if (sinks) expect_compiles(render_attention_backward(spec, fa2, BackwardKernel::sinks), "sm_90a", 0);
      const AttentionBackwardConfig simt = attention_backward_general_config(spec);
      for (BackwardKernel kernel : attention_backward_kernels(simt, true))
        expect_compiles(render_attention_backward(spec, simt, kernel), "sm_80", kWideFormSpills);
    }
  }
}

// The double backward of variants: the wgmma kernels on sm_90a (32-wide score tiles up to 128
// columns where the variant modifies scores, 64-wide at d = 64 for masks alone; two warpgroups
// sharing the columns above), fa2 on sm_80 and in every explicit fa2 form, the general path for
// fp32, odd head dims and the AMD targets (packed batches: below). sm_80's defaults at d = 64
// do not spill; above, the fa2 fused kernel (at 255 registers plain) spills 64–160 bytes with a
// variant. On sm_90a the fused kernel of every preset with sinks spills 24 bytes at d = 128 and
// 256 (at 255 registers).
constexpr int kDoubleBackwardSpills = 192;
constexpr int kWgmmaDoubleBackwardSpills = 32;

TEST(AttentionVariantKernels, DoubleBackwardFamiliesCompileAndTheDefaultsDoNotSpill) {
  for (const auto& [canonical, sinks] : variants()) {
    for (int d : {64, 128, 256}) {
      SCOPED_TRACE("d = " + std::to_string(d));
      const AttentionBackwardSpec spec{DType::bf16, d, true, canonical, sinks};
      for (const char* arch : {"sm_80", "sm_90a"}) {
        const Target target = *parse_target(arch);
        const AttentionBackwardConfig c = attention_double_backward_default_config(spec, {1, 8, 8, 4096, 4096}, target, 132);
        const bool hopper = std::string(arch) == "sm_90a";
        EXPECT_EQ(c.path(), hopper ? BackwardPath::wgmma : BackwardPath::fa2) << to_string(c);
        if (hopper && d <= 128) {
          EXPECT_EQ(c.as<DoubleBackwardWgmmaConfig>()->tile, 32) << "a score modification takes 32-wide score tiles";
        }
        for (DoubleBackwardKernel kernel : attention_double_backward_kernels(c))
          expect_compiles(render_attention_double_backward(spec, c, kernel), arch,
                          hopper ? kWgmmaDoubleBackwardSpills : d == 64 ? 0 : kDoubleBackwardSpills);
      }
    }
    const AttentionBackwardSpec wide{DType::f32, 72, false, canonical, sinks};
    const AttentionBackwardConfig simt = attention_double_backward_default_config(wide, *parse_target("sm_80"));
    EXPECT_EQ(simt.path(), BackwardPath::simt) << to_string(simt);
    for (DoubleBackwardKernel kernel : attention_double_backward_kernels(simt)) {
      expect_compiles(render_attention_double_backward(wide, simt, kernel), "sm_80", 0);
      if (amd_clang_description().find("unavailable") == std::string::npos)
        expect_compiles(render_attention_double_backward(wide, simt, kernel), "gfx942", kWideFormSpills);
    }
  }
  const AttentionBackwardSpec window{DType::bf16, 64, true, Variant::parse(compose_variant({.window = true})).canonical()};
  EXPECT_EQ(attention_double_backward_default_config(window, *parse_target("sm_90a")).as<DoubleBackwardWgmmaConfig>()->tile, 64)
      << "a mask alone keeps the 64-wide score tiles at d = 64";
}

// The double backward of packed batches (docs/attention.md §9): every family takes them, the
// defaults as for dense batches (wgmma on sm_90a, fa2 on sm_80, simt for fp32 and odd head dims),
// fa2 by name on sm_90a too, plain and with a window + softcap variant, within the dense
// variants' spill bounds; the
// fused grid holds its two parts in equal halves of the longest sequence's tiles.
TEST(AttentionVariantKernels, PackedDoubleBackwardRunsEveryFamily) {
  const std::string window_softcap =
      Variant::parse(compose_variant({.window = true, .softcap = true})).canonical();
  for (const std::string& canonical : {std::string(), window_softcap})
    for (int d : {64, 128}) {
      SCOPED_TRACE("d = " + std::to_string(d) + " " + canonical);
      AttentionBackwardSpec spec{DType::bf16, d, true, canonical};
      spec.packed = true;
      // sm_80's fa2 default form (16-key score tiles at d = 128: registers).
      const AttentionBackwardConfig fa2 = DoubleBackwardFa2Config{.rows = 64, .tile = d == 64 ? 32 : 16, .warps = 4};
      for (const char* arch : {"sm_80", "sm_90a"}) {
        const Target target = *parse_target(arch);
        const bool hopper = std::string(arch) == "sm_90a";
        const AttentionBackwardConfig c = attention_double_backward_default_config(spec, {12, 4, 4, 2000, 2000}, target, 132);
        EXPECT_EQ(c.path(), hopper ? BackwardPath::wgmma : BackwardPath::fa2) << to_string(c);
        std::vector<AttentionBackwardConfig> configs = {c};
        if (hopper) configs.push_back(fa2);
        for (const AttentionBackwardConfig& config : configs) {
          EXPECT_FALSE(check_attention_double_backward_config(spec, config, target)) << to_string(config);
          for (DoubleBackwardKernel kernel : attention_double_backward_kernels(config)) {
            const KernelSource k = render_attention_double_backward(spec, config, kernel);
            if (kernel != DoubleBackwardKernel::preprocess) {
              EXPECT_NE(k.source.find("kPacked = true"), std::string::npos) << k.variant;
            }
            expect_compiles(k, arch, config.path() == BackwardPath::wgmma ? kWgmmaDoubleBackwardSpills
                                     : d == 64                          ? 0
                                                                        : kDoubleBackwardSpills);
          }
        }
      }
    }
  AttentionBackwardSpec odd{DType::f32, 33, true};
  odd.packed = true;
  const AttentionBackwardConfig simt = attention_double_backward_default_config(odd, *parse_target("sm_90a"));
  EXPECT_EQ(simt.path(), BackwardPath::simt) << to_string(simt);
  for (DoubleBackwardKernel kernel : attention_double_backward_kernels(simt))
    expect_compiles(render_attention_double_backward(odd, simt, kernel), "sm_80", 0);
  // The spec text names packed batches and reads back.
  AttentionBackwardSpec spec{DType::bf16, 64, true};
  spec.packed = true;
  EXPECT_EQ(double_backward_variant_key(spec), "attention_double_bwd.bf16.d64.causal.packed");
  EXPECT_EQ(parse_double_backward_variant_key(double_backward_variant_key(spec)), spec);
  // The fused grid: 3 sequences of at most 300 queries and 1000 keys, 64-row blocks: two halves of
  // ceil(1000 / 64) = 16 blocks (dense: 5 + 16).
  const AttentionBackwardConfig wg = DoubleBackwardWgmmaConfig{.tile = 64, .rows = 64};
  const AttentionShape shape{3, 4, 4, 300, 1000};
  EXPECT_EQ(attention_double_backward_grid(wg, DoubleBackwardKernel::fused, shape, 132, false, 64, true).x, 32u);
  EXPECT_EQ(attention_double_backward_grid(wg, DoubleBackwardKernel::fused, shape, 132, false, 64).x, 21u);
  EXPECT_EQ(attention_double_backward_grid(wg, DoubleBackwardKernel::fused, shape, 132, false, 64, true).z, 3u);
  // What remains refused: v with a head dim of its own in a packed batch.
  AttentionBackwardSpec mla{DType::bf16, 192, true};
  mla.packed = true, mla.head_dim_v = 128;
  const auto why = check_attention_double_backward_config(mla, attention_backward_general_config(mla),
                                                          *parse_target("sm_90a"));
  ASSERT_TRUE(why);
  EXPECT_EQ(why->rfind("v: head dim 128 differs from q's 192; attention_double_bwd serves that for plain and causal "
                       "attention only, not with a variant, sinks, packed batches",
                       0),
            0u)
      << *why;
}

// Packed batches on sm_90a: the warp-specialised kernel unsplit (GQA groups included), without
// spills; the forms it does not serve say which do.
TEST(AttentionVariantKernels, PackedBackwardRunsTheWarpSpecialisedKernel) {
  const Target sm90 = *parse_target("sm_90a");
  for (int d : {64, 128}) {
    AttentionBackwardSpec spec{DType::bf16, d, true};
    spec.packed = true;
    const AttentionBackwardConfig c = attention_backward_default_config(spec, {1, 64, 8, 16384, 16384}, sm90, 132);
    const auto* wg = c.as<BackwardWgmmaConfig>();
    EXPECT_TRUE(wg && wg->warp_specialised && wg->group_splits == 1) << to_string(c);
    for (BackwardKernel kernel : attention_backward_kernels(c, false))
      expect_compiles(render_attention_backward(spec, c, kernel), "sm_90a", 0);
    for (const char* refused : {"wg:bm64:bn128:a2:t:l:w:p", "wg:bm64:bn128:a2:t:l:w:g4", "wg:bm64:bn128:a2:t"}) {
      const auto why = check_attention_backward_config(spec, *parse_attention_backward_config(refused), sm90);
      ASSERT_TRUE(why) << refused;
      EXPECT_NE(why->find("warp-specialised"), std::string::npos) << *why;
    }
  }
}

TEST(AttentionVariantKernels, FamiliesWithoutVariantsSayWhichDo) {
  const AttentionForwardSpec spec{DType::bf16, 128, false, variants()[0].first, true};
  const auto why = check_attention_forward_config(spec, *parse_attention_forward_config("wg:bm128:bn128:s2"),
                                                  *parse_target("sm_90a"));
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("ws:, fa2: and simt:"), std::string::npos) << *why;
  EXPECT_TRUE(check_attention_forward_config(spec, *parse_attention_forward_config("ws:bm128:bn64:s2:pp1:split"),
                                             *parse_target("sm_90a")));
  // The default never picks a refused form, and never stream-K.
  for (int n : {512, 1024, 4096, 16384}) {
    const AttentionForwardConfig c =
        attention_forward_default_config(spec, {1, 16, 16, n, n}, *parse_target("sm_90a"), 132);
    EXPECT_FALSE(check_attention_forward_config(spec, c, *parse_target("sm_90a"))) << to_string(c);
    EXPECT_FALSE(c.stream_k);
  }
}

TEST(AttentionVariantKernels, SpecTextRoundTrips) {
  for (const auto& [canonical, sinks] : variants()) {
    const AttentionForwardSpec f{DType::f16, 64, true, canonical, sinks};
    EXPECT_EQ(parse_attention_forward_spec(to_string(f)), f) << to_string(f);
    const AttentionBackwardSpec b{DType::bf16, 128, false, canonical, sinks};
    EXPECT_EQ(parse_attention_backward_spec(to_string(b)), b) << to_string(b);
  }
  EXPECT_FALSE(parse_attention_forward_spec("attention_fwd.bf16.d64.full.var{}"));
  EXPECT_FALSE(parse_attention_forward_spec("attention_fwd.bf16.d64.full.var{score=score"));
}

}  // namespace
}  // namespace kgen
