// What a warm leaves in the cache is what it reports: a build whose publish fails (no writable
// layer, a publish failing part-way through, a size cap that evicts what was just stored) is
// counted as not stored, with the reason, in BuildOutcome and in WarmSummary.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "generator/attention_forward.h"
#include "jit/kernel_builder.h"
#include "jit/warm.h"

namespace kgen {
namespace {
namespace fs = std::filesystem;

class WarmStore : public ::testing::Test {
 protected:
  void SetUp() override {
    ::unsetenv("KGEN_CACHE_PATH");
    ::unsetenv("KGEN_CACHE_MAX_BYTES");
    ::unsetenv("KGEN_NO_JIT");
    dir_ = fs::temp_directory_path() / ("kgen-warm-store-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    const Target sm80 = *parse_target("sm_80");
    // Cheap general-path kernels: a fraction of a second each.
    for (int d : {32, 64})
      for (bool causal : {false, true})
        items_.push_back({render_attention_forward({DType::f32, d, causal}, {.path = ForwardPath::simt, .block_m = 4, .block_n = 32, .stages = 1, .max_head_dim = d}), sm80});
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A root below a regular file: nothing can be created there, even by root (chmod would not
  // stop a root test run).
  fs::path unwritable_root() {
    std::ofstream(dir_ / "file") << "x";
    return dir_ / "file" / "cache";
  }

  fs::path dir_;
  std::vector<WarmItem> items_;
};

TEST_F(WarmStore, BuildOutcomeSaysWhetherTheBinaryWasStored) {
  KernelBuilder good(dir_ / "root", {});
  const BuildOutcome compiled = good.build(items_[0].source, items_[0].target);
  EXPECT_FALSE(compiled.from_cache);
  EXPECT_TRUE(compiled.stored);
  EXPECT_TRUE(compiled.store_error.empty());
  const BuildOutcome hit = KernelBuilder(dir_ / "root", {}).build(items_[0].source, items_[0].target);
  EXPECT_TRUE(hit.from_cache);
  EXPECT_TRUE(hit.stored);

  KernelBuilder bad(unwritable_root(), {});
  const BuildOutcome lost = bad.build(items_[0].source, items_[0].target);
  EXPECT_FALSE(lost.from_cache);
  EXPECT_FALSE(lost.image.empty()) << "a failed publish still returns the binary";
  EXPECT_FALSE(lost.stored);
  EXPECT_NE(lost.store_error.find("no writable cache layer"), std::string::npos) << lost.store_error;
}

TEST_F(WarmStore, UnwritableRootCompilesEverythingAndStoresNothing) {
  KernelBuilder builder(unwritable_root(), {});
  const WarmSummary s = warm(builder, items_, 2, {}, {.log_compile = false});
  EXPECT_EQ(s.compiled, static_cast<int>(items_.size()));
  EXPECT_EQ(s.failed, 0);
  EXPECT_EQ(s.not_stored, static_cast<int>(items_.size()));
  EXPECT_EQ(s.evicted, 0);
  for (const WarmResult& r : s.results) {
    EXPECT_TRUE(r.ok);
    EXPECT_FALSE(r.stored);
    EXPECT_FALSE(r.store_error.empty());
  }
}

// The cache fills up part-way through (as a full disk does): what was published before stays
// counted as stored, every later build is not stored and says why.
TEST_F(WarmStore, PublishesFailingPartWayAreCountedFromThere) {
  const fs::path root = dir_ / "root";
  KernelBuilder builder(root, {});
  const std::vector<WarmItem> first(items_.begin(), items_.begin() + 1);
  const WarmSummary before = warm(builder, first, 1, {}, {.log_compile = false});
  ASSERT_EQ(before.compiled, 1);
  ASSERT_EQ(before.not_stored, 0);

  // From here on no staging file can be created, while the layer still looks writable.
  fs::remove_all(root / "v1" / "tmp");
  std::ofstream(root / "v1" / "tmp") << "not a directory";
  const WarmSummary after = warm(builder, items_, 1, {}, {.log_compile = false});
  EXPECT_EQ(after.cached, 1);
  EXPECT_EQ(after.compiled, static_cast<int>(items_.size()) - 1);
  EXPECT_EQ(after.not_stored, static_cast<int>(items_.size()) - 1);
  EXPECT_TRUE(after.results[0].stored) << "the entry published before the failure is still there";
  EXPECT_NE(after.results[1].store_error.find("tmp"), std::string::npos) << after.results[1].store_error;
  for (std::size_t i = 2; i < items_.size(); ++i)
    EXPECT_NE(after.results[i].store_error.find("skipped for writes after a failed publish"), std::string::npos)
        << after.results[i].store_error;
  EXPECT_EQ(builder.stats().published, 1u);
}

TEST_F(WarmStore, EntriesEvictedByTheSizeCapBeforeTheEndAreNotStored) {
  KernelBuilder builder(dir_ / "root", {});
  builder.layered().set_max_bytes(1000);  // smaller than any one entry
  const WarmSummary s = warm(builder, items_, 1, {}, {.log_compile = false});
  EXPECT_EQ(s.compiled, static_cast<int>(items_.size()));
  EXPECT_EQ(s.evicted, static_cast<int>(items_.size()));
  EXPECT_EQ(s.not_stored, s.evicted);
  for (const WarmResult& r : s.results) {
    EXPECT_FALSE(r.stored);
    EXPECT_NE(r.store_error.find("size cap 1000 bytes"), std::string::npos) << r.store_error;
  }
}

TEST_F(WarmStore, AWritableCacheStoresEverything) {
  KernelBuilder builder(dir_ / "root", {});
  const WarmSummary s = warm(builder, items_, 2, {}, {.log_compile = false});
  EXPECT_EQ(s.compiled, static_cast<int>(items_.size()));
  EXPECT_EQ(s.not_stored, 0);
  for (const WarmResult& r : s.results) {
    EXPECT_TRUE(r.stored);
    EXPECT_TRUE(builder.layered().contains(r.key));
  }
}

}  // namespace
}  // namespace kgen
