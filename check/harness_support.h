// Pieces shared by the GPU check/timing harnesses: device buffers (NaN poisoning), host
// tensors in BHND/BNHD memory layouts, random inputs, streams and event timing.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "kgen/kgen.hpp"
#include "generator/target.h"
#include "driver/cuda_driver.h"
#include "check/host_convert.h"
#include "ops/cases.h"
#include "tuning/timing.h"

namespace kgen {

class DeviceBuffer {
 public:
  explicit DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
    // Rounded up to whole 32-bit words, so that poison() covers every element.
    cuda_check(cuda_driver().cuMemAlloc(&ptr_, std::max<std::size_t>((bytes + 3) / 4 * 4, 16)), "cuMemAlloc");
  }
  ~DeviceBuffer() {
    if (ptr_) cuda_driver().cuMemFree(ptr_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return reinterpret_cast<void*>(ptr_); }
  std::size_t bytes() const { return bytes_; }
  // upload and poison go through the legacy default stream, which does not order work on the
  // harness's non-blocking streams: both wait for completion (a pageable HtoD copy may still be
  // in flight when cuMemcpyHtoD returns, a memset always may), so no kernel launched afterwards
  // on any stream can overlap them.
  void upload(const void* host) {
    cuda_check(cuda_driver().cuMemcpyHtoD(ptr_, host, bytes_), "cuMemcpyHtoD");
    cuda_check(cuda_driver().cuCtxSynchronize(), "cuCtxSynchronize after cuMemcpyHtoD");
  }
  void download(void* host) const { cuda_check(cuda_driver().cuMemcpyDtoH(host, ptr_, bytes_), "cuMemcpyDtoH"); }
  // Fills with a NaN pattern of the element type, so skipped stores fail the check.
  void poison(DType t) {
    unsigned pattern = t == DType::f32 ? 0x7fc00000u : t == DType::f16 ? 0x7e007e00u : 0x7fc07fc0u;
    cuda_check(cuda_driver().cuMemsetD32(ptr_, pattern, (bytes_ + 3) / 4), "cuMemsetD32");
    cuda_check(cuda_driver().cuCtxSynchronize(), "cuCtxSynchronize after cuMemsetD32");
  }

 private:
  CUdeviceptr ptr_ = 0;
  std::size_t bytes_;
};

// One (b, h, n, d) tensor's host copy in its memory layout, and its view description.
struct HostTensor {
  int b, h, n, d;
  Layout layout;
  DType dtype;
  std::vector<std::uint8_t> bytes;
  std::size_t offset(int ib, int ih, int in, int id) const {
    std::size_t e = layout == Layout::bhnd ? ((std::size_t(ib) * h + ih) * n + in) * d + id
                                           : ((std::size_t(ib) * n + in) * h + ih) * d + id;
    return e * dtype_bytes(dtype);
  }
  void set(std::size_t byte_off, float v) {
    if (dtype == DType::f32) {
      std::memcpy(&bytes[byte_off], &v, 4);
    } else {
      std::uint16_t bits = dtype == DType::f16 ? float_to_half_bits(v) : float_to_bf16_bits(v);
      std::memcpy(&bytes[byte_off], &bits, 2);
    }
  }
  double get(std::size_t byte_off) const {
    if (dtype == DType::f32) {
      float f;
      std::memcpy(&f, &bytes[byte_off], 4);
      return f;
    }
    std::uint16_t bits;
    std::memcpy(&bits, &bytes[byte_off], 2);
    return dtype == DType::f16 ? half_bits_to_float(bits) : bf16_bits_to_float(bits);
  }
  TensorView view(void* data, int device) const {
    TensorView t;
    t.data = data;
    t.dtype = dtype;
    t.ndim = 4;
    t.device = device;
    t.shape[0] = b, t.shape[1] = h, t.shape[2] = n, t.shape[3] = d;
    if (layout == Layout::bhnd) {
      t.strides[0] = std::int64_t(h) * n * d, t.strides[1] = std::int64_t(n) * d, t.strides[2] = d;
    } else {
      t.strides[0] = std::int64_t(n) * h * d, t.strides[1] = d, t.strides[2] = std::int64_t(h) * d;
    }
    t.strides[3] = 1;
    return t;
  }
};

inline HostTensor make_host(int b, int h, int n, int d, Layout layout, DType dtype) {
  HostTensor t{b, h, n, d, layout, dtype, {}};
  t.bytes.resize(std::size_t(b) * h * n * d * dtype_bytes(dtype));
  return t;
}

// Fills with random normal values rounded to the dtype and returns them in fp64, (b, h, n, d).
inline std::vector<double> fill_random(HostTensor& t, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<double> logical(std::size_t(t.b) * t.h * t.n * t.d);
  std::size_t i = 0;
  for (int ib = 0; ib < t.b; ++ib)
    for (int ih = 0; ih < t.h; ++ih)
      for (int in = 0; in < t.n; ++in)
        for (int id = 0; id < t.d; ++id, ++i) {
          std::size_t off = t.offset(ib, ih, in, id);
          t.set(off, normal(rng));
          logical[i] = t.get(off);
        }
  return logical;
}


struct Stream {
  CUstream s = nullptr;
  Stream() { cuda_check(cuda_driver().cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate"); }
  ~Stream() { cuda_driver().cuStreamDestroy(s); }
};


// Median/p20/p80/mean/std of `reps` runs of run(rep) on `stream`, each between two events,
// after `warmup` untimed runs.
Timing time_runs(const std::function<void(int)>& run, int warmup, int reps, CUstream stream);

}  // namespace kgen
