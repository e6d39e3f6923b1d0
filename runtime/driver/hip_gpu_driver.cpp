// GpuDriver over the HIP module API (libamdhip64, dlopen'd at first use). HIP's few types and
// entry points are declared here, as ROCm's hip_runtime_api.h spells them, so kgen builds without
// ROCm. Without an AMD GPU every device call fails with one sentence; nothing here is needed to
// compile AMD kernels.
#include <dlfcn.h>

#include <cstring>
#include <mutex>
#include <string_view>
#include <vector>

#include "driver/gpu_driver.h"
#include "kgen/types.hpp"

namespace kgen {
namespace {

using hipError_t = int;  // hipSuccess = 0
using hipModule_t = struct hip_module_opaque*;
using hipFunction_t = struct hip_function_opaque*;
using hipStream_t = struct hip_stream_opaque*;
using hipEvent_t = struct hip_event_opaque*;
using hipDeviceptr_t = void*;
constexpr hipError_t kHipSuccess = 0;
constexpr unsigned kHipStreamNonBlocking = 1;
// hipDeviceAttribute_t values of ROCm 5.2's hip_runtime_api.h.
enum HipAttribute : int {
  kAttrClockRate = 5,
  kAttrL2CacheSize = 19,
  kAttrMultiprocessorCount = 63,
  kAttrMaxSharedMemoryPerBlock = 74,
};

#define KGEN_HIP_FUNCTIONS(X)                                                                 \
  X(hipGetDeviceCount, hipError_t (*)(int*))                                                  \
  X(hipDriverGetVersion, hipError_t (*)(int*))                                                \
  X(hipGetErrorString, const char* (*)(hipError_t))                                           \
  X(hipDeviceGetName, hipError_t (*)(char*, int, int))                                        \
  X(hipDeviceGetAttribute, hipError_t (*)(int*, int, int))                                    \
  X(hipDeviceTotalMem, hipError_t (*)(std::size_t*, int))                                     \
  X(hipGetDeviceProperties, hipError_t (*)(void*, int))                                       \
  X(hipSetDevice, hipError_t (*)(int))                                                        \
  X(hipGetDevice, hipError_t (*)(int*))                                                       \
  X(hipDeviceSynchronize, hipError_t (*)())                                                   \
  X(hipModuleLoadData, hipError_t (*)(hipModule_t*, const void*))                             \
  X(hipModuleGetFunction, hipError_t (*)(hipFunction_t*, hipModule_t, const char*))           \
  X(hipModuleOccupancyMaxActiveBlocksPerMultiprocessor,                                       \
    hipError_t (*)(int*, hipFunction_t, int, std::size_t))                                    \
  X(hipModuleLaunchKernel, hipError_t (*)(hipFunction_t, unsigned, unsigned, unsigned, unsigned, unsigned, \
                                          unsigned, unsigned, hipStream_t, void**, void**))   \
  X(hipMalloc, hipError_t (*)(void**, std::size_t))                                           \
  X(hipFree, hipError_t (*)(void*))                                                           \
  X(hipMallocAsync, hipError_t (*)(void**, std::size_t, hipStream_t))                         \
  X(hipFreeAsync, hipError_t (*)(void*, hipStream_t))                                         \
  X(hipMemcpyHtoD, hipError_t (*)(hipDeviceptr_t, const void*, std::size_t))                  \
  X(hipMemcpyDtoH, hipError_t (*)(void*, hipDeviceptr_t, std::size_t))                        \
  X(hipMemcpyDtoDAsync, hipError_t (*)(hipDeviceptr_t, hipDeviceptr_t, std::size_t, hipStream_t)) \
  X(hipMemsetD32, hipError_t (*)(hipDeviceptr_t, int, std::size_t))                           \
  X(hipMemsetD32Async, hipError_t (*)(hipDeviceptr_t, int, std::size_t, hipStream_t))         \
  X(hipStreamCreateWithFlags, hipError_t (*)(hipStream_t*, unsigned))                         \
  X(hipStreamDestroy, hipError_t (*)(hipStream_t))                                            \
  X(hipStreamSynchronize, hipError_t (*)(hipStream_t))                                        \
  X(hipEventCreate, hipError_t (*)(hipEvent_t*))                                              \
  X(hipEventDestroy, hipError_t (*)(hipEvent_t))                                              \
  X(hipEventRecord, hipError_t (*)(hipEvent_t, hipStream_t))                                  \
  X(hipEventSynchronize, hipError_t (*)(hipEvent_t))                                          \
  X(hipEventElapsedTime, hipError_t (*)(float*, hipEvent_t, hipEvent_t))

struct HipApi {
#define KGEN_DECLARE(name, type) \
  using name##_fn = type;         \
  name##_fn name = nullptr;
  KGEN_HIP_FUNCTIONS(KGEN_DECLARE)
#undef KGEN_DECLARE
  std::string library;
  int devices = 0;
  std::string error;  // why no AMD GPU is usable
};

const HipApi& api() {
  static const HipApi loaded = [] {
    HipApi a;
    void* lib = nullptr;
    for (const char* name : {"libamdhip64.so", "libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so.5"})
      if ((lib = dlopen(name, RTLD_NOW | RTLD_LOCAL))) {
        a.library = name;
        break;
      }
    if (!lib) {
      a.error = "no AMD GPU: the HIP runtime (libamdhip64.so) is not installed";
      return a;
    }
#define KGEN_LOAD(name, type)                                                          \
  a.name = reinterpret_cast<HipApi::name##_fn>(dlsym(lib, #name));                     \
  if (!a.name && a.error.empty()) a.error = a.library + " lacks " #name;
    KGEN_HIP_FUNCTIONS(KGEN_LOAD)
#undef KGEN_LOAD
    if (!a.error.empty()) return a;
    const hipError_t r = a.hipGetDeviceCount(&a.devices);
    if (r != kHipSuccess || a.devices == 0) {
      a.devices = 0;
      a.error = std::string("no AMD GPU: hipGetDeviceCount says ") + a.hipGetErrorString(r) + " (" + a.library + ")";
    }
    return a;
  }();
  return loaded;
}

const HipApi& usable() {
  const HipApi& a = api();
  if (!a.error.empty()) throw Error(Status::no_device, a.error);
  return a;
}

void hip_check(hipError_t r, const char* what) {
  if (r != kHipSuccess) throw Error(Status::cuda_error, std::string(what) + " failed: " + api().hipGetErrorString(r));
}

hipStream_t hip_stream(GpuStream s) { return static_cast<hipStream_t>(s); }
void* ptr(DevicePtr p) { return reinterpret_cast<void*>(p); }

// The target id in hipDeviceProp_t::gcnArchName ("gfx942:sramecc+:xnack-"). The struct's layout
// differs between ROCm releases, so it is read into a generous buffer and the one field that
// spells a target id is found by its text.
std::string gcn_arch_name(const HipApi& a, int ordinal) {
  std::vector<char> props(64 * 1024, 0);
  hip_check(a.hipGetDeviceProperties(props.data(), ordinal), "hipGetDeviceProperties");
  for (std::size_t i = 0; i + 4 < props.size(); ++i) {
    if ((i > 0 && props[i - 1] != 0) || std::strncmp(&props[i], "gfx", 3) != 0) continue;
    const std::string_view text(&props[i], strnlen(&props[i], props.size() - i));
    if (text.size() < 256 && text.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789:+-") == std::string_view::npos)
      return std::string(text);
  }
  throw Error(Status::cuda_error, "hipGetDeviceProperties gave no gcnArchName for device " + std::to_string(ordinal));
}

class HipGpuDriver final : public GpuDriver {
 public:
  std::string version() const override {
    int v = 0;
    hip_check(usable().hipDriverGetVersion(&v), "hipDriverGetVersion");
    return "HIP " + std::to_string(v / 10000000) + "." + std::to_string(v / 100000 % 100) + " (" + api().library + ")";
  }
  bool available(std::string* why_not) const override {
    const HipApi& a = api();
    if (why_not) *why_not = a.error;
    return a.error.empty();
  }
  int device_count() const override { return api().devices; }

  DeviceProperties properties(int ordinal) const override {
    const HipApi& a = usable();
    char name[256] = {};
    hip_check(a.hipDeviceGetName(name, sizeof name, ordinal), "hipDeviceGetName");
    auto attr = [&](int which) {
      int v = 0;
      hip_check(a.hipDeviceGetAttribute(&v, which, ordinal), "hipDeviceGetAttribute");
      return v;
    };
    DeviceProperties d;
    d.name = name;
    d.arch = gcn_arch_name(a, ordinal);
    d.sm_count = attr(kAttrMultiprocessorCount);
    d.max_smem_optin = attr(kAttrMaxSharedMemoryPerBlock);  // AMD has no opt-in: the whole LDS
    d.l2_bytes = attr(kAttrL2CacheSize);
    d.sm_clock_khz = attr(kAttrClockRate);
    hip_check(a.hipDeviceTotalMem(&d.total_memory, ordinal), "hipDeviceTotalMem");
    return d;
  }

  // HIP keeps one context per device per process (the one PyTorch uses): selecting the device is
  // making its context current.
  void make_current(int ordinal) const override {
    const HipApi& a = usable();
    int current = -1;
    if (a.hipGetDevice(&current) != kHipSuccess || current != ordinal) hip_check(a.hipSetDevice(ordinal), "hipSetDevice");
  }
  void synchronize_device(const char* what) const override { hip_check(usable().hipDeviceSynchronize(), what); }

  // Dynamic LDS up to the device's limit needs no opt-in on AMD, so smem_bytes sets nothing.
  GpuFunction load_function(std::span<const std::byte> binary, const std::string& entry, int) const override {
    const HipApi& a = usable();
    hipModule_t module = nullptr;
    hip_check(a.hipModuleLoadData(&module, binary.data()), "hipModuleLoadData");
    hipFunction_t f = nullptr;
    hip_check(a.hipModuleGetFunction(&f, module, entry.c_str()), "hipModuleGetFunction");
    return f;
  }
  int resident_blocks_per_sm(GpuFunction f, int threads, int smem_bytes) const override {
    int blocks = 0;
    hip_check(usable().hipModuleOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, static_cast<hipFunction_t>(f), threads,
                                                                          static_cast<std::size_t>(smem_bytes)),
              "hipModuleOccupancyMaxActiveBlocksPerMultiprocessor");
    return blocks;
  }
  void launch(GpuFunction f, unsigned x, unsigned y, unsigned z, int threads, int smem_bytes, GpuStream stream,
              void** args, const char* what) const override {
    hip_check(usable().hipModuleLaunchKernel(static_cast<hipFunction_t>(f), x, y, z, static_cast<unsigned>(threads), 1, 1,
                                             static_cast<unsigned>(smem_bytes), hip_stream(stream), args, nullptr),
              what);
  }

  DevicePtr alloc(std::size_t bytes, const char* what) const override {
    void* p = nullptr;
    hip_check(usable().hipMalloc(&p, bytes), what);
    return reinterpret_cast<DevicePtr>(p);
  }
  void free(DevicePtr p) const noexcept override {
    if (p && api().hipFree) api().hipFree(ptr(p));
  }
  DevicePtr alloc_async(std::size_t bytes, GpuStream stream, const char* what) const override {
    void* p = nullptr;
    hip_check(usable().hipMallocAsync(&p, bytes, hip_stream(stream)), what);
    return reinterpret_cast<DevicePtr>(p);
  }
  void free_async(DevicePtr p, GpuStream stream) const noexcept override {
    if (p && api().hipFreeAsync) api().hipFreeAsync(ptr(p), hip_stream(stream));
  }
  void copy_to_device(DevicePtr dst, const void* src, std::size_t bytes) const override {
    hip_check(usable().hipMemcpyHtoD(ptr(dst), src, bytes), "hipMemcpyHtoD");
  }
  void copy_to_host(void* dst, DevicePtr src, std::size_t bytes) const override {
    hip_check(usable().hipMemcpyDtoH(dst, ptr(src), bytes), "hipMemcpyDtoH");
  }
  void copy_async(DevicePtr dst, DevicePtr src, std::size_t bytes, GpuStream stream) const override {
    hip_check(usable().hipMemcpyDtoDAsync(ptr(dst), ptr(src), bytes, hip_stream(stream)), "hipMemcpyDtoDAsync");
  }
  void fill32(DevicePtr dst, std::uint32_t value, std::size_t count) const override {
    hip_check(usable().hipMemsetD32(ptr(dst), static_cast<int>(value), count), "hipMemsetD32");
  }
  void fill32_async(DevicePtr dst, std::uint32_t value, std::size_t count, GpuStream stream) const override {
    hip_check(usable().hipMemsetD32Async(ptr(dst), static_cast<int>(value), count, hip_stream(stream)),
              "hipMemsetD32Async");
  }

  GpuStream create_stream() const override {
    hipStream_t s = nullptr;
    hip_check(usable().hipStreamCreateWithFlags(&s, kHipStreamNonBlocking), "hipStreamCreateWithFlags");
    return s;
  }
  void destroy_stream(GpuStream s) const noexcept override {
    if (s && api().hipStreamDestroy) api().hipStreamDestroy(hip_stream(s));
  }
  void synchronize(GpuStream s, const char* what) const override {
    hip_check(usable().hipStreamSynchronize(hip_stream(s)), what);
  }
  GpuEvent create_event() const override {
    hipEvent_t e = nullptr;
    hip_check(usable().hipEventCreate(&e), "hipEventCreate");
    return e;
  }
  void destroy_event(GpuEvent e) const noexcept override {
    if (e && api().hipEventDestroy) api().hipEventDestroy(static_cast<hipEvent_t>(e));
  }
  void record(GpuEvent e, GpuStream s) const override {
    hip_check(usable().hipEventRecord(static_cast<hipEvent_t>(e), hip_stream(s)), "hipEventRecord");
  }
  float elapsed_ms(GpuEvent start, GpuEvent end) const override {
    const HipApi& a = usable();
    hip_check(a.hipEventSynchronize(static_cast<hipEvent_t>(end)), "hipEventSynchronize");
    float ms = 0;
    hip_check(a.hipEventElapsedTime(&ms, static_cast<hipEvent_t>(start), static_cast<hipEvent_t>(end)),
              "hipEventElapsedTime");
    return ms;
  }
};

}  // namespace

const GpuDriver& hip_gpu_driver() {
  static const HipGpuDriver driver;
  return driver;
}

}  // namespace kgen
