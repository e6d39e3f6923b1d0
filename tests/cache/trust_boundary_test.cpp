// The cache as a trust boundary (docs/cache.md, "Threat model"): planted links are never
// followed, special files never block, directories are private whatever the umask, a cache owned
// by someone else or writable by others is not used, lock and export staging files are not left
// behind and never clobber a planted target.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>
#include <zstd.h>

#include <fstream>
#include <future>

#include "cache/archive.h"
#include "cache/fs_guard.h"
#include "test_support.h"

namespace kgen::cache {
namespace {
namespace fs = std::filesystem;
using testing::count_files;
using testing::key_for;
using testing::LogCapture;
using testing::sample_entry;
using testing::ScratchDir;

mode_t mode_of(const fs::path& p) {
  struct stat st {};
  EXPECT_EQ(::lstat(p.c_str(), &st), 0) << p;
  return st.st_mode & 07777;
}

// Sets the process umask for the scope.
struct Umask {
  mode_t saved;
  explicit Umask(mode_t m) : saved(::umask(m)) {}
  ~Umask() { ::umask(saved); }
};

// Sets (or unsets, with nullptr) an environment variable for the scope.
struct Env {
  std::string name;
  std::optional<std::string> saved;
  Env(const char* n, const char* value) : name(n) {
    if (const char* v = std::getenv(n)) saved = v;
    value ? ::setenv(n, value, 1) : ::unsetenv(n);
  }
  ~Env() { saved ? ::setenv(name.c_str(), saved->c_str(), 1) : ::unsetenv(name.c_str()); }
};

TEST(TrustBoundary, DirectoriesArePrivateUnderAnyUmaskAndFilesToo) {
  ScratchDir dir;
  Env shared("KGEN_CACHE_SHARED", nullptr);
  Umask open_umask(0);
  BinaryCache cache(dir.path() / "root");
  const std::string key = key_for("modes");
  ASSERT_TRUE(cache.publish(key, sample_entry()));
  for (const fs::path& d : {cache.root(), cache.root() / "v1", cache.root() / "v1" / "tmp",
                            cache.entry_path(key).parent_path()})
    EXPECT_EQ(mode_of(d), 0700u) << d;
  EXPECT_EQ(mode_of(cache.entry_path(key)), 0600u);
  auto lock = KeyLock::try_acquire(cache, key);
  ASSERT_TRUE(lock.held());
  EXPECT_EQ(mode_of(cache.lock_path(key)), 0600u);
}

TEST(TrustBoundary, ASharedCacheIsGroupWritableAndAccepted) {
  ScratchDir dir;
  Env shared("KGEN_CACHE_SHARED", "1");
  Umask umask(022);
  BinaryCache cache(dir.path() / "root");
  const std::string key = key_for("shared");
  ASSERT_TRUE(cache.publish(key, sample_entry()));
  EXPECT_EQ(mode_of(cache.root() / "v1"), 02770u);
  EXPECT_EQ(mode_of(cache.entry_path(key)), 0660u);
  EXPECT_EQ(cache.problem(), "");
  EXPECT_TRUE(cache.load(key).has_value());
}

TEST(TrustBoundary, AWorldWritableCacheIsNotUsed) {
  ScratchDir dir;
  LogCapture log;
  const std::string key = key_for("open");
  {
    BinaryCache writer(dir.path());
    ASSERT_TRUE(writer.publish(key, sample_entry()));
  }
  fs::permissions(dir.path(), fs::perms::all);  // 0777, as a umask of 000 used to leave it
  BinaryCache cache(dir.path());
  EXPECT_NE(cache.problem().find("writable by every user"), std::string::npos) << cache.problem();
  EXPECT_FALSE(cache.load(key).has_value());
  EXPECT_FALSE(cache.publish(key_for("other"), sample_entry()));
  EXPECT_TRUE(cache.list().empty());
  ASSERT_FALSE(log.lines().empty());
  EXPECT_NE(log.lines()[0].find("not using the cache"), std::string::npos) << log.lines()[0];
}

TEST(TrustBoundary, ACacheOwnedByAnotherUserIsNotUsed) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to give a directory to another user";
  ScratchDir dir;
  LogCapture log;
  const std::string key = key_for("theirs");
  {
    BinaryCache writer(dir.path());
    ASSERT_TRUE(writer.publish(key, sample_entry()));
  }
  ASSERT_EQ(::chown((dir.path() / "v1").c_str(), 65534, 65534), 0);
  BinaryCache cache(dir.path());
  EXPECT_NE(cache.problem().find("owned by uid 65534"), std::string::npos) << cache.problem();
  EXPECT_FALSE(cache.load(key).has_value());
}

TEST(TrustBoundary, AGroupWritableCacheOfAnotherGroupNeedsTheSharedOption) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to give a directory to another group";
  ScratchDir dir;
  LogCapture log;
  Env shared("KGEN_CACHE_SHARED", nullptr);
  ASSERT_EQ(::chown(dir.path().c_str(), 0, 65534), 0);
  fs::permissions(dir.path(), fs::perms::owner_all | fs::perms::group_all);
  EXPECT_NE(BinaryCache(dir.path()).problem().find("writable by its group"), std::string::npos);
  Env on("KGEN_CACHE_SHARED", "1");
  EXPECT_EQ(BinaryCache(dir.path()).problem(), "");
}

TEST(TrustBoundary, APlantedLockLinkCreatesNothingElsewhere) {
  ScratchDir dir;
  BinaryCache cache(dir.path() / "root");
  ASSERT_EQ(cache.make_directories(), "");
  const std::string key = key_for("lock-link");
  const fs::path victim = dir.path() / "victim";
  fs::create_symlink(victim, cache.lock_path(key));
  auto lock = KeyLock::try_acquire(cache, key);
  EXPECT_FALSE(lock.held());
  EXPECT_FALSE(fs::exists(victim));
  // Locking is only an optimisation: the build goes on without it.
  EXPECT_TRUE(cache.publish(key, sample_entry()));
}

TEST(TrustBoundary, ALinkedLocksDirectoryIsNotFollowed) {
  ScratchDir dir;
  BinaryCache cache(dir.path() / "root");
  ASSERT_EQ(cache.make_directories(), "");
  const fs::path elsewhere = dir.path() / "elsewhere";
  fs::create_directories(elsewhere);
  fs::remove(cache.root() / "v1" / "locks");
  fs::create_directory_symlink(elsewhere, cache.root() / "v1" / "locks");
  EXPECT_FALSE(KeyLock::try_acquire(cache, key_for("x")).held());
  EXPECT_EQ(count_files(elsewhere), 0u);
}

TEST(TrustBoundary, LinkedShardAndStagingDirectoriesReceiveNothing) {
  ScratchDir dir;
  LogCapture log;
  BinaryCache cache(dir.path() / "root");
  ASSERT_EQ(cache.make_directories(), "");
  const fs::path elsewhere = dir.path() / "elsewhere";
  fs::create_directories(elsewhere);
  const std::string key = key_for("shard-link");
  fs::create_directory_symlink(elsewhere, cache.entry_path(key).parent_path());
  EXPECT_FALSE(cache.publish(key, sample_entry()));
  EXPECT_EQ(count_files(elsewhere), 0u);
  // verify removes the link as damage; the next publish makes a real shard directory.
  EXPECT_GE(cache.verify().corrupt_removed, 1u);
  EXPECT_TRUE(fs::exists(elsewhere));
  EXPECT_TRUE(cache.publish(key, sample_entry()));
  EXPECT_EQ(fs::symlink_status(cache.entry_path(key).parent_path()).type(), fs::file_type::directory);

  fs::remove_all(cache.root() / "v1" / "tmp");
  fs::create_directory_symlink(elsewhere, cache.root() / "v1" / "tmp");
  EXPECT_FALSE(cache.publish(key_for("tmp-link"), sample_entry()));
  EXPECT_EQ(count_files(elsewhere), 0u);
}

TEST(TrustBoundary, AFifoAtAnEntryPathNeitherBlocksNorIsServed) {
  ScratchDir dir;
  LogCapture log;
  BinaryCache cache(dir.path());
  const std::string key = key_for("fifo");
  ASSERT_EQ(cache.make_directories(), "");
  fs::create_directories(cache.entry_path(key).parent_path());
  ASSERT_EQ(::mkfifo(cache.entry_path(key).c_str(), 0600), 0);
  // Each call would block forever on open(O_RDONLY) of a FIFO with no writer.
  auto done = std::async(std::launch::async, [&] {
    EXPECT_TRUE(cache.list().empty());
    EXPECT_FALSE(cache.read_verified_file(key).has_value());
    return cache.load(key).has_value();
  });
  ASSERT_EQ(done.wait_for(std::chrono::seconds(20)), std::future_status::ready) << "a FIFO blocked the cache";
  EXPECT_FALSE(done.get());
  EXPECT_FALSE(fs::exists(fs::symlink_status(cache.entry_path(key))));
  EXPECT_TRUE(cache.publish(key, sample_entry()));
  EXPECT_TRUE(cache.load(key).has_value());
}

TEST(TrustBoundary, ALinkToADeviceAtAnEntryPathIsDamageAndIsRepaired) {
  ScratchDir dir;
  LogCapture log;
  BinaryCache cache(dir.path());
  const std::string key = key_for("dev-zero");
  ASSERT_EQ(cache.make_directories(), "");
  fs::create_directories(cache.entry_path(key).parent_path());
  fs::create_symlink("/dev/zero", cache.entry_path(key));
  EXPECT_FALSE(cache.contains(key));  // so `warm` never reports it as stored
  const VerifyReport r = cache.verify();
  EXPECT_EQ(r.corrupt_removed, 1u);
  EXPECT_FALSE(fs::exists(fs::symlink_status(cache.entry_path(key))));
  fs::create_symlink("/dev/zero", cache.entry_path(key));
  EXPECT_TRUE(cache.publish(key, sample_entry()));  // replaces the link with the entry
  EXPECT_TRUE(cache.contains(key));
  EXPECT_TRUE(cache.load(key).has_value());
}

TEST(TrustBoundary, AnEntryFileLargerThanAnyEntryIsDamage) {
  ScratchDir dir;
  LogCapture log;
  BinaryCache cache(dir.path());
  const std::string key = key_for("huge");
  ASSERT_TRUE(cache.publish(key, sample_entry()));
  fs::resize_file(cache.entry_path(key), kMaxEntryBytes + 1);  // sparse: nothing is written
  EXPECT_FALSE(cache.load(key).has_value());
  EXPECT_EQ(cache.stats().corrupt_removed, 1u);
  EXPECT_FALSE(fs::exists(cache.entry_path(key)));
}

TEST(TrustBoundary, LockFilesGoWithTheirWork) {
  ScratchDir dir;
  BinaryCache cache(dir.path());
  const std::string key = key_for("lock-file");
  auto lock = KeyLock::try_acquire(cache, key);
  ASSERT_TRUE(lock.held());
  ASSERT_TRUE(fs::exists(cache.lock_path(key)));
  lock.release_and_remove();
  EXPECT_FALSE(lock.held());
  EXPECT_FALSE(fs::exists(cache.lock_path(key)));
  EXPECT_TRUE(KeyLock::try_acquire(cache, key).held());
}

TEST(TrustBoundary, ExportNeverWritesThroughAPlantedLinkAndLeavesNoStagingFile) {
  ScratchDir dir;
  BinaryCache cache(dir.path() / "cache");
  ASSERT_TRUE(cache.publish(key_for("e"), sample_entry()));
  const fs::path out_dir = dir.path() / "out";
  fs::create_directories(out_dir);
  const fs::path archive = out_dir / "cache.kgenarc";
  const fs::path victim = dir.path() / "victim";
  std::ofstream(victim) << "keep me";
  // The names earlier versions staged under, and the archive's own name, all planted as links.
  for (int pid : {static_cast<int>(::getpid()), 1})
    fs::create_symlink(victim, fs::path(archive.string() + ".tmp." + std::to_string(pid)));
  fs::create_symlink(victim, fs::path(archive.string() + ".tmp." + std::to_string(::getpid()) + ".0"));
  fs::create_symlink(victim, archive);
  const ExportReport r = export_archive(cache, archive);
  ASSERT_EQ(r.error, "");
  EXPECT_EQ(r.exported, 1u);
  std::ifstream in(victim);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "keep me");
  EXPECT_EQ(fs::symlink_status(archive).type(), fs::file_type::regular);  // the link was replaced
  std::size_t staging = 0;
  for (const auto& e : fs::directory_iterator(out_dir))
    if (e.path().filename().string().find(".tmp.") != std::string::npos && !fs::is_symlink(e.symlink_status()))
      ++staging;
  EXPECT_EQ(staging, 0u);
  BinaryCache imported(dir.path() / "imported");
  EXPECT_EQ(import_archive(imported, archive).imported, 1u);
}

// An archive's header and the start of one member that claims `member_size` bytes: the bytes of
// archive version 1, which version 2 compresses after the header.
std::string member_head(const std::string& key, std::uint64_t member_size) {
  std::string bytes = "M";
  auto put_le = [&](std::uint64_t v, int width) {
    for (int i = 0; i < width; ++i) bytes += static_cast<char>((v >> (8 * i)) & 0xFF);
  };
  put_le(key.size(), 4);
  bytes += key;
  put_le(member_size, 8);
  return bytes;
}

void write_archive(const fs::path& archive, std::uint32_t version, const std::string& body) {
  std::ofstream out(archive, std::ios::binary);
  out.write("KGENARC\n", 8);
  out.write(reinterpret_cast<const char*>(&version), 4);
  out.write(body.data(), static_cast<std::streamsize>(body.size()));
}

TEST(TrustBoundary, AnArchiveMemberLargerThanAnyEntryIsRefusedBeforeItIsRead) {
  ScratchDir dir;
  const fs::path archive = dir.path() / "huge.kgenarc";
  write_archive(archive, kArchiveVersionPlain, member_head(key_for("huge-member"), kMaxEntryBytes + 1));
  fs::resize_file(archive, 2 * kMaxEntryBytes);  // sparse: the claimed bytes "are there"
  BinaryCache cache(dir.path() / "cache");
  const ImportReport r = import_archive(cache, archive);
  EXPECT_NE(r.error.find("larger than any entry"), std::string::npos) << r.error;
  EXPECT_EQ(r.imported, 0u);
}

TEST(TrustBoundary, ACompressedMemberLongerThanItsBodyStopsTheImport) {
  // A compressed body whose member claims 512 MiB and holds three bytes: the import reads what is
  // there (in pieces, never the whole claim at once) and stops.
  const std::string body = member_head(key_for("short-member"), std::uint64_t{512} << 20) + "abc";
  std::string frame(ZSTD_compressBound(body.size()), '\0');
  frame.resize(ZSTD_compress(frame.data(), frame.size(), body.data(), body.size(), 1));
  ScratchDir dir;
  const fs::path archive = dir.path() / "short.kgenarc";
  write_archive(archive, kArchiveVersion, frame);
  BinaryCache cache(dir.path() / "cache");
  const ImportReport r = import_archive(cache, archive);
  EXPECT_NE(r.error.find("truncated"), std::string::npos) << r.error;
  EXPECT_EQ(r.imported, 0u);
}

}  // namespace
}  // namespace kgen::cache
