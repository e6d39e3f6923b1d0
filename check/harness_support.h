// Pieces shared by the GPU check/timing harnesses: device buffers (NaN poisoning), streams and
// event timing; host tensors and random inputs are in check/host_tensor.h.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <vector>

#include "kgen/kgen.hpp"
#include "generator/target.h"
#include "driver/gpu_driver.h"
#include "check/host_tensor.h"
#include "ops/cases.h"
#include "tuning/timing.h"

namespace kgen {

class DeviceBuffer {
 public:
  explicit DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
    // Rounded up to whole 32-bit words, so that poison() covers every element.
    ptr_ = gpu_driver().alloc(std::max<std::size_t>((bytes + 3) / 4 * 4, 16), "device buffer allocation");
  }
  ~DeviceBuffer() { gpu_driver().free(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return reinterpret_cast<void*>(ptr_); }
  std::size_t bytes() const { return bytes_; }
  // upload and poison go through the legacy default stream, which does not order work on the
  // harness's non-blocking streams: both wait for completion (a pageable HtoD copy may still be
  // in flight when the copy returns, a memset always may), so no kernel launched afterwards
  // on any stream can overlap them.
  void upload(const void* host) {
    gpu_driver().copy_to_device(ptr_, host, bytes_);
    gpu_driver().synchronize_device("device synchronize after an upload");
  }
  void download(void* host) const { gpu_driver().copy_to_host(host, ptr_, bytes_); }
  // Fills with a NaN pattern of the element type, so skipped stores fail the check.
  void poison(DType t) {
    unsigned pattern = t == DType::f32 ? 0x7fc00000u : t == DType::f16 ? 0x7e007e00u : 0x7fc07fc0u;
    gpu_driver().fill32(ptr_, pattern, (bytes_ + 3) / 4);
    gpu_driver().synchronize_device("device synchronize after poisoning");
  }

 private:
  DevicePtr ptr_ = 0;
  std::size_t bytes_;
};

struct Stream {
  GpuStream s = gpu_driver().create_stream();
  Stream() = default;
  ~Stream() { gpu_driver().destroy_stream(s); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
};


// Median/p20/p80/mean/std of `reps` runs of run(rep) on `stream`, each between two events,
// after `warmup` untimed runs.
Timing time_runs(const std::function<void(int)>& run, int warmup, int reps, GpuStream stream);

}  // namespace kgen
