// XOR swizzle of 16-byte chunks for row-major shared tiles of 16-bit elements, so that the 8 row
// addresses of one ldmatrix phase (8 consecutive rows, same logical chunk) hit 8 distinct
// 16-byte bank groups, and row-contiguous cp.async writes stay conflict-free. Plain integer
// arithmetic: nothing for a second vendor to provide (its own bank layout may want another one).
#pragma once

namespace kgen {

// Chunks = 16-byte chunks per row (head_dim / 8 for 16-bit data). The XOR stays inside the row:
//   Chunks % 8 == 0 (rows of 128 B multiples): physical chunk = c ^ (row % 8)
//   Chunks % 8 == 4 (64 B or 192 B rows; two rows share a 128 B line): c ^ ((row / 2) % 4)
// In both cases the swizzle depends only on row % 8.
template <int Chunks>
struct Swizzle16B {
  static_assert(Chunks % 4 == 0, "rows must be a multiple of 64 bytes");
  static constexpr int kRowBytes = Chunks * 16;

  __device__ __forceinline__ static int chunk(int row, int c) {
    if constexpr (Chunks % 8 == 0) {
      return c ^ (row & 7);
    } else {
      return c ^ ((row >> 1) & 3);
    }
  }
  // Chunks per XOR group: the swizzle permutes chunks inside aligned groups of this size.
  static constexpr int kGroup = Chunks % 8 == 0 ? 8 : 4;

  // Byte offset of logical (row, chunk c) from the tile base.
  __device__ __forceinline__ static int offset(int row, int c) {
    return row * kRowBytes + chunk(row, c) * 16;
  }

  // Moves the address of logical (row, c) to (row, c + c_step) with one XOR and an immediate
  // add, given: the tile base is kGroup·16-byte aligned, c_step is a compile-time constant and
  // c's bits inside the group do not overlap c_step's (e.g. c in {0, 1} and c_step even).
  // Rows may be moved separately by adding multiples of 8 rows (·kRowBytes).
  __device__ __forceinline__ static unsigned advance(unsigned addr, int c_step) {
    return (addr ^ static_cast<unsigned>((c_step % kGroup) * 16)) +
           static_cast<unsigned>((c_step / kGroup) * kGroup * 16);
  }
};

}  // namespace kgen
