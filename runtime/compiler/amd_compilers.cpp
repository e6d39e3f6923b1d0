#include "compiler/amd_compilers.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "compiler/amd_code_object.h"
#include "compiler/child_process.h"
#include "kgen/types.hpp"

namespace kgen {

AmdBackend choose_amd_backend(std::string_view forced, std::string_view clang_refusal, std::string_view hiprtc_refusal) {
  if (forced == "hiprtc") return AmdBackend::hiprtc;
  if (forced == "clang") return AmdBackend::clang;
  if (!forced.empty())
    throw Error(Status::invalid_argument, "KGEN_AMD_COMPILER='" + std::string(forced) + "': expected hiprtc or clang");
  if (clang_refusal.empty() || !hiprtc_refusal.empty()) return AmdBackend::clang;
  return AmdBackend::hiprtc;
}

const Compiler& amd_compiler_for(const Target& target) {
  const char* forced = std::getenv("KGEN_AMD_COMPILER");
  const std::string_view choice = forced ? forced : "";
  // hiprtc is asked only when the rule needs it: loading ROCm's library costs a dlopen.
  const std::string clang_why = choice.empty() ? amd_clang_refusal() : std::string();
  const std::string hiprtc_why = choice.empty() && !clang_why.empty() ? hiprtc_refusal(target) : std::string();
  return choose_amd_backend(choice, clang_why, hiprtc_why) == AmdBackend::hiprtc ? hiprtc_compiler()
                                                                                : amd_clang_compiler();
}

CompiledBinary AmdCompiler::compile(const KernelSource& source, const Target& target, bool ptx) const {
  if (ptx) throw Error(Status::invalid_argument, "AMD compiles have no PTX: ask for the ISA (kgen inspect --show isa)");
  if (target.vendor != Vendor::amd) throw Error(Status::compile_error, version() + " compiles AMD targets, not " + target.arch);
  const auto start = std::chrono::steady_clock::now();
  CompiledBinary out = compile_(source, target);
  out.resources = amd_resource_usage(out.image, source.entry);
  out.compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return out;
}

std::vector<std::string> amd_common_options(const Target& target) {
  std::vector<std::string> o = {"--offload-arch=" + target.arch, "-DKGEN_JIT=1", "-O3", "-std=c++17"};
  std::ranges::sort(o);
  return o;
}

ResourceUsage amd_resource_usage(std::span<const std::byte> image, const std::string& entry) {
  const AmdCodeObject co = read_amd_code_object(
      std::span(reinterpret_cast<const std::uint8_t*>(image.data()), image.size()));
  for (const AmdKernelResources& k : co.kernels) {
    if (k.name != entry) continue;
    ResourceUsage r;
    r.registers = k.vgpr_count;
    r.agprs = k.agpr_count;
    r.sgprs = k.sgpr_count;
    r.static_smem = k.lds_bytes;
    r.stack_frame = k.scratch_bytes;
    r.spill_stores = r.spill_loads = 4 * k.vgpr_spill_count;
    r.wave_size = k.wavefront_size;
    r.max_threads = k.max_flat_workgroup_size;
    r.parsed = true;
    return r;
  }
  throw Error(Status::compile_error, "the code object holds no kernel named " + entry);
}

std::string amd_disassembly(std::span<const std::byte> image, const Target& target) {
  const std::string objdump = find_executable({"llvm-objdump-22", "/usr/lib/llvm-22/bin/llvm-objdump", "llvm-objdump"});
  if (objdump.empty())
    throw Error(Status::compile_error, "llvm-objdump not found (install llvm-22): AMD disassembly needs it");
  std::string path = (std::filesystem::temp_directory_path() / "kgen-isa-XXXXXX").string();
  const int fd = mkstemp(path.data());
  if (fd < 0) throw Error(Status::compile_error, "cannot create a temporary file for the code object");
  close(fd);
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(image.data()),
                                              static_cast<std::streamsize>(image.size()));
  const ChildResult r = run_child({objdump, "-d", "--mcpu=" + target.processor(), path}, std::chrono::seconds(60));
  std::filesystem::remove(path);
  if (r.exit_code != 0) throw Error(Status::compile_error, objdump + " failed on the code object:\n" + r.output);
  return r.output;
}

}  // namespace kgen
