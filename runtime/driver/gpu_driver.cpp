#include "driver/gpu_driver.h"

#include <string>

#include "kgen/types.hpp"

namespace kgen {

void GpuDriver::encode_tensor_map(void*, const TiledTensorMap&, const char* what) const {
  throw Error(Status::invalid_argument, std::string(what) + ": this GPU driver has no tensor maps (NVIDIA Hopper only)");
}

const GpuDriver& gpu_driver() {
  static const GpuDriver& chosen = [&]() -> const GpuDriver& {
    if (cuda_gpu_driver().available()) return cuda_gpu_driver();
    if (hip_gpu_driver().available()) return hip_gpu_driver();
    return cuda_gpu_driver();
  }();
  return chosen;
}

}  // namespace kgen
