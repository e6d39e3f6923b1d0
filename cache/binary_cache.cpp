#include "cache/binary_cache.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>

#include "cache/entry_format.h"
#include "cache/fs_guard.h"

namespace kgen::cache {
namespace fs = std::filesystem;
namespace {

constexpr std::string_view kEntrySuffix = ".kgen";

// Closes a file descriptor on scope exit.
struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
};

std::string errno_text(int err) { return std::strerror(err); }

bool read_exact(int fd, std::byte* out, std::uint64_t n, std::uint64_t offset) {
  while (n > 0) {
    const ssize_t r = ::pread(fd, out, n, static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    out += r;
    n -= static_cast<std::uint64_t>(r);
    offset += static_cast<std::uint64_t>(r);
  }
  return true;
}

bool write_all(int fd, const std::byte* data, std::size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, data, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    data += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

void fsync_dir(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);  // Best effort: some filesystems refuse fsync on directories.
  ::close(fd);
}

// Deletes `path` only if it is still the file open as `fd`, so a corrupt file that another
// process already replaced with a good entry is not deleted by mistake.
// Returns true if the file is gone afterwards.
bool unlink_if_same(int fd, const fs::path& path) {
  struct stat open_st {}, path_st {};
  if (::fstat(fd, &open_st) != 0 || ::stat(path.c_str(), &path_st) != 0) return true;
  if (open_st.st_dev != path_st.st_dev || open_st.st_ino != path_st.st_ino) return true;
  return ::unlink(path.c_str()) == 0;  // Fails on a read-only directory: still a miss.
}

std::string unique_temp_name(std::string_view key) {
  static std::atomic<std::uint64_t> counter{0};
  const std::size_t tid = std::hash<std::thread::id>{}(std::this_thread::get_id());
  return std::string(key) + "." + std::to_string(::getpid()) + "." + std::to_string(tid) + "." +
         std::to_string(counter.fetch_add(1, std::memory_order_relaxed)) + ".tmp";
}

bool has_entry_name(const fs::path& p, std::string* key) {
  const std::string name = p.filename().string();
  if (name.size() <= kEntrySuffix.size() || !name.ends_with(kEntrySuffix)) return false;
  *key = name.substr(0, name.size() - kEntrySuffix.size());
  return is_valid_key(*key);
}

// Outcome of reading one entry file.
enum class ReadStatus { kMissing, kUnreadable, kCorrupt, kOk };

struct ReadResult {
  ReadStatus status = ReadStatus::kMissing;
  std::string why;
  CacheEntry entry;
};

// Reads and fully verifies the entry at `path` for `key`; a corrupt file is unlinked here. A
// symbolic link, FIFO, device or directory at the path is damage: removed, never followed or
// read (it would block or read another file).
ReadResult read_entry(const fs::path& path, std::string_view key, bool touch_stamp) {
  ReadResult result;
  const int raw_fd = open_regular_file(path);
  if (raw_fd < 0) {
    const int err = errno;
    if (err == ELOOP || err == EINVAL) {
      const bool removed = remove_anything(path);
      result.status = ReadStatus::kCorrupt;
      result.why = std::string(err == ELOOP ? "a symbolic link" : "not a regular file") +
                   (removed ? "" : " (could not delete it)");
      return result;
    }
    result.status = (err == ENOENT || err == ENOTDIR) ? ReadStatus::kMissing : ReadStatus::kUnreadable;
    result.why = errno_text(err);
    return result;
  }
  Fd fd(raw_fd);
  struct stat st {};
  if (::fstat(fd.fd, &st) != 0) {
    result.status = ReadStatus::kUnreadable;
    result.why = errno_text(errno);
    return result;
  }
  const auto size = static_cast<std::uint64_t>(st.st_size);
  auto corrupt = [&](std::string why) {
    const bool removed = unlink_if_same(fd.fd, path);
    result.status = ReadStatus::kCorrupt;
    result.why = std::move(why) + (removed ? "" : " (could not delete it)");
    return std::move(result);
  };
  if (size < detail::kMinEntryBytes) return corrupt("file shorter than the smallest entry");
  if (size > kMaxEntryBytes) return corrupt("file larger than the largest entry kgen writes");

  std::vector<std::byte> bytes(size);
  if (!read_exact(fd.fd, bytes.data(), size, 0)) {
    // A short read here means the file shrank under us or an I/O error: not provably corrupt.
    result.status = ReadStatus::kUnreadable;
    result.why = "read failed";
    return result;
  }
  detail::EntryLayout layout;
  std::uint64_t need = 0;
  std::string why;
  if (detail::parse_layout(bytes, size, &layout, &need, &why) != detail::ParseStatus::kOk) {
    return corrupt(why);
  }
  if (layout.key != key) return corrupt("entry holds key " + std::string(layout.key));
  if (!detail::checksum_matches(bytes)) return corrupt("checksum mismatch");
  nlohmann::json metadata = nlohmann::json::parse(layout.metadata_json, nullptr, false);
  if (metadata.is_discarded()) return corrupt("metadata is not valid JSON");

  result.entry.metadata = std::move(metadata);
  // Reuse the file buffer for the binary rather than copying it (binaries can be large).
  bytes.erase(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(layout.binary_offset));
  bytes.resize(layout.binary_size);
  result.entry.binary = std::move(bytes);
  result.status = ReadStatus::kOk;

  if (touch_stamp) {
    const auto age = std::chrono::seconds(::time(nullptr) - st.st_mtime);
    if (age > kStampInterval) ::futimens(fd.fd, nullptr);  // Best effort: may be read-only.
  }
  return result;
}

// Calls fn(path, key) for every name like an entry's under <version_dir>/<shard>/, in shard
// directories only (a symbolic link in place of a shard is not followed).
template <typename Fn>
void for_each_entry_file(const fs::path& version_dir, Fn&& fn) {
  std::error_code ec;
  for (fs::directory_iterator shard(version_dir, ec), end; !ec && shard != end; shard.increment(ec)) {
    const std::string name = shard->path().filename().string();
    if (name == "tmp" || name == "locks") continue;
    std::error_code type_ec;
    if (shard->symlink_status(type_ec).type() != fs::file_type::directory) continue;
    std::error_code ec2;
    for (fs::directory_iterator it(shard->path(), ec2); !ec2 && it != end; it.increment(ec2)) {
      std::string key;
      if (has_entry_name(it->path(), &key)) fn(it->path(), key);
    }
  }
}

}  // namespace

bool is_valid_key(std::string_view key) {
  if (key.size() < 2 || key.size() > 128) return false;
  return std::all_of(key.begin(), key.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

fs::path default_cache_root() {
  if (const char* dir = std::getenv("KGEN_CACHE_DIR"); dir != nullptr && *dir != '\0') {
    return fs::path(dir);
  }
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg == '/') {
    return fs::path(xdg) / "kgen";
  }
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    return fs::path(home) / ".cache" / "kgen";
  }
  return fs::path(".kgen-cache");
}

BinaryCache::BinaryCache(fs::path root) : root_(std::move(root)) {}

std::string BinaryCache::problem() const {
  {
    std::lock_guard lock(problem_mutex_);
    if (problem_checked_) return problem_;
  }
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(root_, ec))) return "";  // made by the first publish
  std::string why = check_directory(root_, DirRule{.follow_link = true, .root_may_own = true});
  if (why.empty() && fs::exists(fs::symlink_status(version_dir(), ec)))
    why = check_directory(version_dir(), DirRule{.root_may_own = true});
  std::lock_guard lock(problem_mutex_);
  if (!problem_checked_) {
    problem_checked_ = true;
    problem_ = why;
    // A root that is no directory at all fails every publish, which logs; the rest is said here.
    if (!why.empty() && fs::is_directory(root_, ec)) log_line("not using the cache at " + root_.string() + ": " + why);
  }
  return problem_;
}

fs::path BinaryCache::version_dir() const { return root_ / "v1"; }

fs::path BinaryCache::entry_path(std::string_view key) const {
  return version_dir() / std::string(key.substr(0, 2)) / (std::string(key) + ".kgen");
}

fs::path BinaryCache::lock_path(std::string_view key) const {
  return version_dir() / "locks" / (std::string(key) + ".lock");
}

std::optional<CacheEntry> BinaryCache::load(std::string_view key) {
  try {
    if (!is_valid_key(key)) {
      log_line("load: invalid key '" + std::string(key) + "'");
      misses_.fetch_add(1, std::memory_order_relaxed);
      return std::nullopt;
    }
    if (!problem().empty()) {
      misses_.fetch_add(1, std::memory_order_relaxed);
      return std::nullopt;
    }
    const fs::path path = entry_path(key);
    ReadResult r = read_entry(path, key, /*touch_stamp=*/true);
    if (r.status == ReadStatus::kOk) {
      hits_.fetch_add(1, std::memory_order_relaxed);
      return std::move(r.entry);
    }
    if (r.status == ReadStatus::kCorrupt) {
      count_corrupt();
      log_line("corrupt entry " + path.string() + ": " + r.why);
    } else if (r.status == ReadStatus::kUnreadable) {
      log_line("cannot read " + path.string() + ": " + r.why);
    }
  } catch (const std::exception& e) {
    log_line(std::string("load failed: ") + e.what());
  } catch (...) {
    log_line("load failed");
  }
  misses_.fetch_add(1, std::memory_order_relaxed);
  return std::nullopt;
}

bool BinaryCache::publish(std::string_view key, const CacheEntry& entry) {
  std::string why;
  if (publish_quiet(key, entry, &why)) return true;
  log_line("publish " + std::string(key) + " failed: " + why);
  return false;
}

bool BinaryCache::reject(std::string_view key, std::string_view why) {
  if (!is_valid_key(key)) return false;
  std::error_code ec;
  const fs::path path = entry_path(key);
  const bool removed = problem().empty() && fs::exists(fs::symlink_status(path, ec)) && remove_anything(path);
  count_corrupt();
  log_line("corrupt entry " + path.string() + ": " + std::string(why) +
           (removed ? "" : " (could not delete it)"));
  return removed;
}

std::optional<std::vector<std::byte>> BinaryCache::read_verified_file(std::string_view key) {
  try {
    if (!is_valid_key(key) || !problem().empty()) return std::nullopt;
    const fs::path path = entry_path(key);
    ReadResult r = read_entry(path, key, /*touch_stamp=*/false);
    if (r.status == ReadStatus::kOk) {
      // Re-encode from the verified parts: byte-identical to the file for entries written by
      // publish(), and self-consistent in any case.
      return detail::encode_entry(key, r.entry.metadata.dump(), r.entry.binary);
    }
    if (r.status == ReadStatus::kCorrupt) {
      count_corrupt();
      log_line("corrupt entry " + path.string() + ": " + r.why);
    }
  } catch (...) {
  }
  return std::nullopt;
}

bool BinaryCache::publish_quiet(std::string_view key, const CacheEntry& entry, std::string* why_out) {
  auto fail = [&](const std::string& why) {
    publish_failures_.fetch_add(1, std::memory_order_relaxed);
    if (why_out) *why_out = why;
    return false;
  };
  try {
    if (!is_valid_key(key)) return fail("invalid key");
    const fs::path final_path = entry_path(key);
    std::error_code ec;
    const auto existing = fs::symlink_status(final_path, ec).type();
    if (existing == fs::file_type::regular) return true;  // Content-addressed: keep the existing file.
    if (existing != fs::file_type::not_found && !remove_anything(final_path))
      return fail(final_path.string() + " is not a regular file and cannot be removed");

    if (std::string why = make_directories(); !why.empty()) return fail(why);
    const fs::path tmp_dir = version_dir() / "tmp";
    const bool new_shard = !fs::exists(fs::symlink_status(final_path.parent_path(), ec));
    if (std::string why = ensure_directory(final_path.parent_path()); !why.empty()) return fail(why);
    const std::vector<std::byte> bytes = detail::encode_entry(key, entry.metadata.dump(), entry.binary);

    const fs::path tmp_path = tmp_dir / unique_temp_name(key);
    const int fd = create_new_file(tmp_path);
    if (fd < 0) return fail(tmp_path.string() + ": " + errno_text(errno));
    // Marks the staging file as owned by a live writer until close (or death) releases it.
    ::flock(fd, LOCK_EX | LOCK_NB);
    bool ok = write_all(fd, bytes.data(), bytes.size()) && ::fsync(fd) == 0;
    const int err = errno;
    if (!ok) {
      ::unlink(tmp_path.c_str());
      ::close(fd);
      return fail(tmp_path.string() + ": " + errno_text(err));
    }
    // Rename while the staging lock is still held, then close (which releases it).
    if (::rename(tmp_path.c_str(), final_path.c_str()) != 0) {
      const int rename_err = errno;
      ::unlink(tmp_path.c_str());
      ::close(fd);
      return fail("rename to " + final_path.string() + ": " + errno_text(rename_err));
    }
    ::close(fd);  // The data is already durable (fsync above); a close error changes nothing.
    // The rename is durable once the directory holding the new name is; a shard directory made
    // by this publish needs its own name made durable in v1/ too.
    fsync_dir(final_path.parent_path());
    if (new_shard) fsync_dir(version_dir());
    published_.fetch_add(1, std::memory_order_relaxed);
    return true;
  } catch (const std::exception& e) {
    return fail(e.what());
  } catch (...) {
    return fail("unknown error");
  }
}

bool BinaryCache::remove(std::string_view key) {
  if (!is_valid_key(key)) return false;
  std::error_code ec;
  return fs::remove(entry_path(key), ec);
}

bool BinaryCache::contains(std::string_view key) const {
  if (!is_valid_key(key)) return false;
  std::error_code ec;
  return fs::symlink_status(entry_path(key), ec).type() == fs::file_type::regular;
}

std::string BinaryCache::make_directories() const {
  std::error_code ec;
  if (!root_.parent_path().empty()) fs::create_directories(root_.parent_path(), ec);
  if (std::string why = ensure_directory(root_, DirRule{.follow_link = true, .root_may_own = true}); !why.empty())
    return why;
  for (const fs::path& dir : {version_dir(), version_dir() / "tmp", version_dir() / "locks"})
    if (std::string why = ensure_directory(dir, DirRule{.root_may_own = dir == version_dir()}); !why.empty())
      return why;
  return "";
}

std::uint64_t BinaryCache::clear() {
  std::uint64_t removed = 0;
  std::error_code ec;
  for (fs::directory_iterator shard(version_dir(), ec), end; !ec && shard != end; shard.increment(ec)) {
    const std::string name = shard->path().filename().string();
    if (name == "tmp") {
      std::error_code ec2;
      for (fs::directory_iterator it(shard->path(), ec2); !ec2 && it != end; it.increment(ec2)) {
        std::error_code rm_ec;
        fs::remove(it->path(), rm_ec);
      }
    } else if (name == "locks") {
      std::error_code ec2;
      for (fs::directory_iterator it(shard->path(), ec2); !ec2 && it != end; it.increment(ec2)) {
        // Only unheld locks are removed, and only while holding them; KeyLock re-checks the
        // inode after locking, so a waiter on the unlinked file retries on a fresh one.
        const int fd = ::open(it->path().c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
        if (fd < 0) {
          if (errno == ELOOP) ::unlink(it->path().c_str());  // a planted link: removed, not followed
          continue;
        }
        if (::flock(fd, LOCK_EX | LOCK_NB) == 0) ::unlink(it->path().c_str());
        ::close(fd);
      }
    }
  }
  for_each_entry_file(version_dir(), [&](const fs::path& path, const std::string&) {
    std::error_code rm_ec;
    const bool there = fs::exists(fs::symlink_status(path, rm_ec));
    if (there && remove_anything(path)) ++removed;
  });
  return removed;
}

std::vector<EntryInfo> BinaryCache::list() const {
  std::vector<EntryInfo> out;
  if (!problem().empty()) return out;
  for_each_entry_file(version_dir(), [&](const fs::path& path, const std::string& key) {
    const int raw_fd = open_regular_file(path);
    if (raw_fd < 0) return;
    Fd fd(raw_fd);
    struct stat st {};
    if (::fstat(fd.fd, &st) != 0) return;
    const auto size = static_cast<std::uint64_t>(st.st_size);
    // Read the header and metadata only: binaries can be large and list() skips checksums.
    if (size > kMaxEntryBytes) return;
    std::vector<std::byte> prefix(std::min<std::uint64_t>(size, 64 * 1024));
    detail::EntryLayout layout;
    std::uint64_t need = 0;
    std::string why;
    for (;;) {
      if (!read_exact(fd.fd, prefix.data(), prefix.size(), 0)) return;
      const auto status = detail::parse_layout(prefix, size, &layout, &need, &why);
      if (status == detail::ParseStatus::kCorrupt) return;
      if (status == detail::ParseStatus::kOk) break;
      prefix.resize(need);
    }
    if (layout.key != key) return;
    EntryInfo info;
    info.key = key;
    info.size_bytes = size;
    std::error_code ec;
    info.mtime = fs::last_write_time(path, ec);
    info.metadata = nlohmann::json::parse(layout.metadata_json, nullptr, false);
    if (info.metadata.is_discarded()) info.metadata = nullptr;
    out.push_back(std::move(info));
  });
  std::sort(out.begin(), out.end(), [](const EntryInfo& a, const EntryInfo& b) { return a.key < b.key; });
  return out;
}

VerifyReport BinaryCache::verify() {
  VerifyReport report;
  try {
    if (!problem().empty()) return report;
    // A link or file in place of a shard directory is damage (entries would land elsewhere).
    std::error_code ec;
    for (fs::directory_iterator shard(version_dir(), ec), end; !ec && shard != end; shard.increment(ec)) {
      std::error_code type_ec;
      if (shard->symlink_status(type_ec).type() == fs::file_type::directory) continue;
      ++report.corrupt_removed;
      count_corrupt();
      log_line("verify: " + shard->path().string() + " is not a directory: removed");
      remove_anything(shard->path());
    }
    for_each_entry_file(version_dir(), [&](const fs::path& path, const std::string& key) {
      const ReadResult r = read_entry(path, key, /*touch_stamp=*/false);
      if (r.status == ReadStatus::kMissing) return;  // Removed concurrently.
      ++report.checked;
      if (r.status == ReadStatus::kCorrupt) {
        ++report.corrupt_removed;
        count_corrupt();
        log_line("verify: corrupt entry " + path.string() + ": " + r.why);
      } else if (r.status == ReadStatus::kUnreadable) {
        log_line("verify cannot read " + path.string() + ": " + r.why);
      }
    });
    report.stale_temps_removed = remove_stale_temps();
  } catch (const std::exception& e) {
    log_line(std::string("verify failed: ") + e.what());
  }
  return report;
}

std::uint64_t BinaryCache::total_bytes() const {
  std::uint64_t total = 0;
  for_each_entry_file(version_dir(), [&](const fs::path& path, const std::string&) {
    std::error_code ec;
    if (fs::symlink_status(path, ec).type() != fs::file_type::regular) return;
    const auto size = fs::file_size(path, ec);
    if (!ec) total += size;
  });
  return total;
}

std::uint64_t BinaryCache::entry_count() const {
  std::uint64_t n = 0;
  for_each_entry_file(version_dir(), [&](const fs::path&, const std::string&) { ++n; });
  return n;
}

std::vector<std::string> BinaryCache::keys() const {
  std::vector<std::string> out;
  for_each_entry_file(version_dir(), [&](const fs::path&, const std::string& key) { out.push_back(key); });
  std::sort(out.begin(), out.end());
  return out;
}

GcReport BinaryCache::gc(std::uint64_t max_bytes) {
  struct Item {
    fs::path path;
    std::uint64_t size;
    fs::file_time_type stamp;
  };
  GcReport report;
  try {
    std::vector<Item> items;
    if (!problem().empty()) return report;
    for_each_entry_file(version_dir(), [&](const fs::path& path, const std::string&) {
      std::error_code ec1, ec2;
      if (fs::symlink_status(path, ec1).type() != fs::file_type::regular) return;
      const auto size = fs::file_size(path, ec1);
      const auto stamp = fs::last_write_time(path, ec2);
      if (!ec1 && !ec2) items.push_back({path, size, stamp});
    });
    for (const Item& item : items) report.bytes_before += item.size;
    report.bytes_after = report.bytes_before;
    std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) { return a.stamp < b.stamp; });
    for (const Item& item : items) {
      if (report.bytes_after <= max_bytes) break;
      std::error_code ec;
      if (fs::remove(item.path, ec)) {
        ++report.removed;
        report.bytes_after -= item.size;
      }
    }
    remove_stale_temps();
  } catch (const std::exception& e) {
    log_line(std::string("gc failed: ") + e.what());
  }
  return report;
}

std::uint64_t BinaryCache::remove_stale_temps() {
  std::uint64_t removed = 0;
  const auto now = fs::file_time_type::clock::now();
  const auto cutoff = now - kStaleTempAge;
  const auto grace_cutoff = now - kUnlockedTempGrace;
  std::error_code ec;
  if (!check_directory(version_dir() / "tmp").empty()) return 0;
  for (fs::directory_iterator it(version_dir() / "tmp", ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code ec2;
    const fs::path path = it->path();
    if (fs::symlink_status(path, ec2).type() != fs::file_type::regular) {
      if (remove_anything(path)) ++removed;  // nothing kgen stages is anything but a file
      continue;
    }
    const auto stamp = fs::last_write_time(path, ec2);
    if (ec2 || stamp >= grace_cutoff) continue;  // Gone, or young enough to be a live writer's.
    if (stamp < cutoff) {
      if (fs::remove(path, ec2)) ++removed;
      continue;
    }
    // Between the grace period and kStaleTempAge: delete only if no live writer holds its lock.
    const int raw_fd = open_regular_file(path);
    if (raw_fd < 0) continue;
    Fd fd(raw_fd);
    if (::flock(fd.fd, LOCK_EX | LOCK_NB) != 0) continue;  // A live writer: keep it.
    if (unlink_if_same(fd.fd, path) && !fs::exists(path, ec2)) ++removed;
  }
  return removed;
}

CacheStats BinaryCache::stats() const {
  CacheStats s;
  s.hits = hits_.load(std::memory_order_relaxed);
  s.misses = misses_.load(std::memory_order_relaxed);
  s.corrupt_removed = corrupt_removed_.load(std::memory_order_relaxed);
  s.publish_failures = publish_failures_.load(std::memory_order_relaxed);
  s.published = published_.load(std::memory_order_relaxed);
  return s;
}

}  // namespace kgen::cache
