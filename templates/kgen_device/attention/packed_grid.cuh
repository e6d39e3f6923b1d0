// Packed batches (docs/attention.md §9) on the compact grid of the warp-specialised Hopper kernels
// (the ws forward and the backward's warp-specialised key-major kernel). A grid over the longest
// sequence for every sequence leaves most of its blocks idle when the lengths vary; this one has
// lanes·(⌊rows / Rows⌋ + sequences) blocks (rows: the tensors' n), whose linear index (x fastest,
// then y) walks the sequences in order, a sequence's lanes (heads) in order and a lane's tiles of
// `Rows` rows (query tiles in the forward, key tiles in the key-major backward). Sequence s owns
// the indices [lanes·start(s), lanes·start(s + 1)), start(s) = ⌊cu[s] / Rows⌋ + s: at least
// ⌈n_s / Rows⌉ tiles per lane, known from cu alone, so at most one block per (sequence, lane)
// finds no tile.
#pragma once

#include "kgen_device/core/math.cuh"
#include "kgen_device/core/warp.cuh"

namespace kgen {

struct PackedTile {
  int seq, lane, tile;  // seq < 0: the block has no tile
};

// The tile of block `linear` of a batch of `sequences` sequences: every lane of the caller's warp
// calls it. A 32-ary search of cu over the warp's lanes finds the sequence (one round of loads
// per factor of 32 sequences).
template <int Rows>
__device__ __forceinline__ PackedTile packed_tile(const int* cu, int sequences, int lanes, long long linear) {
  constexpr PackedTile kNone{-1, 0, 0};
  if (sequences <= 0) return kNone;
  const int lane = static_cast<int>(threadIdx.x % 32);
  auto start = [&](int s) { return static_cast<long long>(lanes) * (cu[s] / Rows + s); };
  int lo = 0, hi = sequences;  // the block's sequence lies in [lo, hi)
  while (hi - lo > 1) {
    const int step = (hi - lo + 31) / 32, c = lo + lane * step;
    // start grows with s, so the lanes whose candidate starts at or before `linear` are a prefix.
    const int below = __popc(ballot32(c < hi && start(c) <= linear));
    if (below == 0) return kNone;  // before the first sequence's (cu[0] > 0)
    lo += (below - 1) * step;
    hi = imin(lo + step, hi);
  }
  const int c0 = cu[lo], c1 = cu[lo + 1];
  const long long slot = linear - static_cast<long long>(lanes) * (c0 / Rows + lo);
  const int per_lane = c1 / Rows - c0 / Rows + 1;
  if (slot < 0) return kNone;
  const int l = static_cast<int>(slot / per_lane), t = static_cast<int>(slot % per_lane);
  if (l >= lanes || t * Rows >= c1 - c0) return kNone;
  return {lo, l, t};
}

// The grid's linear block index.
__device__ __forceinline__ long long packed_block() {
  return blockIdx.x + static_cast<long long>(gridDim.x) * blockIdx.y;
}

}  // namespace kgen
