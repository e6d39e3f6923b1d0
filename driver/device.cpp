#include "driver/device.h"

#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "kgen/types.hpp"
#include "driver/cuda_driver.h"

namespace kgen {
namespace {

std::mutex& device_mutex() {
  static std::mutex m;
  return m;
}

struct DeviceSlot {
  std::once_flag once;
  DeviceInfo info;
  CUcontext primary = nullptr;
};

DeviceSlot& slot(int ordinal) {
  static std::vector<std::unique_ptr<DeviceSlot>> slots = [] {
    std::vector<std::unique_ptr<DeviceSlot>> s;
    for (int i = 0; i < device_count(); ++i) s.push_back(std::make_unique<DeviceSlot>());
    return s;
  }();
  if (ordinal < 0 || ordinal >= static_cast<int>(slots.size())) {
    cuda_driver();  // throws no_device when there is no GPU at all
    throw Error(Status::invalid_argument,
                "device " + std::to_string(ordinal) + " does not exist (" +
                    std::to_string(slots.size()) + " GPU(s) visible)");
  }
  DeviceSlot& s = *slots[ordinal];
  std::call_once(s.once, [&] {
    const CudaDriver& cu = cuda_driver();
    CUdevice dev;
    cuda_check(cu.cuDeviceGet(&dev, ordinal), "cuDeviceGet");
    char name[256] = {};
    cuda_check(cu.cuDeviceGetName(name, sizeof name, dev), "cuDeviceGetName");
    auto attr = [&](CUdevice_attribute a) {
      int v = 0;
      cuda_check(cu.cuDeviceGetAttribute(&v, a, dev), "cuDeviceGetAttribute");
      return v;
    };
    DeviceInfo& d = s.info;
    d.ordinal = ordinal;
    d.name = name;
    d.cc_major = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
    d.cc_minor = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
    d.sm_count = attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
    d.max_smem_optin = attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
    d.l2_bytes = attr(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE);
    d.sm_clock_khz = attr(CU_DEVICE_ATTRIBUTE_CLOCK_RATE);
    cuda_check(cu.cuDeviceTotalMem(&d.total_memory, dev), "cuDeviceTotalMem");
    auto target = target_for_compute_capability(d.cc_major, d.cc_minor);
    if (!target)
      throw Error(Status::no_device, "GPU " + d.name + " (sm_" + std::to_string(d.cc_major) +
                                         std::to_string(d.cc_minor) +
                                         ") is not supported: kgen needs sm_80 or newer");
    d.target = *target;
    d.target.max_smem_per_block = d.max_smem_optin;
    cuda_check(cu.cuDevicePrimaryCtxRetain(&s.primary, dev), "cuDevicePrimaryCtxRetain");
  });
  return s;
}

}  // namespace

int device_count() {
  if (!cuda_available()) return 0;
  int n = 0;
  if (cuda_driver().cuDeviceGetCount(&n) != CUDA_SUCCESS) return 0;
  return n;
}

const DeviceInfo& device_info(int ordinal) { return slot(ordinal).info; }

CUcontext use_primary_context(int ordinal) {
  DeviceSlot& s = slot(ordinal);
  const CudaDriver& cu = cuda_driver();
  CUcontext current = nullptr;
  cu.cuCtxGetCurrent(&current);
  if (current != s.primary) cuda_check(cu.cuCtxSetCurrent(s.primary), "cuCtxSetCurrent");
  return s.primary;
}

LoadedKernel load_kernel(int ordinal, std::span<const std::byte> cubin, const std::string& entry,
                         int threads, int smem_bytes) {
  std::lock_guard lock(device_mutex());
  use_primary_context(ordinal);
  const CudaDriver& cu = cuda_driver();
  CUmodule module = nullptr;
  cuda_check(cu.cuModuleLoadData(&module, cubin.data()), "cuModuleLoadData");
  LoadedKernel k;
  cuda_check(cu.cuModuleGetFunction(&k.function, module, entry.c_str()), "cuModuleGetFunction");
  if (smem_bytes > 48 * 1024)
    cuda_check(cu.cuFuncSetAttribute(k.function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                     smem_bytes),
               "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)");
  k.threads = threads;
  k.smem_bytes = smem_bytes;
  cuda_check(cu.cuOccupancyMaxActiveBlocksPerMultiprocessor(&k.resident_blocks_per_sm, k.function, threads, smem_bytes),
             "cuOccupancyMaxActiveBlocksPerMultiprocessor");
  return k;  // modules stay loaded for the life of the process
}

}  // namespace kgen
