// The embedded device templates as a whole: their includes resolve among themselves, and vendor
// code (inline PTX, shuffles, votes, atomics, dynamic shared memory) stays in the device core.
#include <gtest/gtest.h>

#include <string>
#include <string_view>

#include "generator/embedded_templates.h"

namespace kgen {
namespace {

bool is_embedded(std::string_view name) {
  for (const auto& t : generator::embedded_templates())
    if (name == t.name) return true;
  return false;
}

TEST(EmbeddedTemplates, EveryKgenDeviceIncludeIsEmbedded) {
  constexpr std::string_view kInclude = "#include \"";
  int includes = 0;
  for (const auto& t : generator::embedded_templates()) {
    const std::string_view text = t.text;
    for (auto at = text.find(kInclude); at != std::string_view::npos; at = text.find(kInclude, at + 1)) {
      const auto begin = at + kInclude.size();
      const auto end = text.find('"', begin);
      ASSERT_NE(end, std::string_view::npos) << t.name;
      const std::string_view name = text.substr(begin, end - begin);
      if (name.substr(0, 12) != "kgen_device/") continue;
      ++includes;
      EXPECT_TRUE(is_embedded(name)) << t.name << " includes " << name;
    }
  }
  EXPECT_GT(includes, 0);
}

TEST(EmbeddedTemplates, VendorCodeOnlyInTheDeviceCore) {
  constexpr std::string_view kCore = "kgen_device/core/";
  constexpr std::string_view kVendor[] = {"asm(",     "asm volatile", "__shfl",    "__ballot",         "__any_sync",
                                          "__all_sync", "__activemask", "atomicAdd", "extern __shared__", "red.global",
                                          "__builtin_amdgcn_"};
  int outside = 0;
  for (const auto& t : generator::embedded_templates()) {
    const std::string_view name = t.name;
    if (name.substr(0, kCore.size()) == kCore) continue;
    ++outside;
    for (std::string_view word : kVendor)
      EXPECT_EQ(std::string_view(t.text).find(word), std::string_view::npos)
          << name << " uses " << word << ": call the kgen:: wrapper in kgen_device/core/ instead";
  }
  EXPECT_GT(outside, 0);
}

}  // namespace
}  // namespace kgen
