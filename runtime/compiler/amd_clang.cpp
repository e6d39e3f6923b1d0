// The clang backend (runtime/compiler/amd_compilers.h): an LLVM clang run as a child process for a
// deviceless HIP device compile. The embedded templates are written once per process into a
// directory named by their digest, and the compile runs in a directory of its own.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <regex>

#include "compiler/amd_compilers.h"
#include "compiler/child_process.h"
#include "generator/embedded_templates.h"
#include "kgen/types.hpp"

namespace kgen {
namespace {

namespace fs = std::filesystem;

// The flags of a deviceless HIP device compile: one ELF code object (no offload bundle), no ROCm
// headers or device libraries (hip_prelude.h declares what the templates use). Joined forms
// ("-xhip"), so that the sorted list of the cache key is also a valid command line.
constexpr const char* kClangFlags[] = {"--cuda-device-only", "--no-gpu-bundle-output",
                                       "-includekgen_device/core/hip_prelude.h", "-nogpuinc", "-nogpulib", "-xhip"};

struct ClangTool {
  std::string path;     // empty when none was found
  std::string version;  // "clang 22.1.8"
  std::string error;
};

const ClangTool& tool() {
  static const ClangTool found = [] {
    ClangTool t;
    const char* env = std::getenv("KGEN_CLANG");
    t.path = find_executable({env ? env : "", "/usr/bin/clang-22", "/usr/lib/llvm-22/bin/clang", "clang-22"});
    if (t.path.empty()) {
      t.error = "clang not found (tried KGEN_CLANG, /usr/bin/clang-22, /usr/lib/llvm-22/bin/clang, clang-22 on PATH): "
                "install clang-22 and lld-22";
      return t;
    }
    const ChildResult r = run_child({t.path, "--version"}, std::chrono::seconds(30));
    std::smatch m;
    static const std::regex version(R"(clang version ([0-9][0-9.]*))");
    if (r.exit_code != 0 || !std::regex_search(r.output, m, version)) {
      t.error = t.path + " --version did not name a clang version: " + r.output;
      return t;
    }
    t.version = "clang " + m[1].str();
    return t;
  }();
  return found;
}

const ClangTool& usable_tool() {
  const ClangTool& t = tool();
  if (!t.error.empty()) throw Error(Status::compile_error, t.error);
  return t;
}

// Seconds a compile may take (KGEN_AMD_COMPILE_TIMEOUT, default 300).
std::chrono::milliseconds compile_timeout() {
  const char* v = std::getenv("KGEN_AMD_COMPILE_TIMEOUT");
  const long s = v && *v ? std::strtol(v, nullptr, 10) : 0;
  return std::chrono::seconds(s > 0 ? s : 300);
}

// A private directory (mkdtemp: 0700, a fresh name), removed with this object by the process
// that made it (a forked child that exits normally leaves its parent's directory alone).
struct WorkDir {
  fs::path path;
  pid_t owner = ::getpid();
  explicit WorkDir(const char* prefix) {
    std::string templ = (fs::temp_directory_path() / (std::string(prefix) + "XXXXXX")).string();
    if (!mkdtemp(templ.data())) throw Error(Status::compile_error, "cannot create a temporary directory for clang");
    path = templ;
  }
  ~WorkDir() {
    std::error_code ec;
    if (::getpid() == owner) fs::remove_all(path, ec);
  }
  WorkDir(const WorkDir&) = delete;
  WorkDir& operator=(const WorkDir&) = delete;
};

// The embedded templates as files, written once per process into a directory of its own: a tree
// at a predictable shared path could be planted by another user and its headers compiled into
// this user's kernels.
fs::path template_tree() {
  static const WorkDir tree("kgen-templates-");
  static std::once_flag written;
  std::call_once(written, [] {  // a throw leaves the flag unset: the next compile tries again
    for (const auto& t : generator::embedded_templates()) {
      const fs::path file = tree.path / t.name;
      fs::create_directories(file.parent_path());
      std::ofstream out(file, std::ios::binary | std::ios::trunc);
      out << t.text;
      if (!out.flush()) throw Error(Status::compile_error, "cannot write kgen's templates under " + tree.path.string());
    }
  });
  return tree.path;
}

// Sorted, as cache keys want them.
std::vector<std::string> clang_options(const Target& target) {
  std::vector<std::string> o = amd_common_options(target);
  o.insert(o.end(), std::begin(kClangFlags), std::end(kClangFlags));
  std::ranges::sort(o);
  return o;
}

CompiledBinary clang_compile(const KernelSource& source, const Target& target) {
  const ClangTool& t = usable_tool();
  const fs::path templates = template_tree();
  WorkDir dir("kgen-clang-");
  const fs::path input = dir.path / "kernel.hip", output = dir.path / "kernel.co";
  std::ofstream(input, std::ios::binary) << source.source;
  std::vector<std::string> argv = {t.path};
  for (const std::string& o : clang_options(target)) argv.push_back(o);
  argv.insert(argv.end(), {"-I", templates.string(), "-c", input.string(), "-o", output.string()});
  const ChildResult r = run_child(argv, compile_timeout());
  CompiledBinary out;
  out.log = r.output;
  if (r.timed_out)
    throw Error(Status::compile_error, "compiling " + source.variant + " for " + target.arch + " with " + t.version +
                                           " timed out after " + std::to_string(compile_timeout().count() / 1000) + " s\n" + out.log);
  if (r.exit_code != 0 || !fs::exists(output))
    throw Error(Status::compile_error, "compiling " + source.variant + " for " + target.arch + " with " + t.version +
                                           " failed (exit status " + std::to_string(r.exit_code) + ")\n" + out.log);
  std::ifstream in(output, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  out.image.resize(bytes.size());
  std::memcpy(out.image.data(), bytes.data(), bytes.size());
  return out;
}

std::string clang_version() { return usable_tool().version; }

}  // namespace

const Compiler& amd_clang_compiler() {
  static const AmdCompiler compiler(clang_version, clang_options, clang_compile);
  return compiler;
}

std::string amd_clang_refusal() { return tool().error; }

std::string amd_clang_description() {
  const ClangTool& t = tool();
  if (!t.error.empty()) return "unavailable: " + t.error;
  return t.version + " (" + t.path + "), targets gfx90a, gfx942, gfx950";
}

}  // namespace kgen
