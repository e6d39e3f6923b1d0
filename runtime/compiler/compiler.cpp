#include "compiler/compiler.h"

#include "compiler/amd_compilers.h"
#include "compiler/nvrtc.h"

namespace kgen {

const Compiler& compiler_for(const Target& target) {
  if (target.vendor == Vendor::amd) return amd_compiler_for(target);
  return nvrtc_compiler();
}

}  // namespace kgen
