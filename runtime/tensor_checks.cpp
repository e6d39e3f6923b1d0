#include "runtime/tensor_checks.h"

#include <cstdint>
#include <sstream>

#include "generator/target.h"

namespace kgen {

void invalid_argument(const std::string& message) { throw Error(Status::invalid_argument, message); }

std::string shape_string(const TensorView& t) {
  std::ostringstream s;
  s << "(";
  for (int i = 0; i < t.ndim; ++i) s << (i ? ", " : "") << t.shape[i];
  s << ")";
  return s.str();
}

void check_view(const TensorView& t, const char* name, int ndim) {
  const std::string n(name);
  if (!t.data) invalid_argument(n + ": data pointer is null");
  if (t.device < 0) invalid_argument(n + ": tensor is in host memory; kgen needs CUDA device memory");
  if (t.ndim != ndim)
    invalid_argument(n + ": expected " + std::to_string(ndim) + " dimensions, got " + std::to_string(t.ndim) + " " +
                     shape_string(t));
  for (int i = 0; i < ndim; ++i) {
    if (t.shape[i] <= 0)
      invalid_argument(n + ": dimension " + std::to_string(i) + " is " + std::to_string(t.shape[i]) +
                       " (empty tensors are not supported)");
    if (t.strides[i] < 0) invalid_argument(n + ": negative strides are not supported");
  }
  if (t.shape[ndim - 1] > 1 && t.strides[ndim - 1] != 1)
    invalid_argument(n + ": the last dimension must be contiguous (stride 1), got stride " +
                     std::to_string(t.strides[ndim - 1]));
  if (reinterpret_cast<std::uintptr_t>(t.data) % dtype_bytes(t.dtype) != 0)
    invalid_argument(n + ": data pointer is not aligned to its element size");
}

bool aligned16(const TensorView& t) {
  if (reinterpret_cast<std::uintptr_t>(t.data) % 16) return false;
  const int per16 = 16 / dtype_bytes(t.dtype);
  for (int i = 0; i + 1 < t.ndim; ++i)
    if (t.shape[i] > 1 && t.strides[i] % per16) return false;
  return true;
}

}  // namespace kgen
