#include "cache/layered_cache.h"

#include <unistd.h>

namespace kgen::cache {
namespace fs = std::filesystem;
namespace {

std::int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

bool root_is_writable(const fs::path& root) {
  try {
    std::error_code ec;
    fs::path p = root.empty() ? fs::path(".") : root;
    // The versioned subdirectory decides if it exists (a root may be writable but hold a
    // read-only v1/ copied from an image).
    if (fs::is_directory(p / "v1", ec)) return ::access((p / "v1").c_str(), W_OK | X_OK) == 0;
    for (;;) {
      const fs::file_status st = fs::status(p, ec);
      if (!ec && fs::exists(st)) {
        return fs::is_directory(st) && ::access(p.c_str(), W_OK | X_OK) == 0;
      }
      if (!p.has_relative_path() || p == p.parent_path()) return false;
      p = p.parent_path();
      if (p.empty()) p = ".";
    }
  } catch (...) {
    return false;
  }
}

LayeredCache::LayeredCache(std::vector<fs::path> roots) {
  layers_.reserve(roots.size());
  for (auto& root : roots) {
    auto layer = std::make_unique<Layer>(std::move(root));
    layer->probed_writable = root_is_writable(layer->cache.root());
    layers_.push_back(std::move(layer));
  }
}

std::optional<CacheEntry> LayeredCache::load(std::string_view key, std::size_t* layer_index,
                                             std::size_t first_layer) {
  for (std::size_t i = first_layer; i < layers_.size(); ++i) {
    if (auto entry = layers_[i]->cache.load(key)) {
      if (layer_index) *layer_index = i;
      return entry;
    }
  }
  return std::nullopt;
}

bool LayeredCache::usable_for_writes(const Layer& layer) const {
  return layer.probed_writable && layer.skip_until_ns.load(std::memory_order_relaxed) <= steady_ns();
}

std::optional<std::size_t> LayeredCache::writable_layer() const {
  for (std::size_t i = 0; i < layers_.size(); ++i)
    if (usable_for_writes(*layers_[i])) return i;
  return std::nullopt;
}

bool LayeredCache::publish(std::string_view key, const CacheEntry& entry, std::string* why_out) {
  std::string why;
  try {
    std::string skipped;  // layers passed over for an earlier failure, and what it was
    for (auto& layer : layers_) {
      if (!layer->probed_writable) continue;
      if (!usable_for_writes(*layer)) {
        std::lock_guard lock(layer->failure_mutex);
        skipped += (skipped.empty() ? "" : "; ") + layer->cache.root().string() + " (" + layer->first_failure + ")";
        continue;
      }
      std::string layer_why;
      if (layer->cache.publish_quiet(key, entry, &layer_why)) {
        enforce_cap(*layer, key);
        return true;
      }
      why = layer_why;
      layer->skip_until_ns.store(
          steady_ns() + std::chrono::duration_cast<std::chrono::nanoseconds>(kLayerRetryInterval).count());
      if (!layer->failure_logged.exchange(true)) {
        {
          std::lock_guard lock(layer->failure_mutex);
          layer->first_failure = layer_why;
        }
        log_line("publish " + std::string(key) + " failed: " + layer_why + " (cache layer " +
                 layer->cache.root().string() + " is skipped for writes for a while; further "
                 "failures there are not logged)");
        none_writable_logged_.store(true);  // One line per failure cause is enough.
      }
    }
    if (why.empty() && !skipped.empty()) why = "skipped for writes after a failed publish: " + skipped;
    if (why.empty()) {
      std::string roots;
      for (const auto& layer : layers_) roots += (roots.empty() ? "" : ":") + layer->cache.root().string();
      why = "no writable cache layer (" + (roots.empty() ? std::string("none") : roots) + ")";
      if (!none_writable_logged_.exchange(true))
        log_line("publish failed: " + why + "; compiled binaries are not persisted");
    }
  } catch (...) {
    if (why.empty()) why = "unexpected error";
  }
  if (why_out) *why_out = why;
  return false;
}

bool LayeredCache::contains(std::string_view key) const {
  for (const auto& layer : layers_)
    if (layer->cache.contains(key)) return true;
  return false;
}

void LayeredCache::enforce_cap(Layer& layer, std::string_view key) {
  const std::uint64_t cap = max_bytes_.load();
  if (cap == 0) return;
  std::lock_guard lock(size_mutex_);
  const auto now = std::chrono::steady_clock::now();
  const std::size_t this_layer = [&] {
    for (std::size_t i = 0; i < layers_.size(); ++i)
      if (layers_[i].get() == &layer) return i;
    return static_cast<std::size_t>(-1);
  }();
  bool rescan = this_layer != sized_layer_ || ++publishes_since_scan_ >= kSizeRescanPublishes ||
                now - last_scan_ >= kSizeRescanInterval;
  if (!rescan) {
    std::error_code ec;
    const auto size = fs::file_size(layer.cache.entry_path(key), ec);
    if (!ec) estimated_bytes_ += size;
    rescan = estimated_bytes_ > cap;  // Confirm with a real listing before evicting anything.
  }
  if (!rescan) return;
  sized_layer_ = this_layer;
  publishes_since_scan_ = 0;
  last_scan_ = now;
  estimated_bytes_ = layer.cache.total_bytes();
  if (estimated_bytes_ <= cap) return;
  const GcReport r = layer.cache.gc(cap / 10 * 9);
  cap_gc_runs_.fetch_add(1);
  estimated_bytes_ = r.bytes_after;
  log_line("size cap " + std::to_string(cap) + " bytes passed in " + layer.cache.root().string() +
           ": evicted " + std::to_string(r.removed) + " least recently used entries (" +
           std::to_string(r.bytes_before) + " -> " + std::to_string(r.bytes_after) + " bytes)");
}

std::vector<LayerInfo> LayeredCache::layer_info() const {
  std::vector<LayerInfo> out;
  for (const auto& layer : layers_) {
    LayerInfo info;
    info.path = layer->cache.root();
    std::error_code ec;
    info.exists = fs::is_directory(info.path, ec);
    info.writable = usable_for_writes(*layer);
    if (info.exists) {
      info.entries = layer->cache.entry_count();
      info.bytes = layer->cache.total_bytes();
    }
    out.push_back(std::move(info));
  }
  return out;
}

CacheStats LayeredCache::stats() const {
  CacheStats total;
  for (const auto& layer : layers_) {
    const CacheStats s = layer->cache.stats();
    total.hits += s.hits;
    total.misses += s.misses;
    total.corrupt_removed += s.corrupt_removed;
    total.publish_failures += s.publish_failures;
    total.published += s.published;
  }
  return total;
}

}  // namespace kgen::cache
