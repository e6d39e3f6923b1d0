// wgmma (sm_90a only): warpgroup-wide asynchronous matrix multiply-accumulate.
// Written by tools/gen_wgmma_header.py (the per-N operand lists): edit the script, not this file.
// NVIDIA only (see mma_sm80.cuh): a second vendor provides nothing here.
//
// A warpgroup is 4 consecutive warps starting at a warp index divisible by 4 (128 threads). One
// wgmma.mma_async.m64nNk16 computes D(64 x N, fp32) += A(64 x 16) · B(16 x N) for 16-bit A and B.
// B always comes from shared memory through a matrix descriptor; A from shared memory (`ss`) or
// from registers (`rs`).
//
// Register layouts (g = lane / 4, t = lane % 4, w = warp index inside the warpgroup): the warp w
// owns rows 16w .. 16w + 15, and the layouts are those of mma.sync m16n8k16 repeated along N:
//   D: d[4j + 2h + e] is row 16w + g + 8h, column 8j + 2t + e   (j < N/8, h, e in {0, 1})
//   A: a[0] = row g, k 2t..2t+1;  a[1] = row g+8, k 2t..;  a[2] = row g, k 2t+8..;
//      a[3] = row g+8, k 2t+8..  (two 16-bit elements per register, lower k in the low half)
//
// Shared-memory operands use the 128-byte swizzle: a tile is stored as column blocks of 64
// elements (128 bytes per row); inside a block row r's 16-byte chunk c sits at chunk c ^ (r % 8),
// and every block starts on a 1024-byte boundary (Sw128 below). Descriptors:
//   K-major (A, or B with TransB = 0; rows of the operand are M or N, 16 k-elements are read):
//     start = block base + row0 · 128 + (k0 % 64) · 2, stride byte offset 1024 (8 rows).
//   MN-major (B with TransB = 1; rows are k, the 64-element block runs along N):
//     start = block base + k0 · 128, leading byte offset = bytes of one column block (the step
//     to the next 64 columns of N), stride byte offset 1024 (8 k-rows).
//
// Ordering: registers written by ordinary instructions (accumulators rescaled, A fragments) need
// fence() before the wgmma that reads them; results are valid after commit() and wait<0>();
// shared memory written by ordinary stores or cp.async needs fence_proxy_async() in each
// writing thread before the barrier that precedes the wgmma.
#pragma once

#include "kgen_device/core/types.cuh"

namespace kgen {
namespace wgmma {

__device__ __forceinline__ void fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void commit() {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
// Waits until at most N committed wgmma groups of this warpgroup are still in flight.
template <int N>
__device__ __forceinline__ void wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
// Orders this thread's earlier generic-proxy shared-memory writes before later async-proxy
// reads (wgmma operands) once a barrier has been passed.
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
// Stores four 8×8 matrices of 16-bit elements (stmatrix .x4): lane i gives the shared address of
// row i % 8 of matrix i / 8; r[k] holds this lane's two elements of matrix k (row lane / 4,
// columns 2·(lane % 4), +1): the layout of a wgmma accumulator's rows packed in pairs.
__device__ __forceinline__ void stmatrix_x4(unsigned smem_addr, unsigned r0, unsigned r1, unsigned r2, unsigned r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(smem_addr), "r"(r0), "r"(r1),
               "r"(r2), "r"(r3)
               : "memory");
}
// Keeps the compiler from moving accesses to accumulator registers across an asynchronous
// wgmma (the asm statements below look synchronous to it).
template <int N>
__device__ __forceinline__ void fence_operand(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// 128-byte-swizzled K-major or MN-major tile of 16-bit elements: Rows rows of Cols elements,
// stored as Cols / 64 column blocks of Rows x 128 bytes each.
template <int Rows, int Cols>
struct Sw128 {
  static_assert(Cols % 64 == 0 && Rows % 8 == 0, "Sw128 tiles are 64-column blocks of 8-row groups");
  static constexpr int kBlockBytes = Rows * 128;
  static constexpr int kBytes = kBlockBytes * (Cols / 64);
  // Byte offset of logical 16-byte chunk c (elements 8c .. 8c+7) of row r.
  __device__ __forceinline__ static int offset(int r, int c) {
    return (c >> 3) * kBlockBytes + r * 128 + (((c & 7) ^ (r & 7)) << 4);
  }
};

// A thread's place in its warpgroup (blocks of whole warpgroups): warpgroup wg, warp w inside
// it (rows 16w .. 16w + 15 of a 64-row tile), g = lane / 4, t = lane % 4 (the register layouts).
struct Lane {
  int wg, warp, lane, g, t;
  __device__ __forceinline__ static Lane of(int tid) {
    Lane l;
    l.wg = tid / 128;
    l.warp = (tid / 32) % 4;
    l.lane = tid % 32;
    l.g = l.lane / 4;
    l.t = l.lane % 4;
    return l;
  }
};

// The four A registers of k-step kk (16 columns) from fp32 accumulators of a previous wgmma of
// the same 64 rows: the accumulator layout is the A layout, so 8 consecutive values pack in place.
template <class T, int N>
__device__ __forceinline__ void pack_a(unsigned (&a)[4], const float (&x)[N], int kk) {
  a[0] = pack2<T>(x[8 * kk + 0], x[8 * kk + 1]);
  a[1] = pack2<T>(x[8 * kk + 2], x[8 * kk + 3]);
  a[2] = pack2<T>(x[8 * kk + 4], x[8 * kk + 5]);
  a[3] = pack2<T>(x[8 * kk + 6], x[8 * kk + 7]);
}

// Descriptor of a 128-byte-swizzled operand at shared address `addr` (see the top comment).
__device__ __forceinline__ unsigned long long desc_sw128(unsigned addr, unsigned leading_bytes,
                                                         unsigned stride_bytes) {
  return static_cast<unsigned long long>((addr & 0x3FFFFu) >> 4) |
         static_cast<unsigned long long>((leading_bytes & 0x3FFFFu) >> 4) << 16 |
         static_cast<unsigned long long>((stride_bytes & 0x3FFFFu) >> 4) << 32 | 1ull << 62;
}

#define KGEN_WG_ACC8(d, i)                                                                   \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
      "+f"(d[i + 6]), "+f"(d[i + 7])

// One m64nNk16 shape: ss (A by descriptor; TransA = 1 reads A M-major, laid out like an MN-major
// B) and rs (A in 4 registers), fp32 accumulators; `accumulate` = 0 overwrites D.
template <int N>
struct Mma;

// The accumulator operands %0 .. %(N/2 − 1) of an m64nNk16 shape, in groups of eight.
#define KGEN_WG_R8_0 "%0,%1,%2,%3,%4,%5,%6,%7"
#define KGEN_WG_R8_1 "%8,%9,%10,%11,%12,%13,%14,%15"
#define KGEN_WG_R8_2 "%16,%17,%18,%19,%20,%21,%22,%23"
#define KGEN_WG_R8_3 "%24,%25,%26,%27,%28,%29,%30,%31"
#define KGEN_WG_R8_4 "%32,%33,%34,%35,%36,%37,%38,%39"
#define KGEN_WG_R8_5 "%40,%41,%42,%43,%44,%45,%46,%47"
#define KGEN_WG_R8_6 "%48,%49,%50,%51,%52,%53,%54,%55"
#define KGEN_WG_R8_7 "%56,%57,%58,%59,%60,%61,%62,%63"
#define KGEN_WG_R8_8 "%64,%65,%66,%67,%68,%69,%70,%71"
#define KGEN_WG_R8_9 "%72,%73,%74,%75,%76,%77,%78,%79"
#define KGEN_WG_R8_10 "%80,%81,%82,%83,%84,%85,%86,%87"
#define KGEN_WG_R8_11 "%88,%89,%90,%91,%92,%93,%94,%95"
#define KGEN_WG_R8_12 "%96,%97,%98,%99,%100,%101,%102,%103"
#define KGEN_WG_R8_13 "%104,%105,%106,%107,%108,%109,%110,%111"
#define KGEN_WG_R8_14 "%112,%113,%114,%115,%116,%117,%118,%119"
#define KGEN_WG_R8_15 "%120,%121,%122,%123,%124,%125,%126,%127"

// KGEN_WG_REGS_N: those operands for N columns; KGEN_WG_OUT_N(d): the matching "+f" outputs.
#define KGEN_WG_REGS_32 KGEN_WG_R8_0 "," KGEN_WG_R8_1
#define KGEN_WG_ACC_32 "{" KGEN_WG_REGS_32 "}"
#define KGEN_WG_OUT_32(d) KGEN_WG_ACC8(d, 0), KGEN_WG_ACC8(d, 8)
#define KGEN_WG_REGS_64 KGEN_WG_REGS_32 "," KGEN_WG_R8_2 "," KGEN_WG_R8_3
#define KGEN_WG_ACC_64 "{" KGEN_WG_REGS_64 "}"
#define KGEN_WG_OUT_64(d) KGEN_WG_OUT_32(d), KGEN_WG_ACC8(d, 16), KGEN_WG_ACC8(d, 24)
#define KGEN_WG_REGS_80 KGEN_WG_REGS_64 "," KGEN_WG_R8_4
#define KGEN_WG_ACC_80 "{" KGEN_WG_REGS_80 "}"
#define KGEN_WG_OUT_80(d) KGEN_WG_OUT_64(d), KGEN_WG_ACC8(d, 32)
#define KGEN_WG_REGS_128 KGEN_WG_REGS_64 "," KGEN_WG_R8_4 "," KGEN_WG_R8_5 "," KGEN_WG_R8_6 "," KGEN_WG_R8_7
#define KGEN_WG_ACC_128 "{" KGEN_WG_REGS_128 "}"
#define KGEN_WG_OUT_128(d) KGEN_WG_OUT_64(d), KGEN_WG_ACC8(d, 32), KGEN_WG_ACC8(d, 40), KGEN_WG_ACC8(d, 48), KGEN_WG_ACC8(d, 56)
#define KGEN_WG_REGS_176 KGEN_WG_REGS_128 "," KGEN_WG_R8_8 "," KGEN_WG_R8_9 "," KGEN_WG_R8_10
#define KGEN_WG_ACC_176 "{" KGEN_WG_REGS_176 "}"
#define KGEN_WG_OUT_176(d) KGEN_WG_OUT_128(d), KGEN_WG_ACC8(d, 64), KGEN_WG_ACC8(d, 72), KGEN_WG_ACC8(d, 80)
#define KGEN_WG_REGS_192 KGEN_WG_REGS_176 "," KGEN_WG_R8_11
#define KGEN_WG_ACC_192 "{" KGEN_WG_REGS_192 "}"
#define KGEN_WG_OUT_192(d) KGEN_WG_OUT_176(d), KGEN_WG_ACC8(d, 88)
#define KGEN_WG_REGS_256 KGEN_WG_REGS_192 "," KGEN_WG_R8_12 "," KGEN_WG_R8_13 "," KGEN_WG_R8_14 "," KGEN_WG_R8_15
#define KGEN_WG_ACC_256 "{" KGEN_WG_REGS_256 "}"
#define KGEN_WG_OUT_256(d) KGEN_WG_OUT_192(d), KGEN_WG_ACC8(d, 96), KGEN_WG_ACC8(d, 104), KGEN_WG_ACC8(d, 112), KGEN_WG_ACC8(d, 120)

#define KGEN_WG_SS(N, TY, A, B, P, TA, TB)                                                     \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " P ", 0;\nwgmma.mma_async.sync.aligned.m64n" #N  \
               "k16.f32." TY "." TY " " KGEN_WG_ACC_##N ", " A ", " B ", p, 1, 1, " TA ", " TB ";\n}\n" \
               : KGEN_WG_OUT_##N(d)                                                            \
               : "l"(a), "l"(b), "r"(accumulate), "n"(TransA), "n"(TransB))
#define KGEN_WG_RS(N, TY, A, B, P, TB)                                                     \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " P ", 0;\nwgmma.mma_async.sync.aligned.m64n" #N  \
               "k16.f32." TY "." TY " " KGEN_WG_ACC_##N ", " A ", " B ", p, 1, 1, " TB ";\n}\n"    \
               : KGEN_WG_OUT_##N(d)                                                            \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate), "n"(TransB))
#define KGEN_WG_SHAPE(N, A_SS, B_SS, P_SS, TA_SS, TB_SS, A_RS, B_RS, P_RS, TB_RS)                       \
  template <>                                                                                  \
  struct Mma<N> {                                                                              \
    template <class T, int TransA, int TransB>                                                 \
    __device__ __forceinline__ static void ss(float (&d)[N / 2], unsigned long long a,         \
                                              unsigned long long b, int accumulate) {          \
      if constexpr (is_same<T, bfloat16_t>::value) KGEN_WG_SS(N, "bf16", A_SS, B_SS, P_SS, TA_SS, TB_SS); \
      else KGEN_WG_SS(N, "f16", A_SS, B_SS, P_SS, TA_SS, TB_SS);                                       \
    }                                                                                          \
    template <class T, int TransB>                                                             \
    __device__ __forceinline__ static void rs(float (&d)[N / 2], const unsigned (&a)[4],       \
                                              unsigned long long b, int accumulate) {          \
      if constexpr (is_same<T, bfloat16_t>::value) KGEN_WG_RS(N, "bf16", A_RS, B_RS, P_RS, TB_RS); \
      else KGEN_WG_RS(N, "f16", A_RS, B_RS, P_RS, TB_RS);                                       \
    }                                                                                          \
  };

KGEN_WG_SHAPE(32, "%16", "%17", "%18", "%19", "%20",
              "{%16,%17,%18,%19}", "%20", "%21", "%22")
KGEN_WG_SHAPE(64, "%32", "%33", "%34", "%35", "%36",
              "{%32,%33,%34,%35}", "%36", "%37", "%38")
KGEN_WG_SHAPE(80, "%40", "%41", "%42", "%43", "%44",
              "{%40,%41,%42,%43}", "%44", "%45", "%46")
KGEN_WG_SHAPE(128, "%64", "%65", "%66", "%67", "%68",
              "{%64,%65,%66,%67}", "%68", "%69", "%70")
KGEN_WG_SHAPE(176, "%88", "%89", "%90", "%91", "%92",
              "{%88,%89,%90,%91}", "%92", "%93", "%94")
KGEN_WG_SHAPE(192, "%96", "%97", "%98", "%99", "%100",
              "{%96,%97,%98,%99}", "%100", "%101", "%102")
KGEN_WG_SHAPE(256, "%128", "%129", "%130", "%131", "%132",
              "{%128,%129,%130,%131}", "%132", "%133", "%134")

#undef KGEN_WG_SHAPE
#undef KGEN_WG_RS
#undef KGEN_WG_SS
#undef KGEN_WG_ACC8
#undef KGEN_WG_ACC_32
#undef KGEN_WG_OUT_32
#undef KGEN_WG_ACC_64
#undef KGEN_WG_OUT_64
#undef KGEN_WG_ACC_80
#undef KGEN_WG_OUT_80
#undef KGEN_WG_ACC_128
#undef KGEN_WG_OUT_128
#undef KGEN_WG_ACC_176
#undef KGEN_WG_OUT_176
#undef KGEN_WG_ACC_192
#undef KGEN_WG_OUT_192
#undef KGEN_WG_ACC_256
#undef KGEN_WG_OUT_256

}  // namespace wgmma
}  // namespace kgen
