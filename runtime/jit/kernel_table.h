// The process-wide table of loaded kernels, one for every operator: KernelKey → LoadedKernel. A
// hit hashes only the small key, never source text; a miss renders, builds through the cache
// (KernelBuilder::global()) and loads, once per key. And the one launch wrapper every op uses.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "driver/device.h"
#include "generator/kernel_source.h"

namespace kgen {

// Identity of one loaded kernel: the operator's registry name (static storage), the op's packing
// of everything that changes the kernel (spec, config, which kernel of a multi-kernel call;
// unique within the op, see KeyPacker), and the device ordinal.
struct KernelKey {
  std::string_view op;
  std::uint64_t packed = 0;
  int device = 0;
  bool operator==(const KernelKey&) const = default;
};

// Packs small non-negative fields into KernelKey::packed. Throws Error(internal) when a value
// does not fit its width or the fields pass 64 bits, so two kernels can never share a key.
class KeyPacker {
 public:
  KeyPacker& add(long long value, int bits);
  std::uint64_t value() const { return value_; }

 private:
  std::uint64_t value_ = 0;
  int used_ = 0;
};

// Another entry point of the same binary, loaded instead of the source's own (lrpe's statistics
// kernel lives beside its apply kernel).
struct EntryPoint {
  std::string entry;
  int smem_bytes = 0;
};

// The loaded kernel of `key`; on the first call per key, `render()` gives its source, which is
// built for the device's target and loaded (as `other` when given). Thread-safe; the reference
// stays valid for the life of the process.
const LoadedKernel& loaded_kernel(const KernelKey& key, const std::function<KernelSource()>& render,
                                  const EntryPoint* other = nullptr);

// Whether launches after a prior grid are on: unless KGEN_PROGRAMMATIC_LAUNCH=0 (read once).
bool programmatic_launches_enabled();
// Launches `k` on `stream` over `grid` with one by-value parameter struct (the kernels' only
// argument); `what` names the launch in the error of a failed launch. `after_prior`: through
// GpuDriver::launch_after_prior (the kernel waits for the previous grid on the stream itself;
// sm_90 and later).
void launch_kernel(const LoadedKernel& k, const LaunchGrid& grid, void* params, void* stream, const char* what,
                   bool after_prior = false);
// The same with a second by-value parameter after the struct (an attention variant's VariantArgs);
// null `second` launches with the struct alone.
void launch_kernel(const LoadedKernel& k, const LaunchGrid& grid, void* params, void* second, void* stream,
                   const char* what);

}  // namespace kgen
