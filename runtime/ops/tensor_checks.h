// Argument checks shared by the operators' validation: every failure throws
// Error(invalid_argument) with a sentence that starts with the argument's name.
#pragma once

#include <cstdint>
#include <string>

#include "kgen/kgen.hpp"

namespace kgen {

[[noreturn]] void invalid_argument(const std::string& message);

// The most elements a tensor may have: far more than any device holds, and few enough that a
// byte count derived from a shape (elements × 16 bytes and a few such terms) stays below 2^63.
inline constexpr std::int64_t kMaxElements = std::int64_t{1} << 56;

// "(2, 8, 100, 64)".
std::string shape_string(const TensorView& t);

// `ndim` dimensions, sizes > 0, at most kMaxElements elements. Reads only ndim and shape.
void check_shape(const TensorView& t, const char* name, int ndim);

// Non-null device pointer aligned to its element, check_shape, strides >= 0, the last dimension
// contiguous, and every element's byte offset within 2^63.
void check_view(const TensorView& t, const char* name, int ndim);

// check_shape for a (batch, heads, n, d) attention tensor, plus kgen's launch limits (batch,
// heads <= 65535 grid blocks, n < 2^31). Reads only ndim and shape: workspace sizes use it.
void check_tensor_shape(const TensorView& t, const char* name, int ndim);

// check_view and check_tensor_shape.
void check_tensor(const TensorView& t, const char* name, int ndim);

// `t` has `ref`'s dtype, device and shape; the message names `name` and `ref_name`.
void check_like(const TensorView& t, const char* name, const TensorView& ref, const char* ref_name);

// Whether the base pointer and every stride but the last (of dimensions larger than 1) allow
// 16-byte loads.
bool aligned16(const TensorView& t);

}  // namespace kgen
