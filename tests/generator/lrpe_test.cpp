// The lrpe_cosine / md_lrpe_cosine spec and config text, validity rules, config space, default,
// launch plan and rendering.
#include <algorithm>
#include <gtest/gtest.h>

#include <set>

#include "generator/lrpe.h"
#include "generator/registry.h"

namespace kgen {
namespace {

constexpr LrpeAct kActs[] = {LrpeAct::none, LrpeAct::relu, LrpeAct::sigmoid,
                             LrpeAct::silu, LrpeAct::softmax, LrpeAct::softmax_seq};

std::vector<LrpeSpec> every_spec() {
  std::vector<LrpeSpec> out;
  for (LrpeOp op : {LrpeOp::cosine, LrpeOp::md_cosine})
    for (LrpeDirection dir : {LrpeDirection::forward, LrpeDirection::backward})
      for (DType t : {DType::f16, DType::bf16, DType::f32})
        for (LrpeAct act : kActs) out.push_back({op, dir, t, act});
  return out;
}

TEST(LrpeSpecText, RoundTripsAndRejectsMalformed) {
  for (const LrpeSpec& s : every_spec()) {
    auto parsed = parse_lrpe_spec(to_string(s));
    ASSERT_TRUE(parsed) << to_string(s);
    EXPECT_EQ(*parsed, s) << to_string(s);
  }
  EXPECT_EQ(to_string(LrpeSpec{LrpeOp::md_cosine, LrpeDirection::backward, DType::f32, LrpeAct::softmax_seq}),
            "md_lrpe_cosine.bwd.fp32.softmax_seq");
  for (const char* bad : {"", "lrpe_cosine", "lrpe_cosine.fwd.bf16", "lrpe_cosine.up.bf16.none", "lrpe.fwd.bf16.none",
                          "lrpe_cosine.fwd.bf8.none", "lrpe_cosine.fwd.bfloat16.none", "lrpe_cosine.fwd.bf16.gelu",
                          "lrpe_cosine.fwd.bf16.none.x"})
    EXPECT_FALSE(parse_lrpe_spec(bad)) << bad;
}

TEST(LrpeConfigText, RoundTripsEveryConfigAndRejectsMalformed) {
  for (const LrpeSpec& s : every_spec())
    for (bool cache : {false, true})
      for (const auto& c : lrpe_config_space(s, cache)) {
        auto parsed = parse_lrpe_config(to_string(c));
        ASSERT_TRUE(parsed) << to_string(c);
        EXPECT_EQ(*parsed, c) << to_string(c);
      }
  EXPECT_EQ(to_string(LrpeConfig{LrpeStrategy::bp, 128, 2, 4, true}), "bp:t128:r2:v4:cache");
  EXPECT_EQ(to_string(LrpeConfig{LrpeStrategy::bp, 256, 1, 8, false, 4}), "bp:t256:r1:v8:b4");
  EXPECT_EQ(to_string(LrpeConfig{LrpeStrategy::sp, 128, 2, 4, true, 12}), "sp:t128:r2:v4:b12:cache");
  EXPECT_EQ(to_string(LrpeConfig{LrpeStrategy::sp, 256, 1, 8, false, 4, 2}), "sp:t256:r1:v8:b4:o2");
  for (const char* text : {"bp:t256:r1:v8:b4", "sp:t128:r2:v4:b12:cache", "bp:t256:r4:v8", "sp:t256:r1:v8:b4:o2",
                           "bp:t128:r1:v8:o4", "bp:t256:r1:v8:b2:o3:cache"}) {
    auto parsed = parse_lrpe_config(text);
    ASSERT_TRUE(parsed) << text;
    EXPECT_EQ(to_string(*parsed), text);
  }
  for (const char* bad : {"", "sp", "sp:t256:r4", "xp:t256:r4:v8", "sp:256:r4:v8", "sp:t256:r4:v8:x", "sp:t256:r4:v8:cache:x",
                          "sp:tx:r4:v8", "sp:t256:r:v8", "sp:t256:r4:v8 ", "sp:t256:r4:v8:b1", "sp:t256:r4:v8:b",
                          "sp:t256:r4:v8:bx", "sp:t256:r4:v8:cache:b2", "sp:t256:r4:v8:b2:b2", "sp:t256:r4:v8:o1",
                          "sp:t256:r4:v8:o2:b2", "sp:t256:r4:v8:ox", "sp:t256:r4:v8:o2:o2"})
    EXPECT_FALSE(parse_lrpe_config(bad)) << bad;
}

TEST(LrpeConfig, SpaceIsValidAndNonEmpty) {
  for (const LrpeSpec& s : every_spec()) {
    auto space = lrpe_config_space(s);
    ASSERT_FALSE(space.empty()) << to_string(s);
    for (const auto& c : space) EXPECT_FALSE(check_lrpe_config(s, c)) << to_string(s) << " " << to_string(c);
    auto cached = lrpe_config_space(s, true);
    EXPECT_EQ(cached.empty(), s.op == LrpeOp::cosine) << to_string(s);
    for (const auto& c : cached) {
      EXPECT_TRUE(c.cache);
      EXPECT_FALSE(check_lrpe_config(s, c)) << to_string(s) << " " << to_string(c);
    }
  }
}

TEST(LrpeConfig, ValidityRulesNameTheReason) {
  LrpeSpec seq{LrpeOp::cosine, LrpeDirection::forward, DType::bf16, LrpeAct::softmax_seq};
  auto why = check_lrpe_config(seq, {LrpeStrategy::sp, 256, 4, 8, false});
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("bp"), std::string::npos) << *why;
  LrpeSpec plain{LrpeOp::cosine, LrpeDirection::forward, DType::bf16, LrpeAct::none};
  EXPECT_NE(check_lrpe_config(plain, {LrpeStrategy::sp, 256, 4, 8, true})->find("md_lrpe_cosine"), std::string::npos);
  EXPECT_EQ(*check_lrpe_config(plain, {LrpeStrategy::sp, 96, 4, 8, false}), "lrpe t must be 128 or 256 (threads per block), got t96");
  EXPECT_EQ(*check_lrpe_config(plain, {LrpeStrategy::sp, 256, 3, 8, false}),
            "lrpe r must be 1, 2 or 4 (rows loaded per thread), got r3");
  EXPECT_EQ(*check_lrpe_config(plain, {LrpeStrategy::sp, 256, 4, 6, false}),
            "lrpe v must be 4, 8 or 16 (features per thread), got v6");
  EXPECT_FALSE(check_lrpe_config(plain, {LrpeStrategy::sp, 128, 1, 16, false, 2, 6}));
  EXPECT_NE(check_lrpe_config(seq, {LrpeStrategy::bp, 128, 1, 16, false})->find("vec 16"), std::string::npos);
  EXPECT_NE(check_lrpe_config(plain, {LrpeStrategy::sp, 256, 1, 8, false, 5})->find("fold"), std::string::npos);
  EXPECT_NE(check_lrpe_config(plain, {LrpeStrategy::sp, 256, 4, 8, false, 8})->find("rows × fold"), std::string::npos);
  EXPECT_FALSE(check_lrpe_config(plain, {LrpeStrategy::bp, 256, 1, 8, false, 16}));
  EXPECT_FALSE(check_lrpe_config(plain, {LrpeStrategy::sp, 256, 1, 8, false, 4, 8}));
  EXPECT_NE(check_lrpe_config(plain, {LrpeStrategy::sp, 256, 1, 8, false, 4, 9})->find("occupancy"), std::string::npos);
  EXPECT_NE(check_lrpe_config(plain, {LrpeStrategy::sp, 256, 1, 8, false, 4, 0})->find("occupancy"), std::string::npos);
  EXPECT_FALSE(check_lrpe_config(seq, {LrpeStrategy::bp, 256, 1, 8, false, 4}));
  EXPECT_NE(check_lrpe_config(seq, {LrpeStrategy::bp, 256, 1, 8, false, 6})->find("fold must be <= 4"), std::string::npos);
  EXPECT_FALSE(check_lrpe_config_for_shape(plain, {LrpeStrategy::sp, 256, 4, 8, false}, {1, 1, 10, 256}));
  auto wide = check_lrpe_config_for_shape(plain, {LrpeStrategy::sp, 256, 4, 4, false}, {1, 1, 10, 129});
  ASSERT_TRUE(wide);
  EXPECT_NE(wide->find("129"), std::string::npos) << *wide;
}

TEST(LrpeConfig, DefaultIsValidForEveryShape) {
  for (const LrpeSpec& s : every_spec())
    for (LrpeShape shape : {LrpeShape{1, 1, 1, 1}, LrpeShape{12, 12, 32768, 128}, LrpeShape{2, 3, 33, 33}, LrpeShape{1, 1, 5, 256}})
      for (bool cache : {false, true}) {
        LrpeConfig c = lrpe_default_config(s, shape, cache);
        EXPECT_FALSE(check_lrpe_config_for_shape(s, c, shape)) << to_string(s) << " " << to_string(c);
        auto space = lrpe_config_space(s, c.cache);  // warm compiles what a launch picks
        EXPECT_NE(std::find(space.begin(), space.end(), c), space.end()) << to_string(s) << " " << to_string(c);
        EXPECT_EQ(c.cache, cache && s.op == LrpeOp::md_cosine);
        if (!cache) {
          EXPECT_LE(c.fold, std::max(1, shape.batch)) << "a default folds no more slices than there are";
        }
      }
}

TEST(LrpeConfig, DefaultFoldsHeadsWhenThetaIsSharedByThem) {
  LrpeSpec plain{LrpeOp::cosine, LrpeDirection::forward, DType::bf16, LrpeAct::none};
  LrpeShape one{1, 12, 4096, 128};
  EXPECT_EQ(lrpe_default_config(plain, one).fold, 1);
  one.theta_shared = true;
  const LrpeConfig c = lrpe_default_config(plain, one);
  EXPECT_GT(c.fold, 1);
  const LrpeLaunchPlan plan = lrpe_launch_plan(c, one, 132);
  EXPECT_TRUE(plan.fold_heads);
  EXPECT_EQ(plan.grid.y, 1u);
  EXPECT_EQ(plan.grid.z, static_cast<unsigned>((12 + c.fold - 1) / c.fold));
}

TEST(LrpeLaunchPlan, CoversEveryRowOnceWithPowerOfTwoRowGroups) {
  for (LrpeStrategy strategy : {LrpeStrategy::sp, LrpeStrategy::bp})
    for (int d : {1, 5, 8, 33, 48, 64, 128, 200, 256})
      for (int n : {1, 33, 1000, 32768})
        for (int bh : {1, 144}) {
          LrpeConfig c{strategy, 256, 4, 8, false};
          LrpeShape shape{bh, 1, n, d};
          LrpeLaunchPlan plan = lrpe_launch_plan(c, shape, 132);
          EXPECT_EQ(1 << plan.row_group_log2, plan.row_group);
          EXPECT_GE(plan.row_group * c.vec, d);
          EXPECT_LE(plan.row_group, 32);
          EXPECT_TRUE(plan.row_group == 1 || (plan.row_group / 2) * c.vec < d) << "row group larger than needed";
          // Blocks along n cover [0, n) exactly, none empty.
          EXPECT_EQ(plan.grid.x, static_cast<unsigned>(plan.splits));
          EXPECT_GE(1LL * plan.splits * plan.rows_per_block, n);
          EXPECT_LT(1LL * (plan.splits - 1) * plan.rows_per_block, n);
          EXPECT_EQ(plan.grid.y, 1u);
          EXPECT_EQ(plan.grid.z, static_cast<unsigned>(bh));
          if (strategy == LrpeStrategy::sp) {
            EXPECT_EQ(plan.rows_per_block, 256 / plan.row_group * 4);
          }
        }
  // Folded slices: grid z counts slice groups (the last one partial), y the heads.
  for (int fold : {2, 3, 4, 16}) {
    LrpeShape shape{5, 3, 1000, 64};
    LrpeLaunchPlan plan = lrpe_launch_plan({LrpeStrategy::bp, 256, 1, 8, false, fold}, shape, 132, 2);
    EXPECT_FALSE(plan.fold_heads);
    EXPECT_EQ(plan.grid.y, 3u);
    EXPECT_EQ(plan.grid.z, static_cast<unsigned>((5 + fold - 1) / fold));
    // bp launches at most kLrpeBpMaxBlocksPerSm blocks per SM (or one split per slice group).
    EXPECT_LE(1LL * plan.splits * plan.grid.y * plan.grid.z, std::max<long long>(kLrpeBpMaxBlocksPerSm * 132, plan.grid.y * plan.grid.z));
  }
  // The softmax-over-the-sequence scratch bound holds for every fold, occupancy and batch.
  for (int fold : {1, 2, 3, 4})
    for (LrpeShape shape : {LrpeShape{12, 12, 16384, 128}, LrpeShape{1, 1, 1 << 20, 64}, LrpeShape{3, 5, 777, 33},
                            LrpeShape{2, 12, 4096, 128, true}})
      for (int resident : {1, 2, 4, 8, 16}) {
        LrpeLaunchPlan plan = lrpe_launch_plan({LrpeStrategy::bp, 128, 1, 8, false, fold}, shape, 132, resident);
        EXPECT_LE(plan.splits, lrpe_max_splits(shape, 132)) << fold << " " << resident;
      }
  LrpeSpec seq{LrpeOp::cosine, LrpeDirection::backward, DType::bf16, LrpeAct::softmax_seq};
  LrpeShape shape{2, 3, 1000, 33};
  auto plan = lrpe_launch_plan({LrpeStrategy::bp, 256, 4, 8, false}, shape, 132);
  EXPECT_EQ(lrpe_stats_floats(seq, shape, plan), std::size_t(3) * 2 * 3 * plan.splits * 33);
  seq.act = LrpeAct::silu;
  EXPECT_EQ(lrpe_stats_floats(seq, shape, plan), 0u);
}

TEST(LrpeLaunchPlan, ForwardStatisticsOfSoftmaxOverTheSequenceReadOneSlicePerBlock) {
  LrpeSpec fwd{LrpeOp::cosine, LrpeDirection::forward, DType::bf16, LrpeAct::softmax_seq};
  LrpeSpec bwd = fwd;
  bwd.direction = LrpeDirection::backward;
  const LrpeConfig c{LrpeStrategy::bp, 128, 1, 8, false, 2, 6};
  EXPECT_EQ(lrpe_stats_fold(fwd, c), 1);
  EXPECT_EQ(lrpe_stats_fold(bwd, c), 2);
  // The statistics kernel's grid has the apply kernel's splits and heads, and one block per slice.
  for (LrpeShape shape : {LrpeShape{5, 3, 1000, 64}, LrpeShape{2, 12, 4096, 128, true}}) {
    const LrpeLaunchPlan plan = lrpe_launch_plan(c, shape, 132, 6, lrpe_stats_fold(fwd, c));
    const long long slices = plan.fold_heads ? 1LL * shape.batch * shape.heads : shape.batch;
    EXPECT_EQ(plan.stats_grid.x, plan.grid.x);
    EXPECT_EQ(plan.stats_grid.y, plan.grid.y);
    EXPECT_EQ(plan.grid.z, static_cast<unsigned>((slices + 1) / 2));
    EXPECT_EQ(plan.stats_grid.z, static_cast<unsigned>(slices));
    const LrpeLaunchPlan same = lrpe_launch_plan(c, shape, 132, 6, lrpe_stats_fold(bwd, c));
    EXPECT_EQ(same.stats_grid.z, same.grid.z);
  }
  // The rendered statistics kernel reads one slice per block in the forward, the config's fold in
  // the backward.
  EXPECT_NE(render_lrpe(fwd, c).source.find("lrpe_column_stats</*T=*/kgen::bfloat16_t, /*V=*/8, /*Threads=*/128, "
                                            "/*Rows=*/1, /*Fold=*/1,"),
            std::string::npos);
  EXPECT_NE(render_lrpe(bwd, c).source.find("lrpe_column_stats</*T=*/kgen::bfloat16_t, /*V=*/8, /*Threads=*/128, "
                                            "/*Rows=*/1, /*Fold=*/2,"),
            std::string::npos);
}

TEST(LrpeRender, EntriesAndTemplateArguments) {
  LrpeSpec spec{LrpeOp::md_cosine, LrpeDirection::backward, DType::f16, LrpeAct::softmax_seq};
  KernelSource k = render_lrpe(spec, {LrpeStrategy::bp, 256, 2, 8, true});
  EXPECT_EQ(k.op, "md_lrpe_cosine");
  EXPECT_EQ(k.entry, kLrpeApplyEntry);
  EXPECT_EQ(k.threads, 256);
  EXPECT_EQ(k.variant, "md_lrpe_cosine.bwd.fp16.softmax_seq.bp:t256:r2:v8:cache");
  EXPECT_NE(k.source.find("extern \"C\" __global__ void __launch_bounds__(256, 1) kgen_lrpe("), std::string::npos) << k.source;
  EXPECT_NE(k.source.find("extern \"C\" __global__ void __launch_bounds__(256, 1) kgen_lrpe_stats("), std::string::npos);
  EXPECT_NE(k.source.find("lrpe_column_stats</*T=*/kgen::half_t, /*V=*/8, /*Threads=*/256, /*Rows=*/2, /*Fold=*/1, "
                          "/*Md=*/true, /*Cache=*/true, /*Backward=*/true>(p)"), std::string::npos) << k.source;
  EXPECT_NE(k.source.find("lrpe_backward</*T=*/kgen::half_t, /*V=*/8, /*Threads=*/256, /*Rows=*/2, /*Fold=*/1, /*Act=*/5, "
                          "/*Md=*/true, /*Cache=*/true>(p)"), std::string::npos) << k.source;
  KernelSource occupied = render_lrpe(spec, {LrpeStrategy::bp, 256, 1, 8, true, 2, 3});
  EXPECT_NE(occupied.source.find("__launch_bounds__(256, 3) kgen_lrpe("), std::string::npos) << occupied.source;
  EXPECT_NE(occupied.variant.find(":b2:o3:cache"), std::string::npos) << occupied.variant;
  KernelSource folded = render_lrpe(spec, {LrpeStrategy::bp, 256, 1, 8, true, 4});
  EXPECT_EQ(folded.variant, "md_lrpe_cosine.bwd.fp16.softmax_seq.bp:t256:r1:v8:b4:cache");
  EXPECT_NE(folded.source.find("lrpe_backward</*T=*/kgen::half_t, /*V=*/8, /*Threads=*/256, /*Rows=*/1, /*Fold=*/4, /*Act=*/5, "
                                 "/*Md=*/true, /*Cache=*/true>(p)"), std::string::npos);
  // Without statistics, sp and bp of the same sizes are one kernel.
  LrpeSpec plain{LrpeOp::cosine, LrpeDirection::forward, DType::bf16, LrpeAct::silu};
  KernelSource sp = render_lrpe(plain, {LrpeStrategy::sp, 256, 4, 8, false});
  KernelSource bp = render_lrpe(plain, {LrpeStrategy::bp, 256, 4, 8, false});
  EXPECT_EQ(sp.variant, bp.variant);
  EXPECT_EQ(sp.source, bp.source);
  EXPECT_EQ(sp.source.find("kgen_lrpe_stats"), std::string::npos);
  EXPECT_NE(sp.source.find("lrpe_forward</*T=*/kgen::bfloat16_t, /*V=*/8, /*Threads=*/256, /*Rows=*/4, /*Fold=*/1, /*Act=*/3, "
                             "/*Md=*/false, /*Cache=*/false>(p)"), std::string::npos) << sp.source;
}

TEST(Registry, KnowsBothLrpeOperatorsWithDistinctVariants) {
  Target target = *parse_target("sm_90a");
  for (const char* name : {"lrpe_cosine", "md_lrpe_cosine"}) {
    const OperatorInfo* op = find_operator(name);
    ASSERT_NE(op, nullptr) << name;
    auto variants = op->all_variants(target);
    std::set<std::string> names;
    for (const auto& v : variants) {
      EXPECT_EQ(v.op, name);
      names.insert(v.variant);
    }
    EXPECT_EQ(names.size(), variants.size()) << name;
    // Every (direction, dtype, act) at least once; the count stays small enough for CI warms.
    EXPECT_GE(variants.size(), 36u) << name;
    EXPECT_LE(variants.size(), 140u) << name;
  }
}

}  // namespace
}  // namespace kgen

namespace kgen {
namespace {

// Equal blocks take as long as their waves: bp splits fill whole waves of resident slots.
TEST(LrpeLaunchPlan, BpSplitsFillTheirWaves) {
  // 144 slices on 4 × 132 slots: 4 splits (576 blocks) would need a second wave for 48 blocks;
  // 7 (1008 blocks, 95 % of two waves) is the fewest that fills 90 %.
  EXPECT_EQ(lrpe_bp_splits(144, 1 << 20, 1024, 132, 4), 7);
  // Enough slices for 90 % of one wave: no split.
  EXPECT_EQ(lrpe_bp_splits(500, 1 << 20, 1024, 132, 4), 1);
  // One slice: the split count fills the slots.
  const int one = lrpe_bp_splits(1, 1 << 20, 1024, 132, 2);
  EXPECT_GE(one, 238);
  EXPECT_LE(one, 264);
  // Too few passes to split further: the best fill within them.
  EXPECT_EQ(lrpe_bp_splits(144, 2, 1024, 132, 4), 2);
  for (long long slices : {1, 7, 24, 144, 1000})
    for (int resident : {1, 2, 4, 8, 16, 32}) {
      const int s = lrpe_bp_splits(slices, 1 << 20, 1024, 132, resident);
      EXPECT_GE(s, 1);
      EXPECT_LE(slices * s, std::max<long long>(kLrpeBpMaxBlocksPerSm * 132, slices)) << slices << " " << resident;
    }
}

}  // namespace
}  // namespace kgen
