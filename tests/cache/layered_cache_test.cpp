#include <gtest/gtest.h>

#include <fstream>

#include "cache/layered_cache.h"
#include "test_support.h"

namespace kgen::cache {
namespace {
namespace fs = std::filesystem;
using testing::key_for;
using testing::LogCapture;
using testing::sample_entry;
using testing::ScratchDir;

TEST(LayeredCache, FirstHitWins) {
  ScratchDir dir;
  const std::string key = key_for("layered");
  CacheEntry front = sample_entry(), back = sample_entry();
  front.metadata["layer"] = "front";
  back.metadata["layer"] = "back";
  ASSERT_TRUE(BinaryCache(dir.path() / "front").publish(key, front));
  ASSERT_TRUE(BinaryCache(dir.path() / "back").publish(key, back));
  ASSERT_TRUE(BinaryCache(dir.path() / "back").publish(key_for("only-back"), back));

  LayeredCache cache({dir.path() / "front", dir.path() / "back"});
  EXPECT_EQ(cache.load(key)->metadata["layer"], "front");
  EXPECT_EQ(cache.load(key_for("only-back"))->metadata["layer"], "back");
  EXPECT_FALSE(cache.load(key_for("nowhere")).has_value());
  EXPECT_EQ(cache.stats().hits, 2u);
}

TEST(LayeredCache, WritesGoToFirstWritableLayer) {
  ScratchDir dir;
  LogCapture log;
  const fs::path read_only = dir.path() / "image-cache";  // a file: nothing can be created in it
  std::ofstream(read_only) << "x";
  LayeredCache cache({read_only, dir.path() / "user"});
  const std::string key = key_for("w");
  EXPECT_TRUE(cache.publish(key, sample_entry()));
  EXPECT_TRUE(fs::exists(cache.layer(1).entry_path(key)));
  EXPECT_TRUE(cache.load(key).has_value());
  EXPECT_EQ(cache.layer(0).stats().publish_failures, 1u);
}

TEST(LayeredCache, NoLayersNeverThrows) {
  LayeredCache cache({});
  EXPECT_FALSE(cache.load(key_for("x")).has_value());
  EXPECT_FALSE(cache.publish(key_for("x"), sample_entry()));
}

}  // namespace
}  // namespace kgen::cache
