// Argument checks shared by the operators' validation: every failure throws
// Error(invalid_argument) with a sentence that starts with the argument's name.
#pragma once

#include <string>

#include "kgen/kgen.hpp"

namespace kgen {

[[noreturn]] void invalid_argument(const std::string& message);

// "(2, 8, 100, 64)".
std::string shape_string(const TensorView& t);

// Non-null device pointer aligned to its element, `ndim` dimensions, sizes > 0, strides >= 0,
// the last dimension contiguous.
void check_view(const TensorView& t, const char* name, int ndim);

// check_view for a (batch, heads, n, d) attention tensor, plus kgen's launch limits
// (batch, heads <= 65535 grid blocks).
void check_tensor(const TensorView& t, const char* name, int ndim);

// `t` has `ref`'s dtype, device and shape; the message names `name` and `ref_name`.
void check_like(const TensorView& t, const char* name, const TensorView& ref, const char* ref_name);

// Whether the base pointer and every stride but the last (of dimensions larger than 1) allow
// 16-byte loads.
bool aligned16(const TensorView& t);

}  // namespace kgen
