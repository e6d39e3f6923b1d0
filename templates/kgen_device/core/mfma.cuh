// AMD CDNA matrix cores (MFMA) for kgen's MFMA attention family: the 32x32 instruction of the
// target with 16-bit inputs and fp32 accumulation, whose lane layouts are mfma_layout.h's, and
// the one wavefront-wide exchange those kernels need. AMD only (no NVIDIA body): the generator
// renders these kernels for gfx90a, gfx942 and gfx950 alone.
//
//   gfx90a, gfx942: v_mfma_f32_32x32x8f16, v_mfma_f32_32x32x8bf16_1k (K = 8)
//   gfx950:         v_mfma_f32_32x32x16_f16, v_mfma_f32_32x32x16_bf16 (K = 16)
//
// The target is chosen by the compiler's predefined __gfx950__, so one rendered source serves
// all three targets (the cache key carries the target).
#pragma once

#include "kgen_device/core/mfma_layout.h"
#include "kgen_device/core/types.cuh"
#include "kgen_device/core/warp.cuh"

namespace kgen {

#if KGEN_AMD
#if defined(__gfx950__)
constexpr int kMfmaK = 16;
#else
constexpr int kMfmaK = 8;
#endif
// 16-bit elements of an A or B operand per lane.
constexpr int kMfmaElements = mfma::operand_elements(kMfmaK);

// The C/D accumulator of one lane (16 fp32, register r at mfma::c_row(lane, r)) and an A or B
// operand (kMfmaElements 16-bit element bit patterns, element e at mfma::a_k / b_k).
typedef float mfma_acc __attribute__((ext_vector_type(16)));
typedef short mfma_operand __attribute__((ext_vector_type(kMfmaElements)));

__device__ __forceinline__ mfma_acc mfma_zero() {
  mfma_acc z;
#pragma unroll
  for (int r = 0; r < mfma::kAccRegisters; ++r) z[r] = 0.f;
  return z;
}

// D = A·B + C (32x32xK) on this target's instruction for T = half_t or bfloat16_t; every lane
// of the wavefront calls it together.
template <class T>
__device__ __forceinline__ mfma_acc mfma_32x32(mfma_operand a, mfma_operand b, mfma_acc c) {
  static_assert(is_same<T, half_t>::value || is_same<T, bfloat16_t>::value, "MFMA takes half_t or bfloat16_t");
  if constexpr (is_same<T, half_t>::value) {
    typedef _Float16 h __attribute__((ext_vector_type(kMfmaElements)));
#if defined(__gfx950__)
    return __builtin_amdgcn_mfma_f32_32x32x16_f16(__builtin_bit_cast(h, a), __builtin_bit_cast(h, b), c, 0, 0, 0);
#else
    return __builtin_amdgcn_mfma_f32_32x32x8f16(__builtin_bit_cast(h, a), __builtin_bit_cast(h, b), c, 0, 0, 0);
#endif
  } else {
#if defined(__gfx950__)
    typedef __bf16 bf __attribute__((ext_vector_type(kMfmaElements)));
    return __builtin_amdgcn_mfma_f32_32x32x16_bf16(__builtin_bit_cast(bf, a), __builtin_bit_cast(bf, b), c, 0, 0, 0);
#else
    return __builtin_amdgcn_mfma_f32_32x32x8bf16_1k(a, b, c, 0, 0, 0);
#endif
  }
}

// min(a, b) as one v_min_u32 that the compiler cannot look through: the MFMA kernels' 32-bit
// load offsets (attention/mfma_tile.cuh), where LLVM widens a plain min under the address's zero
// extension into 64-bit compares and adds, and loses global_load's scalar-base form.
__device__ __forceinline__ unsigned min_u32_opaque(unsigned a, unsigned b) {
  unsigned r;
  asm("v_min_u32 %0, %1, %2" : "=v"(r) : "v"(a), "v"(b));
  return r;
}

// x itself in a vector register the compiler cannot look through (no instruction): the MFMA
// kernels' 32-bit load offsets on whole tiles, which LLVM would otherwise widen into a 64-bit
// address per load (as min_u32_opaque's result).
__device__ __forceinline__ unsigned opaque_u32(unsigned x) {
  asm("" : "+v"(x));
  return x;
}

// opaque_u32 that also stays where it is written (a volatile asm): not hoisted out of a loop, so
// that values computed from it each iteration hold no registers across the loop.
__device__ __forceinline__ unsigned opaque_u32_in_place(unsigned x) {
  asm volatile("" : "+v"(x));
  return x;
}

// The operands of a group made available together: an empty asm that reads and rewrites each
// (no instruction), so that one wait covers the group's LDS reads and the MFMAs that follow take
// their operands without a wait of their own.
template <int N>
__device__ __forceinline__ void operands_together(mfma_operand (&x)[N]) {
  static_assert(N == 1 || N == 2 || N == 4 || N == 8, "groups of 1, 2, 4 or 8 operands");
  if constexpr (N == 2) asm("" : "+v"(x[0]), "+v"(x[1]));
  if constexpr (N == 4) asm("" : "+v"(x[0]), "+v"(x[1]), "+v"(x[2]), "+v"(x[3]));
  if constexpr (N == 8) asm("" : "+v"(x[0]), "+v"(x[1]), "+v"(x[2]), "+v"(x[3]), "+v"(x[4]), "+v"(x[5]), "+v"(x[6]), "+v"(x[7]));
}

#if defined(__gfx950__)
// acc + lo + hi for the two T elements (bf16 or fp16) packed in `pair`, lo in bits 0..15: a dot
// product with (1, 1) (v_dot2c_f32_bf16, v_dot2c_f32_f16), one instruction per pair.
template <class T>
__device__ __forceinline__ float add_pair(unsigned pair, float acc) {
  if constexpr (is_same<T, bfloat16_t>::value) {
    typedef __bf16 b2 __attribute__((ext_vector_type(2)));
    return __builtin_amdgcn_fdot2_f32_bf16(__builtin_bit_cast(b2, pair), b2{1.0, 1.0}, acc, false);
  } else {
    typedef _Float16 h2 __attribute__((ext_vector_type(2)));
    return __builtin_amdgcn_fdot2(__builtin_bit_cast(h2, pair), h2{1.0, 1.0}, acc, false);
  }
}
#endif

#if !defined(__gfx950__)
// lo and hi rounded to fp16 (to nearest even, as v_cvt_f16_f32) in one register, lo in bits
// 0..15: lo · 1 + 0 and hi · 1 + 0 by mixed-precision FMAs of f32 sources rounded once to fp16
// (v_fma_mixlo_f16 writes bits 0..15, v_fma_mixhi_f16 bits 16..31), 2 instructions where two
// conversions and v_pack_b32_f16 take 3 (gfx950 has v_cvt_pk_f16_f32). A zero's sign is not kept.
// The MFMA kernels' fp16 operands from accumulators (attention/mfma_tile.cuh) on gfx90a and gfx942.
__device__ __forceinline__ unsigned pack_half2(float lo, float hi) {
  unsigned r;
  asm("v_fma_mixlo_f16 %0, %1, 1.0, 0" : "=v"(r) : "v"(lo));
  asm("v_fma_mixhi_f16 %0, %1, 1.0, 0" : "+v"(r) : "v"(hi));
  return r;
}
#endif

// v_perm_b32: the bytes `selector` picks (one selector byte per result byte) from the 8 bytes of
// {hi, lo}, lo's bytes 0–3 and hi's 4–7 (CDNA3 ISA, "Vector ALU Operations").
__device__ __forceinline__ unsigned perm_b32(unsigned hi, unsigned lo, unsigned selector) {
  return __builtin_amdgcn_perm(hi, lo, selector);
}

// x of the wavefront's first active lane, in a scalar register: a value every lane holds alike,
// made uniform to the compiler (v_readfirstlane_b32).
__device__ __forceinline__ int wave_uniform(int x) { return __builtin_amdgcn_readfirstlane(x); }

// x of lane (lane ^ 32): the value the other 32-lane half of the wavefront holds in the same
// position (the two halves of an MFMA operand hold the two halves of K).
__device__ __forceinline__ float swap_wave_halves(float x) {
  return __builtin_bit_cast(float, __builtin_amdgcn_ds_bpermute((wave_lane() ^ 32) << 2, __builtin_bit_cast(int, x)));
}
#endif  // KGEN_AMD

}  // namespace kgen
