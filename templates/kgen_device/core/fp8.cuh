// 8-bit floating point (OCP FP8 E4M3, PyTorch's float8_e4m3fn) for the FP8 attention forward:
// a storage type and the conversion that packs fp32 scores into E4M3 wgmma operands. NVIDIA only
// (sm_90a's 8-bit wgmma reads them); a second vendor gets the storage type alone.
#pragma once

#include "kgen_device/core/types.cuh"

namespace kgen {

// E4M3 storage: the bit pattern only, no arithmetic operators.
struct float8_e4m3_t {
  unsigned char bits;
};
template <>
struct element_traits<float8_e4m3_t> {
  static constexpr MmaInput mma = MmaInput::none;
  static constexpr int bytes = 1;
};

#if !KGEN_AMD
// Four fp32 -> one 32-bit register of four E4M3 values, x0 in bits 0..7 (the lowest index, as
// memory and the 8-bit wgmma A fragment expect) to x3 in bits 24..31; round to nearest even,
// saturating to ±448 (NaN stays NaN).
__device__ __forceinline__ unsigned pack4_e4m3(float x0, float x1, float x2, float x3) {
  unsigned r;
  asm("{\n .reg .b16 l, h;\n cvt.rn.satfinite.e4m3x2.f32 l, %2, %1;\n cvt.rn.satfinite.e4m3x2.f32 h, %4, %3;\n"
      " mov.b32 %0, {l, h};\n}"
      : "=r"(r)
      : "f"(x0), "f"(x1), "f"(x2), "f"(x3));
  return r;
}
#endif

}  // namespace kgen
