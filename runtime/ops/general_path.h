// The general path of the attention operators (fp32 SIMT kernels, no tensor cores) is correct
// for every call but much slower; a call never takes it silently. Each variant that lands there
// is logged once per process at info level, with the reason.
#pragma once

#include <string>
#include <string_view>

#include "kgen/types.hpp"

namespace kgen {

// Why a call of `dtype` and `head_dim` runs on the general path: fp32 inputs, views that are not
// 16-byte aligned, or a head dim without a tensor-core kernel (checked in that order).
std::string general_path_reason(DType dtype, int head_dim, bool aligned16);

// Logs `message` at info level the first time `key` is noted in this process. Thread-safe.
void note_once(std::string_view key, const std::string& message);

// Logs "<variant> runs on the general path (fp32 SIMT, no tensor cores): <why>" at info level, the
// first time for each (op, variant) in this process. Thread-safe.
void note_general_path(std::string_view op, const std::string& variant, const std::string& why);

}  // namespace kgen
