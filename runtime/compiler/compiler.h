// The compile step of kgen, KernelSource → binary, behind one interface per vendor compiler:
// NVRTC for NVIDIA targets (sm_*); hiprtc or clang for AMD targets (gfx*,
// runtime/compiler/amd_compilers.h). Callers (the kernel builder, kgen inspect) pick the compiler
// by target and never name one.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "generator/kernel_source.h"
#include "generator/target.h"

namespace kgen {

// Resources of one compiled kernel: on NVIDIA parsed from the ptxas report (--ptxas-options=-v),
// on AMD read from the code object's metadata note (registers = VGPRs, stack frame = scratch per
// lane, spills = 4 bytes per spilled VGPR, static smem = LDS).
struct ResourceUsage {
  int registers = -1;
  int spill_stores = 0;    // bytes
  int spill_loads = 0;     // bytes
  int stack_frame = 0;     // bytes
  int static_smem = 0;     // bytes
  bool serialized_wgmma = false;  // ptxas: "wgmma.mma_async instructions are serialized" (C7510/11/15/20)
  bool parsed = false;
  // AMD only (0 on NVIDIA).
  int agprs = 0, sgprs = 0;
  int wave_size = 0;
  int max_threads = 0;  // the block size the code object was built for (__launch_bounds__)
};

// Output of one compile.
struct CompiledBinary {
  std::vector<std::byte> image;  // CUBIN or AMD code object (or PTX text when compiled to PTX)
  bool is_ptx = false;
  std::string log;               // the compiler's log, verbatim
  ResourceUsage resources;
  double compile_ms = 0;
};

class Compiler {
 public:
  virtual ~Compiler() = default;
  // "nvrtc 13.0"; throws Error(compile_error) when the compiler cannot be loaded. Part of every
  // cache key.
  virtual std::string version() const = 0;
  // The canonical compile options for `target`, sorted: part of every cache key.
  virtual std::vector<std::string> options(const Target& target, bool ptx) const = 0;
  // Compiles `source` for `target`, the templates given as in-memory headers; `ptx` asks for the
  // intermediate text instead of a binary where the compiler has one. Throws
  // Error(compile_error) with the full log on failure.
  virtual CompiledBinary compile(const KernelSource& source, const Target& target, bool ptx = false) const = 0;
};

// The compiler of `target`'s vendor. Throws Error(invalid_argument) for a target no compiler of
// this build serves.
const Compiler& compiler_for(const Target& target);

}  // namespace kgen
