// ldmatrix: warp-collective loads of 8x8 16-bit matrices from shared memory into mma fragments.
// NVIDIA only (see mma_sm80.cuh): a second vendor provides nothing here.
// Lane l supplies the shared address of row (l % 8) of matrix (l / 8) (x2: lanes 0..15 only
// matter). Register j receives matrix j, lane l holding row l / 4, elements 2(l % 4), 2(l % 4)+1;
// with .trans it holds column l / 4, rows 2(l % 4), 2(l % 4)+1 instead.
// volatile: the same address is read again after the buffer is refilled (no CSE across barriers).
#pragma once

namespace kgen {

__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], unsigned smem_addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr));
}

__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], unsigned smem_addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr));
}

__device__ __forceinline__ void ldmatrix_x2(unsigned (&r)[2], unsigned smem_addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(smem_addr));
}

__device__ __forceinline__ void ldmatrix_x2_trans(unsigned (&r)[2], unsigned smem_addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(smem_addr));
}

}  // namespace kgen
