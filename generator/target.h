// Data types and compile targets known to the generator.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "kgen/types.hpp"

namespace kgen {

std::string_view dtype_name(DType t);                      // "fp16", "bf16", "fp32", "int32", "fp8_e4m3"
std::optional<DType> parse_dtype(std::string_view name);   // accepts fp16/f16/float16, ...
int dtype_bytes(DType t);
std::string_view dtype_cxx(DType t);                      // the device type: "kgen::bfloat16_t", ...

enum class Vendor { nvidia, amd };

// A GPU code target: NVIDIA "sm_80", "sm_86", "sm_89", "sm_90", "sm_90a", "sm_100a", "sm_103a",
// "sm_120", "sm_121", or AMD "gfx90a", "gfx942", "gfx950", each with optional feature settings
// ("gfx942:sramecc+:xnack-").
struct Target {
  std::string arch;            // exact target string, part of every cache key
  int sm = 0;                  // NVIDIA: 80, 86, 89, 90, 100, 103, 120, 121 (the CUBIN's SM); 0 on AMD
  int max_smem_per_block = 0;  // opt-in dynamic shared memory (AMD: LDS) limit in bytes
  Vendor vendor = Vendor::nvidia;
  int wave_size = 32;          // lanes of the hardware warp (64 on AMD CDNA)
  bool operator==(const Target&) const = default;

  // The AMD processor without feature settings ("gfx942" of "gfx942:xnack-"); arch on NVIDIA.
  std::string processor() const { return arch.substr(0, arch.find(':')); }
};

// The target for a target string, or nullopt if kgen does not know it. AMD feature settings
// (sramecc, xnack; each at most once, + or -) are kept as given, in the order compilers spell
// them: sramecc before xnack.
std::optional<Target> parse_target(std::string_view arch);

// Why `path` (a family built on NVIDIA-only instructions: mma.sync, ldmatrix, cp.async, wgmma)
// cannot run on `target`, or nullopt on NVIDIA targets.
std::optional<std::string> nvidia_only_path(std::string_view path, const Target& target);

// Whether `target` has Hopper's warpgroup MMA (wgmma), which the wgmma and ws families are built
// on: sm_90a only (an architecture-specific instruction, which Blackwell does not have).
bool has_wgmma(const Target& target);

// Why `path` (a family built on wgmma: "wgmma", "ws") cannot run on `target`, or nullopt on
// sm_90a. On Blackwell the sentence says what that target's tensor cores take instead.
std::optional<std::string> wgmma_only_path(std::string_view path, const Target& target);

// Every target string kgen knows, ", "-separated, for messages ("sm_80, …, gfx950").
std::string_view known_targets();

// The target kgen compiles for on a device of compute capability major.minor
// (sm_90a on Hopper and sm_100a / sm_103a on datacentre Blackwell, so each chip's
// architecture-specific instructions are available; sm_120 / sm_121 on RTX and GB10 Blackwell).
std::optional<Target> target_for_compute_capability(int major, int minor);

}  // namespace kgen
