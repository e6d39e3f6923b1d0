// Host tensors of the harnesses: one (b, h, n, d) tensor's bytes in its BHND or BNHD memory
// layout and dtype, and random normal inputs. No device is needed: the harnesses' comparison
// steps and their CPU tests use them as they are.
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kgen/kgen.hpp"
#include "check/host_convert.h"
#include "generator/target.h"
#include "ops/cases.h"

namespace kgen {

// One (b, h, n, d) tensor's host copy in its memory layout, and its view description.
struct HostTensor {
  int b, h, n, d;
  Layout layout;
  DType dtype;
  std::vector<std::uint8_t> bytes;
  std::size_t offset(int ib, int ih, int in, int id) const {
    std::size_t e = layout == Layout::bhnd ? ((std::size_t(ib) * h + ih) * n + in) * d + id
                                           : ((std::size_t(ib) * n + in) * h + ih) * d + id;
    return e * dtype_bytes(dtype);
  }
  void set(std::size_t byte_off, float v) {
    if (dtype == DType::f32) {
      std::memcpy(&bytes[byte_off], &v, 4);
    } else {
      std::uint16_t bits = dtype == DType::f16 ? float_to_half_bits(v) : float_to_bf16_bits(v);
      std::memcpy(&bytes[byte_off], &bits, 2);
    }
  }
  double get(std::size_t byte_off) const {
    if (dtype == DType::f32) {
      float f;
      std::memcpy(&f, &bytes[byte_off], 4);
      return f;
    }
    std::uint16_t bits;
    std::memcpy(&bits, &bytes[byte_off], 2);
    return dtype == DType::f16 ? half_bits_to_float(bits) : bf16_bits_to_float(bits);
  }
  TensorView view(void* data, int device) const {
    TensorView t;
    t.data = data;
    t.dtype = dtype;
    t.ndim = 4;
    t.device = device;
    t.shape[0] = b, t.shape[1] = h, t.shape[2] = n, t.shape[3] = d;
    if (layout == Layout::bhnd) {
      t.strides[0] = std::int64_t(h) * n * d, t.strides[1] = std::int64_t(n) * d, t.strides[2] = d;
    } else {
      t.strides[0] = std::int64_t(n) * h * d, t.strides[1] = d, t.strides[2] = std::int64_t(h) * d;
    }
    t.strides[3] = 1;
    return t;
  }
};

inline HostTensor make_host(int b, int h, int n, int d, Layout layout, DType dtype) {
  HostTensor t{b, h, n, d, layout, dtype, {}};
  t.bytes.resize(std::size_t(b) * h * n * d * dtype_bytes(dtype));
  return t;
}

// Fills with random normal values rounded to the dtype and returns them in fp64, (b, h, n, d).
inline std::vector<double> fill_random(HostTensor& t, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<double> logical(std::size_t(t.b) * t.h * t.n * t.d);
  std::size_t i = 0;
  for (int ib = 0; ib < t.b; ++ib)
    for (int ih = 0; ih < t.h; ++ih)
      for (int in = 0; in < t.n; ++in)
        for (int id = 0; id < t.d; ++id, ++i) {
          std::size_t off = t.offset(ib, ih, in, id);
          t.set(off, normal(rng));
          logical[i] = t.get(off);
        }
  return logical;
}

}  // namespace kgen
