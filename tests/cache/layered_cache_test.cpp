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
  // The probe sees that nothing can be created in layer 0: it is never tried, nothing is logged.
  EXPECT_EQ(cache.layer(0).stats().publish_failures, 0u);
  EXPECT_EQ(cache.writable_layer(), 1u);
  EXPECT_TRUE(log.lines().empty());
  const auto info = cache.layer_info();
  ASSERT_EQ(info.size(), 2u);
  EXPECT_FALSE(info[0].writable);
  EXPECT_FALSE(info[0].exists);
  EXPECT_TRUE(info[1].writable);
  EXPECT_TRUE(info[1].exists);
  EXPECT_EQ(info[1].entries, 1u);
  EXPECT_GT(info[1].bytes, 0u);
}

TEST(LayeredCache, NoWritableLayerIsLoggedOnceAndNeverFatal) {
  ScratchDir dir;
  LogCapture log;
  const fs::path file_a = dir.path() / "a", file_b = dir.path() / "b";
  std::ofstream(file_a) << "x";
  std::ofstream(file_b) << "x";
  LayeredCache cache({file_a / "cache", file_b});
  EXPECT_FALSE(cache.writable_layer().has_value());
  for (int i = 0; i < 5; ++i) EXPECT_FALSE(cache.publish(key_for("k" + std::to_string(i)), sample_entry()));
  EXPECT_EQ(log.lines().size(), 1u);
  EXPECT_NE(log.lines().at(0).find("no writable cache layer"), std::string::npos);
  EXPECT_FALSE(cache.load(key_for("k0")).has_value());
}

TEST(LayeredCache, LayerThatFailsAPublishIsSkippedAndLoggedOnce) {
  ScratchDir dir;
  LogCapture log;
  const fs::path first = dir.path() / "first";
  LayeredCache cache({first, dir.path() / "second"});
  ASSERT_EQ(cache.writable_layer(), 0u);
  // The probe said writable, but the layer breaks afterwards (think: remounted read-only).
  fs::create_directories(first / "v1");
  std::ofstream(first / "v1" / "tmp") << "not a directory";
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(cache.publish(key_for("s" + std::to_string(i)), sample_entry()));
  EXPECT_EQ(cache.layer(0).stats().publish_failures, 1u);
  EXPECT_EQ(cache.layer(1).stats().published, 4u);
  EXPECT_EQ(cache.writable_layer(), 1u);
  EXPECT_EQ(log.lines().size(), 1u);
}

TEST(LayeredCache, LoadReportsTheLayerThatAnswered) {
  ScratchDir dir;
  ASSERT_TRUE(BinaryCache(dir.path() / "back").publish(key_for("b"), sample_entry()));
  LayeredCache cache({dir.path() / "front", dir.path() / "back"});
  std::size_t index = 99;
  ASSERT_TRUE(cache.load(key_for("b"), &index).has_value());
  EXPECT_EQ(index, 1u);
}

TEST(LayeredCache, SizeCapEvictsLeastRecentlyUsedDownToNinetyPercent) {
  ScratchDir dir;
  LayeredCache cache({dir.path()});
  const std::uint64_t entry_bytes = [&] {
    BinaryCache probe(dir.path() / "probe");
    probe.publish(key_for("probe"), sample_entry(10000));
    return probe.total_bytes();
  }();
  cache.set_max_bytes(entry_bytes * 10);
  std::vector<std::string> keys;
  for (int i = 0; i < 10; ++i) {
    keys.push_back(key_for("cap" + std::to_string(i)));
    ASSERT_TRUE(cache.publish(keys.back(), sample_entry(10000)));
    // Distinct explicit stamps, oldest first.
    fs::last_write_time(cache.layer(0).entry_path(keys.back()),
                        fs::file_time_type::clock::now() - std::chrono::hours(100 - i));
  }
  EXPECT_EQ(cache.cap_evictions(), 0u);
  EXPECT_LE(cache.layer(0).total_bytes(), entry_bytes * 10);
  keys.push_back(key_for("cap-over"));
  ASSERT_TRUE(cache.publish(keys.back(), sample_entry(10000)));
  EXPECT_EQ(cache.cap_evictions(), 1u);
  EXPECT_LE(cache.layer(0).total_bytes(), entry_bytes * 9);
  EXPECT_FALSE(fs::exists(cache.layer(0).entry_path(keys[0]))) << "the oldest stamp goes first";
  EXPECT_FALSE(fs::exists(cache.layer(0).entry_path(keys[1])));
  EXPECT_TRUE(fs::exists(cache.layer(0).entry_path(keys.back()))) << "the new entry stays";
}

TEST(LayeredCache, NoLayersNeverThrows) {
  LayeredCache cache({});
  EXPECT_FALSE(cache.load(key_for("x")).has_value());
  EXPECT_FALSE(cache.publish(key_for("x"), sample_entry()));
}

}  // namespace
}  // namespace kgen::cache
