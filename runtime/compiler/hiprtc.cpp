// The hiprtc backend (runtime/compiler/amd_compilers.h). hiprtc's few types and entry points are
// declared here, as the ROCm headers spell them, so kgen builds without ROCm installed.
#include <dlfcn.h>

#include <chrono>
#include <cstdlib>
#include <mutex>
#include <string_view>

#include "compiler/amd_compilers.h"
#include "generator/embedded_templates.h"
#include "kgen/types.hpp"

namespace kgen {
namespace {

using hiprtcProgram = struct hiprtc_program_opaque*;
using hiprtcResult = int;  // HIPRTC_SUCCESS = 0
constexpr hiprtcResult kHiprtcSuccess = 0;

// A hiprtc library and the targets its ROCm release is known to compile. ROCm 5.2's hiprtc
// (inside libamdhip64.so.5) aborts the process on gfx940/gfx942/gfx950; ROCm 6 added gfx942
// (MI300), ROCm 7 gfx950 (MI355X).
struct HiprtcLibrary {
  std::string_view soname;
  int rocm_major;
  std::vector<std::string_view> targets;
};
const HiprtcLibrary kLibraries[] = {
    {"libhiprtc.so.7", 7, {"gfx90a", "gfx942", "gfx950"}},
    {"libhiprtc.so.6", 6, {"gfx90a", "gfx942"}},
    {"libamdhip64.so.5", 5, {"gfx90a"}},
};

struct HiprtcApi {
  hiprtcResult (*version)(int*, int*) = nullptr;
  const char* (*error_string)(hiprtcResult) = nullptr;
  hiprtcResult (*create)(hiprtcProgram*, const char*, const char*, int, const char* const*, const char* const*) = nullptr;
  hiprtcResult (*destroy)(hiprtcProgram*) = nullptr;
  hiprtcResult (*compile)(hiprtcProgram, int, const char**) = nullptr;
  hiprtcResult (*log_size)(hiprtcProgram, std::size_t*) = nullptr;
  hiprtcResult (*log)(hiprtcProgram, char*) = nullptr;
  hiprtcResult (*code_size)(hiprtcProgram, std::size_t*) = nullptr;
  hiprtcResult (*code)(hiprtcProgram, char*) = nullptr;
  const HiprtcLibrary* library = nullptr;
  std::string version_text;  // "hiprtc 9.0 (ROCm 5, libamdhip64.so.5)"
  std::string error;         // why it did not load
};

const HiprtcApi& api() {
  static const HiprtcApi loaded = [] {
    HiprtcApi a;
    void* lib = nullptr;
    for (const HiprtcLibrary& l : kLibraries) {
      if ((lib = dlopen(std::string(l.soname).c_str(), RTLD_NOW | RTLD_LOCAL))) {
        a.library = &l;
        break;
      }
    }
    if (!lib) {
      a.error = "hiprtc not found (tried libhiprtc.so.7, libhiprtc.so.6, libamdhip64.so.5)";
      return a;
    }
    auto get = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
      if (!fn && a.error.empty()) a.error = std::string(a.library->soname) + " lacks " + name;
    };
    get(a.version, "hiprtcVersion");
    get(a.error_string, "hiprtcGetErrorString");
    get(a.create, "hiprtcCreateProgram");
    get(a.destroy, "hiprtcDestroyProgram");
    get(a.compile, "hiprtcCompileProgram");
    get(a.log_size, "hiprtcGetProgramLogSize");
    get(a.log, "hiprtcGetProgramLog");
    get(a.code_size, "hiprtcGetCodeSize");
    get(a.code, "hiprtcGetCode");
    if (!a.error.empty()) return a;
    int major = 0, minor = 0;
    if (a.version(&major, &minor) != kHiprtcSuccess) {
      a.error = std::string(a.library->soname) + ": hiprtcVersion failed";
      return a;
    }
    a.version_text = "hiprtc " + std::to_string(major) + "." + std::to_string(minor) + " (ROCm " +
                     std::to_string(a.library->rocm_major) + ", " + std::string(a.library->soname) + ")";
    return a;
  }();
  return loaded;
}

const HiprtcApi& loaded_api() {
  const HiprtcApi& a = api();
  if (!a.error.empty()) throw Error(Status::compile_error, a.error);
  return a;
}

std::string allowed_targets(const HiprtcLibrary& l) {
  std::string out;
  for (std::string_view t : l.targets) out += (out.empty() ? "" : ", ") + std::string(t);
  return out;
}

CompiledBinary hiprtc_compile(const KernelSource& source, const Target& target) {
  if (std::string why = hiprtc_refusal(target); !why.empty()) throw Error(Status::compile_error, why);
  const HiprtcApi& a = loaded_api();
  // One program at a time per process: hiprtc 5.2 crashed (SIGSEGV inside hiprtcCompileProgram,
  // another thread in comgr's option parsing) when the warm pool compiled two at once.
  static std::mutex one_at_a_time;
  std::lock_guard lock(one_at_a_time);
  const generator::TemplateHeaders& headers = generator::template_headers();
  hiprtcProgram prog = nullptr;
  const std::string name = source.variant + ".hip";
  auto check = [&](hiprtcResult r, const char* what) {
    if (r != kHiprtcSuccess) throw Error(Status::compile_error, std::string(what) + " failed: " + a.error_string(r));
  };
  check(a.create(&prog, source.source.c_str(), name.c_str(), static_cast<int>(headers.texts.size()), headers.texts.data(),
                 headers.names.data()),
        "hiprtcCreateProgram");
  struct Guard {
    const HiprtcApi& a;
    hiprtcProgram& p;
    ~Guard() { a.destroy(&p); }
  } guard{a, prog};
  const std::vector<std::string> options = amd_common_options(target);
  std::vector<const char*> argv;
  for (const auto& o : options) argv.push_back(o.c_str());
  const hiprtcResult status = a.compile(prog, static_cast<int>(argv.size()), argv.data());
  CompiledBinary out;
  std::size_t log_size = 0;
  if (a.log_size(prog, &log_size) == kHiprtcSuccess && log_size) {
    out.log.resize(log_size);
    a.log(prog, out.log.data());
  }
  while (!out.log.empty() && out.log.back() == '\0') out.log.pop_back();
  if (status != kHiprtcSuccess)
    throw Error(Status::compile_error, "compiling " + source.variant + " for " + target.arch + " with " + a.version_text +
                                           " failed: " + a.error_string(status) + "\n" + out.log);
  std::size_t size = 0;
  check(a.code_size(prog, &size), "hiprtcGetCodeSize");
  out.image.resize(size);
  check(a.code(prog, reinterpret_cast<char*>(out.image.data())), "hiprtcGetCode");
  return out;
}

std::string hiprtc_version() { return loaded_api().version_text; }

}  // namespace

const Compiler& hiprtc_compiler() {
  static const AmdCompiler compiler(hiprtc_version, amd_common_options, hiprtc_compile);
  return compiler;
}

std::string hiprtc_refusal(const Target& target) {
  if (target.vendor != Vendor::amd) return "hiprtc compiles only AMD targets, not " + target.arch;
  const HiprtcApi& a = api();
  if (!a.error.empty()) return a.error;
  for (std::string_view t : a.library->targets)
    if (t == target.processor()) return {};
  return a.version_text + " is not known to compile " + target.arch + " (it may abort the process): it serves " +
         allowed_targets(*a.library) + "; set KGEN_AMD_COMPILER=clang or install a newer ROCm";
}

std::string hiprtc_description() {
  const HiprtcApi& a = api();
  if (!a.error.empty()) return "unavailable: " + a.error;
  return a.version_text + ", targets " + allowed_targets(*a.library);
}

}  // namespace kgen
