// attention_backward and attention_double_backward on the GPU against the fp64 references, on
// NaN-poisoned outputs and workspace (docs/attention.md §5), and the naive GPU references against the
// CPU ones. Labelled `gpu`; every test skips cleanly on a machine without one.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>

#include "generator/attention_backward.h"
#include "check/attention_backward_harness.h"
#include "driver/device.h"
#include "driver/gpu_driver.h"
#include "tests/gpu/require_gpu.h"

namespace kgen {
namespace {

std::string describe(const AttentionCase& c, const BackwardBenchOptions& o, bool dbl, const HarnessCheck& r) {
  return std::string(dbl ? "double backward " : "backward ") + to_string(c) + " " + to_string(o, dbl) + "\n" +
         to_string(r);
}

struct Shape {
  int b, hq, hkv, nq, nk;
};

// Small sizes, every combination is run: n_q != n_k both ways (causal n_q > n_k has fully
// masked rows), n = 1, 7, 63 (no multiple of any tile); GQA 1/4/8 comes from hkv below.
const std::pair<int, int> kSmallLengths[] = {{1, 1}, {7, 7}, {63, 63}, {7, 63}, {63, 7}, {1, 7}, {63, 1}};
const int kKvHeads[] = {8, 2, 1};  // with hq = 8: GQA 1, 4, 8
// Long sequences, one pass each (layout, determinism, cotangents rotate).
const Shape kLargeShapes[] = {{1, 8, 1, 1000, 1000}, {1, 4, 4, 1337, 1000}, {2, 8, 2, 1000, 1337}};
const Shape kManyWaves{2, 16, 8, 1100, 1037};

AttentionCase make_case(DType dtype, int d, bool causal, const Shape& s, Layout layout, std::uint64_t seed) {
  AttentionCase c;
  c.dtype = dtype, c.head_dim = d, c.causal = causal, c.layout = layout, c.seed = seed;
  c.batch = s.b, c.heads_q = s.hq, c.heads_kv = s.hkv, c.n_q = s.nq, c.n_k = s.nk;
  return c;
}

// Runs the backward (or double backward) of `c` (c.config: "" = the launch's choice) on
// NaN-poisoned outputs and expects it to match the reference.
void expect_pass(const AttentionCase& c, const BackwardBenchOptions& o, bool dbl) {
  const HarnessCheck r = dbl ? check_attention_double_backward(c, o) : check_attention_backward(c, o);
  EXPECT_TRUE(r.pass) << (c.config.empty() ? "" : c.config + " ") << describe(c, o, dbl, r);
}

using Param = std::tuple<DType, int, bool>;

std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  return std::string(dtype_name(std::get<0>(info.param))) + "_d" + std::to_string(std::get<1>(info.param)) +
         (std::get<2>(info.param) ? "_causal" : "_full");
}

// Runs the (double) backward over the small grid (full product of lengths, GQA, layouts and
// determinism; cotangent subsets and workspace ownership rotate) and the large shapes.
void run_grid(DType dtype, int d, bool causal, bool dbl) {
  std::uint64_t seed = 100000 * d + 1000 * int(dtype) + (causal ? 500 : 0) + (dbl ? 7 : 0);
  int index = 0;
  auto check_one = [&](const Shape& s, Layout layout, bool deterministic) {
    BackwardBenchOptions o;
    o.deterministic = deterministic;
    o.external_workspace = index % 3 != 2;
    const int subset = 7 - index % 8;  // all three first, none last
    o.gq = subset & 1, o.gk = subset & 2, o.gv = subset & 4;
    ++index;
    expect_pass(make_case(dtype, d, causal, s, layout, seed++), o, dbl);
  };
  for (auto [nq, nk] : kSmallLengths)
    for (int hkv : kKvHeads)
      for (Layout layout : {Layout::bhnd, Layout::bnhd})
        for (bool deterministic : {false, true}) check_one(Shape{1, 8, hkv, nq, nk}, layout, deterministic);
  for (const Shape& s : kLargeShapes) check_one(s, index % 2 ? Layout::bnhd : Layout::bhnd, index % 3 == 0);
  // Enough key blocks (b·h_kv·⌈n_k / 128⌉ = 144) to fill an H100/H200: the launch takes the
  // big-grid defaults (on sm_90a the decoupled wgmma kernels), which the shapes above do not reach.
  check_one(kManyWaves, Layout::bnhd, false);
}

class AttentionBackwardGpu : public ::testing::TestWithParam<Param> {};

TEST_P(AttentionBackwardGpu, MatchesReferenceOnOddShapesLayoutsGqaAndDeterminism) {
  KGEN_REQUIRE_GPU();
  auto [dtype, d, causal] = GetParam();
  run_grid(dtype, d, causal, false);
}

TEST_P(AttentionBackwardGpu, DoubleBackwardMatchesReferenceForEveryCotangentSubset) {
  KGEN_REQUIRE_GPU();
  auto [dtype, d, causal] = GetParam();
  run_grid(dtype, d, causal, true);
}

INSTANTIATE_TEST_SUITE_P(SixteenBit, AttentionBackwardGpu,
                         ::testing::Combine(::testing::Values(DType::f16, DType::bf16),
                                            ::testing::Values(32, 64, 96, 128, 256), ::testing::Bool()),
                         param_name);
// Every other multiple of 8: tiles padded past the head dim; above 128 the key-major kernel
// shares the dK/dV columns between two warpgroups (sm_90a) or splits them over two blocks, and
// the double backward splits its Q̄/dŌ and K̄/V̄ columns.
INSTANTIATE_TEST_SUITE_P(TensorCoreHeadDims, AttentionBackwardGpu,
                         ::testing::Combine(::testing::Values(DType::f16, DType::bf16),
                                            ::testing::Values(8, 40, 80, 104, 112, 136, 160, 192, 200, 248), ::testing::Bool()),
                         param_name);
INSTANTIATE_TEST_SUITE_P(Fp32, AttentionBackwardGpu,
                         ::testing::Combine(::testing::Values(DType::f32), ::testing::Values(32, 64, 80, 96, 128, 256),
                                            ::testing::Bool()),
                         param_name);

// One wgmma backward config against the reference: the small grid (GQA 1/4/8, both layouts,
// atomic and deterministic dQ rotating), the large shapes and a many-wave shape.
void check_wgmma_config(DType dtype, int d, bool causal, const AttentionBackwardConfig& config, std::uint64_t& seed) {
  auto check_one = [&](const Shape& s, Layout layout, bool deterministic) {
    AttentionCase c = make_case(dtype, d, causal, s, layout, seed++);
    c.config = to_string(config);
    BackwardBenchOptions o;
    o.deterministic = deterministic;
    expect_pass(c, o, false);
  };
  int i = 0;
  for (auto [nq, nk] : kSmallLengths)
    for (int hkv : kKvHeads) {
      check_one(Shape{1, 8, hkv, nq, nk}, i % 2 ? Layout::bnhd : Layout::bhnd, i % 3 == 2);
      ++i;
    }
  for (const Shape& s : kLargeShapes) check_one(s, i++ % 2 ? Layout::bnhd : Layout::bhnd, false);
  check_one(Shape{2, 16, 4, 2048, 2048}, Layout::bnhd, false);
}

// The Hopper wgmma key-major kernels (sm_90a devices only): every wg config of the space on the
// small grid (GQA 1/4/8, both layouts, atomic and deterministic dQ) and on a large many-wave shape.
TEST(AttentionBackwardGpuWgmma, EveryWgmmaConfigOnSmallAndLargeShapes) {
  KGEN_REQUIRE_GPU();
  const Target& target = device_info(0).target;
  std::uint64_t seed = 31337;
  int tested = 0;
  GpuTestSplit split;
  for (DType dtype : {DType::bf16, DType::f16})
    for (int d : {64, 128, 80, 40, 256, 192, 160, 136})  // 80, 40, 160, 136: tiles padded past the head dim
      for (bool causal : {false, true})
        for (const auto& config : attention_backward_config_space({dtype, d, causal}, target)) {
          if (config.path() != BackwardPath::wgmma) continue;
          ++tested;
          if (!split.next()) continue;
          check_wgmma_config(dtype, d, causal, config, seed);
        }
  if (target.arch == "sm_90a") {
    EXPECT_GT(tested, 0) << "no wgmma config in the space on an sm_90a device";
  }
  if (tested == 0) GTEST_SKIP() << "the device has no wgmma (" << target.arch << ")";
}

// The decoupled kernel's explicit forms outside the tuner's space: Q/dO loads by TMA (":l"), with
// and without dQ by TMA. The same grid as above (bf16 at the tile head dims, fp16 on padded
// tiles), plus a shape whose key blocks are odd in number (n_k = 1337) with a mask and GQA.
TEST(AttentionBackwardGpuWgmma, ExplicitFormsOnSmallAndLargeShapes) {
  KGEN_REQUIRE_GPU();
  const Target& target = device_info(0).target;
  if (target.arch != "sm_90a") GTEST_SKIP() << "the device has no wgmma (" << target.arch << ")";
  std::uint64_t seed = 7331;
  for (const char* text : {"wg:bm64:bn128:a1:l", "wg:bm64:bn128:a2:l", "wg:bm64:bn128:a2:t:l"})
    for (int d : {64, 128, 80, 40})
      for (bool causal : {false, true}) {
        const DType dtype = d == 64 || d == 128 ? DType::bf16 : DType::f16;
        const auto config = *parse_attention_backward_config(text);
        check_wgmma_config(dtype, d, causal, config, seed);
        AttentionCase c = make_case(dtype, d, causal, Shape{3, 8, 2, 700, 1337}, Layout::bhnd, seed++);
        c.config = text;
        expect_pass(c, BackwardBenchOptions{}, false);
      }
}

// An explicit config on the grid of check_wgmma_config, plus the shape whose key blocks are odd in
// number with GQA 4, and 97 queries against 500 keys (one partial query tile; with the mask, the
// causal diagonal crosses the last key blocks).
void check_config_on_odd_shapes(DType dtype, int d, bool causal, const char* text, std::uint64_t& seed) {
  check_wgmma_config(dtype, d, causal, *parse_attention_backward_config(text), seed);
  for (const Shape& s : {Shape{3, 8, 2, 700, 1337}, Shape{1, 4, 4, 97, 500}}) {
    AttentionCase c = make_case(dtype, d, causal, s, Layout::bhnd, seed++);
    c.config = text;
    expect_pass(c, BackwardBenchOptions{}, false);
  }
}

// The column-share kernel at the 256-column tile (wg:bm64:bn64:c2, head dims 200-256; there the
// deterministic mode and the form for views without tensor maps): at head dim 256 its atomic mode
// stages dQ in the finished stage's Q and dO tiles and adds it by TMA (the next loads of that stage
// wait for the reads), below by red_add2. At 256 in both dtypes and at a padded head dim, both
// masks.
TEST(AttentionBackwardGpuWgmma, ColumnShareAtTwoHundredFiftySixColumns) {
  KGEN_REQUIRE_GPU();
  const Target& target = device_info(0).target;
  if (target.arch != "sm_90a") GTEST_SKIP() << "the device has no wgmma (" << target.arch << ")";
  std::uint64_t seed = 2562;
  GpuTestSplit split;
  for (const auto& [dtype, d] : {std::pair{DType::bf16, 256}, std::pair{DType::f16, 256}, std::pair{DType::f16, 232}})
    for (bool causal : {false, true})
      if (split.next()) check_config_on_odd_shapes(dtype, d, causal, "wg:bm64:bn64:c2", seed);
}

// The warp-specialised wide kernel (wg:bm64:bn96:a1:t:l:w at head dims 136-192,
// wg:bm64:bn48:a1:t:l:w at 200-256; the defaults there) at the tile's head dim and padded ones,
// both masks and dtypes (check_config_on_odd_shapes).
TEST(AttentionBackwardGpuWgmma, WideWarpSpecialisedOnSmallAndLargeShapes) {
  KGEN_REQUIRE_GPU();
  const Target& target = device_info(0).target;
  if (target.arch != "sm_90a") GTEST_SKIP() << "the device has no wgmma (" << target.arch << ")";
  std::uint64_t seed = 4242;
  GpuTestSplit split;
  for (const auto& [text, dims] : {std::pair{"wg:bm64:bn96:a1:t:l:w", std::array{192, 160, 136}},
                                   std::pair{"wg:bm64:bn48:a1:t:l:w", std::array{256, 232, 200}}})
    for (int d : dims)
      for (bool causal : {false, true})
        for (DType dtype : {DType::bf16, DType::f16})
          if (split.next()) check_config_on_odd_shapes(dtype, d, causal, text, seed);
}

// Decoupled forms outside the tuner's space, or new in it, on the grid of check_wgmma_config:
// 128-row query tiles (wg:bm128, the 64-column tile) at the tile's head dim and padded ones;
// group splits (":g2", ":g4", ":g8": each K/V head's query heads over 2, 4 or 8 blocks, dK and
// dV summed in fp32) on both tiles; 128-row tiles with dQ by TMA (":t:l:w", a two-stage ring);
// persistent grids (":p", alone and with group splits: key blocks of several heads and batches
// per block, the rings' phases running on across them, with a shape of more key blocks than
// SMs).
// Both masks (the causal diagonal cuts a 128-key block by 128-row tiles), plus the
// odd key-block shape (GQA 4) with d_o expanded (a zero stride) for the forms without TMA loads
// (a config named with :l refuses such a view), and a group of 3 (group splits run unsplit).
class DecoupledForms : public ::testing::TestWithParam<const char*> {};

TEST_P(DecoupledForms, OnSmallAndLargeShapes) {
  KGEN_REQUIRE_GPU();
  const Target& target = device_info(0).target;
  if (target.arch != "sm_90a") GTEST_SKIP() << "the device has no wgmma (" << target.arch << ")";
  const char* text = GetParam();
  const auto config = *parse_attention_backward_config(text);
  std::uint64_t seed = 9128 + std::string(text).size();
  const BackwardWgmmaConfig& wg = *config.as<BackwardWgmmaConfig>();
  const std::vector<int> dims = wg.query_rows == 128 ? std::vector<int>{64, 40, 8} : std::vector<int>{128, 80, 64};
  for (int d : dims)
    for (bool causal : {false, true}) {
      const DType dtype = d == 64 || d == 128 ? DType::bf16 : DType::f16;
      check_wgmma_config(dtype, d, causal, config, seed);
      std::vector<Shape> shapes{Shape{3, 8, 2, 700, 1337}, Shape{1, 6, 2, 300, 257}};
      // Persistent grids: more key blocks than SMs, so blocks walk several rounds (with the
      // mask, the pairs of key blocks; 19 of them, the middle one without a partner).
      if (wg.persistent) shapes.push_back(Shape{3, 8, 4, 1100, 2311});
      for (const Shape& s : shapes) {
        AttentionCase c = make_case(dtype, d, causal, s, Layout::bhnd, seed++);
        c.config = text;
        BackwardBenchOptions o;
        o.expand_d_o = !wg.tma_loads;
        expect_pass(c, o, false);
      }
    }
}

INSTANTIATE_TEST_SUITE_P(AttentionBackwardGpuWgmma, DecoupledForms,
                         ::testing::Values("wg:bm128:bn128:a1:l", "wg:bm128:bn128:a2:l", "wg:bm128:bn128:a1",
                                           "wg:bm128:bn128:a2", "wg:bm64:bn128:a2:t:l:g2", "wg:bm64:bn128:a1:t:l:g2",
                                           "wg:bm64:bn128:a2:t:g2", "wg:bm128:bn128:a2:l:g2",
                                           "wg:bm64:bn128:a2:t:l:w", "wg:bm64:bn128:a1:t:l:w",
                                           "wg:bm64:bn128:a1:t:l:w:g2", "wg:bm128:bn128:a2:l:w",
                                           "wg:bm64:bn128:a2:t:l:w:g8", "wg:bm64:bn128:a2:t:g4",
                                           "wg:bm128:bn128:a2:l:w:g4", "wg:bm128:bn128:a2:t:l:w",
                                           "wg:bm128:bn128:a1:t:l:w:g2", "wg:bm64:bn128:a2:t:l:w:p",
                                           "wg:bm64:bn128:a2:t:l:w:p:g8"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           std::string name = info.param;
                           for (char& ch : name)
                             if (ch == ':') ch = '_';
                           return name;
                         });

// d_o as an expanded view (zero stride along n, as torch's expand gives): it has no tensor map,
// so where the default loads Q and dO by TMA (sm_90a) the launch serves it with cp.async loads,
// at d = 112 with a mask by the block-synchronous kernel
// (attention_backward_config_without_tma_loads). Big grids reach those defaults; small ones and
// the deterministic mode run as they always do, and the double backward reads d_o as well.
TEST(AttentionBackwardGpu, ExpandedGradientOnEveryPath) {
  KGEN_REQUIRE_GPU();
  std::uint64_t seed = 9119;
  for (int d : {112, 64, 128, 104, 40})
    for (bool causal : {true, false}) {
      const DType dtype = d == 64 || d == 112 ? DType::bf16 : DType::f16;
      BackwardBenchOptions o;
      o.expand_d_o = true;
      for (const Shape& s : {kManyWaves, Shape{2, 16, 16, 2048, 2048}, Shape{1, 8, 2, 63, 7}})
        expect_pass(make_case(dtype, d, causal, s, Layout::bnhd, seed++), o, false);
      o.deterministic = true;
      expect_pass(make_case(dtype, d, causal, Shape{1, 8, 2, 1000, 1337}, Layout::bhnd, seed++), o, false);
      o.deterministic = false;
      expect_pass(make_case(dtype, d, causal, Shape{1, 4, 4, 1337, 1000}, Layout::bhnd, seed++), o, true);
    }
}

// The Hopper wgmma double backward (sm_90a devices only): every wg config of its space on the
// small grid (GQA 1/4/8, both layouts, determinism and the cotangent subsets rotating) and on the
// large shapes.
TEST(AttentionBackwardGpuWgmma, EveryDoubleBackwardWgmmaConfigOnSmallAndLargeShapes) {
  KGEN_REQUIRE_GPU();
  const Target& target = device_info(0).target;
  std::uint64_t seed = 4242;
  int tested = 0;
  GpuTestSplit split;
  for (DType dtype : {DType::bf16, DType::f16})
    for (int d : {64, 128, 80, 40, 256, 200, 160})  // 80, 40, 200, 160: tiles padded past the head dim
      for (bool causal : {false, true})
        for (const auto& config : attention_double_backward_config_space({dtype, d, causal}, target)) {
          if (config.path() != BackwardPath::wgmma) continue;
          ++tested;
          if (!split.next()) continue;
          int i = 0;
          auto check_one = [&](const Shape& s, Layout layout, bool deterministic) {
            AttentionCase c = make_case(dtype, d, causal, s, layout, seed++);
            c.config = to_string(config);
            BackwardBenchOptions o;
            o.deterministic = deterministic;
            const int subset = 7 - i % 8;  // all three first, none last
            o.gq = subset & 1, o.gk = subset & 2, o.gv = subset & 4;
            ++i;
            expect_pass(c, o, true);
          };
          for (auto [nq, nk] : kSmallLengths)
            for (int hkv : kKvHeads) check_one(Shape{1, 8, hkv, nq, nk}, i % 2 ? Layout::bnhd : Layout::bhnd, i % 3 == 2);
          for (const Shape& s : kLargeShapes) check_one(s, i % 2 ? Layout::bnhd : Layout::bhnd, false);
        }
  if (target.arch == "sm_90a") {
    EXPECT_GT(tested, 0) << "no wgmma double backward config in the space on an sm_90a device";
  }
  if (tested == 0) GTEST_SKIP() << "the device has no wgmma (" << target.arch << ")";
}

// Many waves of blocks: every element of every group checked against the GPU reference, then
// timed (checked first, docs/attention.md §5 rule 1) and the TFLOPS printed with their convention.
TEST(AttentionBackwardGpuLarge, ManyWavesCheckedThenTimed) {
  KGEN_REQUIRE_GPU();
  for (bool causal : {false, true})
    for (bool dbl : {false, true}) {
      AttentionCase c;
      c.dtype = DType::bf16, c.head_dim = 128, c.causal = causal, c.layout = Layout::bnhd;
      c.batch = 2, c.heads_q = 16, c.heads_kv = dbl ? 16 : 4, c.n_q = 4096, c.n_k = 4096, c.seed = 77 + causal;
      BackwardBenchOptions o;
      o.deterministic = causal;  // one of each
      std::unique_ptr<AttentionGradientBench> bench;
      if (dbl) bench = std::make_unique<AttentionDoubleBackwardBench>(c, o);
      else bench = std::make_unique<AttentionBackwardBench>(c, o);
      const HarnessCheck r = bench->check("");
      EXPECT_TRUE(r.pass) << describe(c, o, dbl, r);
      if (!r.pass) continue;
      const Timing t = bench->time("", 3, 10);
      EXPECT_GT(t.median_ms, 0);
      const double flops = dbl ? attention_double_backward_flops(c) : attention_backward_flops(c);
      std::printf("%s %s: %.3f ms, %.1f TFLOPS (%s)\n", dbl ? "double backward" : "backward", to_string(c).c_str(),
                  t.median_ms, flops / (t.median_ms * 1e9),
                  dbl ? attention_double_backward_flops_convention().c_str() : "2.5x forward");
    }
}

// The naive GPU references that check large shapes are themselves checked against the fp64 CPU
// references: every element, every dtype, both orders, odd shapes, GQA, fully masked rows.
TEST(AttentionBackwardReferenceGpu, MatchesTheCpuReference) {
  KGEN_REQUIRE_GPU();
  const Shape shapes[] = {{1, 4, 2, 300, 200}, {2, 2, 2, 129, 513}, {1, 8, 1, 1, 77}, {1, 2, 1, 77, 5}};
  std::uint64_t seed = 3;
  for (DType t : {DType::bf16, DType::f16, DType::f32})
    for (bool causal : {false, true})
      for (const Shape& s : shapes)
        for (bool dbl : {false, true}) {
          AttentionCase c;
          c.dtype = t, c.head_dim = t == DType::f32 ? 80 : 64, c.causal = causal, c.layout = Layout::bnhd;
          c.batch = s.b, c.heads_q = s.hq, c.heads_kv = s.hkv, c.n_q = s.nq, c.n_k = s.nk, c.seed = seed++;
          BackwardBenchOptions o;
          const int subset = int(seed % 8);  // cotangent subsets rotate, including none
          o.gq = subset & 1, o.gk = subset & 2, o.gv = subset & 4;
          const HarnessCheck r = check_backward_reference_gpu_against_cpu(c, dbl, o);
          EXPECT_TRUE(r.pass) << describe(c, o, dbl, r);
        }
  // The largest head dim, BHND, and a subset of groups (the others are not written).
  for (bool dbl : {false, true}) {
    AttentionCase c;
    c.dtype = DType::bf16, c.head_dim = 256, c.causal = true, c.layout = Layout::bhnd;
    c.batch = 2, c.heads_q = 4, c.heads_kv = 2, c.n_q = 65, c.n_k = 33, c.seed = 99;
    const HarnessCheck all = check_backward_reference_gpu_against_cpu(c, dbl);
    EXPECT_TRUE(all.pass) << describe(c, {}, dbl, all);
    const HarnessCheck some = check_backward_reference_gpu_against_cpu(c, dbl, {}, {{1, 0}, {0, 1}});
    EXPECT_TRUE(some.pass) << describe(c, {}, dbl, some);
  }
}

}  // namespace
}  // namespace kgen
