// lrpe_cosine and md_lrpe_cosine on the GPU against the fp64 references, NaN-poisoned outputs.
// Every (op, direction, dtype, act) × every config of its space × layouts × theta shapes × odd
// sizes. Labelled `gpu`; every test skips cleanly without one.
#include <gtest/gtest.h>

#include "generator/lrpe.h"
#include "tests/gpu/require_gpu.h"
#include "check/lrpe_harness.h"

namespace kgen {
namespace {

std::string describe(const LrpeCase& c, const HarnessCheck& r) { return to_string(c) + "\n" + to_string(r); }

struct LrpeShape {
  int b, h, n, d;
  bool three_dim;
};
// Odd d (scalar path, partial row groups), d = 48 (vector path, 6 of 8 lanes), d = 128, one row,
// n not a multiple of any block, one head as a 3-d tensor, d = 1 and d = 256.
const LrpeShape kLrpeShapes[] = {{2, 3, 33, 33, false}, {1, 4, 1, 48, false}, {2, 2, 257, 128, false}, {3, 1, 1000, 64, true},
                         {1, 2, 70, 1, false},  {1, 1, 19, 256, false}};

struct MdGrid {
  std::vector<int> sizes;
  int extra, e;  // e = 0: ceil(d / m)
};
const MdGrid kGrids[] = {{{33}, 0, 0}, {{5, 7}, 10, 0}, {{3, 4, 5}, 0, 0}, {{2, 3, 4}, 10, 0}, {{6, 5}, 1, 0}};

using LrpeParam = std::tuple<LrpeOp, LrpeDirection, DType, LrpeAct>;

class LrpeGpu : public ::testing::TestWithParam<LrpeParam> {};

TEST_P(LrpeGpu, EveryConfigMatchesTheReferenceOnOddShapesLayoutsAndThetaShapes) {
  KGEN_REQUIRE_GPU();
  auto [op, dir, dtype, act] = GetParam();
  std::uint64_t seed = 1;
  for (bool cache : {false, true}) {
    const LrpeSpec spec{op, dir, dtype, act};
    std::vector<std::string> configs = {""};
    for (const auto& c : lrpe_config_space(spec, cache)) configs.push_back(to_string(c));
    if (cache && configs.size() == 1) continue;  // lrpe_cosine has no cache variant
    for (const std::string& config : configs) {
      if (cache && config.empty()) continue;  // with angles the default is one of the space's cache configs
      for (const LrpeShape& s : kLrpeShapes) {
        LrpeCase c;
        c.op = op, c.direction = dir, c.dtype = dtype, c.act = act, c.config = config, c.cache = cache;
        c.batch = s.b, c.heads = s.h, c.n = s.n, c.d = s.d, c.three_dim = s.three_dim;
        c.layout = seed % 2 ? Layout::bnhd : Layout::bhnd;
        c.theta_kind = s.three_dim ? 2 : op == LrpeOp::md_cosine ? 2 * static_cast<int>(seed % 2) : static_cast<int>(seed % 3);
        c.seed = seed++;
        if (op == LrpeOp::cosine) {
          c.offset = seed % 2 ? 0 : 1000 + static_cast<std::int64_t>(seed);
        } else {
          const MdGrid& g = kGrids[seed % std::size(kGrids)];
          c.grid = g.sizes, c.extra = g.extra, c.e = g.e;
          int cells = 1;
          for (int v : g.sizes) cells *= v;
          c.n = g.extra + cells;
        }
        auto r = check_lrpe(c);
        EXPECT_TRUE(r.pass) << describe(c, r);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    AllOpsDirectionsDtypesActs, LrpeGpu,
    ::testing::Combine(::testing::Values(LrpeOp::cosine, LrpeOp::md_cosine),
                       ::testing::Values(LrpeDirection::forward, LrpeDirection::backward),
                       ::testing::Values(DType::f16, DType::bf16, DType::f32),
                       ::testing::Values(LrpeAct::none, LrpeAct::relu, LrpeAct::sigmoid, LrpeAct::silu, LrpeAct::softmax,
                                         LrpeAct::softmax_seq)),
    [](const auto& info) {
      return std::string(lrpe_op_name(std::get<0>(info.param))) +
             (std::get<1>(info.param) == LrpeDirection::forward ? "_fwd_" : "_bwd_") +
             std::string(dtype_name(std::get<2>(info.param))) + "_" + std::string(lrpe_act_name(std::get<3>(info.param)));
    });

// Folded slices beyond the config space: partial last groups (batch 5 over folds 2–16), heads
// folded together (theta shared by heads), several rows in flight, the scalar path (d = 33),
// md with and without the angle cache.
TEST(LrpeGpuFold, FoldedConfigsMatchTheReferenceWithPartialGroupsAndFoldedHeads) {
  KGEN_REQUIRE_GPU();
  struct FoldShape {
    int b, h, n, d, theta_kind;
  };
  const FoldShape shapes[] = {{5, 3, 257, 128, 0}, {2, 6, 100, 33, 2}, {1, 12, 64, 64, 2}, {5, 2, 40, 48, 1}};
  const char* configs[] = {"bp:t128:r2:v8:b3", "sp:t256:r1:v4:b4", "bp:t256:r1:v8:b16", "bp:t256:r4:v8:b4", "sp:t128:r1:v8:b2"};
  std::uint64_t seed = 100;
  for (LrpeOp op : {LrpeOp::cosine, LrpeOp::md_cosine})
    for (LrpeDirection dir : {LrpeDirection::forward, LrpeDirection::backward})
      for (LrpeAct act : {LrpeAct::none, LrpeAct::silu, LrpeAct::softmax, LrpeAct::softmax_seq})
        for (bool cache : {false, true}) {
          if (cache && op == LrpeOp::cosine) continue;
          for (std::string config : configs) {
            auto parsed = parse_lrpe_config(config);
            ASSERT_TRUE(parsed);
            if (act == LrpeAct::softmax_seq) parsed->strategy = LrpeStrategy::bp;
            parsed->cache = cache;
            if (check_lrpe_config({op, dir, DType::bf16, act}, *parsed)) continue;  // e.g. softmax_seq with b16
            for (const FoldShape& s : shapes) {
              LrpeCase c;
              c.op = op, c.direction = dir, c.act = act, c.dtype = DType::bf16;  // one dtype: each config compiles once
              c.config = to_string(*parsed), c.cache = cache;
              c.batch = s.b, c.heads = s.h, c.n = s.n, c.d = s.d, c.theta_kind = s.theta_kind;
              c.layout = seed % 2 ? Layout::bnhd : Layout::bhnd;
              c.seed = seed++;
              if (op == LrpeOp::cosine) {
                c.offset = seed % 2 ? 0 : 4000;
              } else {
                if (c.theta_kind == 1) c.theta_kind = 0;  // md theta is (heads | 1, e)
                c.grid = {s.n - 4};
                c.extra = 4;
              }
              auto r = check_lrpe(c);
              EXPECT_TRUE(r.pass) << describe(c, r);
            }
          }
        }
}

// Large inputs: softmax over features leaves its unshifted path (x·log2e beyond ±32 in some rows
// of a warp at scale 8, in all at scale 40), softmax over the sequence moves its column
// references many times; vector and scalar paths, both ops, every dtype, default and folded.
TEST(LrpeGpuLargeValues, SoftmaxShiftedPathsMatchTheReference) {
  KGEN_REQUIRE_GPU();
  struct Big {
    int b, h, n, d;
    const char* config;
  };
  const Big shapes[] = {{2, 3, 257, 128, ""}, {1, 2, 100, 33, ""}, {5, 2, 300, 64, "bp:t128:r2:v8:b4"}};
  std::uint64_t seed = 300;
  for (LrpeOp op : {LrpeOp::cosine, LrpeOp::md_cosine})
    for (LrpeDirection dir : {LrpeDirection::forward, LrpeDirection::backward})
      for (DType t : {DType::f16, DType::bf16, DType::f32})
        for (LrpeAct act : {LrpeAct::softmax, LrpeAct::softmax_seq})
          for (double scale : {8.0, 40.0})
            for (const Big& s : shapes) {
              LrpeCase c;
              c.op = op, c.direction = dir, c.dtype = t, c.act = act, c.x_scale = scale, c.config = s.config;
              c.batch = s.b, c.heads = s.h, c.n = s.n, c.d = s.d, c.seed = seed++;
              if (op == LrpeOp::md_cosine) c.grid = {s.n - 3}, c.extra = 3;
              auto r = check_lrpe(c);
              EXPECT_TRUE(r.pass) << describe(c, r);
            }
}

// Long sequences: angles up to (offset + n)·θ ≈ 32768 in fp32, many blocks, sampled (b, h).
TEST(LrpeGpuLarge, LongSequencesAndLargeOffsetsStayWithinTheFp32Bounds) {
  KGEN_REQUIRE_GPU();
  for (DType t : {DType::f32, DType::bf16})
    for (LrpeDirection dir : {LrpeDirection::forward, LrpeDirection::backward})
      for (LrpeAct act : {LrpeAct::none, LrpeAct::softmax_seq, LrpeAct::silu}) {
        LrpeCase c;
        c.dtype = t, c.direction = dir, c.act = act, c.batch = 2, c.heads = 3, c.n = 8192, c.d = 128;
        c.offset = 32768 - 8192, c.seed = 5;
        auto r = check_lrpe(c);
        EXPECT_TRUE(r.pass) << describe(c, r);
      }
  // The benchmark shape, sampled heads; md 1-d grid of 32768 positions.
  for (LrpeDirection dir : {LrpeDirection::forward, LrpeDirection::backward}) {
    LrpeCase c;
    c.direction = dir, c.batch = 12, c.heads = 12, c.n = 8192, c.d = 128, c.seed = 6;
    auto r = check_lrpe(c);
    EXPECT_TRUE(r.pass) << describe(c, r);
    LrpeCase md = c;
    md.op = LrpeOp::md_cosine, md.batch = 2, md.heads = 2, md.n = 32768 + 10, md.grid = {32768}, md.extra = 10;
    md.dtype = DType::f32;
    for (bool cache : {false, true}) {
      md.cache = cache;
      auto r2 = check_lrpe(md);
      EXPECT_TRUE(r2.pass) << describe(md, r2);
    }
  }
}

}  // namespace
}  // namespace kgen
