#include "driver/device.h"

#include <memory>
#include <mutex>
#include <vector>

#include "kgen/types.hpp"

namespace kgen {
namespace {

std::mutex& device_mutex() {
  static std::mutex m;
  return m;
}

struct DeviceSlot {
  std::once_flag once;
  DeviceInfo info;
};

DeviceSlot& slot(int ordinal) {
  static std::vector<std::unique_ptr<DeviceSlot>> slots = [] {
    std::vector<std::unique_ptr<DeviceSlot>> s;
    for (int i = 0; i < device_count(); ++i) s.push_back(std::make_unique<DeviceSlot>());
    return s;
  }();
  if (ordinal < 0 || ordinal >= static_cast<int>(slots.size())) {
    std::string why;
    if (!gpu_driver().available(&why)) throw Error(Status::no_device, why);
    throw Error(Status::invalid_argument,
                "device " + std::to_string(ordinal) + " does not exist (" +
                    std::to_string(slots.size()) + " GPU(s) visible)");
  }
  DeviceSlot& s = *slots[ordinal];
  std::call_once(s.once, [&] {
    const DeviceProperties p = gpu_driver().properties(ordinal);
    DeviceInfo& d = s.info;
    d.ordinal = ordinal;
    d.name = p.name;
    d.cc_major = p.cc_major, d.cc_minor = p.cc_minor;
    d.sm_count = p.sm_count;
    d.max_smem_optin = p.max_smem_optin;
    d.l2_bytes = p.l2_bytes;
    d.sm_clock_khz = p.sm_clock_khz;
    d.total_memory = p.total_memory;
    if (!p.arch.empty()) {
      auto target = parse_target(p.arch);
      if (!target)
        throw Error(Status::no_device, "GPU " + d.name + " (" + p.arch +
                                           ") is not supported: kgen compiles for AMD gfx90a, gfx942 and gfx950");
      d.target = *target;
      return;
    }
    auto target = target_for_compute_capability(d.cc_major, d.cc_minor);
    if (!target)
      throw Error(Status::no_device, "GPU " + d.name + " (sm_" + std::to_string(d.cc_major) +
                                         std::to_string(d.cc_minor) +
                                         ") is not supported: kgen compiles for sm_80, sm_86, sm_89, sm_90a, sm_100a, "
                                         "sm_103a, sm_120 and sm_121");
    d.target = *target;
    d.target.max_smem_per_block = d.max_smem_optin;
  });
  return s;
}

}  // namespace

int device_count() { return gpu_driver().device_count(); }

const DeviceInfo& device_info(int ordinal) { return slot(ordinal).info; }

void use_primary_context(int ordinal) {
  slot(ordinal);
  gpu_driver().make_current(ordinal);
}

LoadedKernel load_kernel(int ordinal, std::span<const std::byte> cubin, const std::string& entry,
                         int threads, int smem_bytes) {
  std::lock_guard lock(device_mutex());
  use_primary_context(ordinal);
  const GpuDriver& gpu = gpu_driver();
  LoadedKernel k;
  k.function = gpu.load_function(cubin, entry, smem_bytes);
  k.threads = threads;
  k.smem_bytes = smem_bytes;
  k.resident_blocks_per_sm = gpu.resident_blocks_per_sm(k.function, threads, smem_bytes);
  return k;  // modules stay loaded for the life of the process
}

}  // namespace kgen
