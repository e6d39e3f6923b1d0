// The wide-head-dim wgmma backward (backward_wide.cuh, config "wg:bm64:bn96:c3"): its block
// shape and shared memory. Shared by the host (config checks, launch sizes) and the template
// (static_asserts). Plain constexpr C++.
#pragma once

namespace kgen {
namespace attention_bwd {

// Three warpgroups share a block of 96 keys (32 each for S and dP; 64 head-dim rows each of dKᵀ,
// dVᵀ and 64 columns each of dQ) at the 192-column tile, against query tiles of 64 rows.
constexpr int kWideThreads = 384;
constexpr int kWideKeys = 96;
constexpr int kWideQueryRows = 64;
constexpr int kWideHeadDim = 192;

// Shared memory: 1024 bytes of alignment; the K and V tiles (96 × 192 each, v's too when its head
// dim is below q's); two stages of the Q and dO tiles (64 × 192 each; dQ's fp32 staging boxes take
// the finished stage); the Pᵀ and dSᵀ tiles (96 × 64); two stages of the rows' lse2 and delta.
constexpr int kWideSmemBytes = 1024 +
                               (2 * kWideKeys * kWideHeadDim + 4 * kWideQueryRows * kWideHeadDim +
                                2 * kWideKeys * kWideQueryRows) * 2 +
                               4 * kWideQueryRows * 4;
static_assert(kWideSmemBytes == 198656, "the wide kernel's shared memory");

}  // namespace attention_bwd
}  // namespace kgen
