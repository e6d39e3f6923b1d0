// LayeredCache: several BinaryCache roots searched in order, for deployment (a pre-warmed,
// possibly read-only directory baked into an image behind or in front of the user's cache).
#pragma once

#include <cstddef>
#include <filesystem>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "cache/binary_cache.h"

namespace kgen::cache {

class LayeredCache {
 public:
  // Uses `roots` in order; an empty list is allowed (every load misses, every publish fails).
  explicit LayeredCache(std::vector<std::filesystem::path> roots);

  // Returns the entry from the first layer that has a valid one (first hit wins); corrupt
  // entries are handled by each layer as in BinaryCache::load. Never throws.
  std::optional<CacheEntry> load(std::string_view key);

  // Publishes to the first layer that accepts the entry (the first writable one); false if none
  // does. A read-only layer is never fatal. Never throws.
  bool publish(std::string_view key, const CacheEntry& entry);

  // Returns the number of layers.
  std::size_t size() const { return layers_.size(); }
  // Returns layer `i` (0 = searched first), for listing, verify and gc.
  BinaryCache& layer(std::size_t i) { return *layers_.at(i); }

  // Returns the counters of all layers added together.
  CacheStats stats() const;

 private:
  std::vector<std::unique_ptr<BinaryCache>> layers_;
};

}  // namespace kgen::cache
