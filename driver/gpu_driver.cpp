#include "driver/gpu_driver.h"

namespace kgen {

const GpuDriver& gpu_driver() {
  static const GpuDriver& chosen = [&]() -> const GpuDriver& {
    if (cuda_gpu_driver().available()) return cuda_gpu_driver();
    if (hip_gpu_driver().available()) return hip_gpu_driver();
    return cuda_gpu_driver();
  }();
  return chosen;
}

}  // namespace kgen
