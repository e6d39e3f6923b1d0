#include "jit/kernel_table.h"

#include <cstdlib>
#include <mutex>
#include <shared_mutex>
#include <string_view>
#include <unordered_map>

#include "jit/kernel_builder.h"
#include "kgen/types.hpp"

namespace kgen {
namespace {

struct KernelKeyHash {
  std::size_t operator()(const KernelKey& k) const noexcept {
    std::size_t h = std::hash<std::string_view>{}(k.op);
    h = h * 1000003u ^ std::hash<std::uint64_t>{}(k.packed);
    return h * 1000003u ^ static_cast<std::size_t>(k.device);
  }
};

}  // namespace

KeyPacker& KeyPacker::add(long long value, int bits) {
  if (value < 0 || bits <= 0 || bits > 63 || value >= (1LL << bits) || used_ + bits > 64)
    throw Error(Status::internal, "kernel key field " + std::to_string(value) + " does not fit " + std::to_string(bits) +
                                      " bits (" + std::to_string(used_) + " of 64 used)");
  value_ = (value_ << bits) | static_cast<std::uint64_t>(value);
  used_ += bits;
  return *this;
}

const LoadedKernel& loaded_kernel(const KernelKey& key, const std::function<KernelSource()>& render,
                                  const EntryPoint* other) {
  static std::shared_mutex mutex;
  static std::unordered_map<KernelKey, LoadedKernel, KernelKeyHash> table;
  {
    std::shared_lock lock(mutex);
    if (auto it = table.find(key); it != table.end()) return it->second;
  }
  const DeviceInfo& dev = device_info(key.device);
  KernelSource src = render();
  BuildOutcome built = KernelBuilder::global().build(src, dev.target);
  LoadedKernel k = other ? load_kernel(key.device, built.image, other->entry, src.threads, other->smem_bytes)
                         : load_kernel(key.device, built.image, src.entry, src.threads, src.smem_bytes);
  std::unique_lock lock(mutex);
  return table.emplace(key, k).first->second;
}

namespace {

// Queues `k` over `grid` with the kernel arguments `args` (after the prior grid where
// `after_prior`). An empty grid (a packed batch whose sequences are all empty) has no work to
// launch.
void launch_args(const LoadedKernel& k, const LaunchGrid& grid, void** args, void* stream, const char* what,
                 bool after_prior) {
  if (grid.x == 0 || grid.y == 0 || grid.z == 0) return;
  if (after_prior)
    gpu_driver().launch_after_prior(k.function, grid.x, grid.y, grid.z, k.threads, k.smem_bytes, stream, args, what);
  else
    gpu_driver().launch(k.function, grid.x, grid.y, grid.z, k.threads, k.smem_bytes, stream, args, what);
}

}  // namespace

bool programmatic_launches_enabled() {
  static const bool enabled = [] {
    const char* v = std::getenv("KGEN_PROGRAMMATIC_LAUNCH");
    return v == nullptr || std::string_view(v) != "0";
  }();
  return enabled;
}

void launch_kernel(const LoadedKernel& k, const LaunchGrid& grid, void* params, void* stream, const char* what,
                   bool after_prior) {
  void* args[] = {params};
  launch_args(k, grid, args, stream, what, after_prior);
}

void launch_kernel(const LoadedKernel& k, const LaunchGrid& grid, void* params, void* second, void* stream,
                   const char* what) {
  void* args[] = {params, second};
  launch_args(k, grid, args, stream, what, false);
}

}  // namespace kgen
