// wgmma shapes of the warp-specialised wide backward at 256 columns (sm_90a only): m64n24k16 for
// a consumer's 24 keys of a 48-key block, and stmatrix .x2 with transposition.
// Written by tools/gen_wgmma_header.py --narrow (the per-N operand lists): edit the script, not this file.
// NVIDIA only (see mma_sm80.cuh). Layouts, descriptors and ordering: wgmma.cuh.
#pragma once

#include "kgen_device/core/wgmma_keys.cuh"

namespace kgen {
namespace wgmma {

// Stores two 8×8 matrices of 16-bit elements transposed (stmatrix .x2 .trans): as
// stmatrix_x4_trans (wgmma_keys.cuh) for matrices 0 and 1, whose rows lanes 0-15 address.
__device__ __forceinline__ void stmatrix_x2_trans(unsigned smem_addr, unsigned r0, unsigned r1) {
  asm volatile("stmatrix.sync.aligned.m8n8.x2.trans.shared.b16 [%0], {%1, %2};" ::"r"(smem_addr), "r"(r0), "r"(r1)
               : "memory");
}

#define KGEN_WN_ACC8(d, i)                                                                   \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
      "+f"(d[i + 6]), "+f"(d[i + 7])
#define KGEN_WN_ACC4(d, i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3])

// The accumulator operands %0 .. %(N/2 − 1) of an m64nNk16 shape, in groups of eight.
#define KGEN_WN_R8_0 "%0,%1,%2,%3,%4,%5,%6,%7"
#define KGEN_WN_R4_1 "%8,%9,%10,%11"

// KGEN_WN_REGS_N: those operands for N columns; KGEN_WN_OUT_N(d): the matching "+f" outputs.
#define KGEN_WN_REGS_24 KGEN_WN_R8_0 "," KGEN_WN_R4_1
#define KGEN_WN_ACC_24 "{" KGEN_WN_REGS_24 "}"
#define KGEN_WN_OUT_24(d) KGEN_WN_ACC8(d, 0), KGEN_WN_ACC4(d, 8)

#define KGEN_WN_SS(N, TY, A, B, P, TA, TB)                                                     \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " P ", 0;\nwgmma.mma_async.sync.aligned.m64n" #N  \
               "k16.f32." TY "." TY " " KGEN_WN_ACC_##N ", " A ", " B ", p, 1, 1, " TA ", " TB ";\n}\n" \
               : KGEN_WN_OUT_##N(d)                                                            \
               : "l"(a), "l"(b), "r"(accumulate), "n"(TransA), "n"(TransB))
#define KGEN_WN_RS(N, TY, A, B, P, TB)                                                     \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " P ", 0;\nwgmma.mma_async.sync.aligned.m64n" #N  \
               "k16.f32." TY "." TY " " KGEN_WN_ACC_##N ", " A ", " B ", p, 1, 1, " TB ";\n}\n"    \
               : KGEN_WN_OUT_##N(d)                                                            \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate), "n"(TransB))
#define KGEN_WN_SHAPE(N, A_SS, B_SS, P_SS, TA_SS, TB_SS, A_RS, B_RS, P_RS, TB_RS)                       \
  template <>                                                                                  \
  struct Mma<N> {                                                                              \
    template <class T, int TransA, int TransB>                                                 \
    __device__ __forceinline__ static void ss(float (&d)[N / 2], unsigned long long a,         \
                                              unsigned long long b, int accumulate) {          \
      if constexpr (is_same<T, bfloat16_t>::value) KGEN_WN_SS(N, "bf16", A_SS, B_SS, P_SS, TA_SS, TB_SS); \
      else KGEN_WN_SS(N, "f16", A_SS, B_SS, P_SS, TA_SS, TB_SS);                                       \
    }                                                                                          \
    template <class T, int TransB>                                                             \
    __device__ __forceinline__ static void rs(float (&d)[N / 2], const unsigned (&a)[4],       \
                                              unsigned long long b, int accumulate) {          \
      if constexpr (is_same<T, bfloat16_t>::value) KGEN_WN_RS(N, "bf16", A_RS, B_RS, P_RS, TB_RS); \
      else KGEN_WN_RS(N, "f16", A_RS, B_RS, P_RS, TB_RS);                                       \
    }                                                                                          \
  };

KGEN_WN_SHAPE(24, "%12", "%13", "%14", "%15", "%16",
              "{%12,%13,%14,%15}", "%16", "%17", "%18")

#undef KGEN_WN_SHAPE
#undef KGEN_WN_RS
#undef KGEN_WN_SS
#undef KGEN_WN_ACC8
#undef KGEN_WN_ACC_24
#undef KGEN_WN_OUT_24

#undef KGEN_WN_R8_0
#undef KGEN_WN_R4_1
#undef KGEN_WN_REGS_24
#undef KGEN_WN_ACC4

}  // namespace wgmma
}  // namespace kgen
