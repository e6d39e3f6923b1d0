#include "cache/layered_cache.h"

namespace kgen::cache {

LayeredCache::LayeredCache(std::vector<std::filesystem::path> roots) {
  layers_.reserve(roots.size());
  for (auto& root : roots) layers_.push_back(std::make_unique<BinaryCache>(std::move(root)));
}

std::optional<CacheEntry> LayeredCache::load(std::string_view key) {
  for (auto& layer : layers_) {
    if (auto entry = layer->load(key)) return entry;
  }
  return std::nullopt;
}

bool LayeredCache::publish(std::string_view key, const CacheEntry& entry) {
  for (auto& layer : layers_) {
    if (layer->publish(key, entry)) return true;
  }
  return false;
}

CacheStats LayeredCache::stats() const {
  CacheStats total;
  for (const auto& layer : layers_) {
    const CacheStats s = layer->stats();
    total.hits += s.hits;
    total.misses += s.misses;
    total.corrupt_removed += s.corrupt_removed;
    total.publish_failures += s.publish_failures;
    total.published += s.published;
  }
  return total;
}

}  // namespace kgen::cache
