#include "generator/target.h"

namespace kgen {

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f16: return "fp16";
    case DType::bf16: return "bf16";
    case DType::f32: return "fp32";
    case DType::i32: return "int32";
    case DType::f8e4m3: return "fp8_e4m3";
  }
  return "?";
}

std::optional<DType> parse_dtype(std::string_view n) {
  if (n == "fp16" || n == "f16" || n == "float16" || n == "half") return DType::f16;
  if (n == "bf16" || n == "bfloat16") return DType::bf16;
  if (n == "fp32" || n == "f32" || n == "float32" || n == "float") return DType::f32;
  return std::nullopt;
}

int dtype_bytes(DType t) { return t == DType::f32 || t == DType::i32 ? 4 : t == DType::f8e4m3 ? 1 : 2; }

std::string_view dtype_cxx(DType t) {
  switch (t) {
    case DType::f16: return "kgen::half_t";
    case DType::bf16: return "kgen::bfloat16_t";
    case DType::f32: return "float";
    case DType::i32: return "int";
    case DType::f8e4m3: return "kgen::float8_e4m3_t";
  }
  return "void";
}

namespace {

// AMD processors kgen compiles for: CDNA 2/3/4, 64-lane wavefronts. LDS per workgroup from AMD's
// ISA guides (64 KiB on MI200/MI300, 160 KiB on MI355X).
struct AmdProcessor {
  std::string_view name;
  int lds_bytes;
};
constexpr AmdProcessor kAmdProcessors[] = {{"gfx90a", 64 * 1024}, {"gfx942", 64 * 1024}, {"gfx950", 160 * 1024}};

// "gfx942[:sramecc±][:xnack±]".
std::optional<Target> parse_amd_target(std::string_view arch) {
  const std::size_t colon = arch.find(':');
  const std::string_view name = arch.substr(0, colon);
  const AmdProcessor* proc = nullptr;
  for (const AmdProcessor& p : kAmdProcessors)
    if (p.name == name) proc = &p;
  if (!proc) return std::nullopt;
  std::string_view rest = colon == std::string_view::npos ? std::string_view{} : arch.substr(colon);
  for (std::string_view feature : {":sramecc", ":xnack"}) {
    if (!rest.starts_with(feature)) continue;
    rest.remove_prefix(feature.size());
    if (rest.empty() || (rest[0] != '+' && rest[0] != '-')) return std::nullopt;
    rest.remove_prefix(1);
  }
  if (!rest.empty()) return std::nullopt;
  return Target{std::string(arch), 0, proc->lds_bytes, Vendor::amd, 64};
}

}  // namespace

std::optional<std::string> nvidia_only_path(std::string_view path, const Target& target) {
  if (target.vendor == Vendor::nvidia) return std::nullopt;
  return std::string(path) + " path uses NVIDIA-only instructions (mma.sync, ldmatrix, cp.async, wgmma) that " +
         target.arch + " lacks: AMD targets run the simt path";
}

std::string_view known_targets() {
  return "sm_80, sm_86, sm_89, sm_90, sm_90a, gfx90a, gfx942, gfx950 (AMD: with :sramecc± and :xnack± settings)";
}

std::optional<Target> parse_target(std::string_view arch) {
  if (arch.starts_with("gfx")) return parse_amd_target(arch);
  // Opt-in shared memory per block, from the CUDA programming guide's per-arch table.
  if (arch == "sm_80") return Target{"sm_80", 80, 163 * 1024};
  if (arch == "sm_86") return Target{"sm_86", 86, 99 * 1024};
  if (arch == "sm_89") return Target{"sm_89", 89, 99 * 1024};
  if (arch == "sm_90") return Target{"sm_90", 90, 227 * 1024};
  if (arch == "sm_90a") return Target{"sm_90a", 90, 227 * 1024};
  return std::nullopt;
}

std::optional<Target> target_for_compute_capability(int major, int minor) {
  int sm = major * 10 + minor;
  if (sm == 90) return parse_target("sm_90a");
  return parse_target("sm_" + std::to_string(sm));
}

}  // namespace kgen
