// The launch path's kernel keys (runtime/ops/attention_backward.h: gradient_kernel_key) pack every
// field of every config kgen can choose or be given into 64 bits: a field that does not fit throws
// at the first launch, on a GPU only. Here every config of the spaces, every default and the
// explicit forms outside the spaces are packed, for every kernel of both modes, without a device.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "generator/attention_backward.h"
#include "generator/target.h"
#include "ops/attention_backward.h"

namespace kgen {
namespace {

// Every config worth packing for `spec` on `target`: the spaces, the defaults of the shapes
// kgen warms for, and the explicit forms of the decoupled Hopper kernel.
std::vector<AttentionBackwardConfig> configs_of(const AttentionBackwardSpec& spec, const Target& target, bool dbl) {
  std::vector<AttentionBackwardConfig> out =
      dbl ? attention_double_backward_config_space(spec, target) : attention_backward_config_space(spec, target);
  for (const AttentionShape& shape : attention_backward_default_shapes())
    for (int sm_count : {132, 8})
      out.push_back(dbl ? attention_double_backward_default_config(spec, shape, target, sm_count)
                        : attention_backward_default_config(spec, shape, target, sm_count));
  if (!dbl)
    for (const char* text : {"wg:bm64:bn128:a1:t:l:g2", "wg:bm128:bn128:a2:l:g2",
                             "wg:bm64:bn128:a1:t:l:w:g2", "wg:bm64:bn128:a2:t:l:w:g4", "wg:bm64:bn128:a2:t:l:w:g8",
                             "wg:bm128:bn128:a2:l:w:g4", "wg:bm64:bn128:a2:t:l:w:p:g8", "wg:bm128:bn128:a2:t:l:w:p"}) {
      const auto c = *parse_attention_backward_config(text);
      if (!check_attention_backward_config(spec, c, target)) out.push_back(c);
    }
  return out;
}

TEST(KernelKeys, EveryConfigsKernelsPackIntoSixtyFourBitsAndStayDistinct) {
  int packed = 0;
  for (const char* arch : {"sm_80", "sm_90a", "gfx942"}) {
    const Target target = *parse_target(arch);
    for (DType dtype : {DType::f16, DType::bf16, DType::f32})
      for (int d = 8; d <= 256; d += 8)
        for (bool causal : {false, true}) {
          const AttentionBackwardSpec spec{dtype, d, causal};
          // Distinct configs of this spec and op get distinct keys for the same kernel.
          std::set<std::pair<std::string, std::uint64_t>> seen;
          for (const auto& c : configs_of(spec, target, false))
            for (bool deterministic : {false, true})
              for (BackwardKernel k : attention_backward_kernels(c, deterministic)) {
                std::uint64_t key = 0;
                ASSERT_NO_THROW(key = gradient_kernel_key(spec, c, int(k))) << arch << " " << to_string(spec) << " " << to_string(c);
                seen.insert({to_string(c) + "/" + std::to_string(int(k)), key});
                ++packed;
              }
          std::set<std::uint64_t> keys;
          for (const auto& [name, key] : seen) EXPECT_TRUE(keys.insert(key).second) << name;
          for (const auto& c : configs_of(spec, target, true))
            for (DoubleBackwardKernel k : attention_double_backward_kernels(c))
              ASSERT_NO_THROW(gradient_kernel_key(spec, c, int(k))) << arch << " " << to_string(spec) << " " << to_string(c);
        }
  }
  EXPECT_GT(packed, 10000);
}

}  // namespace
}  // namespace kgen
