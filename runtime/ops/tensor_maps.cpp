#include "ops/tensor_maps.h"

#include "generator/target.h"
#include "ops/tensor_checks.h"

namespace kgen {

bool tiled_map(const TensorView& t, int rows, TiledTensorMap& m) {
  const int bytes = dtype_bytes(t.dtype);
  m.base = t.data;
  m.rank = 4;
  m.element = t.dtype == DType::bf16 ? TiledTensorMap::Element::bf16 : TiledTensorMap::Element::f16;
  for (int i = 0; i < 4; ++i) m.dims[i] = static_cast<std::uint64_t>(t.shape[3 - i]);
  for (int i = 1; i < 4; ++i) {
    const std::int64_t stride = t.strides[3 - i];
    if (t.shape[3 - i] > 1 && stride <= 0) return false;
    // A dimension of one element is never stepped: any valid stride serves.
    m.strides_bytes[i - 1] = t.shape[3 - i] > 1 ? static_cast<std::uint64_t>(stride * bytes) : 16;
  }
  m.box[0] = 64, m.box[1] = static_cast<std::uint32_t>(rows), m.box[2] = 1, m.box[3] = 1;
  return true;
}

}  // namespace kgen
