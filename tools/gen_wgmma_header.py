#!/usr/bin/env python3
"""Writes templates/kgen_device/core/wgmma.cuh: the wgmma wrappers need one inline-asm operand list
per accumulator width N, spelled out; this script is the header's source. The test
tools/tests/test_gen_wgmma_header.py checks that the checked-in header equals its output.

It also writes templates/kgen_device/core/wgmma_fp8.cuh, the E4M3 shapes (m64nNk32) of the FP8
forward, with its own operand lists for the widths that forward uses, and
templates/kgen_device/core/wgmma_keys.cuh, the 16-bit widths only the wide-head-dim backward and
the warp-specialised forward's 96- and 112-key tiles use, kept out of wgmma.cuh so that the kernels including that header keep their
text, and templates/kgen_device/core/wgmma_keys24.cuh, the 24-key width of the warp-specialised wide backward at 256
columns, and templates/kgen_device/core/wgmma_cols.cuh, the widths of products over a head dim
rounded up to 16 (head_dim_width) that no other header has.

Usage (from the repository root):
  python3 tools/gen_wgmma_header.py > templates/kgen_device/core/wgmma.cuh
  python3 tools/gen_wgmma_header.py --fp8 > templates/kgen_device/core/wgmma_fp8.cuh
  python3 tools/gen_wgmma_header.py --keys > templates/kgen_device/core/wgmma_keys.cuh
  python3 tools/gen_wgmma_header.py --narrow > templates/kgen_device/core/wgmma_keys24.cuh
  python3 tools/gen_wgmma_header.py --cols > templates/kgen_device/core/wgmma_cols.cuh
"""

import sys

# The accumulator widths kgen's kernels use (wgmma m64nNk16), each with the narrower width whose
# operand list it extends (None: the first).
BASE = {32: None, 64: 32, 80: 64, 128: 64, 176: 128, 192: 176, 256: 192}
NS = list(BASE)
# The widths of wgmma_keys.cuh: the wide-head-dim backward's key blocks (dKᵀ and dVᵀ, N = keys: 96
# in the three-warpgroup kernel, 48 per consumer in the warp-specialised one; its S and dP too),
# and the warp-specialised forward's 96- and 112-key tiles at head dims 136–192 (its S). A width of
# 8 past a multiple of 16 ends in a group of four registers.
BASE_KEYS = {48: None, 96: 48, 112: 96}
# The widths of wgmma_keys24.cuh: a consumer's 24 keys in the warp-specialised backward's 48-key
# blocks at 256 columns (apart, so that the kernels including wgmma_keys.cuh keep their text).
BASE_NARROW = {24: None}
# The widths of wgmma_cols.cuh: products over a head dim rounded up to 16 (its head_dim_width) where no
# other header has that width (head dims 136-160 and 200-240 on the 192- and 256-column tiles).
BASE_COLS = {144: None, 160: 144, 208: 160, 224: 208, 240: 224}
# The E4M3 widths (wgmma m64nNk32): the FP8 forward's 128- and 192-key score tiles and its head dims
# 128 and 256.
BASE8 = {128: None, 192: 128, 256: 192}

# Everything before the operand lists: the header's comment, the fragment helpers, the
# descriptor and KGEN_WG_ACC8.
PREFIX = r'''// wgmma (sm_90a only): warpgroup-wide asynchronous matrix multiply-accumulate.
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

'''

# The asm wrappers and the per-shape specialisation, written once for every N.
SHAPE_MACROS = r'''#define KGEN_WG_SS(N, TY, A, B, P, TA, TB)                                                     \
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

'''

SUFFIX = r'''}  // namespace wgmma
}  // namespace kgen
'''


def groups(n):
    """Number of eight-register groups of an N-column fp32 accumulator (N / 2 registers)."""
    return n // 16


def half_groups(ns):
    """The groups of four registers that end the widths of ns that are 8 past a multiple of 16."""
    return sorted({groups(n) for n in ns if n % 16})


def operand_lists(base=BASE, shape="m64nNk16"):
    ns = list(base)
    out = [f"// The accumulator operands %0 .. %(N/2 \u2212 1) of an {shape} shape, in groups of eight.\n"]
    for g in range(groups(max(ns))):
        regs = ",".join(f"%{i}" for i in range(8 * g, 8 * g + 8))
        out.append(f'#define KGEN_WG_R8_{g} "{regs}"\n')
    for g in half_groups(ns):
        regs = ",".join(f"%{i}" for i in range(8 * g, 8 * g + 4))
        out.append(f'#define KGEN_WG_R4_{g} "{regs}"\n')
    out.append("\n")
    out.append('// KGEN_WG_REGS_N: those operands for N columns; KGEN_WG_OUT_N(d): the matching "+f" outputs.\n')
    for n in ns:
        prev = base[n]
        first = groups(prev) if prev else 0
        new = range(first, groups(n))
        regs = [f"KGEN_WG_REGS_{prev}"] if prev else []
        regs += [f"KGEN_WG_R8_{g}" for g in new]
        outs = [f"KGEN_WG_OUT_{prev}(d)"] if prev else []
        outs += [f"KGEN_WG_ACC8(d, {8 * g})" for g in new]
        if n % 16:
            assert prev is None or prev % 16 == 0, "a width ending in four registers extends none"
            regs.append(f"KGEN_WG_R4_{groups(n)}")
            outs.append(f"KGEN_WG_ACC4(d, {8 * groups(n)})")
        out.append(f"#define KGEN_WG_REGS_{n} " + ' "," '.join(regs) + "\n")
        out.append(f'#define KGEN_WG_ACC_{n} "{{" KGEN_WG_REGS_{n} "}}"\n')
        out.append(f"#define KGEN_WG_OUT_{n}(d) " + ", ".join(outs) + "\n")
    out.append("\n")
    return "".join(out)


def shapes(ns=NS):
    out = []
    for n in ns:
        a = n // 2  # the first operand after the accumulators
        ss = ", ".join(f'"%{a + i}"' for i in range(5))
        rs = f'"{{%{a},%{a + 1},%{a + 2},%{a + 3}}}", "%{a + 4}", "%{a + 5}", "%{a + 6}"'
        out.append(f"KGEN_WG_SHAPE({n}, {ss},\n              {rs})\n")
    out.append("\n")
    for name in ["KGEN_WG_SHAPE", "KGEN_WG_RS", "KGEN_WG_SS", "KGEN_WG_ACC8"]:
        out.append(f"#undef {name}\n")
    for n in ns:
        out.append(f"#undef KGEN_WG_ACC_{n}\n#undef KGEN_WG_OUT_{n}\n")
    out.append("\n")
    return "".join(out)


def header():
    return PREFIX + operand_lists() + SHAPE_MACROS + shapes() + SUFFIX


PREFIX8 = r'''// wgmma with E4M3 operands (sm_90a only): the 8-bit shapes m64nNk32 of the FP8 attention forward.
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

#define KGEN_WG_ACC8(d, i)                                                                   \
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

'''

SHAPE_MACROS8 = r'''#define KGEN_WG_SS8(N, A, B, P)                                                                 \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " P ", 0;\nwgmma.mma_async.sync.aligned.m64n" #N  \
               "k32.f32.e4m3.e4m3 " KGEN_WG_ACC_##N ", " A ", " B ", p, 1, 1;\n}\n"                \
               : KGEN_WG_OUT_##N(d)                                                            \
               : "l"(a), "l"(b), "r"(accumulate))
#define KGEN_WG_RS8(N, A, B, P)                                                                 \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " P ", 0;\nwgmma.mma_async.sync.aligned.m64n" #N  \
               "k32.f32.e4m3.e4m3 " KGEN_WG_ACC_##N ", " A ", " B ", p, 1, 1;\n}\n"                \
               : KGEN_WG_OUT_##N(d)                                                            \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate))
#define KGEN_WG_SHAPE8(N, A_SS, B_SS, P_SS, A_RS, B_RS, P_RS)                                     \
  template <>                                                                                  \
  struct Mma8<N> {                                                                             \
    __device__ __forceinline__ static void ss(float (&d)[N / 2], unsigned long long a,         \
                                              unsigned long long b, int accumulate) {          \
      KGEN_WG_SS8(N, A_SS, B_SS, P_SS);                                                        \
    }                                                                                          \
    __device__ __forceinline__ static void rs(float (&d)[N / 2], const unsigned (&a)[4],       \
                                              unsigned long long b, int accumulate) {          \
      KGEN_WG_RS8(N, A_RS, B_RS, P_RS);                                                        \
    }                                                                                          \
  };

'''


def shapes8():
    out = []
    for n in BASE8:
        a = n // 2
        ss = ", ".join(f'"%{a + i}"' for i in range(3))
        rs = f'"{{%{a},%{a + 1},%{a + 2},%{a + 3}}}", "%{a + 4}", "%{a + 5}"'
        out.append(f"KGEN_WG_SHAPE8({n}, {ss},\n               {rs})\n")
    out.append("\n")
    for name in ["KGEN_WG_SHAPE8", "KGEN_WG_RS8", "KGEN_WG_SS8", "KGEN_WG_ACC8"]:
        out.append(f"#undef {name}\n")
    for g in range(groups(max(BASE8))):
        out.append(f"#undef KGEN_WG_R8_{g}\n")
    for n in BASE8:
        out.append(f"#undef KGEN_WG_REGS_{n}\n#undef KGEN_WG_ACC_{n}\n#undef KGEN_WG_OUT_{n}\n")
    out.append("\n")
    return "".join(out)


def header_fp8():
    # Macros of their own (KGEN_W8_*): wgmma.cuh leaves its operand lists defined.
    text = PREFIX8 + operand_lists(BASE8, "m64nNk32") + SHAPE_MACROS8 + shapes8() + SUFFIX
    return text.replace("KGEN_WG_", "KGEN_W8_")


PREFIX_KEYS = r'''// wgmma shapes of the wide-head-dim backward (sm_90a only): m64n96k16 and m64n48k16 for its
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

#define KGEN_WG_ACC8(d, i)                                                                   \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
      "+f"(d[i + 6]), "+f"(d[i + 7])

'''

PREFIX_NARROW = r'''// wgmma shapes of the warp-specialised wide backward at 256 columns (sm_90a only): m64n24k16 for
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

#define KGEN_WG_ACC8(d, i)                                                                   \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
      "+f"(d[i + 6]), "+f"(d[i + 7])
#define KGEN_WG_ACC4(d, i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3])

'''


PREFIX_COLS = r'''// wgmma shapes for products over a head dim rounded up to 16 (sm_90a only): m64n144k16,
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

#define KGEN_WG_ACC8(d, i)                                                                   \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
      "+f"(d[i + 6]), "+f"(d[i + 7])

'''


def header_keys(base=None, prefix=None, tag="KGEN_WK_"):
    # Macros of their own (KGEN_WK_*): wgmma.cuh leaves its operand lists defined.
    base = base or BASE_KEYS
    text = (prefix or PREFIX_KEYS) + operand_lists(base) + SHAPE_MACROS + shapes(list(base))
    for g in range(groups(max(base))):
        text += f"#undef KGEN_WG_R8_{g}\n"
    for g in half_groups(base):
        text += f"#undef KGEN_WG_R4_{g}\n"
    for n in base:
        text += f"#undef KGEN_WG_REGS_{n}\n"
    if half_groups(base):
        text += "#undef KGEN_WG_ACC4\n"
    text += "\n" + SUFFIX
    return text.replace("KGEN_WG_", tag)


if __name__ == "__main__":
    args = sys.argv[1:]
    if args == ["--narrow"]:
        print(header_keys(BASE_NARROW, PREFIX_NARROW, "KGEN_WN_"), end="")
    elif args == ["--cols"]:
        print(header_keys(BASE_COLS, PREFIX_COLS, "KGEN_WC_"), end="")
    else:
        print(header_fp8() if args == ["--fp8"] else header_keys() if args == ["--keys"] else header(), end="")
