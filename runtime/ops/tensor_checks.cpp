#include "ops/tensor_checks.h"

#include <algorithm>
#include <cstdint>
#include <sstream>

#include "generator/target.h"

namespace kgen {
namespace {
constexpr int kMaxGridYZ = 65535;
}  // namespace

void invalid_argument(const std::string& message) { throw Error(Status::invalid_argument, message); }

std::string shape_string(const TensorView& t) {
  std::ostringstream s;
  s << "(";
  for (int i = 0; i < std::min(t.ndim, 4); ++i) s << (i ? ", " : "") << t.shape[i];
  s << ")";
  return s.str();
}

void check_shape(const TensorView& t, const char* name, int ndim) {
  const std::string n(name);
  if (t.ndim != ndim)
    invalid_argument(n + ": expected " + std::to_string(ndim) + " dimensions, got " + std::to_string(t.ndim) + " " +
                     shape_string(t));
  std::int64_t elements = 1;
  for (int i = 0; i < ndim; ++i) {
    if (t.shape[i] <= 0)
      invalid_argument(n + ": dimension " + std::to_string(i) + " is " + std::to_string(t.shape[i]) +
                       (t.shape[i] ? " (sizes must be positive)" : " (empty tensors are not supported)"));
    if (__builtin_mul_overflow(elements, t.shape[i], &elements) || elements > kMaxElements)
      invalid_argument(n + ": shape " + shape_string(t) + " has more than 2^56 elements");
  }
}

void check_view(const TensorView& t, const char* name, int ndim) {
  const std::string n(name);
  if (!t.data) invalid_argument(n + ": data pointer is null");
  if (t.device < 0) invalid_argument(n + ": tensor is in host memory; kgen needs CUDA device memory");
  if (t.dtype == DType::i32) invalid_argument(n + ": dtype int32 is not float16, bfloat16 or float32");
  check_shape(t, name, ndim);
  // The byte offset of the last element; its sum of products must not overflow.
  std::int64_t last = 0;
  for (int i = 0; i < ndim; ++i) {
    if (t.strides[i] < 0) invalid_argument(n + ": negative strides are not supported");
    std::int64_t step = 0;
    if (__builtin_mul_overflow(t.shape[i] - 1, t.strides[i], &step) || __builtin_add_overflow(last, step, &last))
      invalid_argument(n + ": strides reach past 2^63 elements");
  }
  if (__builtin_mul_overflow(last, std::int64_t{dtype_bytes(t.dtype)}, &last))
    invalid_argument(n + ": strides reach past 2^63 bytes");
  if (t.shape[ndim - 1] > 1 && t.strides[ndim - 1] != 1)
    invalid_argument(n + ": the last dimension must be contiguous (stride 1), got stride " +
                     std::to_string(t.strides[ndim - 1]));
  if (reinterpret_cast<std::uintptr_t>(t.data) % dtype_bytes(t.dtype) != 0)
    invalid_argument(n + ": data pointer is not aligned to its element size");
}

void check_tensor_shape(const TensorView& t, const char* name, int ndim) {
  check_shape(t, name, ndim);
  if (t.shape[0] > kMaxGridYZ || t.shape[1] > kMaxGridYZ || t.shape[2] > (1LL << 31) - 1)
    invalid_argument(std::string(name) + ": shape " + shape_string(t) +
                     " exceeds kgen's launch limits (batch, heads <= 65535, n < 2^31)");
}

void check_tensor(const TensorView& t, const char* name, int ndim) {
  check_view(t, name, ndim);
  check_tensor_shape(t, name, ndim);
}

bool aligned16(const TensorView& t) {
  if (reinterpret_cast<std::uintptr_t>(t.data) % 16) return false;
  const int per16 = 16 / dtype_bytes(t.dtype);
  for (int i = 0; i + 1 < t.ndim; ++i)
    if (t.shape[i] > 1 && t.strides[i] % per16) return false;
  return true;
}

void check_like(const TensorView& t, const char* name, const TensorView& ref, const char* ref_name) {
  if (t.dtype != ref.dtype)
    invalid_argument(std::string(name) + ": dtype " + std::string(dtype_name(t.dtype)) + " differs from " + ref_name + "'s " +
            std::string(dtype_name(ref.dtype)));
  if (t.device != ref.device)
    invalid_argument(std::string(name) + ": on device " + std::to_string(t.device) + ", " + ref_name + " is on device " +
            std::to_string(ref.device));
  for (int i = 0; i < ref.ndim; ++i)
    if (t.shape[i] != ref.shape[i])
      invalid_argument(std::string(name) + ": shape " + shape_string(t) + " differs from " + ref_name + " " + shape_string(ref));
}

}  // namespace kgen
