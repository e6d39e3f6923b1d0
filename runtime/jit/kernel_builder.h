// KernelSource → binary, through the on-disk cache: content-addressed key, cache lookup,
// NVRTC compile on a miss, publish. Thread-safe, with in-process single flight per key and a
// cross-process advisory lock so concurrent processes compile a key once.
//
// Cache layers: the directories of KGEN_CACHE_PATH (colon-separated, pre-warmed and usually
// read-only) are searched first, in order, then the root (KGEN_CACHE_DIR or the default root);
// the first hit wins and publishes go to the first writable layer. A read-only layer or root is
// never fatal: a miss compiles, and a failed publish is logged once (and reported in each
// BuildOutcome). KGEN_CACHE_MAX_BYTES caps
// the writable layer (LRU gc down to 90 % when a publish passes the cap).
//
// A hit is served only if its metadata names the requested target and entry point and its
// CUBIN's ELF header names the requested SM: a verified entry that fails this (a hand-made or
// mis-keyed entry, a bad import) is removed, counted as corrupt, logged, and recompiled.
#pragma once

#include <filesystem>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cache/binary_cache.h"
#include "cache/layered_cache.h"
#include "generator/kernel_source.h"
#include "generator/target.h"
#include "compiler/compiler.h"

namespace kgen {

struct BuildOutcome {
  std::string key;               // cache key (SHA-256 hex)
  std::vector<std::byte> image;  // CUBIN
  ResourceUsage resources;
  bool from_cache = false;       // this call compiled nothing (disk hit or another thread's compile)
  double compile_ms = 0;         // 0 for a cache hit
  std::string log;               // compiler log (also kept in the entry's metadata)
  // The binary is in a cache layer: served from one, or published to one by this build (or by
  // the build this call waited for). False when the publish failed (full disk, read-only cache,
  // no writable layer): the binary is returned all the same, and `store_error` says why.
  bool stored = false;
  std::string store_error;
};

struct BuildOptions {
  // Log one info line per compile (variant, time, key, registers, spills). `kgen warm` turns it
  // off and reports each kernel itself.
  bool log_compile = true;
};

// One cache layer as KernelBuilder::layers() reports it (path, exists, writable, entries, bytes).
using LayerInfo = cache::LayerInfo;

// Splits a KGEN_CACHE_PATH value on ':' (empty parts dropped).
std::vector<std::filesystem::path> parse_cache_path(std::string_view value);

class KernelBuilder {
 public:
  // Uses the layers of KGEN_CACHE_PATH, then the writable root `cache_root`; the size cap comes
  // from KGEN_CACHE_MAX_BYTES.
  explicit KernelBuilder(std::filesystem::path cache_root);
  // Uses `read_layers` (searched first, in order), then `cache_root`; the environment is not read
  // for layers (KGEN_CACHE_MAX_BYTES still is).
  KernelBuilder(std::filesystem::path cache_root, std::vector<std::filesystem::path> read_layers);

  // The process-wide builder on default_cache_root() (KGEN_CACHE_DIR / XDG cache).
  static KernelBuilder& global();

  // The canonical key record of (source, target): schema, kgen version, templates digest,
  // rendered-source digest, compiler and version, target, sorted options, host platform.
  std::string key_record(const KernelSource& source, const Target& target) const;
  std::string cache_key(const KernelSource& source, const Target& target) const;

  // The binary for (source, target): from the cache, or compiled and published (a failed publish
  // is not an error: see BuildOutcome::stored). With KGEN_NO_JIT=1 a miss throws
  // Error(compile_error) instead of compiling.
  BuildOutcome build(const KernelSource& source, const Target& target, const BuildOptions& options = {});

  // The root layer (KGEN_CACHE_DIR or the default root), the last one searched.
  cache::BinaryCache& cache() { return layers_.layer(layers_.size() - 1); }
  // The layer publishes go to: the first writable one (a KGEN_CACHE_PATH layer before the root),
  // else the root.
  cache::BinaryCache& publish_cache() { return layers_.layer(layers_.writable_layer().value_or(layers_.size() - 1)); }
  // Every layer in search order, the root last.
  cache::LayeredCache& layered() { return layers_; }
  std::vector<LayerInfo> layers() const { return layers_.layer_info(); }
  // Counters of all layers added together; corrupt_removed includes entries rejected for a
  // wrong target.
  cache::CacheStats stats() const { return layers_.stats(); }

 private:
  BuildOutcome build_uncached(const KernelSource& source, const Target& target, const std::string& key,
                              const BuildOptions& options);
  // Loads `key` through the layers, rejecting entries that do not match (source, target).
  std::optional<cache::CacheEntry> load_checked(const std::string& key, const KernelSource& source,
                                                const Target& target);

  cache::LayeredCache layers_;
  std::mutex mutex_;
  std::map<std::string, std::shared_future<BuildOutcome>> in_flight_;
};

// "linux-x86_64": the host part of cache keys.
std::string host_platform();

}  // namespace kgen
