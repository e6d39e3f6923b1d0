// wgmma shapes of the wide-head-dim backward (sm_90a only): m64n96k16 and m64n48k16 for its
// 96-key blocks (whole, or a consumer warpgroup's half), and stmatrix with transposition; and
// m64n112k16 for the warp-specialised forward's 112-key tiles (its 96-key tiles take m64n96k16).
// Written by tools/gen_wgmma_header.py --keys (the per-N operand lists): edit the script, not this file.
// NVIDIA only (see mma_sm80.cuh). Layouts, descriptors and ordering: wgmma.cuh, whose Mma template
// this header specialises; kept apart so that the kernels that include wgmma.cuh keep their text.
#pragma once

#include "kgen_device/core/wgmma.cuh"

namespace kgen {
namespace wgmma {

// Stores four 8×8 matrices of 16-bit elements transposed (stmatrix .x4 .trans): lane i gives the
// shared address of row i % 8 of stored matrix i / 8; r[k] holds this lane's two elements of
// matrix k (row lane / 4, columns 2·(lane % 4), +1), which land in column lane / 4 of the stored
// rows 2·(lane % 4) and 2·(lane % 4) + 1: an accumulator's 8 × 8 block written as its transpose,
// 16 contiguous bytes per stored row.
__device__ __forceinline__ void stmatrix_x4_trans(unsigned smem_addr, unsigned r0, unsigned r1, unsigned r2,
                                                  unsigned r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(smem_addr), "r"(r0),
               "r"(r1), "r"(r2), "r"(r3)
               : "memory");
}

#define KGEN_WK_ACC8(d, i)                                                                   \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
      "+f"(d[i + 6]), "+f"(d[i + 7])

// The accumulator operands %0 .. %(N/2 − 1) of an m64nNk16 shape, in groups of eight.
#define KGEN_WK_R8_0 "%0,%1,%2,%3,%4,%5,%6,%7"
#define KGEN_WK_R8_1 "%8,%9,%10,%11,%12,%13,%14,%15"
#define KGEN_WK_R8_2 "%16,%17,%18,%19,%20,%21,%22,%23"
#define KGEN_WK_R8_3 "%24,%25,%26,%27,%28,%29,%30,%31"
#define KGEN_WK_R8_4 "%32,%33,%34,%35,%36,%37,%38,%39"
#define KGEN_WK_R8_5 "%40,%41,%42,%43,%44,%45,%46,%47"
#define KGEN_WK_R8_6 "%48,%49,%50,%51,%52,%53,%54,%55"

// KGEN_WK_REGS_N: those operands for N columns; KGEN_WK_OUT_N(d): the matching "+f" outputs.
#define KGEN_WK_REGS_48 KGEN_WK_R8_0 "," KGEN_WK_R8_1 "," KGEN_WK_R8_2
#define KGEN_WK_ACC_48 "{" KGEN_WK_REGS_48 "}"
#define KGEN_WK_OUT_48(d) KGEN_WK_ACC8(d, 0), KGEN_WK_ACC8(d, 8), KGEN_WK_ACC8(d, 16)
#define KGEN_WK_REGS_96 KGEN_WK_REGS_48 "," KGEN_WK_R8_3 "," KGEN_WK_R8_4 "," KGEN_WK_R8_5
#define KGEN_WK_ACC_96 "{" KGEN_WK_REGS_96 "}"
#define KGEN_WK_OUT_96(d) KGEN_WK_OUT_48(d), KGEN_WK_ACC8(d, 24), KGEN_WK_ACC8(d, 32), KGEN_WK_ACC8(d, 40)
#define KGEN_WK_REGS_112 KGEN_WK_REGS_96 "," KGEN_WK_R8_6
#define KGEN_WK_ACC_112 "{" KGEN_WK_REGS_112 "}"
#define KGEN_WK_OUT_112(d) KGEN_WK_OUT_96(d), KGEN_WK_ACC8(d, 48)

#define KGEN_WK_SS(N, TY, A, B, P, TA, TB)                                                     \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " P ", 0;\nwgmma.mma_async.sync.aligned.m64n" #N  \
               "k16.f32." TY "." TY " " KGEN_WK_ACC_##N ", " A ", " B ", p, 1, 1, " TA ", " TB ";\n}\n" \
               : KGEN_WK_OUT_##N(d)                                                            \
               : "l"(a), "l"(b), "r"(accumulate), "n"(TransA), "n"(TransB))
#define KGEN_WK_RS(N, TY, A, B, P, TB)                                                     \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " P ", 0;\nwgmma.mma_async.sync.aligned.m64n" #N  \
               "k16.f32." TY "." TY " " KGEN_WK_ACC_##N ", " A ", " B ", p, 1, 1, " TB ";\n}\n"    \
               : KGEN_WK_OUT_##N(d)                                                            \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate), "n"(TransB))
#define KGEN_WK_SHAPE(N, A_SS, B_SS, P_SS, TA_SS, TB_SS, A_RS, B_RS, P_RS, TB_RS)                       \
  template <>                                                                                  \
  struct Mma<N> {                                                                              \
    template <class T, int TransA, int TransB>                                                 \
    __device__ __forceinline__ static void ss(float (&d)[N / 2], unsigned long long a,         \
                                              unsigned long long b, int accumulate) {          \
      if constexpr (is_same<T, bfloat16_t>::value) KGEN_WK_SS(N, "bf16", A_SS, B_SS, P_SS, TA_SS, TB_SS); \
      else KGEN_WK_SS(N, "f16", A_SS, B_SS, P_SS, TA_SS, TB_SS);                                       \
    }                                                                                          \
    template <class T, int TransB>                                                             \
    __device__ __forceinline__ static void rs(float (&d)[N / 2], const unsigned (&a)[4],       \
                                              unsigned long long b, int accumulate) {          \
      if constexpr (is_same<T, bfloat16_t>::value) KGEN_WK_RS(N, "bf16", A_RS, B_RS, P_RS, TB_RS); \
      else KGEN_WK_RS(N, "f16", A_RS, B_RS, P_RS, TB_RS);                                       \
    }                                                                                          \
  };

KGEN_WK_SHAPE(48, "%24", "%25", "%26", "%27", "%28",
              "{%24,%25,%26,%27}", "%28", "%29", "%30")
KGEN_WK_SHAPE(96, "%48", "%49", "%50", "%51", "%52",
              "{%48,%49,%50,%51}", "%52", "%53", "%54")
KGEN_WK_SHAPE(112, "%56", "%57", "%58", "%59", "%60",
              "{%56,%57,%58,%59}", "%60", "%61", "%62")

#undef KGEN_WK_SHAPE
#undef KGEN_WK_RS
#undef KGEN_WK_SS
#undef KGEN_WK_ACC8
#undef KGEN_WK_ACC_48
#undef KGEN_WK_OUT_48
#undef KGEN_WK_ACC_96
#undef KGEN_WK_OUT_96
#undef KGEN_WK_ACC_112
#undef KGEN_WK_OUT_112

#undef KGEN_WK_R8_0
#undef KGEN_WK_R8_1
#undef KGEN_WK_R8_2
#undef KGEN_WK_R8_3
#undef KGEN_WK_R8_4
#undef KGEN_WK_R8_5
#undef KGEN_WK_R8_6
#undef KGEN_WK_REGS_48
#undef KGEN_WK_REGS_96
#undef KGEN_WK_REGS_112

}  // namespace wgmma
}  // namespace kgen
