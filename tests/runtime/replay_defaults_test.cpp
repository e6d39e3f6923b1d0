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

// The row of `source` for `target`, or nullptr with a test failure.
const ReplayRow* row_of(const Table& table, const std::string& target, const KernelSource& source) {
  auto it = table.find({target, source.variant});
  if (it == table.end()) {
    ADD_FAILURE() << source.variant << " for " << target << " is not in the replay table (not warmed)";
    return nullptr;
  }
  return &it->second;
}

TEST(ReplayDefaults, FirstOrderBackwardDefaultsAreWarmedAndSpillFree) {
  const Table table = replay_table();
  ASSERT_FALSE(table.empty()) << KGEN_REPLAY_TABLE;
  int checked = 0;
  for (const char* arch : {"sm_80", "sm_90a"}) {
    const Target target = *parse_target(arch);
    for (DType t : {DType::f16, DType::bf16})
      for (int d = 8; d <= kMaxHeadDim; d += 8)
        for (bool causal : {false, true})
          for (const AttentionShape& shape : attention_backward_default_shapes()) {
            const AttentionBackwardSpec spec{t, d, causal};
            const auto config = attention_backward_default_config(spec, shape, target, 132);
            // With it, in the atomic mode, what serves views without tensor maps (a zero stride).
            const auto without = attention_backward_config_without_tma_loads(spec, config);
            for (bool deterministic : {false, true})
              for (const auto& c : deterministic ? std::vector{config} : std::vector{config, without})
                for (BackwardKernel kernel : attention_backward_kernels(c, deterministic)) {
                  const KernelSource source = render_attention_backward(spec, c, kernel);
                  if (const ReplayRow* row = row_of(table, arch, source)) {
                    EXPECT_EQ(row->spill_bytes, 0) << source.variant << " for " << arch;
                    ++checked;
                  }
                }
          }
  }
  EXPECT_GT(checked, 1000);
}

TEST(ReplayDefaults, DoubleBackwardDefaultsAreWarmedAndSpillFree) {
  const Table table = replay_table();
  ASSERT_FALSE(table.empty()) << KGEN_REPLAY_TABLE;
  int checked = 0;
  for (const char* arch : {"sm_80", "sm_90a"}) {
    const Target target = *parse_target(arch);
    for (DType t : {DType::f16, DType::bf16})
      for (int d = 8; d <= kMaxHeadDim; d += 8)
        for (bool causal : {false, true})
          for (const AttentionShape& shape : attention_double_backward_default_shapes()) {
            const AttentionBackwardSpec spec{t, d, causal};
            const auto config = attention_double_backward_default_config(spec, shape, target, 132);
            for (DoubleBackwardKernel kernel : attention_double_backward_kernels(config)) {
              if (kernel == DoubleBackwardKernel::preprocess) continue;  // attention_bwd's kernel
              const KernelSource source = render_attention_double_backward(spec, config, kernel);
              if (const ReplayRow* row = row_of(table, arch, source)) {
                EXPECT_EQ(row->spill_bytes, 0) << source.variant << " for " << arch;
                ++checked;
              }
            }
          }
  }
  EXPECT_GT(checked, 500);
}

}  // namespace
}  // namespace kgen
