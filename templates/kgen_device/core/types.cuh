// 16-bit element types and float conversions for device templates. No toolkit headers: NVRTC 13
// has no cuda_fp16.h / cuda_bf16.h built in, so the types are plain 16-bit storage structs and
// every conversion is one PTX instruction (sm_80+). AMD keeps the structs and traits; its
// to_float, from_float, pack2 and unpack2 have the same bit layouts and rounding (round to
// nearest even): fp16 through the compiler's _Float16 (v_cvt_f16_f32), bf16 by integer rounding.
#pragma once

#include "kgen_device/core/vendor.cuh"

namespace kgen {

// IEEE binary16 and bfloat16 storage: the bit pattern only, no arithmetic operators.
struct half_t {
  unsigned short bits;
};
struct bfloat16_t {
  unsigned short bits;
};

// Minimal traits (no <type_traits>).
template <class A, class B>
struct is_same {
  static constexpr bool value = false;
};
template <class A>
struct is_same<A, A> {
  static constexpr bool value = true;
};

// Which tensor-core instruction family an element type uses.
enum class MmaInput { f16, bf16, none };

template <class T>
struct element_traits {
  static constexpr MmaInput mma = MmaInput::none;
  static constexpr int bytes = sizeof(T);
};
template <>
struct element_traits<half_t> {
  static constexpr MmaInput mma = MmaInput::f16;
  static constexpr int bytes = 2;
};
template <>
struct element_traits<bfloat16_t> {
  static constexpr MmaInput mma = MmaInput::bf16;
  static constexpr int bytes = 2;
};

// Element -> fp32 (exact for both 16-bit types); fp32 -> element, round to nearest even (AMD's
// bf16 NaN is the canonical 0x7fff, as cvt.rn.bf16.f32 gives); pack2 puts two fp32 into one
// 32-bit register of two 16-bit elements, `lo` in bits 0..15 (the element with the lower index,
// as mma fragments and memory expect), `hi` in bits 16..31; unpack2 is its inverse.
__device__ __forceinline__ float to_float(float x) { return x; }
template <class T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) {
  return x;
}

#if KGEN_AMD
__device__ __forceinline__ float to_float(half_t x) { return static_cast<float>(__builtin_bit_cast(_Float16, x.bits)); }
__device__ __forceinline__ float to_float(bfloat16_t x) {
  return __builtin_bit_cast(float, static_cast<unsigned>(x.bits) << 16);
}

template <>
__device__ __forceinline__ half_t from_float<half_t>(float x) {
  return {__builtin_bit_cast(unsigned short, static_cast<_Float16>(x))};
}
template <>
__device__ __forceinline__ bfloat16_t from_float<bfloat16_t>(float x) {
  const unsigned u = __builtin_bit_cast(unsigned, x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return {0x7fff};
  return {static_cast<unsigned short>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16)};
}

template <class T>
__device__ __forceinline__ unsigned pack2(float lo, float hi) {
  return from_float<T>(lo).bits | (static_cast<unsigned>(from_float<T>(hi).bits) << 16);
}

template <class T>
__device__ __forceinline__ void unpack2(unsigned w, float& lo, float& hi) {
  lo = to_float(T{static_cast<unsigned short>(w & 0xffffu)});
  hi = to_float(T{static_cast<unsigned short>(w >> 16)});
}

#else
__device__ __forceinline__ float to_float(half_t x) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x.bits));
  return f;
}
__device__ __forceinline__ float to_float(bfloat16_t x) {
  // bf16 is the upper half of an fp32: widening is a shift (cvt.f32.bf16 needs sm_90).
  return __uint_as_float(static_cast<unsigned>(x.bits) << 16);
}

template <>
__device__ __forceinline__ half_t from_float<half_t>(float x) {
  half_t h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h.bits) : "f"(x));
  return h;
}
template <>
__device__ __forceinline__ bfloat16_t from_float<bfloat16_t>(float x) {
  bfloat16_t h;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h.bits) : "f"(x));
  return h;
}

// Two fp32 -> one 32-bit register of two 16-bit elements: `lo` in bits 0..15 (the element with
// the lower index, as mma fragments and memory expect), `hi` in bits 16..31.
template <class T>
__device__ __forceinline__ unsigned pack2(float lo, float hi);
template <>
__device__ __forceinline__ unsigned pack2<half_t>(float lo, float hi) {
  unsigned r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
template <>
__device__ __forceinline__ unsigned pack2<bfloat16_t>(float lo, float hi) {
  unsigned r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

// The inverse of pack2: the two 16-bit elements of `w` as fp32 (bf16: one instruction each).
template <class T>
__device__ __forceinline__ void unpack2(unsigned w, float& lo, float& hi);
template <>
__device__ __forceinline__ void unpack2<half_t>(unsigned w, float& lo, float& hi) {
  asm("{\n .reg .f16 l, h;\n mov.b32 {l, h}, %2;\n cvt.f32.f16 %0, l;\n cvt.f32.f16 %1, h;\n}"
      : "=f"(lo), "=f"(hi) : "r"(w));
}
template <>
__device__ __forceinline__ void unpack2<bfloat16_t>(unsigned w, float& lo, float& hi) {
  lo = __uint_as_float(w << 16);
  hi = __uint_as_float(w & 0xffff0000u);
}

#endif  // KGEN_AMD

}  // namespace kgen
