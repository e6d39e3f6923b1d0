// Deviceless NVRTC compiles of the kernels that serve a v head dim below q's (MLA,
// docs/kernels/mla.md) at pairs outside the replay table's (kAttentionWarmHeadDimPairs, whose
// defaults the replay table builds): the defaults' forward, backward (both modes) and double
// backward kernels for sm_80 and sm_90a, without spills or stack.
#include <gtest/gtest.h>

#include <filesystem>

#include "generator/attention_backward.h"
#include "generator/attention_forward.h"
#include "jit/kernel_builder.h"

namespace kgen {
namespace {

TEST(CompileMla, DefaultKernelsOfOtherPairsCompileWithoutSpills) {
  KernelBuilder builder(std::filesystem::path(KGEN_TEST_CACHE_DIR));
  const AttentionShape shape{4, 16, 4, 1000, 1000};
  for (const char* arch : {"sm_80", "sm_90a"})
    for (auto [d, dv] : {std::pair{64, 32}, {96, 64}, {256, 128}}) {
      const Target target = *parse_target(arch);
      std::vector<KernelSource> sources;
      AttentionForwardSpec f{DType::bf16, d, true};
      f.head_dim_v = dv;
      sources.push_back(render_attention_forward(f, attention_forward_default_config(f, shape, target, 132)));
      AttentionBackwardSpec b{DType::bf16, d, true};
      b.head_dim_v = dv;
      const AttentionBackwardConfig c = attention_backward_default_config(b, shape, target, 132);
      for (bool deterministic : {false, true})
        for (BackwardKernel k : attention_backward_kernels(c, deterministic))
          if (k != BackwardKernel::dq_convert) sources.push_back(render_attention_backward(b, c, k));
      const AttentionBackwardConfig g = attention_double_backward_default_config(b, shape, target, 132);
      for (DoubleBackwardKernel k : attention_double_backward_kernels(g))
        if (k != DoubleBackwardKernel::preprocess) sources.push_back(render_attention_double_backward(b, g, k));
      for (const KernelSource& src : sources) {
        SCOPED_TRACE(std::string(arch) + " " + src.variant);
        const auto built = builder.build(src, target);
        ASSERT_TRUE(built.resources.parsed) << built.log;
        EXPECT_EQ(built.resources.spill_stores, 0);
        EXPECT_EQ(built.resources.spill_loads, 0);
        EXPECT_EQ(built.resources.stack_frame, 0);
      }
    }
}

}  // namespace
}  // namespace kgen
