// GpuDriver over the CUDA driver API (runtime/driver/cuda_driver.h's dlopen'd table).
#include <cuda.h>

#include <memory>
#include <mutex>
#include <vector>

#include "driver/cuda_driver.h"
#include "driver/gpu_driver.h"
#include "kgen/types.hpp"

namespace kgen {
namespace {

CUstream cu_stream(GpuStream s) { return static_cast<CUstream>(s); }

// kgen's stream-ordered pool of the current context's device, created at first use. The
// driver's default pool gives its free memory back at every synchronisation (a release threshold
// of 0), so scratch taken from it was mapped again by each call after one: 0.15-0.25 ms of a
// grouped backward at 1k keys (H100, docs/kernels/measurements.md "Finer group splits"). This pool
// keeps what it has reserved, as a caching allocator does, and other users of the default pool see
// no change.
CUmemoryPool scratch_pool() {
  const CudaDriver& cu = cuda_driver();
  CUdevice dev = 0;
  cuda_check(cu.cuCtxGetDevice(&dev), "cuCtxGetDevice (stream-ordered scratch)");
  static std::mutex mutex;
  static std::vector<CUmemoryPool> pools;
  std::lock_guard<std::mutex> lock(mutex);
  if (static_cast<std::size_t>(dev) >= pools.size()) pools.resize(static_cast<std::size_t>(dev) + 1, nullptr);
  if (!pools[dev]) {
    CUmemPoolProps props{};
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.handleTypes = CU_MEM_HANDLE_TYPE_NONE;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = dev;
    CUmemoryPool pool = nullptr;
    cuda_check(cu.cuMemPoolCreate(&pool, &props), "cuMemPoolCreate (stream-ordered scratch)");
    cuuint64_t keep = ~cuuint64_t{0};
    cuda_check(cu.cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep),
               "cuMemPoolSetAttribute (stream-ordered scratch)");
    pools[dev] = pool;
  }
  return pools[dev];
}

class CudaGpuDriver final : public GpuDriver {
 public:
  std::string version() const override {
    int v = 0;
    cuda_check(cuda_driver().cuDriverGetVersion(&v), "cuDriverGetVersion");
    return "CUDA driver " + std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
  }

  bool available(std::string* why_not) const override { return cuda_available(why_not); }

  int device_count() const override {
    if (!cuda_available()) return 0;
    int n = 0;
    if (cuda_driver().cuDeviceGetCount(&n) != CUDA_SUCCESS) return 0;
    return n;
  }

  DeviceProperties properties(int ordinal) const override {
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
    DeviceProperties d;
    d.name = name;
    d.cc_major = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
    d.cc_minor = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
    d.sm_count = attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
    d.max_smem_optin = attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
    d.l2_bytes = attr(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE);
    d.sm_clock_khz = attr(CU_DEVICE_ATTRIBUTE_CLOCK_RATE);
    cuda_check(cu.cuDeviceTotalMem(&d.total_memory, dev), "cuDeviceTotalMem");
    return d;
  }

  void make_current(int ordinal) const override {
    CUcontext primary = primary_context(ordinal);
    const CudaDriver& cu = cuda_driver();
    CUcontext current = nullptr;
    cu.cuCtxGetCurrent(&current);
    if (current != primary) cuda_check(cu.cuCtxSetCurrent(primary), "cuCtxSetCurrent");
  }

  void synchronize_device(const char* what) const override { cuda_check(cuda_driver().cuCtxSynchronize(), what); }

  GpuFunction load_function(std::span<const std::byte> binary, const std::string& entry, int smem_bytes) const override {
    const CudaDriver& cu = cuda_driver();
    CUmodule module = nullptr;
    cuda_check(cu.cuModuleLoadData(&module, binary.data()), "cuModuleLoadData");
    CUfunction f = nullptr;
    cuda_check(cu.cuModuleGetFunction(&f, module, entry.c_str()), "cuModuleGetFunction");
    if (smem_bytes > 48 * 1024)
      cuda_check(cu.cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem_bytes),
                 "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)");
    return f;
  }

  int resident_blocks_per_sm(GpuFunction f, int threads, int smem_bytes) const override {
    int blocks = 0;
    cuda_check(cuda_driver().cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, static_cast<CUfunction>(f), threads,
                                                                         smem_bytes),
               "cuOccupancyMaxActiveBlocksPerMultiprocessor");
    return blocks;
  }

  void launch(GpuFunction f, unsigned x, unsigned y, unsigned z, int threads, int smem_bytes, GpuStream stream,
              void** args, const char* what) const override {
    cuda_check(cuda_driver().cuLaunchKernel(static_cast<CUfunction>(f), x, y, z, threads, 1, 1, smem_bytes,
                                            cu_stream(stream), args, nullptr),
               what);
  }

  void launch_after_prior(GpuFunction f, unsigned x, unsigned y, unsigned z, int threads, int smem_bytes,
                          GpuStream stream, void** args, const char* what) const override {
    const CudaDriver& cu = cuda_driver();
    if (!cu.cuLaunchKernelEx) return launch(f, x, y, z, threads, smem_bytes, stream, args, what);
    CUlaunchAttribute attribute{};
    attribute.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attribute.value.programmaticStreamSerializationAllowed = 1;
    CUlaunchConfig config{};
    config.gridDimX = x, config.gridDimY = y, config.gridDimZ = z;
    config.blockDimX = static_cast<unsigned>(threads), config.blockDimY = 1, config.blockDimZ = 1;
    config.sharedMemBytes = static_cast<unsigned>(smem_bytes);
    config.hStream = cu_stream(stream);
    config.attrs = &attribute;
    config.numAttrs = 1;
    cuda_check(cu.cuLaunchKernelEx(&config, static_cast<CUfunction>(f), args, nullptr), what);
  }

  void encode_tensor_map(void* out, const TiledTensorMap& m, const char* what) const override {
    cuuint64_t dims[5], strides[4];
    cuuint32_t box[5], element_strides[5];
    for (int i = 0; i < m.rank; ++i) {
      dims[i] = m.dims[i];
      box[i] = m.box[i];
      element_strides[i] = 1;
      if (i + 1 < m.rank) strides[i] = m.strides_bytes[i];
    }
    cuda_check(cuda_driver().cuTensorMapEncodeTiled(
                   static_cast<CUtensorMap*>(out),
                   m.element == TiledTensorMap::Element::f32    ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32
                   : m.element == TiledTensorMap::Element::bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                                                : CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
                   static_cast<cuuint32_t>(m.rank), const_cast<void*>(m.base), dims, strides, box, element_strides,
                   CU_TENSOR_MAP_INTERLEAVE_NONE,
                   m.swizzle == TiledTensorMap::Swizzle::b64 ? CU_TENSOR_MAP_SWIZZLE_64B : CU_TENSOR_MAP_SWIZZLE_128B,
                   CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                   CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
               what);
  }

  DevicePtr alloc(std::size_t bytes, const char* what) const override {
    CUdeviceptr p = 0;
    cuda_check(cuda_driver().cuMemAlloc(&p, bytes), what);
    return p;
  }
  void free(DevicePtr p) const noexcept override {
    if (p) cuda_driver().cuMemFree(p);
  }
  DevicePtr alloc_async(std::size_t bytes, GpuStream stream, const char* what) const override {
    CUdeviceptr p = 0;
    cuda_check(cuda_driver().cuMemAllocFromPoolAsync(&p, bytes, scratch_pool(), cu_stream(stream)), what);
    return p;
  }
  void free_async(DevicePtr p, GpuStream stream) const noexcept override {
    if (p) cuda_driver().cuMemFreeAsync(p, cu_stream(stream));
  }
  void copy_to_device(DevicePtr dst, const void* src, std::size_t bytes) const override {
    cuda_check(cuda_driver().cuMemcpyHtoD(dst, src, bytes), "cuMemcpyHtoD");
  }
  void copy_to_host(void* dst, DevicePtr src, std::size_t bytes) const override {
    cuda_check(cuda_driver().cuMemcpyDtoH(dst, src, bytes), "cuMemcpyDtoH");
  }
  void copy_async(DevicePtr dst, DevicePtr src, std::size_t bytes, GpuStream stream) const override {
    cuda_check(cuda_driver().cuMemcpyDtoDAsync(dst, src, bytes, cu_stream(stream)), "cuMemcpyDtoDAsync");
  }
  void fill32(DevicePtr dst, std::uint32_t value, std::size_t count) const override {
    cuda_check(cuda_driver().cuMemsetD32(dst, value, count), "cuMemsetD32");
  }
  void fill32_async(DevicePtr dst, std::uint32_t value, std::size_t count, GpuStream stream) const override {
    cuda_check(cuda_driver().cuMemsetD32Async(dst, value, count, cu_stream(stream)), "cuMemsetD32Async");
  }

  GpuStream create_stream() const override {
    CUstream s = nullptr;
    cuda_check(cuda_driver().cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    return s;
  }
  void destroy_stream(GpuStream s) const noexcept override {
    if (s) cuda_driver().cuStreamDestroy(cu_stream(s));
  }
  void synchronize(GpuStream s, const char* what) const override {
    cuda_check(cuda_driver().cuStreamSynchronize(cu_stream(s)), what);
  }
  GpuEvent create_event() const override {
    CUevent e = nullptr;
    cuda_check(cuda_driver().cuEventCreate(&e, CU_EVENT_DEFAULT), "cuEventCreate");
    return e;
  }
  void destroy_event(GpuEvent e) const noexcept override {
    if (e) cuda_driver().cuEventDestroy(static_cast<CUevent>(e));
  }
  void record(GpuEvent e, GpuStream s) const override {
    cuda_check(cuda_driver().cuEventRecord(static_cast<CUevent>(e), cu_stream(s)), "cuEventRecord");
  }
  float elapsed_ms(GpuEvent start, GpuEvent end) const override {
    const CudaDriver& cu = cuda_driver();
    cuda_check(cu.cuEventSynchronize(static_cast<CUevent>(end)), "cuEventSynchronize");
    float ms = 0;
    cuda_check(cu.cuEventElapsedTime(&ms, static_cast<CUevent>(start), static_cast<CUevent>(end)), "cuEventElapsedTime");
    return ms;
  }

 private:
  // The retained primary context of each device, retained once per process.
  CUcontext primary_context(int ordinal) const {
    std::call_once(contexts_once_, [&] { contexts_ = std::vector<Slot>(static_cast<std::size_t>(device_count())); });
    if (ordinal < 0 || ordinal >= static_cast<int>(contexts_.size()))
      throw Error(Status::invalid_argument, "device " + std::to_string(ordinal) + " does not exist (" +
                                                std::to_string(contexts_.size()) + " GPU(s) visible)");
    Slot& s = contexts_[static_cast<std::size_t>(ordinal)];
    std::call_once(*s.once, [&] {
      CUdevice dev;
      cuda_check(cuda_driver().cuDeviceGet(&dev, ordinal), "cuDeviceGet");
      cuda_check(cuda_driver().cuDevicePrimaryCtxRetain(&s.context, dev), "cuDevicePrimaryCtxRetain");
    });
    return s.context;
  }

  struct Slot {
    std::unique_ptr<std::once_flag> once = std::make_unique<std::once_flag>();
    CUcontext context = nullptr;
  };
  mutable std::once_flag contexts_once_;
  mutable std::vector<Slot> contexts_;
};

}  // namespace

const GpuDriver& cuda_gpu_driver() {
  static const CudaGpuDriver driver;
  return driver;
}

}  // namespace kgen
