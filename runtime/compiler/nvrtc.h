// The NVRTC backend of the Compiler interface (runtime/compiler/compiler.h), loaded with dlopen at
// first use. Callers go through compiler_for(target); these are its parts, for its tests and kgen
// info.
#pragma once

#include <string>
#include <vector>

#include "compiler/compiler.h"

namespace kgen {

// The NVRTC backend.
const Compiler& nvrtc_compiler();

// "nvrtc 13.0", or throws kgen::Error(compile_error) when NVRTC cannot be loaded.
std::string nvrtc_version();

// The canonical compile options for `target`, sorted: part of every cache key.
std::vector<std::string> nvrtc_options(const Target& target, bool ptx);

// Compiles `source` for `target` (an sm_* target) with NVRTC, the templates given as in-memory headers.
// Throws kgen::Error(compile_error) with the full log on failure.
CompiledBinary nvrtc_compile(const KernelSource& source, const Target& target, bool ptx = false);

// Parses the ptxas -v lines of an NVRTC log.
ResourceUsage parse_ptxas_report(const std::string& log);

}  // namespace kgen
