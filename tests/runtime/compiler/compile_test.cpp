// Deviceless NVRTC compiles: the Hopper backward's explicit forms outside the tuner's space, the
// compiler's error log and the ptxas report parser. The resource rules of every variant `kgen
// warm` builds are checked on the replay table's rows (replay_defaults_test.cpp).
#include <gtest/gtest.h>

#include <filesystem>

#include "generator/attention_backward.h"
#include "generator/attention_forward.h"
#include "compiler/nvrtc.h"
#include "jit/warm.h"

namespace kgen {
namespace {

std::filesystem::path test_cache() { return std::filesystem::path(KGEN_TEST_CACHE_DIR); }

// The Hopper backward's explicit forms outside the tuner's space: Q/dO loads by TMA (":l") and
// group splits (":g2", ":g8": dK and dV added into fp32 rows), also with a producer warpgroup
// (":w", setmaxnreg). They compile for sm_90a without spills, stack or serialised wgmma at the
// tile head dims 64 and 128, for both dtypes and masks.
TEST(Compile, BackwardExplicitFormsCompileForSm90aWithoutSpills) {
  KernelBuilder builder(test_cache());
  const Target target = *parse_target("sm_90a");
  for (const char* text : {"wg:bm64:bn128:a1:l", "wg:bm64:bn128:a2:l", "wg:bm64:bn128:a2:t:l", "wg:bm64:bn128:a1:t:l",
                           "wg:bm64:bn128:a2:t:l:g2", "wg:bm64:bn128:a1:t:l:g2", "wg:bm64:bn128:a1:t:l:w:g2",
                           "wg:bm64:bn128:a2:t:l:w:g8"})
    for (DType t : {DType::bf16, DType::f16})
      for (int d : {64, 128})
        for (bool causal : {false, true}) {
          if (t == DType::f16 && std::string(text) != "wg:bm64:bn128:a2:t:l") continue;  // one dtype is enough
          const AttentionBackwardSpec spec{t, d, causal};
          const auto config = *parse_attention_backward_config(text);
          ASSERT_FALSE(check_attention_backward_config(spec, config, target));
          const KernelSource src = render_attention_backward(spec, config, BackwardKernel::kv_atomic);
          SCOPED_TRACE(src.variant);
          auto built = builder.build(src, target);
          ASSERT_TRUE(built.resources.parsed) << built.log;
          EXPECT_EQ(built.resources.spill_stores, 0);
          EXPECT_EQ(built.resources.stack_frame, 0);
          EXPECT_FALSE(built.resources.serialized_wgmma);
        }
}

TEST(Compile, ReportsCompilerErrorsWithTheLog) {
  KernelSource bad{"attention_fwd", "broken", "extern \"C\" __global__ void k() { this_is_not_cuda; }", "k", 32, 0};
  try {
    compiler_for(*parse_target("sm_80")).compile(bad, *parse_target("sm_80"));
    FAIL() << "expected a compile error";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::compile_error);
    EXPECT_NE(std::string(e.what()).find("this_is_not_cuda"), std::string::npos) << e.what();
  }
}

TEST(Compile, ParsesThePtxasReport) {
  auto r = parse_ptxas_report(
      "ptxas info    : Compiling entry function 'k' for 'sm_90a'\n"
      "ptxas info    : Function properties for k\n"
      "    16 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads\n"
      "ptxas info    : Used 168 registers, used 1 barriers, 400 bytes smem, 376 bytes cmem[0]\n");
  EXPECT_TRUE(r.parsed);
  EXPECT_EQ(r.registers, 168);
  EXPECT_EQ(r.stack_frame, 16);
  EXPECT_EQ(r.spill_stores, 8);
  EXPECT_EQ(r.spill_loads, 4);
  EXPECT_EQ(r.static_smem, 400);
  EXPECT_TRUE(parse_ptxas_report("ptxas warning : (C7510) Potential Performance Loss: wgmma.mma_async").serialized_wgmma);
  // The divergent-path form, which a branch around a warpgroup's wgmma issue gives.
  EXPECT_TRUE(parse_ptxas_report("ptxas info    : (C7520) Potential Performance Loss: wgmma.mma_async instructions are "
                                 "serialized due to program dependence on compiler-inserted WG.AR in divergent path in "
                                 "the function 'kgen_attention_fwd'")
                  .serialized_wgmma);
  EXPECT_TRUE(parse_ptxas_report("ptxas info    : (C7599) wgmma.mma_async instructions are serialized due to a "
                                 "reason this version does not name")
                  .serialized_wgmma);
  EXPECT_FALSE(parse_ptxas_report("ptxas info    : Used 168 registers").serialized_wgmma);
}

// A module with several entries (or non-inlined functions): the report has a block per
// function, and the spills of every one of them count.
TEST(Compile, SumsTheSpillsOfEveryFunction) {
  auto r = parse_ptxas_report(
      "ptxas info    : Compiling entry function 'k' for 'sm_90a'\n"
      "ptxas info    : Function properties for k\n"
      "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Used 255 registers, used 1 barriers\n"
      "ptxas info    : Function properties for _Z6part_av\n"
      "    0 bytes stack frame, 12 bytes spill stores, 8 bytes spill loads\n"
      "ptxas info    : Function properties for _Z6part_bv\n"
      "    0 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads\n");
  EXPECT_EQ(r.registers, 255);
  EXPECT_EQ(r.spill_stores, 16);
  EXPECT_EQ(r.spill_loads, 12);
}

// Two entries in one module: registers, stack frame and static shared memory are the largest
// entry's, whichever is reported first.
TEST(Compile, TakesTheLargestEntrysRegistersStackAndSharedMemory) {
  auto r = parse_ptxas_report(
      "ptxas info    : Compiling entry function 'small' for 'sm_90a'\n"
      "ptxas info    : Function properties for small\n"
      "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Used 40 registers, used 0 barriers, 512 bytes smem\n"
      "ptxas info    : Compiling entry function 'large' for 'sm_90a'\n"
      "ptxas info    : Function properties for large\n"
      "    24 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads\n"
      "ptxas info    : Used 168 registers, used 1 barriers, 256 bytes smem\n");
  EXPECT_TRUE(r.parsed);
  EXPECT_EQ(r.registers, 168);
  EXPECT_EQ(r.stack_frame, 24);
  EXPECT_EQ(r.static_smem, 512);
  EXPECT_EQ(r.spill_stores, 4);
}

}  // namespace
}  // namespace kgen
