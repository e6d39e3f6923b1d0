// Data types and compile targets known to the generator.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "kgen/types.hpp"

namespace kgen {

std::string_view dtype_name(DType t);                      // "fp16", "bf16", "fp32"
std::optional<DType> parse_dtype(std::string_view name);   // accepts fp16/f16/float16, ...
int dtype_bytes(DType t);
std::string_view dtype_cxx(DType t);                      // the device type: "kgen::bfloat16_t", ...

// A GPU code target: NVIDIA "sm_80", "sm_86", "sm_89", "sm_90", "sm_90a".
struct Target {
  std::string arch;          // exact target string, part of every cache key
  int sm = 0;                // 80, 86, 89, 90
  int max_smem_per_block = 0;  // opt-in dynamic shared memory limit in bytes
  bool operator==(const Target&) const = default;
};

// The target for a target string, or nullopt if kgen does not know it.
std::optional<Target> parse_target(std::string_view arch);

// The target kgen compiles for on a device of compute capability major.minor
// (sm_90a on Hopper, so Hopper-only instructions are available).
std::optional<Target> target_for_compute_capability(int major, int minor);

}  // namespace kgen
