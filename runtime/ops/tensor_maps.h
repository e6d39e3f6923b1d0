// TMA views of attention tensors for the Hopper kernels that load or store through tensor maps.
#pragma once

#include "driver/gpu_driver.h"
#include "kgen/kgen.hpp"

namespace kgen {

// The 4-d TMA view (d, n, heads, batch) of a 16-bit (batch, heads, n, d) tensor in boxes of 64
// columns by `rows` rows; false when a dimension of more than one element has stride 0 (an
// expanded view), which TMA cannot walk. The caller has checked aligned16.
bool tiled_map(const TensorView& t, int rows, TiledTensorMap& m);

}  // namespace kgen
