// The range tables of an attention variant's mask tensors (core/expr_interval.h, iv_table),
// built on the GPU before the attention kernels of a call whose mask reads integer tensors (the
// document preset's ids, a user's segment ids), so that their tile() proves tiles empty or full
// from the tensor's values.
//
// Grid (rows of the tensor's leading dimensions), Threads threads: block r builds table row r,
// level 0 (each pair the min and max of 2^kExprRangeShift elements of the last dimension) from
// the tensor, then each level l from level l − 1 after a barrier (the block's own global writes
// are visible to it after __syncthreads).
#pragma once

#include "kgen_device/attention/variant_ranges_params.h"
#include "kgen_device/core/expr_interval.h"
#include "kgen_device/core/vendor.cuh"

namespace kgen {

template <int Threads>
__device__ __forceinline__ void variant_ranges(const VariantRangeParams& p) {
  const long long row = blockIdx.x;
  long long base = 0, rest = row;
  for (int d = p.rank - 2; d >= 0; --d) {
    base += rest % p.shape[d] * p.stride[d];
    rest /= p.shape[d];
  }
  const long long step = p.stride[p.rank - 1];
  const long long blocks = iv_table_blocks(p.n);
  const int levels = iv_table_levels(blocks);
  int* level0 = p.table + 2 * iv_table_pair(p.n, row, 0, 0);
  for (long long e = threadIdx.x; e < blocks; e += Threads) {
    const long long i0 = e << kExprRangeShift, i1 = iv_min2(p.n, i0 + (1 << kExprRangeShift));
    int lo = p.src[base + i0 * step], hi = lo;
    for (long long i = i0 + 1; i < i1; ++i) {
      const int x = p.src[base + i * step];
      lo = x < lo ? x : lo;
      hi = x > hi ? x : hi;
    }
    level0[2 * e] = lo;
    level0[2 * e + 1] = hi;
  }
  for (int l = 1; l < levels; ++l) {
    __syncthreads();
    const int* below = p.table + 2 * iv_table_pair(p.n, row, l - 1, 0);
    int* at = p.table + 2 * iv_table_pair(p.n, row, l, 0);
    for (long long e = threadIdx.x; e < blocks; e += Threads) {
      const long long f = iv_min2(e + (1LL << (l - 1)), blocks - 1);
      const int lo0 = below[2 * e], lo1 = below[2 * f], hi0 = below[2 * e + 1], hi1 = below[2 * f + 1];
      at[2 * e] = lo0 < lo1 ? lo0 : lo1;
      at[2 * e + 1] = hi0 > hi1 ? hi0 : hi1;
    }
  }
}

}  // namespace kgen
