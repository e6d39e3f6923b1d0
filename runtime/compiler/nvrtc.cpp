#include "compiler/nvrtc.h"

#include <dlfcn.h>
#include <nvrtc.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <regex>

#include "generator/embedded_templates.h"
#include "kgen/types.hpp"

namespace kgen {
namespace {

struct NvrtcApi {
  decltype(&::nvrtcVersion) version = nullptr;
  decltype(&::nvrtcGetErrorString) error_string = nullptr;
  decltype(&::nvrtcCreateProgram) create = nullptr;
  decltype(&::nvrtcDestroyProgram) destroy = nullptr;
  decltype(&::nvrtcCompileProgram) compile = nullptr;
  decltype(&::nvrtcGetProgramLogSize) log_size = nullptr;
  decltype(&::nvrtcGetProgramLog) log = nullptr;
  decltype(&::nvrtcGetCUBINSize) cubin_size = nullptr;
  decltype(&::nvrtcGetCUBIN) cubin = nullptr;
  decltype(&::nvrtcGetPTXSize) ptx_size = nullptr;
  decltype(&::nvrtcGetPTX) ptx = nullptr;
  std::string error;
};

// Candidate locations, in order: KGEN_NVRTC_PATH, the loader's search path, CUDA_HOME.
std::vector<std::string> nvrtc_candidates() {
  std::vector<std::string> c;
  if (const char* p = std::getenv("KGEN_NVRTC_PATH"); p && *p) c.emplace_back(p);
  c.emplace_back("libnvrtc.so.13");
  c.emplace_back("libnvrtc.so.12");
  for (const char* var : {"CUDA_HOME", "CUDA_PATH"})
    if (const char* home = std::getenv(var); home && *home) {
      c.push_back(std::string(home) + "/lib64/libnvrtc.so.13");
      c.push_back(std::string(home) + "/lib64/libnvrtc.so.12");
    }
  c.emplace_back("/usr/local/cuda/lib64/libnvrtc.so.13");
  c.emplace_back("/usr/local/cuda/lib64/libnvrtc.so.12");
  return c;
}

const NvrtcApi& api() {
  static const NvrtcApi loaded = [] {
    NvrtcApi a;
    void* lib = nullptr;
    for (const auto& path : nvrtc_candidates())
      if ((lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL))) break;
    if (!lib) {
      a.error = "NVRTC not found (tried KGEN_NVRTC_PATH, libnvrtc.so.13, libnvrtc.so.12, "
                "$CUDA_HOME/lib64, /usr/local/cuda/lib64): set KGEN_NVRTC_PATH to libnvrtc.so";
      return a;
    }
    auto get = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
      if (!fn && a.error.empty()) a.error = std::string("NVRTC lacks ") + name;
    };
    get(a.version, "nvrtcVersion");
    get(a.error_string, "nvrtcGetErrorString");
    get(a.create, "nvrtcCreateProgram");
    get(a.destroy, "nvrtcDestroyProgram");
    get(a.compile, "nvrtcCompileProgram");
    get(a.log_size, "nvrtcGetProgramLogSize");
    get(a.log, "nvrtcGetProgramLog");
    get(a.cubin_size, "nvrtcGetCUBINSize");
    get(a.cubin, "nvrtcGetCUBIN");
    get(a.ptx_size, "nvrtcGetPTXSize");
    get(a.ptx, "nvrtcGetPTX");
    return a;
  }();
  if (!loaded.error.empty()) throw Error(Status::compile_error, loaded.error);
  return loaded;
}

void check(const NvrtcApi& a, nvrtcResult r, const char* what) {
  if (r != NVRTC_SUCCESS)
    throw Error(Status::compile_error, std::string(what) + " failed: " + a.error_string(r));
}

// ptxas reports one "Function properties" block per entry of the module (LRPE's softmax over the
// sequence has two) and per non-inlined function. kgen stores and checks the module's usage:
// every block's spills count (sum_ints), and registers, stack frame and static shared memory are
// those of its largest entry (max_ints), whichever block comes first.
int sum_ints(const std::string& log, const std::regex& re) {
  int total = 0;
  for (auto it = std::sregex_iterator(log.begin(), log.end(), re); it != std::sregex_iterator(); ++it)
    total += std::stoi((*it)[1].str());
  return total;
}
int max_ints(const std::string& log, const std::regex& re) {
  int most = 0;
  for (auto it = std::sregex_iterator(log.begin(), log.end(), re); it != std::sregex_iterator(); ++it)
    most = std::max(most, std::stoi((*it)[1].str()));
  return most;
}

}  // namespace

std::string nvrtc_version() {
  const NvrtcApi& a = api();
  int major = 0, minor = 0;
  check(a, a.version(&major, &minor), "nvrtcVersion");
  return "nvrtc " + std::to_string(major) + "." + std::to_string(minor);
}

std::vector<std::string> nvrtc_options(const Target& target, bool ptx) {
  std::string arch = target.arch;
  if (ptx) arch.replace(0, 2, "compute");  // sm_90a -> compute_90a
  std::vector<std::string> o = {
      "--gpu-architecture=" + arch,
      "--std=c++17",
      "--ptxas-options=-v",
      // kgen keeps its own cache. NVRTC's (CUDA 12.9+, in the driver's compute cache) would
      // answer repeated compiles without running ptxas, so without the -v report that kgen
      // stores and checks (seen on an H200: registers missing, 22 ms "compiles").
      "--no-cache",
      "--generate-line-info",
      "-DKGEN_JIT=1",
  };
  std::ranges::sort(o);
  return o;
}

ResourceUsage parse_ptxas_report(const std::string& log) {
  ResourceUsage r;
  static const std::regex regs(R"(Used (\d+) registers)");
  static const std::regex stack(R"((\d+) bytes stack frame)");
  static const std::regex spill_st(R"((\d+) bytes spill stores)");
  static const std::regex spill_ld(R"((\d+) bytes spill loads)");
  static const std::regex smem(R"((\d+) bytes smem)");
  r.parsed = std::regex_search(log, regs);
  if (r.parsed) r.registers = max_ints(log, regs);
  r.stack_frame = max_ints(log, stack);
  r.spill_stores = sum_ints(log, spill_st);
  r.spill_loads = sum_ints(log, spill_ld);
  r.static_smem = max_ints(log, smem);
  // ptxas says why with a code (C7510 extern calls, C7511 accumulators defined inside a stage,
  // C7515 registers, C7520 a divergent path, …) and always the same words.
  r.serialized_wgmma = log.find("C7510") != std::string::npos || log.find("C7511") != std::string::npos ||
                       log.find("C7515") != std::string::npos || log.find("C7520") != std::string::npos ||
                       log.find("wgmma.mma_async instructions are serialized") != std::string::npos;
  return r;
}

CompiledBinary nvrtc_compile(const KernelSource& source, const Target& target, bool ptx) {
  const NvrtcApi& a = api();
  auto start = std::chrono::steady_clock::now();
  const generator::TemplateHeaders& headers = generator::template_headers();
  nvrtcProgram prog = nullptr;
  std::string name = source.variant + ".cu";
  check(a, a.create(&prog, source.source.c_str(), name.c_str(), static_cast<int>(headers.texts.size()),
                    headers.texts.data(), headers.names.data()),
        "nvrtcCreateProgram");
  struct Guard {
    const NvrtcApi& a;
    nvrtcProgram& p;
    ~Guard() { a.destroy(&p); }
  } guard{a, prog};

  std::vector<std::string> options = nvrtc_options(target, ptx);
  std::vector<const char*> argv;
  for (const auto& o : options) argv.push_back(o.c_str());
  nvrtcResult status = a.compile(prog, static_cast<int>(argv.size()), argv.data());

  CompiledBinary out;
  size_t log_size = 0;
  a.log_size(prog, &log_size);
  out.log.resize(log_size);
  if (log_size) a.log(prog, out.log.data());
  while (!out.log.empty() && out.log.back() == '\0') out.log.pop_back();
  if (status != NVRTC_SUCCESS)
    throw Error(Status::compile_error, "compiling " + source.variant + " for " + target.arch +
                                           " failed: " + a.error_string(status) + "\n" + out.log);
  size_t size = 0;
  if (ptx) {
    check(a, a.ptx_size(prog, &size), "nvrtcGetPTXSize");
    out.image.resize(size);
    check(a, a.ptx(prog, reinterpret_cast<char*>(out.image.data())), "nvrtcGetPTX");
    while (!out.image.empty() && out.image.back() == std::byte{0}) out.image.pop_back();
    out.is_ptx = true;
  } else {
    check(a, a.cubin_size(prog, &size), "nvrtcGetCUBINSize");
    out.image.resize(size);
    check(a, a.cubin(prog, reinterpret_cast<char*>(out.image.data())), "nvrtcGetCUBIN");
  }
  out.resources = parse_ptxas_report(out.log);
  out.compile_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return out;
}

namespace {

class NvrtcCompiler final : public Compiler {
 public:
  std::string version() const override { return nvrtc_version(); }
  std::vector<std::string> options(const Target& target, bool ptx) const override { return nvrtc_options(target, ptx); }
  CompiledBinary compile(const KernelSource& source, const Target& target, bool ptx) const override {
    return nvrtc_compile(source, target, ptx);
  }
};

}  // namespace

const Compiler& nvrtc_compiler() {
  static const NvrtcCompiler nvrtc;
  return nvrtc;
}

}  // namespace kgen
