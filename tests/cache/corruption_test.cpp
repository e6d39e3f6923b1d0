// Each way an entry file can go bad is detected by load(): the file is deleted, the event is
// counted and logged once, and the caller sees a miss.
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <iterator>

#include "test_support.h"

namespace kgen::cache {
namespace {
namespace fs = std::filesystem;
using testing::key_for;
using testing::LogCapture;
using testing::read_all;
using testing::sample_entry;
using testing::ScratchDir;
using testing::write_all;

// Offsets inside an entry for a 64-character key (see the grammar in binary_cache.h).
constexpr std::uint64_t kKeyOffset = 5 + 4 + 8;
constexpr std::uint64_t kMetadataLengthOffset = kKeyOffset + 64;
constexpr std::uint64_t kMetadataOffset = kMetadataLengthOffset + 8;

void flip_bit(const fs::path& p, std::uint64_t offset) {
  std::vector<char> bytes = read_all(p);
  bytes.at(offset) ^= 0x10;
  write_all(p, bytes);
}

struct Tamper {
  using Apply = std::function<void(BinaryCache&, const std::string& key)>;
  Tamper(const char* n, Apply a, std::string load = {})
      : name(n), apply(std::move(a)), key_to_load(std::move(load)) {}
  const char* name;
  Apply apply;
  std::string key_to_load;  // empty: the published key
};

class CorruptEntry : public ::testing::TestWithParam<Tamper> {};

TEST_P(CorruptEntry, IsDetectedRemovedCountedAndAMiss) {
  ScratchDir dir;
  BinaryCache cache(dir.path());
  const std::string key = key_for("victim");
  ASSERT_TRUE(cache.publish(key, sample_entry(2048)));
  GetParam().apply(cache, key);
  const std::string load_key = GetParam().key_to_load.empty() ? key : GetParam().key_to_load;
  ASSERT_TRUE(fs::exists(cache.entry_path(load_key)));

  LogCapture log;
  std::optional<CacheEntry> loaded;
  EXPECT_NO_THROW(loaded = cache.load(load_key));
  EXPECT_FALSE(loaded.has_value());
  EXPECT_FALSE(fs::exists(cache.entry_path(load_key)));
  const CacheStats s = cache.stats();
  EXPECT_EQ(s.corrupt_removed, 1u);
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.hits, 0u);
  ASSERT_EQ(log.lines().size(), 1u);
  EXPECT_NE(log.lines()[0].find("corrupt"), std::string::npos) << log.lines()[0];

  // The recompile path: publish again and hit.
  ASSERT_TRUE(cache.publish(load_key, sample_entry(2048)));
  EXPECT_TRUE(cache.load(load_key).has_value());
}

const std::string kOtherKey = key_for("other");

INSTANTIATE_TEST_SUITE_P(
    AllCorruptions, CorruptEntry,
    ::testing::Values(
        Tamper{"TruncatedByFive",
               [](BinaryCache& c, const std::string& k) {
                 const auto p = c.entry_path(k);
                 fs::resize_file(p, fs::file_size(p) - 5);
               }},
        Tamper{"TruncatedToHeader",
               [](BinaryCache& c, const std::string& k) { fs::resize_file(c.entry_path(k), 20); }},
        Tamper{"Empty", [](BinaryCache& c, const std::string& k) { fs::resize_file(c.entry_path(k), 0); }},
        Tamper{"Extended",
               [](BinaryCache& c, const std::string& k) {
                 const auto p = c.entry_path(k);
                 fs::resize_file(p, fs::file_size(p) + 1);
               }},
        Tamper{"BadMagic", [](BinaryCache& c, const std::string& k) { flip_bit(c.entry_path(k), 0); }},
        Tamper{"BadVersion", [](BinaryCache& c, const std::string& k) { flip_bit(c.entry_path(k), 5); }},
        Tamper{"FlippedKeyByte",
               [](BinaryCache& c, const std::string& k) { flip_bit(c.entry_path(k), kKeyOffset + 3); }},
        Tamper{"FlippedMetadataLength",
               [](BinaryCache& c, const std::string& k) {
                 flip_bit(c.entry_path(k), kMetadataLengthOffset);
               }},
        Tamper{"HugeMetadataLength",
               [](BinaryCache& c, const std::string& k) {
                 flip_bit(c.entry_path(k), kMetadataLengthOffset + 7);
               }},
        Tamper{"FlippedMetadataByte",
               [](BinaryCache& c, const std::string& k) { flip_bit(c.entry_path(k), kMetadataOffset + 2); }},
        Tamper{"FlippedBinaryByte",
               [](BinaryCache& c, const std::string& k) {
                 const auto p = c.entry_path(k);
                 flip_bit(p, fs::file_size(p) - 32 - 100);
               }},
        Tamper{"FlippedChecksumByte",
               [](BinaryCache& c, const std::string& k) {
                 const auto p = c.entry_path(k);
                 flip_bit(p, fs::file_size(p) - 1);
               }},
        Tamper{"RenamedToAnotherKey",
               [](BinaryCache& c, const std::string& k) {
                 fs::create_directories(c.entry_path(kOtherKey).parent_path());
                 fs::rename(c.entry_path(k), c.entry_path(kOtherKey));
               },
               kOtherKey},
        Tamper{"Garbage",
               [](BinaryCache& c, const std::string& k) {
                 write_all(c.entry_path(k), std::vector<char>(500, 'g'));
               }}),
    [](const ::testing::TestParamInfo<Tamper>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace kgen::cache
