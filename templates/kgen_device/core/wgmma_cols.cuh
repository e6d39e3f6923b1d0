// wgmma shapes for products over a head dim rounded up to 16 (sm_90a only): m64n144k16,
// m64n160k16, m64n208k16, m64n224k16 and m64n240k16, the widths that wgmma.cuh and
// wgmma_keys.cuh do not have, so that with this header every width head_dim_width gives has a
// specialisation of Mma.
// Written by tools/gen_wgmma_header.py --cols (the per-N operand lists): edit the script, not this file.
// NVIDIA only (see mma_sm80.cuh). Layouts, descriptors and ordering: wgmma.cuh.
#pragma once

#include "kgen_device/core/host_device.h"
#include "kgen_device/core/wgmma_keys.cuh"

namespace kgen {
namespace wgmma {

// The wgmma width N of a product over `head_dim` columns of a wider, zero-filled tile: the head
// dim rounded up to the n-step of 16, at least 32 (the narrowest width of the headers), so that
// no tensor-core time goes to the columns past it (the warp-specialised forward's P·V, the
// warp-specialised backward's dVᵀ and dKᵀ).
KGEN_HOST_DEVICE constexpr int head_dim_width(int head_dim) { return head_dim <= 32 ? 32 : (head_dim + 15) / 16 * 16; }

#define KGEN_WC_ACC8(d, i)                                                                   \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
      "+f"(d[i + 6]), "+f"(d[i + 7])

// The accumulator operands %0 .. %(N/2 − 1) of an m64nNk16 shape, in groups of eight.
#define KGEN_WC_R8_0 "%0,%1,%2,%3,%4,%5,%6,%7"
#define KGEN_WC_R8_1 "%8,%9,%10,%11,%12,%13,%14,%15"
#define KGEN_WC_R8_2 "%16,%17,%18,%19,%20,%21,%22,%23"
#define KGEN_WC_R8_3 "%24,%25,%26,%27,%28,%29,%30,%31"
#define KGEN_WC_R8_4 "%32,%33,%34,%35,%36,%37,%38,%39"
#define KGEN_WC_R8_5 "%40,%41,%42,%43,%44,%45,%46,%47"
#define KGEN_WC_R8_6 "%48,%49,%50,%51,%52,%53,%54,%55"
#define KGEN_WC_R8_7 "%56,%57,%58,%59,%60,%61,%62,%63"
#define KGEN_WC_R8_8 "%64,%65,%66,%67,%68,%69,%70,%71"
#define KGEN_WC_R8_9 "%72,%73,%74,%75,%76,%77,%78,%79"
#define KGEN_WC_R8_10 "%80,%81,%82,%83,%84,%85,%86,%87"
#define KGEN_WC_R8_11 "%88,%89,%90,%91,%92,%93,%94,%95"
#define KGEN_WC_R8_12 "%96,%97,%98,%99,%100,%101,%102,%103"
#define KGEN_WC_R8_13 "%104,%105,%106,%107,%108,%109,%110,%111"
#define KGEN_WC_R8_14 "%112,%113,%114,%115,%116,%117,%118,%119"

// KGEN_WC_REGS_N: those operands for N columns; KGEN_WC_OUT_N(d): the matching "+f" outputs.
#define KGEN_WC_REGS_144 KGEN_WC_R8_0 "," KGEN_WC_R8_1 "," KGEN_WC_R8_2 "," KGEN_WC_R8_3 "," KGEN_WC_R8_4 "," KGEN_WC_R8_5 "," KGEN_WC_R8_6 "," KGEN_WC_R8_7 "," KGEN_WC_R8_8
#define KGEN_WC_ACC_144 "{" KGEN_WC_REGS_144 "}"
#define KGEN_WC_OUT_144(d) KGEN_WC_ACC8(d, 0), KGEN_WC_ACC8(d, 8), KGEN_WC_ACC8(d, 16), KGEN_WC_ACC8(d, 24), KGEN_WC_ACC8(d, 32), KGEN_WC_ACC8(d, 40), KGEN_WC_ACC8(d, 48), KGEN_WC_ACC8(d, 56), KGEN_WC_ACC8(d, 64)
#define KGEN_WC_REGS_160 KGEN_WC_REGS_144 "," KGEN_WC_R8_9
#define KGEN_WC_ACC_160 "{" KGEN_WC_REGS_160 "}"
#define KGEN_WC_OUT_160(d) KGEN_WC_OUT_144(d), KGEN_WC_ACC8(d, 72)
#define KGEN_WC_REGS_208 KGEN_WC_REGS_160 "," KGEN_WC_R8_10 "," KGEN_WC_R8_11 "," KGEN_WC_R8_12
#define KGEN_WC_ACC_208 "{" KGEN_WC_REGS_208 "}"
#define KGEN_WC_OUT_208(d) KGEN_WC_OUT_160(d), KGEN_WC_ACC8(d, 80), KGEN_WC_ACC8(d, 88), KGEN_WC_ACC8(d, 96)
#define KGEN_WC_REGS_224 KGEN_WC_REGS_208 "," KGEN_WC_R8_13
#define KGEN_WC_ACC_224 "{" KGEN_WC_REGS_224 "}"
#define KGEN_WC_OUT_224(d) KGEN_WC_OUT_208(d), KGEN_WC_ACC8(d, 104)
#define KGEN_WC_REGS_240 KGEN_WC_REGS_224 "," KGEN_WC_R8_14
#define KGEN_WC_ACC_240 "{" KGEN_WC_REGS_240 "}"
#define KGEN_WC_OUT_240(d) KGEN_WC_OUT_224(d), KGEN_WC_ACC8(d, 112)

#define KGEN_WC_SS(N, TY, A, B, P, TA, TB)                                                     \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " P ", 0;\nwgmma.mma_async.sync.aligned.m64n" #N  \
               "k16.f32." TY "." TY " " KGEN_WC_ACC_##N ", " A ", " B ", p, 1, 1, " TA ", " TB ";\n}\n" \
               : KGEN_WC_OUT_##N(d)                                                            \
               : "l"(a), "l"(b), "r"(accumulate), "n"(TransA), "n"(TransB))
#define KGEN_WC_RS(N, TY, A, B, P, TB)                                                     \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " P ", 0;\nwgmma.mma_async.sync.aligned.m64n" #N  \
               "k16.f32." TY "." TY " " KGEN_WC_ACC_##N ", " A ", " B ", p, 1, 1, " TB ";\n}\n"    \
               : KGEN_WC_OUT_##N(d)                                                            \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate), "n"(TransB))
#define KGEN_WC_SHAPE(N, A_SS, B_SS, P_SS, TA_SS, TB_SS, A_RS, B_RS, P_RS, TB_RS)                       \
  template <>                                                                                  \
  struct Mma<N> {                                                                              \
    template <class T, int TransA, int TransB>                                                 \
    __device__ __forceinline__ static void ss(float (&d)[N / 2], unsigned long long a,         \
                                              unsigned long long b, int accumulate) {          \
      if constexpr (is_same<T, bfloat16_t>::value) KGEN_WC_SS(N, "bf16", A_SS, B_SS, P_SS, TA_SS, TB_SS); \
      else KGEN_WC_SS(N, "f16", A_SS, B_SS, P_SS, TA_SS, TB_SS);                                       \
    }                                                                                          \
    template <class T, int TransB>                                                             \
    __device__ __forceinline__ static void rs(float (&d)[N / 2], const unsigned (&a)[4],       \
                                              unsigned long long b, int accumulate) {          \
      if constexpr (is_same<T, bfloat16_t>::value) KGEN_WC_RS(N, "bf16", A_RS, B_RS, P_RS, TB_RS); \
      else KGEN_WC_RS(N, "f16", A_RS, B_RS, P_RS, TB_RS);                                       \
    }                                                                                          \
  };

KGEN_WC_SHAPE(144, "%72", "%73", "%74", "%75", "%76",
              "{%72,%73,%74,%75}", "%76", "%77", "%78")
KGEN_WC_SHAPE(160, "%80", "%81", "%82", "%83", "%84",
              "{%80,%81,%82,%83}", "%84", "%85", "%86")
KGEN_WC_SHAPE(208, "%104", "%105", "%106", "%107", "%108",
              "{%104,%105,%106,%107}", "%108", "%109", "%110")
KGEN_WC_SHAPE(224, "%112", "%113", "%114", "%115", "%116",
              "{%112,%113,%114,%115}", "%116", "%117", "%118")
KGEN_WC_SHAPE(240, "%120", "%121", "%122", "%123", "%124",
              "{%120,%121,%122,%123}", "%124", "%125", "%126")

#undef KGEN_WC_SHAPE
#undef KGEN_WC_RS
#undef KGEN_WC_SS
#undef KGEN_WC_ACC8
#undef KGEN_WC_ACC_144
#undef KGEN_WC_OUT_144
#undef KGEN_WC_ACC_160
#undef KGEN_WC_OUT_160
#undef KGEN_WC_ACC_208
#undef KGEN_WC_OUT_208
#undef KGEN_WC_ACC_224
#undef KGEN_WC_OUT_224
#undef KGEN_WC_ACC_240
#undef KGEN_WC_OUT_240

#undef KGEN_WC_R8_0
#undef KGEN_WC_R8_1
#undef KGEN_WC_R8_2
#undef KGEN_WC_R8_3
#undef KGEN_WC_R8_4
#undef KGEN_WC_R8_5
#undef KGEN_WC_R8_6
#undef KGEN_WC_R8_7
#undef KGEN_WC_R8_8
#undef KGEN_WC_R8_9
#undef KGEN_WC_R8_10
#undef KGEN_WC_R8_11
#undef KGEN_WC_R8_12
#undef KGEN_WC_R8_13
#undef KGEN_WC_R8_14
#undef KGEN_WC_REGS_144
#undef KGEN_WC_REGS_160
#undef KGEN_WC_REGS_208
#undef KGEN_WC_REGS_224
#undef KGEN_WC_REGS_240

}  // namespace wgmma
}  // namespace kgen
