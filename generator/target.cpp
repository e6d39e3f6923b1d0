#include "generator/target.h"

namespace kgen {

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f16: return "fp16";
    case DType::bf16: return "bf16";
    case DType::f32: return "fp32";
  }
  return "?";
}

std::optional<DType> parse_dtype(std::string_view n) {
  if (n == "fp16" || n == "f16" || n == "float16" || n == "half") return DType::f16;
  if (n == "bf16" || n == "bfloat16") return DType::bf16;
  if (n == "fp32" || n == "f32" || n == "float32" || n == "float") return DType::f32;
  return std::nullopt;
}

int dtype_bytes(DType t) { return t == DType::f32 ? 4 : 2; }

std::string_view dtype_cxx(DType t) {
  switch (t) {
    case DType::f16: return "kgen::half_t";
    case DType::bf16: return "kgen::bfloat16_t";
    case DType::f32: return "float";
  }
  return "void";
}

std::optional<Target> parse_target(std::string_view arch) {
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
