// Devices, their primary contexts and loaded modules.
#pragma once

#include <cstddef>
#include <span>
#include <string>

#include "driver/gpu_driver.h"
#include "generator/target.h"

namespace kgen {

struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;
  int sm_count = 0;
  int max_smem_optin = 0;  // bytes of dynamic shared memory a block may opt into
  int l2_bytes = 0;
  int sm_clock_khz = 0;    // maximum SM clock
  std::size_t total_memory = 0;
  Target target;           // what kgen compiles for on this device
};

// Number of usable GPUs; 0 when there is no driver (never throws).
int device_count();

// Properties of GPU `ordinal`, queried once. Throws Error(no_device) / Error(invalid_argument).
const DeviceInfo& device_info(int ordinal);

// Makes the primary context of `ordinal` current on this thread unless it already is
// (it is what the vendor runtime, and so PyTorch, uses).
void use_primary_context(int ordinal);

// A kernel function loaded into the primary context of one device. Lives for the process.
struct LoadedKernel {
  GpuFunction function = nullptr;
  int threads = 0;
  int smem_bytes = 0;
  int resident_blocks_per_sm = 0;  // occupancy at `threads` and `smem_bytes`
};

// Loads a CUBIN into the primary context of `ordinal` and prepares `entry` for launch with
// `smem_bytes` of dynamic shared memory (raising the 48 KB default when needed).
LoadedKernel load_kernel(int ordinal, std::span<const std::byte> cubin, const std::string& entry,
                         int threads, int smem_bytes);

}  // namespace kgen
