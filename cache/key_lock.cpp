#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <thread>

#include "cache/binary_cache.h"
#include "cache/fs_guard.h"

namespace kgen::cache {
namespace fs = std::filesystem;
namespace {

// Opens (creating if needed) the lock file; -1 if that is impossible. Neither a symbolic link
// at the lock's path nor one in place of the locks directory is followed, and anything but a
// regular file is refused, so a planted link cannot make kgen create or lock a file elsewhere.
int open_lock_file(const BinaryCache& cache, const fs::path& path) {
  if (!cache.problem().empty()) return -1;
  if (!check_directory(path.parent_path()).empty() && !cache.make_directories().empty()) return -1;
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, private_file_mode());
  // flock works on read-only descriptors too: a read-only cache with existing lock files.
  if (fd < 0 && errno != ELOOP) fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return -1;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// True if `fd` is still the file at `path` (clear() may unlink a lock file between our open and
// our flock; locking the orphaned inode would exclude nobody).
bool still_linked(int fd, const fs::path& path) {
  struct stat open_st {}, path_st {};
  if (::fstat(fd, &open_st) != 0 || ::stat(path.c_str(), &path_st) != 0) return false;
  return open_st.st_dev == path_st.st_dev && open_st.st_ino == path_st.st_ino;
}

}  // namespace

void KeyLock::acquire(const BinaryCache& cache, const fs::path& path, bool blocking) {
  for (int attempt = 0; attempt < 16; ++attempt) {
    const int fd = open_lock_file(cache, path);
    if (fd < 0) {
      state_ = State::kUnavailable;
      return;
    }
    int rc;
    do {
      rc = ::flock(fd, LOCK_EX | (blocking ? 0 : LOCK_NB));
    } while (rc != 0 && errno == EINTR);
    if (rc != 0) {
      state_ = (errno == EWOULDBLOCK) ? State::kBusy : State::kUnavailable;
      ::close(fd);
      return;
    }
    if (still_linked(fd, path)) {
      fd_ = fd;
      path_ = path;
      state_ = State::kHeld;
      return;
    }
    ::close(fd);
  }
  state_ = State::kUnavailable;
}

KeyLock::KeyLock(const BinaryCache& cache, std::string_view key) {
  if (is_valid_key(key)) acquire(cache, cache.lock_path(key), /*blocking=*/true);
}

KeyLock KeyLock::try_acquire(const BinaryCache& cache, std::string_view key) {
  KeyLock lock;
  if (is_valid_key(key)) lock.acquire(cache, cache.lock_path(key), /*blocking=*/false);
  return lock;
}

KeyLock KeyLock::acquire_for(const BinaryCache& cache, std::string_view key,
                             std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto pause = std::chrono::milliseconds(1);
  for (;;) {
    KeyLock lock = try_acquire(cache, key);
    if (lock.state() != State::kBusy || std::chrono::steady_clock::now() >= deadline) return lock;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
}

KeyLock::KeyLock(KeyLock&& other) noexcept : fd_(other.fd_), state_(other.state_), path_(std::move(other.path_)) {
  other.fd_ = -1;
  other.state_ = State::kUnavailable;
}

KeyLock& KeyLock::operator=(KeyLock&& other) noexcept {
  if (this != &other) {
    release();
    fd_ = other.fd_;
    state_ = other.state_;
    path_ = std::move(other.path_);
    other.fd_ = -1;
    other.state_ = State::kUnavailable;
  }
  return *this;
}

KeyLock::~KeyLock() { release(); }

void KeyLock::release_and_remove() noexcept {
  // Unlinked while held: a process waiting on this inode finds it unlinked after its flock and
  // retries on a fresh file (still_linked), so nobody is left locking an orphan.
  if (fd_ >= 0 && still_linked(fd_, path_)) ::unlink(path_.c_str());
  release();
}

void KeyLock::release() noexcept {
  if (fd_ >= 0) {
    ::close(fd_);  // Closing the only descriptor of the open file releases the flock.
    fd_ = -1;
  }
  if (state_ == State::kHeld) state_ = State::kUnavailable;
}

}  // namespace kgen::cache
