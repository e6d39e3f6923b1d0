// Cache archives (`kgen cache export|import`) and dead writers' staging files.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <unistd.h>

#include <fstream>

#include "cache/archive.h"
#include "test_support.h"

namespace kgen::cache {
namespace {
namespace fs = std::filesystem;
using testing::key_for;
using testing::read_all;
using testing::sample_entry;
using testing::ScratchDir;
using testing::write_all;

class Archive : public ::testing::Test {
 protected:
  void SetUp() override {
    BinaryCache src(dir_.path() / "src");
    for (int i = 0; i < 3; ++i) {
      keys_.push_back(key_for("arc" + std::to_string(i)));
      CacheEntry e = sample_entry(2000 + static_cast<std::size_t>(i));
      e.metadata["i"] = i;
      ASSERT_TRUE(src.publish(keys_.back(), e));
    }
    std::sort(keys_.begin(), keys_.end());
    const ExportReport r = export_archive(src, archive_);
    ASSERT_TRUE(r.error.empty()) << r.error;
    ASSERT_EQ(r.exported, 3u);
    ASSERT_EQ(r.bytes, fs::file_size(archive_));
    // The uncompressed form (version 1, what kgen wrote before zstd) for the member-level tests:
    // its bytes are the members themselves.
    const ExportReport p = export_archive(src, plain_, /*compress=*/false);
    ASSERT_TRUE(p.error.empty()) << p.error;
    ASSERT_EQ(p.bytes, fs::file_size(plain_));
    ASSERT_EQ(p.body_bytes + 12, p.bytes);
    ASSERT_EQ(r.body_bytes, p.body_bytes);
  }
  ScratchDir dir_;
  fs::path archive_ = dir_.path() / "cache.kgenarc";
  fs::path plain_ = dir_.path() / "plain.kgenarc";
  std::vector<std::string> keys_;
};

std::uint32_t version_of(const std::vector<char>& bytes) {
  std::uint32_t v = 0;
  for (int i = 4; i-- > 0;) v = (v << 8) | static_cast<unsigned char>(bytes[8 + static_cast<std::size_t>(i)]);
  return v;
}

TEST_F(Archive, ExportCompressesAndPlainArchivesStillImport) {
  EXPECT_EQ(version_of(read_all(archive_)), kArchiveVersion);
  EXPECT_EQ(version_of(read_all(plain_)), kArchiveVersionPlain);
  EXPECT_LT(fs::file_size(archive_) * 4, fs::file_size(plain_));  // the sample entries repeat
  BinaryCache dst(dir_.path() / "dst");
  const ImportReport r = import_archive(dst, plain_);
  EXPECT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.imported, 3u);
  for (const auto& key : keys_) EXPECT_EQ(dst.load(key)->binary, BinaryCache(dir_.path() / "src").load(key)->binary);
}

TEST_F(Archive, DamagedCompressedDataStopsTheImportAndNothingCorruptLands) {
  const auto good = read_all(archive_);
  for (std::size_t at : {std::size_t{12}, std::size_t{20}, good.size() / 2, good.size() - 6}) {
    auto bytes = good;
    bytes[at] ^= 0x40;
    write_all(archive_, bytes);
    ScratchDir d;
    BinaryCache dst(d.path());
    const ImportReport r = import_archive(dst, archive_);
    EXPECT_FALSE(r.ok()) << "flipped byte " << at;
    EXPECT_FALSE(r.error.empty() && r.problems.empty()) << "flipped byte " << at;
    for (const auto& key : dst.keys()) EXPECT_TRUE(dst.read_verified_file(key).has_value());
  }
}

TEST_F(Archive, TruncatedCompressedArchiveSaysSo) {
  const auto good = read_all(archive_);
  for (std::size_t keep : {std::size_t{12}, std::size_t{16}, good.size() / 2, good.size() - 1}) {
    auto bytes = good;
    bytes.resize(keep);
    write_all(archive_, bytes);
    ScratchDir d;
    BinaryCache dst(d.path());
    const ImportReport r = import_archive(dst, archive_);
    EXPECT_FALSE(r.error.empty()) << "kept " << keep;
    EXPECT_TRUE(r.error.find("truncated") != std::string::npos || r.error.find("ends inside a frame") != std::string::npos ||
                r.error.find("damaged") != std::string::npos)
        << r.error;
    if (keep <= 16) {
      EXPECT_EQ(r.imported, 0u);  // (the last bytes are the frame's checksum)
    }
  }
}

TEST_F(Archive, BytesAfterACompressedBodyAreRefused) {
  auto bytes = read_all(archive_);
  bytes.push_back('x');
  write_all(archive_, bytes);
  BinaryCache dst(dir_.path() / "dst");
  const ImportReport r = import_archive(dst, archive_);
  EXPECT_FALSE(r.error.empty());
}

TEST_F(Archive, RoundTripPublishesEveryEntry) {
  BinaryCache dst(dir_.path() / "dst");
  ImportReport r = import_archive(dst, archive_);
  EXPECT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.members, 3u);
  EXPECT_EQ(r.imported, 3u);
  EXPECT_EQ(r.already_present, 0u);
  for (const auto& key : keys_) {
    auto a = BinaryCache(dir_.path() / "src").load(key);
    auto b = dst.load(key);
    ASSERT_TRUE(b.has_value());
    EXPECT_EQ(a->binary, b->binary);
    EXPECT_EQ(a->metadata, b->metadata);
  }
  EXPECT_TRUE(fs::is_empty(dir_.path() / "dst" / "v1" / "tmp"));
  r = import_archive(dst, archive_);  // idempotent
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(r.already_present, 3u);
}

TEST_F(Archive, CorruptMemberIsReportedAndSkipped) {
  auto bytes = read_all(plain_);
  // Flip a byte in the middle of the second member's entry (members are sorted by key).
  const std::string needle = keys_[1];
  const auto at = std::search(bytes.begin(), bytes.end(), needle.begin(), needle.end());
  ASSERT_NE(at, bytes.end());
  *(at + 64 + 8 + 500) ^= 0x40;
  write_all(plain_, bytes);
  BinaryCache dst(dir_.path() / "dst");
  const ImportReport r = import_archive(dst, plain_);
  EXPECT_FALSE(r.ok());
  EXPECT_TRUE(r.error.empty()) << r.error;
  EXPECT_EQ(r.members, 3u);
  EXPECT_EQ(r.imported, 2u);
  EXPECT_EQ(r.corrupt_skipped, 1u);
  ASSERT_EQ(r.problems.size(), 1u);
  EXPECT_NE(r.problems[0].find("checksum"), std::string::npos) << r.problems[0];
  EXPECT_FALSE(dst.load(keys_[1]).has_value());
  EXPECT_TRUE(dst.load(keys_[0]).has_value());
  EXPECT_TRUE(dst.load(keys_[2]).has_value());
}

TEST_F(Archive, TruncatedArchiveKeepsWholeMembersAndSaysSo) {
  auto bytes = read_all(plain_);
  bytes.resize(bytes.size() - 9 - 32 - 100);  // into the last member
  write_all(plain_, bytes);
  BinaryCache dst(dir_.path() / "dst");
  const ImportReport r = import_archive(dst, plain_);
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.error.find("truncated"), std::string::npos) << r.error;
  EXPECT_EQ(r.imported, 2u);
  EXPECT_EQ(dst.entry_count(), 2u);
}

TEST_F(Archive, MissingTrailerIsTruncation) {
  auto bytes = read_all(plain_);
  bytes.resize(bytes.size() - 9);
  write_all(plain_, bytes);
  BinaryCache dst(dir_.path() / "dst");
  const ImportReport r = import_archive(dst, plain_);
  EXPECT_NE(r.error.find("truncated"), std::string::npos) << r.error;
  EXPECT_EQ(r.imported, 3u);
}

TEST_F(Archive, NotAnArchiveOrMissingFileIsAnErrorNotACrash) {
  BinaryCache dst(dir_.path() / "dst");
  write_all(dir_.path() / "junk", {'h', 'e', 'l', 'l', 'o'});
  EXPECT_NE(import_archive(dst, dir_.path() / "junk").error.find("not a kgen cache archive"), std::string::npos);
  write_all(dir_.path() / "empty", {});
  EXPECT_FALSE(import_archive(dst, dir_.path() / "empty").error.empty());
  EXPECT_NE(import_archive(dst, dir_.path() / "nope").error.find("cannot open"), std::string::npos);
  auto bytes = read_all(archive_);
  bytes[8] = 7;  // version
  write_all(dir_.path() / "v7", bytes);
  EXPECT_NE(import_archive(dst, dir_.path() / "v7").error.find("version"), std::string::npos);
  EXPECT_EQ(dst.entry_count(), 0u);
}

TEST_F(Archive, ExportSkipsCorruptEntries) {
  BinaryCache src(dir_.path() / "src");
  fs::resize_file(src.entry_path(keys_[0]), 80);
  const ExportReport r = export_archive(src, dir_.path() / "again");
  EXPECT_EQ(r.exported, 2u);
  EXPECT_EQ(r.corrupt_skipped, 1u);
}

TEST_F(Archive, ExportToAnUnwritablePlaceFailsCleanly) {
  BinaryCache src(dir_.path() / "src");
  std::ofstream(dir_.path() / "file") << "x";
  const ExportReport r = export_archive(src, dir_.path() / "file" / "a.kgenarc");
  EXPECT_FALSE(r.error.empty());
}

TEST(StagingFiles, DeadWritersFilesGoLiveWritersFilesStay) {
  ScratchDir dir;
  BinaryCache cache(dir.path());
  ASSERT_TRUE(cache.publish(key_for("x"), sample_entry()));
  const fs::path tmp = dir.path() / "v1" / "tmp";
  const fs::path dead = tmp / "dead.tmp", live = tmp / "live.tmp", young = tmp / "young.tmp";
  for (const auto& p : {dead, live, young}) std::ofstream(p) << "partial";
  const auto old = fs::file_time_type::clock::now() - kUnlockedTempGrace - std::chrono::seconds(5);
  fs::last_write_time(dead, old);
  fs::last_write_time(live, old);
  // A live writer holds flock on its staging file (a second open file description conflicts).
  const int fd = ::open(live.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);
  const VerifyReport r = cache.verify();
  EXPECT_EQ(r.stale_temps_removed, 1u);
  EXPECT_FALSE(fs::exists(dead));
  EXPECT_TRUE(fs::exists(live));
  EXPECT_TRUE(fs::exists(young)) << "within the grace period a writer may not have locked yet";
  ::close(fd);
  cache.gc(1 << 30);
  EXPECT_FALSE(fs::exists(live)) << "unlocked now: its writer is gone";
}

TEST(BinaryCache, RejectRemovesCountsAndLogs) {
  ScratchDir dir;
  testing::LogCapture log;
  BinaryCache cache(dir.path());
  ASSERT_TRUE(cache.publish(key_for("r"), sample_entry()));
  EXPECT_TRUE(cache.reject(key_for("r"), "wrong target"));
  EXPECT_FALSE(cache.load(key_for("r")).has_value());
  EXPECT_EQ(cache.stats().corrupt_removed, 1u);
  ASSERT_EQ(log.lines().size(), 1u);
  EXPECT_NE(log.lines()[0].find("wrong target"), std::string::npos);
}

}  // namespace
}  // namespace kgen::cache
