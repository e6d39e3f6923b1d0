#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "test_support.h"

namespace kgen::cache {
namespace {
namespace fs = std::filesystem;
using testing::count_files;
using testing::key_for;
using testing::LogCapture;
using testing::sample_entry;
using testing::ScratchDir;

TEST(BinaryCache, PublishLoadRoundTrip) {
  ScratchDir dir;
  BinaryCache cache(dir.path());
  const std::string key = key_for("round-trip");
  const CacheEntry entry = sample_entry(4096);
  ASSERT_TRUE(cache.publish(key, entry));

  const fs::path expected = dir.path() / "v1" / key.substr(0, 2) / (key + ".kgen");
  EXPECT_EQ(cache.entry_path(key), expected);
  EXPECT_TRUE(fs::is_regular_file(expected));
  EXPECT_TRUE(fs::is_empty(dir.path() / "v1" / "tmp"));

  const auto loaded = cache.load(key);
  ASSERT_TRUE(loaded.has_value());
  EXPECT_EQ(loaded->binary, entry.binary);
  EXPECT_EQ(loaded->metadata, entry.metadata);
  const CacheStats s = cache.stats();
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.misses, 0u);
  EXPECT_EQ(s.published, 1u);
  EXPECT_EQ(s.corrupt_removed, 0u);
}

TEST(BinaryCache, EmptyBinaryAndNullMetadataRoundTrip) {
  ScratchDir dir;
  BinaryCache cache(dir.path());
  const std::string key = key_for("empty");
  ASSERT_TRUE(cache.publish(key, CacheEntry{}));
  const auto loaded = cache.load(key);
  ASSERT_TRUE(loaded.has_value());
  EXPECT_TRUE(loaded->binary.empty());
  EXPECT_TRUE(loaded->metadata.is_null());
}

TEST(BinaryCache, MissingEntryIsASilentMiss) {
  ScratchDir dir;
  LogCapture log;
  BinaryCache cache(dir.path() / "does-not-exist");
  EXPECT_FALSE(cache.load(key_for("absent")).has_value());
  EXPECT_EQ(cache.stats().misses, 1u);
  EXPECT_TRUE(log.lines().empty());
  EXPECT_FALSE(fs::exists(dir.path() / "does-not-exist"));  // load creates nothing
}

TEST(BinaryCache, InvalidKeysAreRejectedWithoutThrowing) {
  ScratchDir dir;
  LogCapture log;
  BinaryCache cache(dir.path());
  for (std::string_view bad : {"", "a", "../../etc/passwd", "ABCDEF", "ab/cd", "zz"}) {
    EXPECT_FALSE(cache.publish(bad, sample_entry())) << bad;
    EXPECT_FALSE(cache.load(bad).has_value()) << bad;
  }
  EXPECT_EQ(cache.stats().publish_failures, 6u);
  EXPECT_EQ(count_files(dir.path()), 0u);
}

TEST(BinaryCache, PublishingAnExistingKeyKeepsTheFirstEntry) {
  ScratchDir dir;
  BinaryCache cache(dir.path());
  const std::string key = key_for("twice");
  CacheEntry first = sample_entry();
  CacheEntry second = sample_entry();
  second.metadata["note"] = "second";
  ASSERT_TRUE(cache.publish(key, first));
  EXPECT_TRUE(cache.publish(key, second));
  EXPECT_EQ(cache.stats().published, 1u);
  EXPECT_EQ(cache.load(key)->metadata, first.metadata);
}

TEST(BinaryCache, ListRemoveClearAndTotalBytes) {
  ScratchDir dir;
  BinaryCache cache(dir.path());
  const std::string a = key_for("a"), b = key_for("b");
  ASSERT_TRUE(cache.publish(a, sample_entry(100)));
  ASSERT_TRUE(cache.publish(b, sample_entry(200)));

  const std::vector<EntryInfo> entries = cache.list();
  ASSERT_EQ(entries.size(), 2u);
  std::uint64_t sum = 0;
  for (const EntryInfo& e : entries) {
    EXPECT_TRUE(e.key == a || e.key == b);
    EXPECT_EQ(e.size_bytes, fs::file_size(cache.entry_path(e.key)));
    EXPECT_EQ(e.metadata, sample_entry().metadata);
    sum += e.size_bytes;
  }
  EXPECT_EQ(cache.total_bytes(), sum);

  EXPECT_TRUE(cache.remove(a));
  EXPECT_FALSE(cache.remove(a));
  EXPECT_FALSE(cache.load(a).has_value());
  EXPECT_TRUE(cache.load(b).has_value());

  { KeyLock lock(cache, b); }
  EXPECT_EQ(cache.clear(), 1u);
  EXPECT_TRUE(cache.list().empty());
  EXPECT_EQ(cache.total_bytes(), 0u);
  EXPECT_EQ(count_files(dir.path()), 0u);  // lock files and temps too
}

TEST(BinaryCache, VerifyCountsAndRemovesCorruptEntries) {
  ScratchDir dir;
  LogCapture log;
  BinaryCache cache(dir.path());
  std::vector<std::string> keys;
  for (std::size_t i = 0; i < 5; ++i) {
    keys.push_back(key_for("verify" + std::to_string(i)));
    ASSERT_TRUE(cache.publish(keys.back(), sample_entry(300 + i)));
  }
  fs::resize_file(cache.entry_path(keys[1]), 70);
  {
    std::fstream f(cache.entry_path(keys[3]), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-40, std::ios::end);
    f.put('\x5a');
  }
  // A stale staging file left by a crashed writer, and a fresh one that must survive.
  const fs::path stale = dir.path() / "v1" / "tmp" / "stale.tmp";
  const fs::path fresh = dir.path() / "v1" / "tmp" / "fresh.tmp";
  std::ofstream(stale) << "x";
  std::ofstream(fresh) << "x";
  fs::last_write_time(stale, fs::file_time_type::clock::now() - std::chrono::hours(2));

  const VerifyReport report = cache.verify();
  EXPECT_EQ(report.checked, 5u);
  EXPECT_EQ(report.corrupt_removed, 2u);
  EXPECT_EQ(report.stale_temps_removed, 1u);
  EXPECT_EQ(cache.stats().corrupt_removed, 2u);
  EXPECT_EQ(log.lines().size(), 2u);
  EXPECT_FALSE(fs::exists(cache.entry_path(keys[1])));
  EXPECT_FALSE(fs::exists(cache.entry_path(keys[3])));
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_TRUE(fs::exists(fresh));

  const VerifyReport again = cache.verify();
  EXPECT_EQ(again.checked, 3u);
  EXPECT_EQ(again.corrupt_removed, 0u);
}

TEST(BinaryCache, GcEvictsLeastRecentlyUsedFirst) {
  ScratchDir dir;
  BinaryCache cache(dir.path());
  const auto now = fs::file_time_type::clock::now();
  std::vector<std::string> keys;
  for (int i = 0; i < 4; ++i) {
    keys.push_back(key_for("gc" + std::to_string(i)));
    ASSERT_TRUE(cache.publish(keys.back(), sample_entry(1000)));
    fs::last_write_time(cache.entry_path(keys.back()), now - std::chrono::hours(10 - i));
  }
  // A hit on the oldest entry refreshes its stamp, so it survives.
  ASSERT_TRUE(cache.load(keys[0]).has_value());
  EXPECT_GT(fs::last_write_time(cache.entry_path(keys[0])), now - std::chrono::minutes(1));

  const std::uint64_t one = fs::file_size(cache.entry_path(keys[0]));
  const GcReport report = cache.gc(2 * one);
  EXPECT_EQ(report.bytes_before, 4 * one);
  EXPECT_EQ(report.bytes_after, 2 * one);
  EXPECT_EQ(report.removed, 2u);
  EXPECT_TRUE(fs::exists(cache.entry_path(keys[0])));
  EXPECT_FALSE(fs::exists(cache.entry_path(keys[1])));
  EXPECT_FALSE(fs::exists(cache.entry_path(keys[2])));
  EXPECT_TRUE(fs::exists(cache.entry_path(keys[3])));
}

// Root-owned processes ignore permission bits, so a 0555 directory stops nobody; the test needs
// an unprivileged user.
bool permissions_are_enforced(const fs::path& dir) {
  const fs::path probe = dir / "probe";
  fs::create_directory(probe);
  fs::permissions(probe, fs::perms::owner_read | fs::perms::owner_exec);
  const bool enforced = ::access(probe.c_str(), W_OK) != 0;
  fs::permissions(probe, fs::perms::owner_all);
  fs::remove(probe);
  return enforced;
}

TEST(BinaryCache, ReadOnlyRootPublishFailsWithoutThrowing) {
  ScratchDir dir;
  if (!permissions_are_enforced(dir.path())) GTEST_SKIP() << "running as root: chmod 0555 does not stop writes";
  LogCapture log;
  const std::string key = key_for("read-only");
  const std::string bad_key = key_for("corrupt-read-only");
  BinaryCache writer(dir.path());
  ASSERT_TRUE(writer.publish(key, sample_entry()));
  ASSERT_TRUE(writer.publish(bad_key, sample_entry()));
  fs::resize_file(writer.entry_path(bad_key), 100);
  const auto read_only = fs::perms::owner_read | fs::perms::owner_exec;
  for (const fs::path& d : {dir.path(), dir.path() / "v1", dir.path() / "v1" / "tmp",
                            writer.entry_path(key).parent_path(),
                            writer.entry_path(bad_key).parent_path()}) {
    fs::permissions(d, read_only);
  }

  BinaryCache cache(dir.path());
  bool ok = true;
  EXPECT_NO_THROW(ok = cache.publish(key_for("new"), sample_entry()));
  EXPECT_FALSE(ok);
  EXPECT_EQ(cache.stats().publish_failures, 1u);
  EXPECT_TRUE(cache.load(key).has_value());  // a read-only cache still serves hits
  // A corrupt entry that cannot be deleted is still a counted, logged miss.
  EXPECT_FALSE(cache.load(bad_key).has_value());
  EXPECT_TRUE(fs::exists(cache.entry_path(bad_key)));
  EXPECT_EQ(cache.stats().corrupt_removed, 1u);
  ASSERT_EQ(log.lines().size(), 2u);
  EXPECT_NE(log.lines()[1].find("could not delete"), std::string::npos) << log.lines()[1];
}

TEST(BinaryCache, UnwritableRootPublishFailsWithoutThrowing) {
  // Works as root too: the root is a regular file, so no directory can be created under it.
  ScratchDir dir;
  LogCapture log;
  const fs::path root = dir.path() / "not-a-dir";
  std::ofstream(root) << "x";
  BinaryCache cache(root);
  bool ok = true;
  EXPECT_NO_THROW(ok = cache.publish(key_for("x"), sample_entry()));
  EXPECT_FALSE(ok);
  EXPECT_FALSE(cache.load(key_for("x")).has_value());
  EXPECT_TRUE(cache.list().empty());
  EXPECT_EQ(cache.verify().checked, 0u);
  EXPECT_EQ(cache.clear(), 0u);
  const CacheStats s = cache.stats();
  EXPECT_EQ(s.publish_failures, 1u);
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(log.lines().size(), 1u);
}

TEST(BinaryCache, DirectoryInPlaceOfAnEntryIsDamageAndIsRepaired) {
  ScratchDir dir;
  LogCapture log;
  BinaryCache cache(dir.path());
  const std::string key = key_for("dir-in-the-way");
  fs::create_directories(cache.entry_path(key) / "inner");  // a directory where the file should be
  EXPECT_FALSE(cache.load(key).has_value());
  EXPECT_EQ(cache.stats().corrupt_removed, 1u);
  EXPECT_FALSE(fs::exists(cache.entry_path(key)));
  // The next publish stores the entry, and the key is served.
  fs::create_directories(cache.entry_path(key));
  EXPECT_TRUE(cache.publish(key, sample_entry()));
  EXPECT_TRUE(cache.contains(key));
  EXPECT_TRUE(cache.load(key).has_value());
}

TEST(BinaryCache, DefaultRootFollowsEnvironment) {
  auto saved = [](const char* name) -> std::optional<std::string> {
    const char* v = std::getenv(name);
    return v ? std::optional<std::string>(v) : std::nullopt;
  };
  const auto kgen = saved("KGEN_CACHE_DIR"), xdg = saved("XDG_CACHE_HOME"), home = saved("HOME");

  ::setenv("HOME", "/home/u", 1);
  ::unsetenv("KGEN_CACHE_DIR");
  ::unsetenv("XDG_CACHE_HOME");
  EXPECT_EQ(default_cache_root(), fs::path("/home/u/.cache/kgen"));
  ::setenv("XDG_CACHE_HOME", "/xdg", 1);
  EXPECT_EQ(default_cache_root(), fs::path("/xdg/kgen"));
  ::setenv("KGEN_CACHE_DIR", "/override", 1);
  EXPECT_EQ(default_cache_root(), fs::path("/override"));

  auto restore = [](const char* name, const std::optional<std::string>& v) {
    if (v) ::setenv(name, v->c_str(), 1); else ::unsetenv(name);
  };
  restore("KGEN_CACHE_DIR", kgen);
  restore("XDG_CACHE_HOME", xdg);
  restore("HOME", home);
}

TEST(BinaryCache, ThrowingLogSinkIsHarmless) {
  ScratchDir dir;
  set_log_sink([](std::string_view) { throw std::runtime_error("sink"); });
  BinaryCache cache(dir.path());
  EXPECT_NO_THROW(cache.load("zz-invalid"));
  set_log_sink(nullptr);
}

}  // namespace
}  // namespace kgen::cache
