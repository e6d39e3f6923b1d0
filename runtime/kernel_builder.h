// KernelSource → binary, through the on-disk cache: content-addressed key, cache lookup,
// NVRTC compile on a miss, publish. Thread-safe, with in-process single flight per key and a
// cross-process advisory lock so concurrent processes compile a key once.
#pragma once

#include <filesystem>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cache/binary_cache.h"
#include "generator/kernel_source.h"
#include "generator/target.h"
#include "runtime/nvrtc.h"

namespace kgen {

struct BuildOutcome {
  std::string key;               // cache key (SHA-256 hex)
  std::vector<std::byte> image;  // CUBIN
  ResourceUsage resources;
  bool from_cache = false;       // this call compiled nothing (disk hit or another thread's compile)
  double compile_ms = 0;         // 0 for a cache hit
  std::string log;               // compiler log (also kept in the entry's metadata)
};

class KernelBuilder {
 public:
  // Uses the cache at `cache_root`.
  explicit KernelBuilder(std::filesystem::path cache_root);

  // The process-wide builder on default_cache_root() (KGEN_CACHE_DIR / XDG cache).
  static KernelBuilder& global();

  // The canonical key record of (source, target): schema, kgen version, templates digest,
  // rendered-source digest, compiler and version, target, sorted options, host platform.
  std::string key_record(const KernelSource& source, const Target& target) const;
  std::string cache_key(const KernelSource& source, const Target& target) const;

  // The binary for (source, target): from the cache, or compiled and published. With
  // KGEN_NO_JIT=1 a miss throws Error(compile_error) instead of compiling.
  BuildOutcome build(const KernelSource& source, const Target& target);

  cache::BinaryCache& cache() { return cache_; }

 private:
  BuildOutcome build_uncached(const KernelSource& source, const Target& target, const std::string& key);

  cache::BinaryCache cache_;
  std::mutex mutex_;
  std::map<std::string, std::shared_future<BuildOutcome>> in_flight_;
};

// "linux-x86_64": the host part of cache keys.
std::string host_platform();

}  // namespace kgen
