// Argument checks shared by the operators' entry points: every failure throws
// Error(invalid_argument) with one sentence that names the argument.
#pragma once

#include <string>

#include "kgen/kgen.hpp"

namespace kgen {

[[noreturn]] void invalid(const std::string& message);

// "(2, 8, 1024, 128)".
std::string shape_string(const TensorView& t);

// Device memory, `ndim` dimensions, non-empty, non-negative strides, contiguous last dimension,
// element-aligned pointer, within kgen's launch limits (batch, heads <= 65535).
void check_tensor(const TensorView& t, const char* name, int ndim);

// `t` has `ref`'s dtype, device and (first `ndim`) shape; the message names `name` and `ref_name`.
void check_like(const TensorView& t, const char* name, const TensorView& ref, const char* ref_name);

// Base pointer and every row/head/batch stride allow 16-byte vector loads.
bool aligned16(const TensorView& t);

}  // namespace kgen
