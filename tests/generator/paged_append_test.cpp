// The paged K/V append's generator (docs/attention.md §10): spec and config texts round-trip, the
// validity rules name the field, the launch plan covers the rows, the registry serves it, and every
// spec's default renders and compiles deviceless for sm_80, sm_90a and the AMD targets without
// spills or scratch.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "compiler/amd_compilers.h"
#include "compiler/compiler.h"
#include "generator/paged_append.h"
#include "generator/registry.h"

namespace kgen {
namespace {

std::vector<PagedAppendSpec> every_spec() {
  std::vector<PagedAppendSpec> out;
  for (DType t : {DType::f16, DType::bf16, DType::f32})
    for (AppendRotary r : {AppendRotary::none, AppendRotary::halves, AppendRotary::pairs})
      for (bool f32 : {false, true})
        if (!f32 || (r != AppendRotary::none && t != DType::f32)) out.push_back({t, r, f32});
  return out;
}

TEST(PagedAppend, SpecAndConfigTextsRoundTrip) {
  for (const PagedAppendSpec& s : every_spec()) {
    const auto back = parse_paged_append_spec(to_string(s));
    ASSERT_TRUE(back) << to_string(s);
    EXPECT_EQ(*back, s) << to_string(s);
    for (const PagedAppendConfig& c : paged_append_config_space(s)) {
      EXPECT_FALSE(check_paged_append_config(s, c)) << to_string(s) << " " << to_string(c);
      EXPECT_EQ(parse_paged_append_config(to_string(c)), c);
    }
  }
  EXPECT_EQ(to_string(PagedAppendSpec{DType::bf16, AppendRotary::pairs, true}),
            "paged_append.bf16.rotary_interleaved.cos_fp32");
  EXPECT_EQ(to_string(paged_append_default_config({DType::f16})), "ap:t128:v8");
  EXPECT_EQ(to_string(paged_append_default_config({DType::f32})), "ap:t128:v4");
  for (const char* bad : {"paged_append", "paged_append.int32", "paged_append.bf16.cos_fp32",
                          "paged_append.fp32.rotary.cos_fp32", "paged_append.bf16.rotary.extra", "lrpe.bf16"})
    EXPECT_FALSE(parse_paged_append_spec(bad)) << bad;
  for (const char* bad : {"ap:t128", "ap:t128:v8:x", "bp:t128:v8", "ap:x128:v8"})
    EXPECT_FALSE(parse_paged_append_config(bad)) << bad;
}

TEST(PagedAppend, ValidityRulesNameTheField) {
  const PagedAppendSpec f32{DType::f32};
  EXPECT_NE(check_paged_append_config(f32, {128, 8})->find("16 bytes"), std::string::npos);
  EXPECT_EQ(*check_paged_append_config(f32, {96, 4}), "ap t must be 64, 128 or 256 (threads per block), got t96");
  EXPECT_EQ(*check_paged_append_config(f32, {128, 3}), "ap v must be 2, 4 or 8 (elements per thread), got v3");
  EXPECT_NE(check_paged_append_config_for_head_dim({DType::bf16}, {64, 2}, 256)->find("head dims up to 128"),
            std::string::npos);
  EXPECT_FALSE(check_paged_append_config_for_head_dim({DType::bf16}, {128, 8}, 576));
}

TEST(PagedAppend, LaunchPlanCoversEveryRow) {
  // d = 128 in pieces of 8: 16 threads per row, 8 rows per 128-thread block.
  PagedAppendLaunchPlan p = paged_append_launch_plan({128, 8}, 128, 100);
  EXPECT_EQ(p.row_group, 16);
  EXPECT_EQ(p.row_group_log2, 4);
  EXPECT_EQ(p.grid.x, 13u);
  // d = 80: 10 pieces round up to 16 threads.
  EXPECT_EQ(paged_append_launch_plan({128, 8}, 80, 1).row_group, 16);
  // d = 576 (MLA) in pieces of 8: 128 threads per row, one row per block.
  p = paged_append_launch_plan({128, 8}, 576, 7);
  EXPECT_EQ(p.row_group, 128);
  EXPECT_EQ(p.grid.x, 7u);
}

TEST(PagedAppend, TheRegistryServesIt) {
  const OperatorInfo* op = find_operator(kPagedAppendOp);
  ASSERT_TRUE(op);
  const Target sm80 = *parse_target("sm_80");
  const ConfigKernels k = op->config_kernels("paged_append.fp16.rotary", "", sm80);
  ASSERT_EQ(k.problem, ConfigKernels::Problem::none) << k.error;
  ASSERT_EQ(k.kernels.size(), 1u);
  EXPECT_EQ(k.kernels[0].variant, "paged_append.fp16.rotary.ap:t128:v8");
  EXPECT_NE(k.kernels[0].source.find("kgen_device/attention/paged_append.cuh"), std::string::npos);
  EXPECT_NE(k.kernels[0].source.find("/*Rotary=*/1"), std::string::npos);
  EXPECT_EQ(op->config_kernels("paged_append.fp32", "ap:t128:v8", sm80).problem,
            ConfigKernels::Problem::invalid_config);
  EXPECT_EQ(op->config_kernels("paged_append.fp9", "", sm80).problem, ConfigKernels::Problem::unknown_variant);
  EXPECT_EQ(op->config_space("paged_append.bf16", sm80).configs.size(), 4u);
  std::set<std::string> names;
  for (const KernelSource& s : paged_append_all_variants()) EXPECT_TRUE(names.insert(s.variant).second) << s.variant;
  EXPECT_EQ(names.size(), 52u);
  EXPECT_EQ(paged_append_default_variants().size(), 6u);
}

// Compiles `k` for `arch`; no spill bytes, no stack frame.
void expect_compiles(const KernelSource& k, const std::string& arch) {
  SCOPED_TRACE(arch + " " + k.variant);
  const Target target = *parse_target(arch);
  try {
    const CompiledBinary bin = compiler_for(target).compile(k, target);
    EXPECT_FALSE(bin.image.empty());
    EXPECT_EQ(bin.resources.spill_stores + bin.resources.spill_loads, 0) << "spill bytes";
  } catch (const Error& e) {
    ADD_FAILURE() << e.what();
  }
}

TEST(PagedAppend, EverySpecCompilesForNvidiaAndAmdTargets) {
  std::vector<std::string> arches = {"sm_80", "sm_90a"};
  const bool clang = amd_clang_description().find("unavailable") == std::string::npos;
  if (clang || hiprtc_description().find("unavailable") == std::string::npos) arches.push_back("gfx90a");
  if (clang) arches.insert(arches.end(), {"gfx942", "gfx950"});
  for (const PagedAppendSpec& s : every_spec())
    for (const std::string& arch : arches) expect_compiles(render_paged_append(s, paged_append_default_config(s)), arch);
  // The smallest pieces of the space (scalar fallbacks beside them) compile too.
  expect_compiles(render_paged_append({DType::bf16, AppendRotary::halves}, {256, 4}), "sm_90a");
}

}  // namespace
}  // namespace kgen
