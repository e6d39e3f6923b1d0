// Page ids of the paged K/V tiles that the one-warpgroup Hopper forward (forward_wgmma.cuh)
// gathers: shared by the host (launch sizes) and the device template. Plain constexpr C++.
#pragma once

namespace kgen {
namespace attention_fwd {

// A key tile spans at most 256 / 16 pages (tiles of up to 256 keys, pages of 16 rows or more).
constexpr int kPagedTileIds = 16;
// Two slots of a tile's page ids (the next tile's copies read one while the other fills), at
// the end of the kernel's dynamic shared memory.
constexpr int kPagedTileIdBytes = 2 * kPagedTileIds * 4;

}  // namespace attention_fwd
}  // namespace kgen
