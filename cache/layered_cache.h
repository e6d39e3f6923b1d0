// LayeredCache: several BinaryCache roots searched in order, for deployment (a pre-warmed,
// possibly read-only directory baked into an image in front of the user's cache).
//
// Reads: first valid hit wins. Writes: the first writable layer. Writability is probed once at
// construction (access(W_OK) on the root, or on its nearest existing ancestor if the root does
// not exist yet); a layer whose publish fails anyway (read-only mount, full disk) is skipped for
// kLayerRetryInterval, and only its first failure is logged. A read-only layer is never fatal.
//
// Size cap (set_max_bytes): after a publish the writable layer's size is tracked incrementally
// (one stat of the new entry); the tree is re-listed only when the estimate passes the cap, or
// every kSizeRescanPublishes publishes / kSizeRescanInterval (other processes write too). Above
// the cap, gc() evicts LRU entries down to 90 % of it.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cache/binary_cache.h"

namespace kgen::cache {

inline constexpr std::chrono::seconds kLayerRetryInterval{300};
inline constexpr std::uint64_t kSizeRescanPublishes = 64;
inline constexpr std::chrono::seconds kSizeRescanInterval{60};

// One layer as layers() reports it.
struct LayerInfo {
  std::filesystem::path path;
  bool exists = false;     // the root directory exists
  bool writable = false;   // publishes may go here (probe, and no recent publish failure)
  std::uint64_t entries = 0;
  std::uint64_t bytes = 0;
};

class LayeredCache {
 public:
  // Uses `roots` in order; an empty list is allowed (every load misses, every publish fails).
  explicit LayeredCache(std::vector<std::filesystem::path> roots);

  // Returns the entry from the first layer that has a valid one (first hit wins); corrupt
  // entries are handled by each layer as in BinaryCache::load. If `layer_index` is not null it
  // receives the index of the layer that answered; layers before `first_layer` are not searched
  // (to look behind an entry the caller rejected). Never throws.
  std::optional<CacheEntry> load(std::string_view key, std::size_t* layer_index = nullptr,
                                 std::size_t first_layer = 0);

  // Publishes to the first writable layer; false if none accepts the entry. A read-only layer
  // is never fatal. Enforces the size cap afterwards. On failure `*why` (if not null) says why the
  // entry was not stored, even when the log stays silent (only a layer's first failure is
  // logged). Never throws.
  bool publish(std::string_view key, const CacheEntry& entry, std::string* why = nullptr);

  // True if some layer holds an entry file for `key` (names only: nothing is read). Never throws.
  bool contains(std::string_view key) const;

  // Returns the number of layers.
  std::size_t size() const { return layers_.size(); }
  // Returns layer `i` (0 = searched first), for listing, verify and gc.
  BinaryCache& layer(std::size_t i) { return layers_.at(i)->cache; }
  // Returns the index of the layer publishes go to now, or nullopt if none is writable.
  std::optional<std::size_t> writable_layer() const;
  // Describes every layer (lists entry files: not for a hot path).
  std::vector<LayerInfo> layer_info() const;

  // Caps the writable layer at `max_bytes` (0 = no cap).
  void set_max_bytes(std::uint64_t max_bytes) { max_bytes_.store(max_bytes); }
  std::uint64_t max_bytes() const { return max_bytes_.load(); }
  // Number of gc() runs triggered by the cap (for tests and stats).
  std::uint64_t cap_evictions() const { return cap_gc_runs_.load(); }

  // Returns the counters of all layers added together.
  CacheStats stats() const;

 private:
  struct Layer {
    explicit Layer(std::filesystem::path root) : cache(std::move(root)) {}
    BinaryCache cache;
    bool probed_writable = false;
    std::atomic<std::int64_t> skip_until_ns{0};  // steady clock; publishes skip it until then
    std::atomic<bool> failure_logged{false};
    std::mutex failure_mutex;
    std::string first_failure;  // why its first publish failed (guarded by failure_mutex)
  };
  bool usable_for_writes(const Layer& layer) const;
  void enforce_cap(Layer& layer, std::string_view key);

  std::vector<std::unique_ptr<Layer>> layers_;
  std::atomic<bool> none_writable_logged_{false};
  std::atomic<std::uint64_t> max_bytes_{0};
  std::atomic<std::uint64_t> cap_gc_runs_{0};
  // Size tracking of the layer publishes went to (guarded by size_mutex_).
  std::mutex size_mutex_;
  std::size_t sized_layer_ = static_cast<std::size_t>(-1);
  std::uint64_t estimated_bytes_ = 0;
  std::uint64_t publishes_since_scan_ = 0;
  std::chrono::steady_clock::time_point last_scan_{};
};

// True if files can be created under `root` now (probe: access(W_OK) on the root, or on its
// nearest existing ancestor directory). Never throws.
bool root_is_writable(const std::filesystem::path& root);

}  // namespace kgen::cache
