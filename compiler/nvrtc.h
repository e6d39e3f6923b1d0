// NVRTC, loaded with dlopen at first use, and kgen's compile step: KernelSource → Binary.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "generator/kernel_source.h"
#include "generator/target.h"

namespace kgen {

// Resources of one compiled kernel, parsed from the ptxas report (--ptxas-options=-v).
struct ResourceUsage {
  int registers = -1;
  int spill_stores = 0;    // bytes
  int spill_loads = 0;     // bytes
  int stack_frame = 0;     // bytes
  int static_smem = 0;     // bytes
  bool serialized_wgmma = false;  // ptxas warnings C7510/C7511/C7515
  bool parsed = false;
};

// Output of one compile.
struct CompiledBinary {
  std::vector<std::byte> image;  // CUBIN (or PTX text when compiled to PTX)
  bool is_ptx = false;
  std::string log;               // the compiler's log, verbatim
  ResourceUsage resources;
  double compile_ms = 0;
};

// "nvrtc 13.0", or throws kgen::Error(compile_error) when NVRTC cannot be loaded.
std::string nvrtc_version();

// The canonical compile options for `target`, sorted: part of every cache key.
std::vector<std::string> compile_options(const Target& target, bool ptx);

// Compiles `source` for `target` with NVRTC, the templates given as in-memory headers.
// Throws kgen::Error(compile_error) with the full log on failure.
CompiledBinary compile(const KernelSource& source, const Target& target, bool ptx = false);

// Parses the ptxas -v lines of an NVRTC log.
ResourceUsage parse_ptxas_report(const std::string& log);

}  // namespace kgen
