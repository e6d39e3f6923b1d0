// Warm manifests (runtime/jit/manifest.h): any file either gives items or throws kgen::Error naming
// the line; nothing else escapes.
#include "fuzz_support.h"
#include "jit/manifest.h"
#include "kgen/types.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto path = kgen::fuzz::input_file("manifest.jsonl", data, size);
  try {
    (void)kgen::read_manifest(path, {"sm_80"});
  } catch (const kgen::Error&) {
  }
  return 0;
}
