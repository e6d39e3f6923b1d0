// Warp-level tensor-core MMA for sm_80+: mma.sync.aligned.m16n8k16.row.col, fp32 accumulate.
// NVIDIA only, as are ldmatrix, cp.async and wgmma: the kernels built on them (fa2, wgmma) are
// NVIDIA kernels, and a second vendor brings its own matrix-core kernels instead.
//
// Fragment layouts (g = lane / 4, t = lane % 4); each 32-bit register holds two 16-bit elements,
// the lower column/k index in bits 0..15:
//   A (16x16, row-major):  a[0] = (g, 2t..2t+1)   a[1] = (g+8, 2t..2t+1)
//                          a[2] = (g, 2t+8..+9)   a[3] = (g+8, 2t+8..+9)
//   B (16x8, "col" = stored as 8 rows n of 16 k):  b0 = (k 2t..2t+1, n g)  b1 = (k 2t+8..+9, n g)
//   C/D (16x8, fp32):      c[0], c[1] = (g, 2t), (g, 2t+1)   c[2], c[3] = (g+8, 2t), (g+8, 2t+1)
#pragma once

#include "kgen_device/core/types.cuh"

namespace kgen {

// c += a · b for one 16x8x16 tile; T selects f16 or bf16 inputs.
template <class T>
__device__ __forceinline__ void mma_16x8x16(float (&c)[4], const unsigned (&a)[4], unsigned b0,
                                            unsigned b1);

template <>
__device__ __forceinline__ void mma_16x8x16<half_t>(float (&c)[4], const unsigned (&a)[4],
                                                    unsigned b0, unsigned b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <>
__device__ __forceinline__ void mma_16x8x16<bfloat16_t>(float (&c)[4], const unsigned (&a)[4],
                                                        unsigned b0, unsigned b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

}  // namespace kgen
