// Host-side conversions between float and the 16-bit storage formats (round to nearest even).
#pragma once

#include <cstdint>
#include <bit>
#include <cstring>

namespace kgen {

inline std::uint16_t float_to_bf16_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}

inline float bf16_bits_to_float(std::uint16_t b) {
  std::uint32_t u = static_cast<std::uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline std::uint16_t float_to_half_bits(float f) { return static_cast<std::uint16_t>(std::bit_cast<std::uint16_t>(static_cast<_Float16>(f))); }

inline float half_bits_to_float(std::uint16_t h) { return static_cast<float>(std::bit_cast<_Float16>(h)); }

}  // namespace kgen
