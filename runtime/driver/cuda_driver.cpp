#include "driver/cuda_driver.h"

#include <dlfcn.h>

#include <mutex>

#include "kgen/types.hpp"

namespace kgen {
namespace {

struct LoadedDriver {
  CudaDriver table;
  std::string error;  // empty when usable
};

const LoadedDriver& load_driver() {
  static const LoadedDriver loaded = [] {
    LoadedDriver d;
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      d.error = "no CUDA driver found (libcuda.so.1 could not be loaded): this machine can "
                "compile kernels but not run them";
      return d;
    }
    auto resolve = [&](const char* symbol) -> void* {
      void* f = dlsym(lib, symbol);
      // cuEventElapsedTime_v2 is new in CUDA 12.8 drivers; older ones export the same
      // signature without the suffix.
      if (!f && std::string_view(symbol) == "cuEventElapsedTime_v2") f = dlsym(lib, "cuEventElapsedTime");
      return f;
    };
#define KGEN_RESOLVE(name, symbol)                                                          \
  d.table.name = reinterpret_cast<decltype(d.table.name)>(resolve(symbol));                 \
  if (!d.table.name && d.error.empty())                                                     \
    d.error = std::string("the CUDA driver is too old: it lacks ") + symbol;
    KGEN_CUDA_DRIVER_FUNCTIONS(KGEN_RESOLVE)
#undef KGEN_RESOLVE
    d.table.cuLaunchKernelEx = reinterpret_cast<decltype(d.table.cuLaunchKernelEx)>(resolve("cuLaunchKernelEx"));
    if (!d.error.empty()) return d;
    CUresult r = d.table.cuInit(0);
    if (r != CUDA_SUCCESS) {
      const char* msg = nullptr;
      d.table.cuGetErrorString(r, &msg);
      d.error = std::string("the CUDA driver failed to initialise (") + (msg ? msg : "unknown") +
                "): no usable GPU";
      return d;
    }
    // Programmatic dependent launches inside captured CUDA graphs need a 12.3 driver or later:
    // older ones launch those kernels as ordinary ones.
    int version = 0;
    if (d.table.cuDriverGetVersion(&version) != CUDA_SUCCESS || version < 12030) d.table.cuLaunchKernelEx = nullptr;
    int count = 0;
    if (d.table.cuDeviceGetCount(&count) != CUDA_SUCCESS || count == 0)
      d.error = "the CUDA driver reports no GPU";
    return d;
  }();
  return loaded;
}

}  // namespace

const CudaDriver& cuda_driver() {
  const LoadedDriver& d = load_driver();
  if (!d.error.empty()) throw Error(Status::no_device, d.error);
  return d.table;
}

bool cuda_available(std::string* why_not) {
  const LoadedDriver& d = load_driver();
  if (why_not) *why_not = d.error;
  return d.error.empty();
}

void cuda_check(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return;
  const CudaDriver& cu = cuda_driver();
  const char* name = nullptr;
  const char* msg = nullptr;
  cu.cuGetErrorName(r, &name);
  cu.cuGetErrorString(r, &msg);
  throw Error(Status::cuda_error, std::string(what) + " failed: " + (name ? name : "?") + " (" +
                                      (msg ? msg : "no message") + ")");
}

}  // namespace kgen
