// Shared helpers for the cache tests: a scratch directory, a log capture, sample entries.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <string>
#include <vector>

#include "cache/binary_cache.h"
#include "cache/cache_key.h"

namespace kgen::cache::testing {

// A file's bytes, and a file replaced by `bytes`.
inline std::vector<char> read_all(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
inline void write_all(const std::filesystem::path& p, const std::vector<char>& bytes) {
  std::ofstream(p, std::ios::binary | std::ios::trunc).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A fresh directory under $TMPDIR, removed (with any read-only bits undone) at destruction.
class ScratchDir {
 public:
  ScratchDir() {
    std::string templ = (std::filesystem::temp_directory_path() / "kgen_cache_test.XXXXXX").string();
    if (::mkdtemp(templ.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = templ;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::permissions(path_, std::filesystem::perms::owner_all,
                                 std::filesystem::perm_options::add, ec);
    for (auto it = std::filesystem::recursive_directory_iterator(path_, ec);
         !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
      std::filesystem::permissions(it->path(), std::filesystem::perms::owner_all,
                                   std::filesystem::perm_options::add, ec);
    }
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// Collects log lines while alive.
class LogCapture {
 public:
  LogCapture() {
    set_log_sink([this](std::string_view line) {
      std::lock_guard lock(mu_);
      lines_.emplace_back(line);
    });
  }
  ~LogCapture() { set_log_sink(nullptr); }
  std::vector<std::string> lines() const {
    std::lock_guard lock(mu_);
    return lines_;
  }

 private:
  mutable std::mutex mu_;
  std::vector<std::string> lines_;
};

inline std::string key_for(std::string_view name) {
  return CacheKeyBuilder().add("test", name).digest();
}

inline CacheEntry sample_entry(std::size_t binary_bytes = 1000) {
  CacheEntry e;
  for (std::size_t i = 0; i < binary_bytes; ++i) e.binary.push_back(static_cast<std::byte>(i * 7 + 3));
  e.metadata = {{"target", "sm_90a"}, {"kernel", "attn_fwd"}, {"regs", 168}};
  return e;
}

// Returns the number of regular files anywhere under `dir`.
inline std::size_t count_files(const std::filesystem::path& dir) {
  std::size_t n = 0;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(dir, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_regular_file()) ++n;
  }
  return n;
}

}  // namespace kgen::cache::testing
