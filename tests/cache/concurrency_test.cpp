// Many writers of one key, in threads and in processes, leave exactly one whole entry and no
// staging files; readers racing with writers never see a torn entry.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "test_support.h"

namespace kgen::cache {
namespace {
namespace fs = std::filesystem;
using testing::key_for;
using testing::ScratchDir;

// An entry whose every binary byte and whose metadata name the writer, so a mix of two writers'
// data would show.
CacheEntry writer_entry(int writer) {
  CacheEntry e;
  e.binary.assign(256 * 1024, static_cast<std::byte>(writer));
  e.metadata = {{"writer", writer}};
  return e;
}

void expect_single_whole_entry(const fs::path& root, const std::string& key) {
  BinaryCache cache(root);
  std::size_t entries = 0;
  for (const auto& f : fs::recursive_directory_iterator(root / "v1")) {
    if (f.is_regular_file() && f.path().extension() == ".kgen") ++entries;
  }
  EXPECT_EQ(entries, 1u);
  EXPECT_TRUE(fs::is_empty(root / "v1" / "tmp"));
  const auto loaded = cache.load(key);
  ASSERT_TRUE(loaded.has_value());
  const int writer = loaded->metadata.at("writer").get<int>();
  EXPECT_EQ(loaded->binary, writer_entry(writer).binary);
}

TEST(Concurrency, EightThreadsPublishOneKey) {
  ScratchDir dir;
  BinaryCache cache(dir.path());
  const std::string key = key_for("threads");
  std::atomic<int> ready{0};
  std::atomic<int> succeeded{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      ready.fetch_add(1);
      while (ready.load() < 8) {
      }
      if (cache.publish(key, writer_entry(t))) succeeded.fetch_add(1);
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(succeeded.load(), 8);
  EXPECT_EQ(cache.stats().publish_failures, 0u);
  EXPECT_GE(cache.stats().published, 1u);
  expect_single_whole_entry(dir.path(), key);
}

TEST(Concurrency, FourProcessesPublishOneKey) {
  ScratchDir dir;
  const std::string key = key_for("processes");
  int go[2];
  ASSERT_EQ(::pipe(go), 0);
  std::vector<pid_t> children;
  for (int p = 0; p < 4; ++p) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::close(go[1]);
      char c;
      (void)!::read(go[0], &c, 1);  // returns at EOF, when the parent closes its end
      BinaryCache cache(dir.path());
      bool ok = true;
      for (int round = 0; round < 20; ++round) ok = cache.publish(key, writer_entry(p + 1)) && ok;
      ::_exit(ok ? 0 : 1);
    }
    children.push_back(pid);
  }
  ::close(go[0]);
  ::close(go[1]);
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  expect_single_whole_entry(dir.path(), key);
}

TEST(Concurrency, ReadersNeverSeeATornEntry) {
  ScratchDir dir;
  BinaryCache cache(dir.path());
  const std::string key = key_for("readers");
  std::atomic<bool> stop{false};
  std::atomic<int> hits{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < 4; ++r) {
    readers.emplace_back([&] {
      while (!stop.load()) {
        if (auto e = cache.load(key)) {
          EXPECT_EQ(e->binary, writer_entry(e->metadata.at("writer").get<int>()).binary);
          hits.fetch_add(1);
        }
      }
    });
  }
  for (int round = 0; round < 200; ++round) {
    ASSERT_TRUE(cache.publish(key, writer_entry(round % 7)));
    cache.remove(key);
  }
  ASSERT_TRUE(cache.publish(key, writer_entry(3)));
  while (hits.load() == 0) std::this_thread::yield();
  stop.store(true);
  for (auto& th : readers) th.join();
  EXPECT_EQ(cache.stats().corrupt_removed, 0u);
  EXPECT_EQ(cache.stats().publish_failures, 0u);
}

TEST(Concurrency, ManyKeysManyThreads) {
  ScratchDir dir;
  BinaryCache cache(dir.path());
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        const std::string key = key_for("k" + std::to_string((t * 50 + i) % 100));
        if (!cache.load(key)) {
          EXPECT_TRUE(cache.publish(key, writer_entry(t)));
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(cache.list().size(), 100u);
  EXPECT_EQ(cache.verify().corrupt_removed, 0u);
  EXPECT_TRUE(fs::is_empty(dir.path() / "v1" / "tmp"));
}

}  // namespace
}  // namespace kgen::cache
