// The defaults the dispatcher picks on the NVIDIA targets, looked up in the replay table
// (tests/replay/table.tsv, which the replay.table test checks against real compiles): every one
// is there, so `kgen warm` builds it, and compiles without spills (issue "no performance cliffs":
// no spills on defaults).
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>
#include <utility>
#include <vector>

#include "generator/attention_backward.h"
#include "generator/attention_forward.h"
#include "jit/replay.h"

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

// Checks that every kernel `sources(spec, shape, target)` lists is a row of the table for its
// target (so `kgen warm` builds it) with no spill bytes: 16-bit specs of every multiple-of-8 head
// dim, both masks, each of `shapes`, on sm_80 and sm_90a. Returns how many rows it checked.
template <class Sources>
int expect_warmed_and_spill_free(const std::vector<AttentionShape>& shapes, Sources sources) {
  static const Table table = replay_table();
  EXPECT_FALSE(table.empty()) << KGEN_REPLAY_TABLE;
  int checked = 0;
  for (const char* arch : {"sm_80", "sm_90a"}) {
    const Target target = *parse_target(arch);
    for (DType t : {DType::f16, DType::bf16})
      for (int d = 8; d <= kMaxHeadDim; d += 8)
        for (bool causal : {false, true})
          for (const AttentionShape& shape : shapes)
            for (const KernelSource& source : sources(AttentionBackwardSpec{t, d, causal}, shape, target)) {
              auto it = table.find({arch, source.variant});
              if (it == table.end()) {
                ADD_FAILURE() << source.variant << " for " << arch << " is not in the replay table (not warmed)";
                continue;
              }
              EXPECT_EQ(it->second.spill_bytes, 0) << source.variant << " for " << arch;
              ++checked;
            }
  }
  return checked;
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

}  // namespace
}  // namespace kgen
