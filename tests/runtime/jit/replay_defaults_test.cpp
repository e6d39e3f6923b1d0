// The defaults the dispatcher picks on the NVIDIA targets, looked up in the replay table
// (tests/replay/table.tsv, which the replay.table test checks against real compiles): every one
// is there, so `kgen warm` builds it, and compiles without spills (issue "no performance cliffs":
// no spills on defaults). Also the resource rules of whole config spaces (the forward's fa2
// configs, LRPE), read from the same rows: every variant `kgen warm` builds is in the table, so
// it compiled when its row was written, and the check rebuilds any row whose inputs changed.
#include <gtest/gtest.h>

#include <fstream>
#include <algorithm>
#include <map>
#include <set>
#include <sstream>
#include <utility>
#include <vector>

#include "generator/attention_backward.h"
#include "generator/attention_forward.h"
#include "jit/replay.h"
#include "jit/warm.h"

namespace kgen {
namespace {

using Table = std::map<std::pair<std::string, std::string>, ReplayRow>;  // (target, variant)

Table replay_table() {
  std::ifstream in(KGEN_REPLAY_TABLE);
  std::stringstream text;
  text << in.rdbuf();
  Table table;
  for (auto& row : parse_replay_table(text.str(), KGEN_REPLAY_TABLE)) {
    auto key = std::make_pair(row.target, row.variant);
    table.emplace(std::move(key), std::move(row));
  }
  return table;
}

const Table& table() {
  static const Table t = replay_table();
  return t;
}

// The row of `variant` for `arch`, or nullptr (and a failure) when the table has none.
const ReplayRow* row_of(const std::string& arch, const std::string& variant) {
  auto it = table().find({arch, variant});
  if (it != table().end()) return &it->second;
  ADD_FAILURE() << variant << " for " << arch << " is not in the replay table (not warmed)";
  return nullptr;
}

// Checks that every kernel `sources(spec, shape, target)` lists is a row of the table for its
// target (so `kgen warm` builds it) with no spill bytes (and, if `no_local_memory`, no stack
// frame and no serialised wgmma): 16-bit specs of every multiple-of-8 head dim, both masks, each
// of `shapes`, on sm_80 and sm_90a. Returns how many rows it checked.
template <class Sources>
int expect_warmed_and_spill_free(const std::vector<AttentionShape>& shapes, Sources sources,
                                 bool no_local_memory = false) {
  const Table& table = kgen::table();
  EXPECT_FALSE(table.empty()) << KGEN_REPLAY_TABLE;
  int checked = 0;
  for (const char* arch : {"sm_80", "sm_90a"}) {
    const Target target = *parse_target(arch);
    for (DType t : {DType::f16, DType::bf16})
      for (int d = 8; d <= kMaxHeadDim; d += 8)
        for (bool causal : {false, true})
          for (const AttentionShape& shape : shapes)
            for (const KernelSource& source : sources(AttentionBackwardSpec{t, d, causal}, shape, target)) {
              const ReplayRow* row = row_of(arch, source.variant);
              if (!row) continue;
              EXPECT_EQ(row->spill_bytes, 0) << source.variant << " for " << arch;
              if (no_local_memory) {
                EXPECT_EQ(row->stack_bytes, 0) << source.variant << " for " << arch;
                EXPECT_FALSE(row->serialized_wgmma) << source.variant << " for " << arch;
              }
              ++checked;
            }
  }
  return checked;
}

// The forward's defaults for the benchmark and check shapes: no spills, no local memory, no
// serialised wgmma.
TEST(ReplayDefaults, ForwardDefaultsAreWarmedAndFreeOfLocalMemory) {
  const int checked = expect_warmed_and_spill_free(
      {AttentionShape{8, 16, 16, 2048, 2048}, AttentionShape{1, 1, 1, 64, 64}},
      [](const AttentionBackwardSpec& spec, const AttentionShape& shape, const Target& target) {
        const AttentionForwardSpec forward{spec.dtype, spec.head_dim, spec.causal};
        return std::vector{render_attention_forward(forward, attention_forward_default_config(forward, shape, target, 132))};
      },
      /*no_local_memory=*/true);
  EXPECT_EQ(checked, 2 * 2 * (kMaxHeadDim / 8) * 2 * 2);
}

// Every variant `kgen warm` builds for the named operators is a row; `rule(row)` holds for each.
template <class Rule>
void expect_every_variant_in_the_table(const std::vector<std::string>& ops, Rule rule) {
  const auto items = warm_items(ops, {"sm_80", "sm_90a"});
  ASSERT_GT(items.size(), 100u);
  for (const WarmItem& item : items)
    if (const ReplayRow* row = row_of(item.target.arch, item.source.variant)) rule(*row);
}

// The fa2 register estimate admits only configs that compile without spills.
TEST(ReplayDefaults, EveryForwardVariantIsWarmedAndItsFa2ConfigsAreSpillFree) {
  expect_every_variant_in_the_table({"attention_fwd"}, [](const ReplayRow& row) {
    if (row.variant.find(".fa2:") != std::string::npos) {
      EXPECT_EQ(row.spill_bytes, 0) << row.variant << " " << row.target;
    }
  });
}

// Memory-bound kernels: a spill or a stack frame is local-memory traffic on the hot path. A
// config that forces an occupancy (":o<k>", a register cap) trades a few spilled bytes for
// resident warps where the sweep measured it faster (docs/kernels/measurements.md, LRPE occupancy),
// up to 128.
TEST(ReplayDefaults, EveryLrpeVariantIsWarmedWithoutSpillsBeyondItsOccupancyCap) {
  expect_every_variant_in_the_table({"lrpe_cosine", "md_lrpe_cosine"}, [](const ReplayRow& row) {
    const bool capped = row.variant.find(":o") != std::string::npos;
    EXPECT_LE(row.spill_bytes, capped ? 2 * 128 : 0) << row.variant << " " << row.target;
    EXPECT_LE(row.stack_bytes, capped ? 128 : 0) << row.variant << " " << row.target;
  });
}

// The paged append is a copy loop: no spills, no stack frame, in any config.
TEST(ReplayDefaults, EveryPagedAppendVariantIsWarmedWithoutLocalMemory) {
  expect_every_variant_in_the_table({"paged_append"}, [](const ReplayRow& row) {
    EXPECT_EQ(row.spill_bytes, 0) << row.variant << " " << row.target;
    EXPECT_EQ(row.stack_bytes, 0) << row.variant << " " << row.target;
  });
}

// The Blackwell targets (compiled for, never run) hold the kernels of `kgen warm --defaults` only:
// each is a row without spills or stack, but for two known cases. LRPE's occupancy-capped configs
// (":o<k>") keep the allowance of the LRPE rule above. The fa2 double backward's fused kernel at
// 128 columns, at 255 registers on every target, spills 8–44 bytes (stack 8–24) on sm_100a and
// sm_103a (ptxas 13.0), where sm_80, sm_90a and sm_120 compile it without; the smallest fa2 tile
// of that double backward (fa2:bm32:bn16:w2) spills too, and the general path is the only other.
TEST(ReplayDefaults, BlackwellDefaultsAreRowsWithoutLocalMemory) {
  const std::vector<std::string> archs = {"sm_100a", "sm_103a", "sm_120"};
  const auto items = replay_items({}, archs);
  ASSERT_GT(items.size(), 3 * 100u);
  EXPECT_EQ(items.size(), default_warm_items(archs).size());
  for (const WarmItem& item : items) {
    EXPECT_TRUE(replay_defaults_only(item.target)) << item.target.arch;
    const ReplayRow* row = row_of(item.target.arch, item.source.variant);
    if (!row) continue;
    const std::string& v = row->variant;
    const bool capped = row->op.find("lrpe") != std::string::npos && v.find(":o") != std::string::npos;
    const bool dbl_fused_d128 = row->target != "sm_120" && v.starts_with("attention_double_bwd.") &&
                                v.find(".d128.") != std::string::npos && v.ends_with(".fused");
    EXPECT_LE(row->spill_bytes, capped ? 2 * 128 : dbl_fused_d128 ? 64 : 0) << v << " " << row->target;
    EXPECT_LE(row->stack_bytes, capped ? 128 : dbl_fused_d128 ? 32 : 0) << v << " " << row->target;
    EXPECT_FALSE(row->serialized_wgmma) << v << " " << row->target;
    EXPECT_EQ(v.find(".wg:"), std::string::npos) << v << " " << row->target;
    EXPECT_EQ(v.find(".ws:"), std::string::npos) << v << " " << row->target;
  }
  // Every row of those targets is one of the defaults: the table holds nothing else for them.
  std::size_t rows = 0;
  for (const auto& [key, row] : table()) rows += std::find(archs.begin(), archs.end(), key.first) != archs.end();
  std::set<std::pair<std::string, std::string>> distinct;
  for (const WarmItem& item : items) distinct.insert({item.target.arch, item.source.variant});
  EXPECT_EQ(rows, distinct.size());
}

TEST(ReplayDefaults, FirstOrderBackwardDefaultsAreWarmedAndSpillFree) {
  const int checked = expect_warmed_and_spill_free(
      attention_backward_default_shapes(), [](const AttentionBackwardSpec& spec, const AttentionShape& shape, const Target& target) {
        std::vector<KernelSource> out;
        const auto config = attention_backward_default_config(spec, shape, target, 132);
        // With it, in the atomic mode, what serves views without tensor maps (a zero stride).
        const auto without = attention_backward_config_without_tma_loads(spec, config);
        for (bool deterministic : {false, true})
          for (const auto& c : deterministic ? std::vector{config} : std::vector{config, without})
            for (BackwardKernel kernel : attention_backward_kernels(c, deterministic))
              out.push_back(render_attention_backward(spec, c, kernel));
        return out;
      });
  EXPECT_GT(checked, 1000);
}

TEST(ReplayDefaults, DoubleBackwardDefaultsAreWarmedAndSpillFree) {
  const int checked = expect_warmed_and_spill_free(
      attention_double_backward_default_shapes(),
      [](const AttentionBackwardSpec& spec, const AttentionShape& shape, const Target& target) {
        std::vector<KernelSource> out;
        const auto config = attention_double_backward_default_config(spec, shape, target, 132);
        for (DoubleBackwardKernel kernel : attention_double_backward_kernels(config))
          if (kernel != DoubleBackwardKernel::preprocess)  // attention_bwd's kernel
            out.push_back(render_attention_double_backward(spec, config, kernel));
        return out;
      });
  EXPECT_GT(checked, 500);
}

// `kgen replay --write FILE --ops X` (or --archs) rewrites X's rows and keeps the file's others.
TEST(ReplayTable, WritingASubsetKeepsTheRowsOfOtherOperatorsAndTargets) {
  auto row = [](const char* target, const char* op, const char* variant, const char* code) {
    ReplayRow r;
    r.target = target, r.op = op, r.variant = variant, r.entry = "k", r.code_sha256 = code;
    return r;
  };
  const std::vector<ReplayRow> table = {row("sm_80", "attention_fwd", "a", "1"), row("sm_80", "lrpe_cosine", "l", "2"),
                                        row("sm_80", "lrpe_cosine", "m", "3"), row("sm_90a", "lrpe_cosine", "l", "4")};
  // lrpe_cosine on sm_80 rebuilt: "l" changed, "m" is gone, "n" is new.
  const std::vector<ReplayRow> built = {row("sm_80", "lrpe_cosine", "n", "6"), row("sm_80", "lrpe_cosine", "l", "5")};
  const auto merged = merge_replay_rows(table, built, {"lrpe_cosine"}, {"sm_80"});
  std::vector<std::string> got;
  for (const auto& r : merged) got.push_back(r.target + "/" + r.op + "/" + r.variant + "=" + r.code_sha256);
  EXPECT_EQ(got, (std::vector<std::string>{"sm_80/attention_fwd/a=1", "sm_80/lrpe_cosine/l=5", "sm_80/lrpe_cosine/n=6",
                                           "sm_90a/lrpe_cosine/l=4"}));
  // Everything selected: the built rows alone.
  EXPECT_EQ(merge_replay_rows(table, built, {}, {}).size(), built.size());
  EXPECT_TRUE(replay_row_selected(table[1], {"lrpe_cosine"}, {}));
  EXPECT_FALSE(replay_row_selected(table[3], {}, {"sm_80", "sm_100a"}));
}

}  // namespace
}  // namespace kgen

namespace kgen {
namespace {

// v head dims below q's (kAttentionWarmHeadDimPairs): every forward, backward and double-backward
// default of each shape class is a row without spills or stack (fp16 and bf16 on fa2, fp32 on simt).
TEST(ReplayDefaults, MlaPairDefaultsAreWarmedWithoutLocalMemory) {
  std::vector<AttentionShape> shapes = attention_backward_default_shapes();
  shapes.push_back({1, 8, 8, 4, 4096});
  int checked = 0;
  for (const char* arch : {"sm_80", "sm_90a"}) {
    const Target target = *parse_target(arch);
    for (auto [d, dv] : kAttentionWarmHeadDimPairs)
      for (DType t : {DType::f16, DType::bf16, DType::f32})
        for (bool causal : {false, true})
          for (const AttentionShape& shape : shapes) {
            AttentionForwardSpec f{t, d, causal};
            f.head_dim_v = dv;
            AttentionBackwardSpec b{t, d, causal};
            b.head_dim_v = dv;
            std::vector<KernelSource> sources{
                render_attention_forward(f, attention_forward_default_config(f, shape, target, 132))};
            const AttentionBackwardConfig c = attention_backward_default_config(b, shape, target, 132);
            for (bool deterministic : {false, true})
              for (BackwardKernel k : attention_backward_kernels(c, deterministic))
                sources.push_back(render_attention_backward(b, c, k));
            const AttentionBackwardConfig g = attention_double_backward_default_config(b, shape, target, 132);
            for (DoubleBackwardKernel k : attention_double_backward_kernels(g))
              sources.push_back(render_attention_double_backward(b, g, k));
            for (const KernelSource& s : sources)
              if (const ReplayRow* row = row_of(arch, s.variant)) {
                EXPECT_EQ(row->spill_bytes, 0) << s.variant << " for " << arch;
                EXPECT_EQ(row->stack_bytes, 0) << s.variant << " for " << arch;
                ++checked;
              }
          }
  }
  EXPECT_GT(checked, 300);
}

}  // namespace
}  // namespace kgen
