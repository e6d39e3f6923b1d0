// The vendor-neutral GPU driver: what kgen asks of a GPU runtime (devices, loading and launching
// kernels, memory, streams, events), behind opaque handles. Two backends: the CUDA driver
// (runtime/driver/cuda_gpu_driver.cpp over the dlopen'd table of runtime/driver/cuda_driver.h) and
// HIP's module API (runtime/driver/hip_gpu_driver.cpp, libamdhip64 dlopen'd). Nothing outside
// runtime/driver/ includes a vendor header.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace kgen {

// Opaque handles of the backend: a stream (nullptr: the default stream), an event, a loaded
// kernel function, and a device address.
using GpuStream = void*;
using GpuEvent = void*;
using GpuFunction = void*;
using DevicePtr = std::uintptr_t;

// What kgen reads of one device.
struct DeviceProperties {
  std::string name;
  int cc_major = 0, cc_minor = 0;  // compute capability (NVIDIA)
  std::string arch;                // AMD: the target id from gcnArchName ("gfx942:sramecc+:xnack-")
  int sm_count = 0;                // multiprocessors (compute units)
  int max_smem_optin = 0;          // bytes of dynamic shared memory a block may opt into
  int l2_bytes = 0;
  int sm_clock_khz = 0;            // maximum SM clock
  std::size_t total_memory = 0;
};

// A tiled tensor map (the TMA descriptor of NVIDIA Hopper): a tensor of 16-bit or fp32 elements
// with up to 5 dimensions, innermost first, copied in boxes of `box` elements under the 128-byte
// shared-memory swizzle; elements outside `dims` read as zero and are not written.
struct TiledTensorMap {
  const void* base = nullptr;  // 16-byte aligned
  int rank = 0;
  std::uint64_t dims[5] = {};
  std::uint64_t strides_bytes[4] = {};  // of dims 1 .. rank - 1, multiples of 16
  std::uint32_t box[5] = {};
  enum class Element { f16, bf16, f32 } element = Element::f16;
  // The shared-memory swizzle the box is written in; box[0] · element bytes must not exceed its
  // span (128 or 64 bytes).
  enum class Swizzle { b128, b64 } swizzle = Swizzle::b128;
};

// Every call that can fail throws kgen::Error (cuda_error, naming `what` or the call and the
// driver's message; no_device when no GPU is usable). Calls that act on "the current device"
// use the device made current on this thread by make_current(). Thread-safe.
class GpuDriver {
 public:
  virtual ~GpuDriver() = default;

  // "CUDA driver 13.0"; throws no_device when no driver is usable.
  virtual std::string version() const = 0;
  // Whether a driver and at least one GPU are usable (never throws); why not in `why_not`.
  virtual bool available(std::string* why_not = nullptr) const = 0;
  // Number of usable GPUs; 0 when there is no driver (never throws).
  virtual int device_count() const = 0;
  virtual DeviceProperties properties(int ordinal) const = 0;
  // Makes `ordinal`'s primary context (the one the vendor runtime, and so PyTorch, uses) current
  // on this thread unless it already is.
  virtual void make_current(int ordinal) const = 0;
  // Waits for all work of the current device.
  virtual void synchronize_device(const char* what) const = 0;

  // Loads `binary` into the current device and returns `entry`, prepared for `smem_bytes` of
  // dynamic shared memory (raising the default limit when needed). Modules stay loaded for the
  // life of the process.
  virtual GpuFunction load_function(std::span<const std::byte> binary, const std::string& entry,
                                    int smem_bytes) const = 0;
  // Blocks of `f` resident on one multiprocessor at `threads` and `smem_bytes`.
  virtual int resident_blocks_per_sm(GpuFunction f, int threads, int smem_bytes) const = 0;
  // Launches `f` over grid (x, y, z) with `threads` per block; `args` as the vendor's launch call
  // takes them (one pointer per kernel parameter).
  virtual void launch(GpuFunction f, unsigned x, unsigned y, unsigned z, int threads, int smem_bytes,
                      GpuStream stream, void** args, const char* what) const = 0;
  // launch, where the kernel may begin before the previous kernel on `stream` has finished: its
  // blocks wait for that grid's completion and memory (core/grid_dependency.cuh) before they read
  // its results, so only the launch latency overlaps. For devices of sm_90 and later (the caller
  // checks); backends or drivers without programmatic dependent launches launch as usual.
  virtual void launch_after_prior(GpuFunction f, unsigned x, unsigned y, unsigned z, int threads, int smem_bytes,
                                  GpuStream stream, void** args, const char* what) const {
    launch(f, x, y, z, threads, smem_bytes, stream, args, what);
  }

  // Writes the 128-byte descriptor of `map` to `out` (64-byte aligned). Backends without tensor
  // maps throw Error(invalid_argument).
  virtual void encode_tensor_map(void* out, const TiledTensorMap& map, const char* what) const;

  // Device memory of the current device. free and free_async never throw (destructors use them).
  virtual DevicePtr alloc(std::size_t bytes, const char* what) const = 0;
  virtual void free(DevicePtr p) const noexcept = 0;
  // Stream-ordered memory of kgen's pool on the current device (CUDA: one that keeps the memory
  // it reserved, where the default pool returns it at each synchronisation; HIP: the default pool).
  virtual DevicePtr alloc_async(std::size_t bytes, GpuStream stream, const char* what) const = 0;
  virtual void free_async(DevicePtr p, GpuStream stream) const noexcept = 0;
  virtual void copy_to_device(DevicePtr dst, const void* src, std::size_t bytes) const = 0;
  virtual void copy_to_host(void* dst, DevicePtr src, std::size_t bytes) const = 0;
  virtual void copy_async(DevicePtr dst, DevicePtr src, std::size_t bytes, GpuStream stream) const = 0;
  // Sets `count` 32-bit words at `dst` to `value`.
  virtual void fill32(DevicePtr dst, std::uint32_t value, std::size_t count) const = 0;
  // The same, ordered on `stream` (and captured by a CUDA/HIP graph like a kernel).
  virtual void fill32_async(DevicePtr dst, std::uint32_t value, std::size_t count, GpuStream stream) const = 0;

  // A stream that does not synchronise with the default stream.
  virtual GpuStream create_stream() const = 0;
  virtual void destroy_stream(GpuStream s) const noexcept = 0;
  virtual void synchronize(GpuStream s, const char* what) const = 0;
  virtual GpuEvent create_event() const = 0;
  virtual void destroy_event(GpuEvent e) const noexcept = 0;
  virtual void record(GpuEvent e, GpuStream s) const = 0;
  // Milliseconds between two recorded events; waits for `end`.
  virtual float elapsed_ms(GpuEvent start, GpuEvent end) const = 0;
};

// The driver of this process: the CUDA driver when it sees an NVIDIA GPU, else HIP when it sees an
// AMD GPU, else the CUDA driver (whose calls then fail with no_device). One process uses one
// vendor's GPUs. Created on first use (the vendor libraries are loaded then, so kgen runs
// compile-only on a machine with none). Never throws; its calls do.
const GpuDriver& gpu_driver();

// The two backends, for kgen show-config and tests.
const GpuDriver& cuda_gpu_driver();
const GpuDriver& hip_gpu_driver();

}  // namespace kgen
