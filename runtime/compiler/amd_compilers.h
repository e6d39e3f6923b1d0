// The AMD backends of the Compiler interface (runtime/compiler/compiler.h), for gfx90a, gfx942
// and gfx950:
//   hiprtc: ROCm's runtime compiler, dlopen'd (libhiprtc.so.7, .6, or libamdhip64.so.5 where
//     ROCm 5.x keeps it). Each ROCm major has an allow-list of targets: a hiprtc asked for a
//     target it does not know aborts the whole process inside comgr (ROCm 5.2 on gfx942), so kgen
//     refuses such a target with one sentence before calling it.
//   clang: an LLVM clang (Debian's clang-22) run as a child process for a deviceless HIP device
//     compile, with kgen_device/core/hip_prelude.h in place of the HIP headers.
// Selection is deterministic: clang wherever it is found, hiprtc only where clang is missing and
// hiprtc allows the target; KGEN_AMD_COMPILER=hiprtc|clang forces one. Clang serves every AMD
// target kgen knows, and on gfx90a it builds the MFMA kernels in fewer registers than ROCm 5.2's
// hiprtc (which needs AGPRs past its 256 VGPRs where clang fits in VGPRs); hiprtc's builds are
// smaller only for some small kernels, by at most 19 registers (docs/kernels/measurements.md, "AMD").
// The compiler's name and version are part of every cache key, so entries of the two never mix.
// Resources of both come from the code object's metadata (runtime/compiler/amd_code_object.h).
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "compiler/compiler.h"

namespace kgen {

// The hiprtc backend (whether or not it loads) and the clang backend.
const Compiler& hiprtc_compiler();
const Compiler& amd_clang_compiler();

// The AMD compiler for `target` by the rule above. Throws Error(invalid_argument) for a
// KGEN_AMD_COMPILER value other than hiprtc or clang.
const Compiler& amd_compiler_for(const Target& target);

// The rule itself, on what was found: `forced` is KGEN_AMD_COMPILER's value (empty when unset), the
// refusals say why clang or hiprtc cannot compile the target (empty when it can). With neither,
// clang, whose compile then says what to install. Throws Error(invalid_argument) for a `forced`
// other than "", "hiprtc" or "clang".
enum class AmdBackend { hiprtc, clang };
AmdBackend choose_amd_backend(std::string_view forced, std::string_view clang_refusal, std::string_view hiprtc_refusal);

// Why hiprtc cannot compile for `target` (not found, or the target is not on its ROCm's
// allow-list, naming the targets it supports), or the empty string when it can.
std::string hiprtc_refusal(const Target& target);

// Why clang cannot compile (none of KGEN_CLANG, clang-22 found, or it names no version), or the
// empty string when it can.
std::string amd_clang_refusal();

// One line each for `kgen show-config`: what was found (version, library or path) and the
// targets it serves, or why it is unavailable.
std::string hiprtc_description();
std::string amd_clang_description();

// The resources of kernel `entry` in the AMD code object `image`. Throws Error(compile_error)
// when the image is not a code object or holds no such kernel.
ResourceUsage amd_resource_usage(std::span<const std::byte> image, const std::string& entry);

// The disassembly of an AMD code object for `target` (llvm-objdump -d --mcpu), or throws
// Error(compile_error) saying why it could not be made.
std::string amd_disassembly(std::span<const std::byte> image, const Target& target);

// An AMD backend as the Compiler interface: its version, options and compile step (the code
// object and log; the resources and compile time are added here). AMD compiles have no PTX:
// asking for it is an invalid_argument error.
class AmdCompiler final : public Compiler {
 public:
  using VersionFn = std::string (*)();
  using OptionsFn = std::vector<std::string> (*)(const Target&);
  using CompileFn = CompiledBinary (*)(const KernelSource&, const Target&);
  AmdCompiler(VersionFn version, OptionsFn options, CompileFn compile)
      : version_(version), options_(options), compile_(compile) {}
  std::string version() const override { return version_(); }
  std::vector<std::string> options(const Target& target, bool) const override { return options_(target); }
  CompiledBinary compile(const KernelSource& source, const Target& target, bool ptx) const override;

 private:
  VersionFn version_;
  OptionsFn options_;
  CompileFn compile_;
};

// The compile options every AMD backend passes, sorted (`-DKGEN_JIT=1`, `-O3`, `-std=c++17`, the
// target); a backend adds its own to these.
std::vector<std::string> amd_common_options(const Target& target);

}  // namespace kgen
