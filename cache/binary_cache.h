// BinaryCache: compiled binaries + JSON metadata on disk under content-addressed keys.
// The cache knows nothing of kernels; the runtime builds keys with CacheKeyBuilder.
//
// Layout under the root (one file per entry; few inodes per entry):
//   <root>/v1/<key[0:2]>/<key>.kgen   entries
//   <root>/v1/tmp/                    staging files, same filesystem, so rename(2) is atomic
//   <root>/v1/locks/<key>.lock        advisory per-key locks (KeyLock)
//
// Entry file grammar (integers little-endian, fixed width):
//   entry     := magic version key metadata binary checksum
//   magic     := "KGEN" 0x01                      5 bytes
//   version   := u32                              format version, currently 1
//   key       := u64(n) byte[n]                   the entry's own key (catches renamed files)
//   metadata  := u64(n) byte[n]                   UTF-8 JSON text (nlohmann::json::dump())
//   binary    := u64(n) byte[n]                   opaque compiled binary
//   checksum  := byte[32]                         SHA-256 of every byte before it
// The three lengths must add up to exactly the file size.
//
// Writers: write a unique temp file in v1/tmp while holding flock(LOCK_EX) on it, fsync, rename
// onto the final name, fsync the entry's directory (and v1/ when that directory was just made),
// so a published entry survives a power loss. The lock dies with the writer, so verify()/gc() can
// tell a crashed writer's staging file (unlocked, older than kUnlockedTempGrace) from a live one. Readers never lock: they read the whole file and check magic, version, key,
// lengths and checksum. A bad entry is deleted, counted, logged once and reported as a miss.
// Every cache error (unreadable or read-only root, full disk, corrupt file) is a miss or a
// failed publish, never an exception or an abort. All members are safe to call concurrently
// from many threads and processes.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "cache/log.h"

namespace kgen::cache {

// One cached item: the bytes and a JSON description (the runtime decides what goes in it).
struct CacheEntry {
  std::vector<std::byte> binary;
  nlohmann::json metadata;
};

// Counters since the BinaryCache was constructed (a snapshot).
struct CacheStats {
  std::uint64_t hits = 0;              // load() returned an entry
  std::uint64_t misses = 0;            // load() returned nullopt, corrupt entries included
  std::uint64_t corrupt_removed = 0;   // corrupt entries found by load() or verify() (deleted)
  std::uint64_t publish_failures = 0;  // publish() returned false
  std::uint64_t published = 0;         // publish() created a new entry file
};

// One entry as list() sees it.
struct EntryInfo {
  std::string key;
  std::uint64_t size_bytes = 0;  // the whole entry file
  std::filesystem::file_time_type mtime;  // last publish or hit: the LRU stamp
  nlohmann::json metadata;       // null if the metadata is not valid JSON
};

// What verify() found.
struct VerifyReport {
  std::uint64_t checked = 0;              // entry files read
  std::uint64_t corrupt_removed = 0;      // of those, corrupt (deleted, or deletion attempted)
  std::uint64_t stale_temps_removed = 0;  // staging files older than kStaleTempAge
};

// What gc() did.
struct GcReport {
  std::uint64_t removed = 0;       // entries evicted
  std::uint64_t bytes_before = 0;  // total_bytes() before
  std::uint64_t bytes_after = 0;   // total_bytes() after
};

// Staging files older than this are leftovers of a crashed writer (whatever their lock says).
inline constexpr std::chrono::hours kStaleTempAge{1};
// An unlocked staging file older than this is a dead writer's leftover (SIGKILL, OOM, power):
// live writers lock their staging file right after creating it.
inline constexpr std::chrono::seconds kUnlockedTempGrace{2};
// A hit refreshes the entry's mtime (its LRU stamp) only if it is older than this, so hot
// entries are not rewritten on every load. atime is not used: noatime/relatime mounts lie.
inline constexpr std::chrono::minutes kStampInterval{10};

// The largest entry file the cache reads; a larger file at an entry's path is damage.
inline constexpr std::uint64_t kMaxEntryBytes = std::uint64_t{1} << 30;

// Returns true if `key` is usable as an entry name: 2 to 128 lowercase hex digits.
bool is_valid_key(std::string_view key);

// Returns $KGEN_CACHE_DIR if set and non-empty, else ${XDG_CACHE_HOME:-$HOME/.cache}/kgen
// (relative XDG_CACHE_HOME is ignored, as the XDG spec says); "./.kgen-cache" if HOME is unset.
std::filesystem::path default_cache_root();

class BinaryCache {
 public:
  // Uses `root` (need not exist; nothing is created until the first publish).
  explicit BinaryCache(std::filesystem::path root);
  BinaryCache(const BinaryCache&) = delete;
  BinaryCache& operator=(const BinaryCache&) = delete;

  // Returns the root directory given at construction.
  const std::filesystem::path& root() const { return root_; }
  // Why this cache must not be used ("" if it may): its root or v1/ is a symbolic link where one
  // is not allowed, owned by another user, or writable by others (fs_guard.h). Checked once per
  // object when the root exists; a cache with a problem misses every load, fails every publish
  // and lists nothing, and the problem is logged once.
  std::string problem() const;
  // Makes (and checks) the root, v1/, v1/tmp and v1/locks with private modes; "" or why they
  // cannot be used.
  std::string make_directories() const;
  // Returns where the entry for `key` lives (whether or not it exists).
  std::filesystem::path entry_path(std::string_view key) const;
  // Returns where KeyLock keeps the lock file for `key`.
  std::filesystem::path lock_path(std::string_view key) const;

  // Returns the verified entry for `key`, or nullopt on a miss; a corrupt entry is deleted,
  // counted and logged, and is a miss. Lock-free; never throws.
  std::optional<CacheEntry> load(std::string_view key);

  // Atomically stores `entry` under `key`; true if the entry is now present (already present
  // counts: entries are content-addressed, the existing file is kept). False, logged and
  // counted, if the root is unwritable or anything else fails; never throws.
  bool publish(std::string_view key, const CacheEntry& entry);
  // As publish(), but on failure the reason goes to *why (if not null) instead of the log, so a
  // caller (LayeredCache) can decide what to log; the failure is still counted.
  bool publish_quiet(std::string_view key, const CacheEntry& entry, std::string* why);

  // Deletes the entry for `key` because the caller found it unusable although it verified (for
  // example metadata naming another target than the key was computed for); counted as
  // corrupt_removed and logged with `why`. Returns true if a file was removed.
  bool reject(std::string_view key, std::string_view why);

  // Returns the complete, verified entry file for `key` (for export), or nullopt on a miss; a
  // corrupt entry is handled as in load(). Does not refresh the LRU stamp. Never throws.
  std::optional<std::vector<std::byte>> read_verified_file(std::string_view key);

  // Deletes the entry for `key`; true if a file was removed.
  bool remove(std::string_view key);

  // True if an entry file for `key` exists (nothing is read or verified). Never throws.
  bool contains(std::string_view key) const;

  // Deletes every entry, staging file and unheld lock file; returns the number of entries removed.
  std::uint64_t clear();

  // Returns every entry whose header parses (checksums are not read: use verify()).
  std::vector<EntryInfo> list() const;

  // Reads every entry in full, deletes the corrupt ones and stale staging files (as in gc()).
  VerifyReport verify();

  // Returns the total size in bytes of the entry files.
  std::uint64_t total_bytes() const;
  // Returns the number of entry files (names only: nothing is read).
  std::uint64_t entry_count() const;
  // Returns the keys of every entry file, sorted (names only: nothing is read or verified).
  std::vector<std::string> keys() const;

  // Evicts least recently used entries (oldest mtime stamp first) until total_bytes() <= max_bytes,
  // and deletes stale staging files (older than kStaleTempAge, or unlocked and older than
  // kUnlockedTempGrace).
  GcReport gc(std::uint64_t max_bytes);

  // Returns a snapshot of the counters.
  CacheStats stats() const;

 private:
  std::filesystem::path version_dir() const;

  std::uint64_t remove_stale_temps();
  void count_corrupt() { corrupt_removed_.fetch_add(1, std::memory_order_relaxed); }

  std::filesystem::path root_;
  mutable std::mutex problem_mutex_;
  mutable bool problem_checked_ = false;
  mutable std::string problem_;
  std::atomic<std::uint64_t> hits_{0};
  std::atomic<std::uint64_t> misses_{0};
  std::atomic<std::uint64_t> corrupt_removed_{0};
  std::atomic<std::uint64_t> publish_failures_{0};
  std::atomic<std::uint64_t> published_{0};
};

// Advisory per-key lock across threads and processes, used only to avoid compiling the same key
// twice: flock(LOCK_EX) on <root>/v1/locks/<key>.lock, released by the kernel if the process
// dies. Correctness never depends on it; if the lock file cannot be created the state is
// kUnavailable and the caller proceeds without the lock.
class KeyLock {
 public:
  enum class State { kHeld, kBusy, kUnavailable };

  // Blocks until this KeyLock holds the lock for `key` (or the lock is unavailable).
  KeyLock(const BinaryCache& cache, std::string_view key);
  // Takes the lock only if nobody holds it now; state() is kBusy otherwise.
  static KeyLock try_acquire(const BinaryCache& cache, std::string_view key);
  // Waits at most `timeout` for the lock (a live but hung holder must not hang everyone);
  // state() is kBusy on timeout.
  static KeyLock acquire_for(const BinaryCache& cache, std::string_view key,
                             std::chrono::milliseconds timeout);

  KeyLock(KeyLock&& other) noexcept;
  KeyLock& operator=(KeyLock&& other) noexcept;
  KeyLock(const KeyLock&) = delete;
  KeyLock& operator=(const KeyLock&) = delete;
  // Releases the lock if held.
  ~KeyLock();

  // Returns whether the lock was taken, is held by someone else, or could not be used.
  State state() const { return state_; }
  // Returns true if this object holds the lock.
  bool held() const { return state_ == State::kHeld; }
  // Releases the lock now (idempotent).
  void release() noexcept;
  // Removes the lock file (if this object holds it) and releases the lock: for a key whose work
  // is done, so lock files do not pile up.
  void release_and_remove() noexcept;

 private:
  KeyLock() = default;
  void acquire(const BinaryCache& cache, const std::filesystem::path& path, bool blocking);

  int fd_ = -1;
  State state_ = State::kUnavailable;
  std::filesystem::path path_;
};

}  // namespace kgen::cache
