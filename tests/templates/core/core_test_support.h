// What the device core's primitive tests share: one translation unit of small test kernels built
// through the kernel builder (a scratch cache, removed after the build), device buffers, launches,
// and the host's rounding of fp32 to the 16-bit types.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "driver/device.h"
#include "driver/gpu_driver.h"
#include "jit/kernel_builder.h"
#include "tests/gpu/require_gpu.h"

namespace kgen::core_test {

// Builds `source` (whose kernel `entry` the outcome's resources describe) for `target`.
inline BuildOutcome build_test_kernels(const char* source, const char* entry, const Target& target) {
  const std::filesystem::path cache =
      std::filesystem::temp_directory_path() / ("kgen-core-test-" + std::to_string(::getpid()));
  KernelBuilder builder(cache, {});
  BuildOutcome b = builder.build({"core_test", "core_primitives", source, entry, 256, 0}, target);
  std::filesystem::remove_all(cache);
  return b;
}

// Device buffers freed at scope exit.
struct Buffer {
  DevicePtr ptr = 0;
  std::size_t bytes = 0;
  explicit Buffer(std::size_t n) : ptr(gpu_driver().alloc(n, "core test buffer")), bytes(n) {}
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { gpu_driver().free(ptr); }
  template <class T>
  void put(const std::vector<T>& v) { gpu_driver().copy_to_device(ptr, v.data(), v.size() * sizeof(T)); }
  template <class T>
  std::vector<T> get(std::size_t n) const {
    std::vector<T> v(n);
    gpu_driver().copy_to_host(v.data(), ptr, n * sizeof(T));
    return v;
  }
  // Every 32-bit word set to `word`.
  void fill(std::uint32_t word) const { gpu_driver().fill32(ptr, word, bytes / 4); }
};

// Launches `entry` of `image` over `blocks` blocks of `threads` with `smem` bytes of dynamic shared
// memory and `args` (pointers to each parameter), then waits for it.
inline void launch(const std::vector<std::byte>& image, const char* entry, unsigned blocks, int threads,
                   std::vector<void*> args, int smem = 0) {
  const GpuFunction f = gpu_driver().load_function(image, entry, smem);
  gpu_driver().launch(f, blocks, 1, 1, threads, smem, nullptr, args.data(), entry);
  gpu_driver().synchronize_device(entry);
}

// A test over the kernels of one image: SetUp sets image_ (or skips).
class CoreKernelTest : public ::testing::Test {
 protected:
  void launch(const char* entry, unsigned blocks, int threads, std::vector<void*> args, int smem = 0) {
    core_test::launch(*image_, entry, blocks, threads, std::move(args), smem);
  }
  const std::vector<std::byte>* image_ = nullptr;
};

// fp32 to bf16's bits, round to nearest even; NaN is 0x7fff.
inline std::uint32_t bf16_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  if (std::isnan(f)) return 0x7fff;
  return (u + 0x7fff + ((u >> 16) & 1)) >> 16;
}
// fp32 to fp16's bits, round to nearest even.
inline std::uint32_t f16_bits(float f) {
  const _Float16 h = static_cast<_Float16>(f);
  std::uint16_t b;
  std::memcpy(&b, &h, 2);
  return b;
}
inline float from_bf16(std::uint32_t b) {
  const std::uint32_t u = b << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline float from_f16(std::uint32_t b) {
  const std::uint16_t h16 = static_cast<std::uint16_t>(b);
  _Float16 h;
  std::memcpy(&h, &h16, 2);
  return static_cast<float>(h);
}
// The bits of `f` in the 16-bit type named by `bf16`, and back.
inline std::uint16_t bits16(float f, bool bf16) { return static_cast<std::uint16_t>(bf16 ? bf16_bits(f) : f16_bits(f)); }
inline float from16(std::uint32_t b, bool bf16) { return bf16 ? from_bf16(b) : from_f16(b); }

}  // namespace kgen::core_test
