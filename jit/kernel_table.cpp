#include "jit/kernel_table.h"

#include <mutex>
#include <shared_mutex>
#include <unordered_map>

#include "driver/cuda_driver.h"
#include "jit/kernel_builder.h"

namespace kgen {

const LoadedKernel& loaded_kernel(int device, const std::string& key, const std::function<KernelSource()>& render) {
  static std::shared_mutex mutex;
  static std::unordered_map<std::string, LoadedKernel> table;
  const std::string full = std::to_string(device) + "/" + key;
  {
    std::shared_lock lock(mutex);
    if (auto it = table.find(full); it != table.end()) return it->second;
  }
  const DeviceInfo& dev = device_info(device);
  KernelSource src = render();
  BuildOutcome built = KernelBuilder::global().build(src, dev.target);
  LoadedKernel k = load_kernel(device, built.image, src.entry, src.threads, src.smem_bytes);
  std::unique_lock lock(mutex);
  return table.emplace(full, k).first->second;
}

void launch_kernel(const LoadedKernel& k, unsigned gx, unsigned gy, unsigned gz, void* params, void* stream,
                   const char* what) {
  void* args[] = {params};
  cuda_check(cuda_driver().cuLaunchKernel(k.function, gx, gy, gz, k.threads, 1, 1, k.smem_bytes,
                                          static_cast<CUstream>(stream), args, nullptr),
             what);
}

}  // namespace kgen
