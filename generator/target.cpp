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

// NVIDIA targets with their opt-in dynamic shared memory per block, from the CUDA programming
// guide's per-compute-capability table: 163 KiB on sm_80, 99 KiB (101,376 bytes) on sm_86, sm_89,
// sm_120 and sm_121, 227 KiB (232,448 bytes) on Hopper and datacentre Blackwell. The Blackwell
// targets are the ones NVRTC 13 compiles for: sm_100a (B200, GB200), sm_103a (B300, GB300),
// sm_120 (RTX 50, RTX PRO) and sm_121 (GB10). sm_120a and sm_121a add architecture-specific
// instructions (block-scaled MMA kinds among them) that kgen's kernels do not use, so the portable
// sm_120 and sm_121 are the targets.
struct NvidiaTarget {
  std::string_view arch;
  int sm;
  int smem_bytes;
};
constexpr NvidiaTarget kNvidiaTargets[] = {
    {"sm_80", 80, 163 * 1024},   {"sm_86", 86, 99 * 1024},     {"sm_89", 89, 99 * 1024},
    {"sm_90", 90, 227 * 1024},   {"sm_90a", 90, 227 * 1024},   {"sm_100a", 100, 227 * 1024},
    {"sm_103a", 103, 227 * 1024}, {"sm_120", 120, 99 * 1024}, {"sm_121", 121, 99 * 1024},
};

}  // namespace

std::optional<std::string> nvidia_only_path(std::string_view path, const Target& target) {
  if (target.vendor == Vendor::nvidia) return std::nullopt;
  return std::string(path) + " path uses NVIDIA-only instructions (mma.sync, ldmatrix, cp.async, wgmma) that " +
         target.arch + " lacks: AMD targets run the simt path";
}

std::string_view known_targets() {
  return "sm_80, sm_86, sm_89, sm_90, sm_90a, sm_100a, sm_103a, sm_120, sm_121, gfx90a, gfx942, gfx950 (AMD: with "
         ":sramecc± and :xnack± settings)";
}

std::optional<Target> parse_target(std::string_view arch) {
  if (arch.starts_with("gfx")) return parse_amd_target(arch);
  for (const NvidiaTarget& t : kNvidiaTargets)
    if (t.arch == arch) return Target{std::string(arch), t.sm, t.smem_bytes};
  return std::nullopt;
}

bool has_wgmma(const Target& target) { return target.arch == "sm_90a"; }

std::optional<std::string> wgmma_only_path(std::string_view path, const Target& target) {
  if (has_wgmma(target)) return std::nullopt;
  std::string why = std::string(path) + " path needs the sm_90a target, not " + target.arch;
  if (target.sm == 100 || target.sm == 103)
    why += ": Blackwell has no wgmma; its tensor-core path is tcgen05 with tensor memory, which kgen does not "
           "generate (the fa2 and simt paths run there)";
  else if (target.sm >= 120)
    why += ": Blackwell has no wgmma, and " + target.arch +
           " has no tcgen05 either; its tensor cores take mma.sync (the fa2 path)";
  return why;
}

std::optional<Target> target_for_compute_capability(int major, int minor) {
  const int sm = major * 10 + minor;
  // The architecture-specific targets: a device of that capability runs their CUBINs, and they
  // keep wgmma (sm_90a) and tcgen05 (sm_100a, sm_103a) available.
  if (sm == 90 || sm == 100 || sm == 103) return parse_target("sm_" + std::to_string(sm) + "a");
  return parse_target("sm_" + std::to_string(sm));
}

}  // namespace kgen
