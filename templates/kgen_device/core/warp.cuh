// Shuffles, votes and reductions over the 32 lanes of a warp; every lane of the warp calls them
// together (full mask). The width 32 is part of each name because the kernels' lane layouts
// assume it. On AMD, where a CDNA wavefront has 64 lanes, kgen's warp is an aligned 32-lane half
// of the wavefront: the shuffles stay inside the caller's half (ds_bpermute with width 32) and
// all32 votes on the caller's half of the 64-bit ballot, so the portable kernels compute the same
// thing on both vendors.
#pragma once

#include "kgen_device/core/vendor.cuh"

namespace kgen {

#if KGEN_AMD
// This lane's index in the wavefront (0..63).
__device__ __forceinline__ int wave_lane() { return __builtin_amdgcn_mbcnt_hi(~0u, __builtin_amdgcn_mbcnt_lo(~0u, 0u)); }
// x (32 bits) of lane `src` of the caller's 32-lane half (src taken mod 32).
__device__ __forceinline__ int bpermute32(int x, int src) {
  return __builtin_amdgcn_ds_bpermute(((wave_lane() & 32) | (src & 31)) << 2, x);
}

__device__ __forceinline__ float shfl_xor32(float x, int lane_mask) {
  return __builtin_bit_cast(float, bpermute32(__builtin_bit_cast(int, x), wave_lane() ^ lane_mask));
}
__device__ __forceinline__ double shfl_xor32(double x, int lane_mask) {
  const long long bits = __builtin_bit_cast(long long, x);
  const int src = wave_lane() ^ lane_mask;
  const unsigned lo = bpermute32(static_cast<int>(bits), src), hi = bpermute32(static_cast<int>(bits >> 32), src);
  return __builtin_bit_cast(double, static_cast<long long>((static_cast<unsigned long long>(hi) << 32) | lo));
}
__device__ __forceinline__ float shfl32(float x, int src_lane) {
  return __builtin_bit_cast(float, bpermute32(__builtin_bit_cast(int, x), src_lane));
}
__device__ __forceinline__ int shfl32(int x, int src_lane) { return bpermute32(x, src_lane); }
// Bit i set where pred holds on lane i of the caller's 32-lane half.
__device__ __forceinline__ unsigned ballot32(bool pred) {
#if __has_builtin(__builtin_amdgcn_ballot_w64)
  const unsigned long long ballot = __builtin_amdgcn_ballot_w64(pred);
#else  // hiprtc 5.2 (LLVM 15): the compare form of the ballot; 33 is ICMP_NE
  const unsigned long long ballot = __builtin_amdgcn_uicmp(static_cast<unsigned>(pred), 0u, 33);
#endif
  return static_cast<unsigned>(wave_lane() & 32 ? ballot >> 32 : ballot);
}
__device__ __forceinline__ bool all32(bool pred) { return ballot32(pred) == 0xffffffffu; }
// The index of the lowest set bit of x (x != 0).
__device__ __forceinline__ int lowest_bit32(unsigned x) { return __builtin_ctz(x); }
#else

// x of lane (lane ^ lane_mask).
__device__ __forceinline__ float shfl_xor32(float x, int lane_mask) {
  return __shfl_xor_sync(0xffffffffu, x, lane_mask);
}
__device__ __forceinline__ double shfl_xor32(double x, int lane_mask) {
  return __shfl_xor_sync(0xffffffffu, x, lane_mask);
}

// x of lane src_lane.
__device__ __forceinline__ float shfl32(float x, int src_lane) { return __shfl_sync(0xffffffffu, x, src_lane); }
__device__ __forceinline__ int shfl32(int x, int src_lane) { return __shfl_sync(0xffffffffu, x, src_lane); }

// Whether pred holds on all 32 lanes (the same answer on every lane).
__device__ __forceinline__ bool all32(bool pred) { return __all_sync(0xffffffffu, pred); }
// Bit i set where pred holds on lane i.
__device__ __forceinline__ unsigned ballot32(bool pred) { return __ballot_sync(0xffffffffu, pred); }
// The index of the lowest set bit of x (x != 0).
__device__ __forceinline__ int lowest_bit32(unsigned x) { return __ffs(static_cast<int>(x)) - 1; }

#endif  // KGEN_AMD

// Reductions over the 4 lanes of a quad (lanes 4g .. 4g+3), as held by mma accumulators.
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, shfl_xor32(x, 1));
  return fmaxf(x, shfl_xor32(x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += shfl_xor32(x, 1);
  return x + shfl_xor32(x, 2);
}

// Reductions over the 32 lanes; every lane gets the result.
__device__ __forceinline__ float warp32_max(float x) {
#pragma unroll
  for (int level = 0; level < 5; ++level) x = fmaxf(x, shfl_xor32(x, 16 >> level));
  return x;
}
__device__ __forceinline__ float warp32_sum(float x) {
#pragma unroll
  for (int level = 0; level < 5; ++level) x += shfl_xor32(x, 16 >> level);
  return x;
}

}  // namespace kgen
