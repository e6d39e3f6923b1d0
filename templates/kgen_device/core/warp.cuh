// Shuffles, votes and reductions over the 32 lanes of a warp; every lane of the warp calls them
// together (full mask). The width 32 is part of each name because the kernels' lane layouts
// assume it. A second vendor provides the same names over aligned groups of 32 lanes: on HIP,
// where a CDNA wavefront has 64 lanes, shfl_xor32 / shfl32 are __shfl_xor / __shfl with width 32
// and all32 a vote restricted to the caller's 32-lane half of the wavefront.
#pragma once

namespace kgen {

// x of lane (lane ^ lane_mask).
__device__ __forceinline__ float shfl_xor32(float x, int lane_mask) {
  return __shfl_xor_sync(0xffffffffu, x, lane_mask);
}
__device__ __forceinline__ double shfl_xor32(double x, int lane_mask) {
  return __shfl_xor_sync(0xffffffffu, x, lane_mask);
}

// x of lane src_lane.
__device__ __forceinline__ float shfl32(float x, int src_lane) { return __shfl_sync(0xffffffffu, x, src_lane); }

// Whether pred holds on all 32 lanes (the same answer on every lane).
__device__ __forceinline__ bool all32(bool pred) { return __all_sync(0xffffffffu, pred); }

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
