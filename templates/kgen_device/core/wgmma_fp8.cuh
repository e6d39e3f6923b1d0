// wgmma with E4M3 operands (sm_90a only): the 8-bit shapes m64nNk32 of the FP8 attention forward.
// Written by tools/gen_wgmma_header.py --fp8 (the per-N operand lists): edit the script, not this file.
// NVIDIA only (see mma_sm80.cuh): a second vendor provides nothing here.
//
// One wgmma.mma_async.m64nNk32.f32.e4m3.e4m3 computes D(64 x N, fp32) += A(64 x 32) · B(32 x N).
// 8-bit wgmma takes no transpose: A and B are both K-major, so a k-step reads 32 bytes of each
// operand row inside a 128-byte swizzled column block (wgmma.cuh's Sw128, whose 16-bit columns
// hold two E4M3 values each), as the 16-bit k16 step does. D's layout is wgmma.cuh's; the A
// fragment in registers holds four bytes per register (lower k in the lower byte):
//   a[0] = row g, k 4t..4t+3;  a[1] = row g+8, k 4t..;  a[2] = row g, k 4t+16..;  a[3] = row g+8, k 4t+16..
#pragma once

#include "kgen_device/core/fp8.cuh"
#include "kgen_device/core/wgmma.cuh"

namespace kgen {
namespace wgmma {

// The four A registers of k-step kk (32 columns) from fp32 accumulators of a previous wgmma of the
// same 64 rows. The accumulator gives this thread columns 2t, 2t+1, 8+2t, 9+2t (and 16 more in
// the upper half) where the A fragment expects k 4t..4t+3, so k position p of the step stands for
// column 16·(p / 16) + 8·((p % 4) / 2) + 2·((p % 16) / 4) + p % 2: the B operand's k rows must
// come in that order (the FP8 forward writes its transposed V so, forward_fp8.cuh).
template <int N>
__device__ __forceinline__ void pack_a8(unsigned (&a)[4], const float (&x)[N], int kk) {
  a[0] = pack4_e4m3(x[16 * kk + 0], x[16 * kk + 1], x[16 * kk + 4], x[16 * kk + 5]);
  a[1] = pack4_e4m3(x[16 * kk + 2], x[16 * kk + 3], x[16 * kk + 6], x[16 * kk + 7]);
  a[2] = pack4_e4m3(x[16 * kk + 8], x[16 * kk + 9], x[16 * kk + 12], x[16 * kk + 13]);
  a[3] = pack4_e4m3(x[16 * kk + 10], x[16 * kk + 11], x[16 * kk + 14], x[16 * kk + 15]);
}

#define KGEN_W8_ACC8(d, i)                                                                   \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
      "+f"(d[i + 6]), "+f"(d[i + 7])

// Descriptor of a K-major operand in the 64-byte swizzle at shared address `addr`: rows of 64
// bytes (two 32-byte k-steps), row r's 16-byte chunk c at chunk c ^ ((r / 2) % 4), every 8-row
// group 512 bytes on from the last (the stride byte offset), blocks on 512-byte boundaries. A TMA
// box of 64-byte rows with CU_TENSOR_MAP_SWIZZLE_64B writes it; the second k-step of a row starts
// 32 bytes on, as the k-steps inside a 128-byte row do (the swizzle applies to the address).
__device__ __forceinline__ unsigned long long desc_sw64(unsigned addr) {
  return static_cast<unsigned long long>((addr & 0x3FFFFu) >> 4) | 1ull << 16 |
         static_cast<unsigned long long>(512u >> 4) << 32 | 2ull << 62;
}

// One m64nNk32 E4M3 shape: ss (A by descriptor) and rs (A in 4 registers), fp32 accumulators;
// `accumulate` = 0 overwrites D.
template <int N>
struct Mma8;

// The accumulator operands %0 .. %(N/2 − 1) of an m64nNk32 shape, in groups of eight.
#define KGEN_W8_R8_0 "%0,%1,%2,%3,%4,%5,%6,%7"
#define KGEN_W8_R8_1 "%8,%9,%10,%11,%12,%13,%14,%15"
#define KGEN_W8_R8_2 "%16,%17,%18,%19,%20,%21,%22,%23"
#define KGEN_W8_R8_3 "%24,%25,%26,%27,%28,%29,%30,%31"
#define KGEN_W8_R8_4 "%32,%33,%34,%35,%36,%37,%38,%39"
#define KGEN_W8_R8_5 "%40,%41,%42,%43,%44,%45,%46,%47"
#define KGEN_W8_R8_6 "%48,%49,%50,%51,%52,%53,%54,%55"
#define KGEN_W8_R8_7 "%56,%57,%58,%59,%60,%61,%62,%63"
#define KGEN_W8_R8_8 "%64,%65,%66,%67,%68,%69,%70,%71"
#define KGEN_W8_R8_9 "%72,%73,%74,%75,%76,%77,%78,%79"
#define KGEN_W8_R8_10 "%80,%81,%82,%83,%84,%85,%86,%87"
#define KGEN_W8_R8_11 "%88,%89,%90,%91,%92,%93,%94,%95"
#define KGEN_W8_R8_12 "%96,%97,%98,%99,%100,%101,%102,%103"
#define KGEN_W8_R8_13 "%104,%105,%106,%107,%108,%109,%110,%111"
#define KGEN_W8_R8_14 "%112,%113,%114,%115,%116,%117,%118,%119"
#define KGEN_W8_R8_15 "%120,%121,%122,%123,%124,%125,%126,%127"

// KGEN_W8_REGS_N: those operands for N columns; KGEN_W8_OUT_N(d): the matching "+f" outputs.
#define KGEN_W8_REGS_128 KGEN_W8_R8_0 "," KGEN_W8_R8_1 "," KGEN_W8_R8_2 "," KGEN_W8_R8_3 "," KGEN_W8_R8_4 "," KGEN_W8_R8_5 "," KGEN_W8_R8_6 "," KGEN_W8_R8_7
#define KGEN_W8_ACC_128 "{" KGEN_W8_REGS_128 "}"
#define KGEN_W8_OUT_128(d) KGEN_W8_ACC8(d, 0), KGEN_W8_ACC8(d, 8), KGEN_W8_ACC8(d, 16), KGEN_W8_ACC8(d, 24), KGEN_W8_ACC8(d, 32), KGEN_W8_ACC8(d, 40), KGEN_W8_ACC8(d, 48), KGEN_W8_ACC8(d, 56)
#define KGEN_W8_REGS_192 KGEN_W8_REGS_128 "," KGEN_W8_R8_8 "," KGEN_W8_R8_9 "," KGEN_W8_R8_10 "," KGEN_W8_R8_11
#define KGEN_W8_ACC_192 "{" KGEN_W8_REGS_192 "}"
#define KGEN_W8_OUT_192(d) KGEN_W8_OUT_128(d), KGEN_W8_ACC8(d, 64), KGEN_W8_ACC8(d, 72), KGEN_W8_ACC8(d, 80), KGEN_W8_ACC8(d, 88)
#define KGEN_W8_REGS_256 KGEN_W8_REGS_192 "," KGEN_W8_R8_12 "," KGEN_W8_R8_13 "," KGEN_W8_R8_14 "," KGEN_W8_R8_15
#define KGEN_W8_ACC_256 "{" KGEN_W8_REGS_256 "}"
#define KGEN_W8_OUT_256(d) KGEN_W8_OUT_192(d), KGEN_W8_ACC8(d, 96), KGEN_W8_ACC8(d, 104), KGEN_W8_ACC8(d, 112), KGEN_W8_ACC8(d, 120)

#define KGEN_W8_SS8(N, A, B, P)                                                                 \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " P ", 0;\nwgmma.mma_async.sync.aligned.m64n" #N  \
               "k32.f32.e4m3.e4m3 " KGEN_W8_ACC_##N ", " A ", " B ", p, 1, 1;\n}\n"                \
               : KGEN_W8_OUT_##N(d)                                                            \
               : "l"(a), "l"(b), "r"(accumulate))
#define KGEN_W8_RS8(N, A, B, P)                                                                 \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " P ", 0;\nwgmma.mma_async.sync.aligned.m64n" #N  \
               "k32.f32.e4m3.e4m3 " KGEN_W8_ACC_##N ", " A ", " B ", p, 1, 1;\n}\n"                \
               : KGEN_W8_OUT_##N(d)                                                            \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate))
#define KGEN_W8_SHAPE8(N, A_SS, B_SS, P_SS, A_RS, B_RS, P_RS)                                     \
  template <>                                                                                  \
  struct Mma8<N> {                                                                             \
    __device__ __forceinline__ static void ss(float (&d)[N / 2], unsigned long long a,         \
                                              unsigned long long b, int accumulate) {          \
      KGEN_W8_SS8(N, A_SS, B_SS, P_SS);                                                        \
    }                                                                                          \
    __device__ __forceinline__ static void rs(float (&d)[N / 2], const unsigned (&a)[4],       \
                                              unsigned long long b, int accumulate) {          \
      KGEN_W8_RS8(N, A_RS, B_RS, P_RS);                                                        \
    }                                                                                          \
  };

KGEN_W8_SHAPE8(128, "%64", "%65", "%66",
               "{%64,%65,%66,%67}", "%68", "%69")
KGEN_W8_SHAPE8(192, "%96", "%97", "%98",
               "{%96,%97,%98,%99}", "%100", "%101")
KGEN_W8_SHAPE8(256, "%128", "%129", "%130",
               "{%128,%129,%130,%131}", "%132", "%133")

#undef KGEN_W8_SHAPE8
#undef KGEN_W8_RS8
#undef KGEN_W8_SS8
#undef KGEN_W8_ACC8
#undef KGEN_W8_R8_0
#undef KGEN_W8_R8_1
#undef KGEN_W8_R8_2
#undef KGEN_W8_R8_3
#undef KGEN_W8_R8_4
#undef KGEN_W8_R8_5
#undef KGEN_W8_R8_6
#undef KGEN_W8_R8_7
#undef KGEN_W8_R8_8
#undef KGEN_W8_R8_9
#undef KGEN_W8_R8_10
#undef KGEN_W8_R8_11
#undef KGEN_W8_R8_12
#undef KGEN_W8_R8_13
#undef KGEN_W8_R8_14
#undef KGEN_W8_R8_15
#undef KGEN_W8_REGS_128
#undef KGEN_W8_ACC_128
#undef KGEN_W8_OUT_128
#undef KGEN_W8_REGS_192
#undef KGEN_W8_ACC_192
#undef KGEN_W8_OUT_192
#undef KGEN_W8_REGS_256
#undef KGEN_W8_ACC_256
#undef KGEN_W8_OUT_256

}  // namespace wgmma
}  // namespace kgen
