// The FP8 forward's first kernel: V (E4M3) transposed for the P·V product of forward_ws.cuh
// (AttentionFp8VParams). 8-bit wgmma reads its B operand K-major only, so V's tile must be head-dim
// rows of key bytes; and P's accumulator layout gives each thread keys 2t, 2t+1, 8+2t, 9+2t where the
// A fragment wants k positions 4t..4t+3, so each group of 32 keys is written in that order
// (wgmma::pack_a8): column 32·g + p of the output holds key 32·g + key_of(p).
//
// Grid (n_pad / 32, ceil(head_dim / 128), batch · heads_kv), 128 threads: a block moves 32 keys by
// 128 head-dim columns through shared memory, 16-byte loads of V's rows in, 4-byte stores of the
// output's rows out. Keys past n_k and columns past head_dim read as zero (the forward's tiles
// past n_k then multiply zero, never stale bytes).
#pragma once

#include "kgen_device/attention/fp8_params.h"
#include "kgen_device/core/fp8.cuh"

namespace kgen {

// The key that k position p (0 .. 31) of an 8-bit A fragment's k-step stands for (wgmma::pack_a8).
__device__ __forceinline__ int fp8_key_of(int p) {
  return 16 * (p / 16) + 8 * ((p % 4) / 2) + 2 * ((p % 16) / 4) + p % 2;
}

// T: V's element type (float8_e4m3_t; the transposition moves bytes).
template <class T>
__device__ __forceinline__ void attention_fp8_v_transpose(const AttentionFp8VParams& p) {
  static_assert(element_traits<T>::bytes == 1, "the transposition moves one-byte elements");
  constexpr int kKeys = 32, kCols = 128, kPitch = kCols + 16;
  __shared__ __align__(16) unsigned char tile[kKeys * kPitch];
  const int tid = threadIdx.x;
  const int n0 = blockIdx.x * kKeys, c0 = blockIdx.y * kCols;
  const int batch = blockIdx.z / p.heads_kv, head = blockIdx.z % p.heads_kv;
  const unsigned char* v = static_cast<const unsigned char*>(p.v) + batch * p.v_stride_b + head * p.v_stride_h;
#pragma unroll
  for (int i = 0; i < kKeys * kCols / 16 / 128; ++i) {
    const int idx = tid + 128 * i, key = idx / (kCols / 16), chunk = idx % (kCols / 16);
    const int col = c0 + 16 * chunk;
    uint4 x = make_uint4(0u, 0u, 0u, 0u);
    if (n0 + key < p.n_k && col < p.head_dim)
      x = *reinterpret_cast<const uint4*>(v + static_cast<long long>(n0 + key) * p.v_stride_n + col);
    *reinterpret_cast<uint4*>(tile + key * kPitch + 16 * chunk) = x;
  }
  __syncthreads();
  unsigned char* out = static_cast<unsigned char*>(p.vt) +
                       (static_cast<long long>(blockIdx.z) * p.head_dim + c0) * p.n_pad + n0;
#pragma unroll
  for (int i = 0; i < kCols * kKeys / 4 / 128; ++i) {
    const int idx = tid + 128 * i, row = idx / (kKeys / 4), word = idx % (kKeys / 4);
    if (c0 + row >= p.head_dim) continue;
    unsigned w = 0;
#pragma unroll
    for (int e = 0; e < 4; ++e) w |= static_cast<unsigned>(tile[fp8_key_of(4 * word + e) * kPitch + row]) << (8 * e);
    *reinterpret_cast<unsigned*>(out + static_cast<long long>(row) * p.n_pad + 4 * word) = w;
  }
}

}  // namespace kgen
