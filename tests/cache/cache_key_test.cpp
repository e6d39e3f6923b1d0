#include <gtest/gtest.h>

#include <set>

#include "cache/cache_key.h"
#include "cache/sha256.h"

namespace kgen::cache {
namespace {

CacheKeyBuilder reference_builder() {
  CacheKeyBuilder b;
  b.add("kgen_version", "0.1.0")
      .add("templates", "t-hash")
      .add("source", "s-hash")
      .add("compiler", "nvrtc 12.4.131")
      .add("target", "sm_90a")
      .add_sorted("options", {"-lineinfo", "--std=c++17"})
      .add("platform", "linux-x86_64");
  return b;
}

TEST(CacheKey, RecordIsCanonicalAndSchemaFirst) {
  CacheKeyBuilder b;
  b.add("a", "xyz").add("", "");
  EXPECT_EQ(b.record(), "6:schema1:11:a3:xyz0:0:");
}

// A golden digest: if this changes, the key format changed and every cache is invalidated;
// bump kSchemaVersion deliberately and update the literal in the same change.
TEST(CacheKey, GoldenDigest) {
  const CacheKeyBuilder b = reference_builder();
  EXPECT_EQ(b.record(),
            "6:schema1:112:kgen_version5:0.1.09:templates6:t-hash6:source6:s-hash8:compiler"
            "14:nvrtc 12.4.1316:target6:sm_90a7:options25:11:--std=c++179:-lineinfo8:platform"
            "12:linux-x86_64");
  EXPECT_EQ(b.digest(), "ac84c967737743bd4f98231dbdfbfde3d0f8cd6f6f9f6b065c768c245f99848b");
  EXPECT_EQ(b.digest(), sha256_hex(b.record()));
}

TEST(CacheKey, SameFieldsSameDigest) {
  EXPECT_EQ(reference_builder().digest(), reference_builder().digest());
}

TEST(CacheKey, SortedOptionsIgnoreOrder) {
  CacheKeyBuilder a, b;
  a.add_sorted("options", {"-O3", "-lineinfo", "--std=c++17"});
  b.add_sorted("options", {"--std=c++17", "-O3", "-lineinfo"});
  EXPECT_EQ(a.digest(), b.digest());
}

TEST(CacheKey, ChangingAnyOneFieldChangesDigest) {
  const std::vector<std::pair<std::string, std::string>> fields = {
      {"kgen_version", "0.1.0"}, {"templates", "t"}, {"source", "s"},
      {"compiler", "nvrtc 12.4"}, {"target", "sm_90a"}, {"platform", "linux-x86_64"}};
  std::set<std::string> digests;
  auto build = [&](std::size_t changed, bool change_name) {
    CacheKeyBuilder b;
    for (std::size_t i = 0; i < fields.size(); ++i) {
      const auto& [name, value] = fields[i];
      if (i == changed) {
        b.add(change_name ? name + "x" : name, change_name ? value : value + "x");
      } else {
        b.add(name, value);
      }
    }
    return b.digest();
  };
  digests.insert(build(fields.size(), false));  // Nothing changed.
  for (std::size_t i = 0; i < fields.size(); ++i) {
    digests.insert(build(i, false));
    digests.insert(build(i, true));
  }
  EXPECT_EQ(digests.size(), 1 + 2 * fields.size());
}

TEST(CacheKey, FieldBoundariesDoNotCollide) {
  EXPECT_NE(CacheKeyBuilder().add("ab", "c").digest(), CacheKeyBuilder().add("a", "bc").digest());
  EXPECT_NE(CacheKeyBuilder().add("f", "ab").add("g", "c").digest(),
            CacheKeyBuilder().add("f", "a").add("g", "bc").digest());
  // A value that looks like an encoded item cannot fake a second field.
  EXPECT_NE(CacheKeyBuilder().add("f", "1:x1:y").digest(),
            CacheKeyBuilder().add("f", "").add("x", "y").digest());
  EXPECT_NE(CacheKeyBuilder().add_sorted("o", {"ab", "c"}).digest(),
            CacheKeyBuilder().add_sorted("o", {"a", "bc"}).digest());
}

TEST(CacheKey, DigestIsLowercaseHex64) {
  const std::string d = reference_builder().digest();
  ASSERT_EQ(d.size(), 64u);
  for (char c : d) EXPECT_TRUE((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')) << c;
}

}  // namespace
}  // namespace kgen::cache
