// KeyLock excludes other holders (threads and processes) and dies with its process.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <thread>

#include "test_support.h"

namespace kgen::cache {
namespace {
namespace fs = std::filesystem;
using testing::key_for;
using testing::ScratchDir;

// Forks a child that tries the lock without blocking; returns the child's KeyLock::State.
KeyLock::State state_seen_by_child(const fs::path& root, const std::string& key) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    BinaryCache cache(root);
    ::_exit(static_cast<int>(KeyLock::try_acquire(cache, key).state()));
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return static_cast<KeyLock::State>(WEXITSTATUS(status));
}

TEST(KeyLock, ExcludesAnotherProcess) {
  ScratchDir dir;
  BinaryCache cache(dir.path());
  const std::string key = key_for("lock");
  {
    KeyLock lock(cache, key);
    ASSERT_TRUE(lock.held());
    EXPECT_TRUE(fs::exists(cache.lock_path(key)));
    EXPECT_EQ(state_seen_by_child(dir.path(), key), KeyLock::State::kBusy);
    EXPECT_EQ(state_seen_by_child(dir.path(), key_for("other")), KeyLock::State::kHeld);
  }
  EXPECT_EQ(state_seen_by_child(dir.path(), key), KeyLock::State::kHeld);
}

TEST(KeyLock, ExcludesAnotherHolderInTheSameProcess) {
  ScratchDir dir;
  BinaryCache cache(dir.path());
  const std::string key = key_for("lock");
  KeyLock first = KeyLock::try_acquire(cache, key);
  ASSERT_TRUE(first.held());
  EXPECT_EQ(KeyLock::try_acquire(cache, key).state(), KeyLock::State::kBusy);
  KeyLock moved = std::move(first);
  EXPECT_TRUE(moved.held());
  EXPECT_FALSE(first.held());
  EXPECT_EQ(KeyLock::try_acquire(cache, key).state(), KeyLock::State::kBusy);
  moved.release();
  EXPECT_TRUE(KeyLock::try_acquire(cache, key).held());
}

TEST(KeyLock, ReleasedWhenHolderIsKilled) {
  ScratchDir dir;
  BinaryCache cache(dir.path());
  const std::string key = key_for("killed");
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    BinaryCache child_cache(dir.path());
    KeyLock lock(child_cache, key);
    const char c = lock.held() ? 'y' : 'n';
    (void)!::write(ready[1], &c, 1);
    for (;;) ::pause();
  }
  ::close(ready[1]);
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  ::close(ready[0]);
  ASSERT_EQ(c, 'y');
  EXPECT_EQ(KeyLock::try_acquire(cache, key).state(), KeyLock::State::kBusy);
  ::kill(pid, SIGKILL);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(KeyLock::try_acquire(cache, key).held());
}

TEST(KeyLock, BlockingAcquireWaitsForRelease) {
  ScratchDir dir;
  BinaryCache cache(dir.path());
  const std::string key = key_for("wait");
  auto holder = std::make_unique<KeyLock>(cache, key);
  ASSERT_TRUE(holder->held());
  std::atomic<bool> acquired{false};
  std::thread waiter([&] {
    KeyLock lock(cache, key);
    acquired.store(lock.held());
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(acquired.load());
  holder.reset();
  waiter.join();
  EXPECT_TRUE(acquired.load());
}

TEST(KeyLock, AcquireForTimesOut) {
  ScratchDir dir;
  BinaryCache cache(dir.path());
  const std::string key = key_for("timeout");
  KeyLock holder(cache, key);
  const auto start = std::chrono::steady_clock::now();
  const KeyLock waiter = KeyLock::acquire_for(cache, key, std::chrono::milliseconds(100));
  EXPECT_EQ(waiter.state(), KeyLock::State::kBusy);
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(100));
  holder.release();
  EXPECT_TRUE(KeyLock::acquire_for(cache, key, std::chrono::milliseconds(100)).held());
}

TEST(KeyLock, UnavailableLockIsNotAnError) {
  ScratchDir dir;
  const fs::path root = dir.path() / "file";
  std::ofstream(root) << "x";
  BinaryCache cache(root);
  EXPECT_EQ(KeyLock(cache, key_for("x")).state(), KeyLock::State::kUnavailable);
  EXPECT_EQ(KeyLock(cache, "not a key").state(), KeyLock::State::kUnavailable);
}

TEST(KeyLock, ClearKeepsHeldLocks) {
  ScratchDir dir;
  BinaryCache cache(dir.path());
  const std::string held_key = key_for("held"), free_key = key_for("free");
  KeyLock held(cache, held_key);
  { KeyLock tmp(cache, free_key); }
  cache.clear();
  EXPECT_TRUE(fs::exists(cache.lock_path(held_key)));
  EXPECT_FALSE(fs::exists(cache.lock_path(free_key)));
  EXPECT_EQ(state_seen_by_child(dir.path(), held_key), KeyLock::State::kBusy);
}

}  // namespace
}  // namespace kgen::cache
