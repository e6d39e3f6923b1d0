#include "ops/workspace.h"

#include <string>

#include "driver/device.h"
#include "ops/tensor_checks.h"

namespace kgen {

Workspace::Workspace(void* given, std::size_t given_bytes, std::size_t needed, int device, GpuStream stream,
                     const char* what)
    : stream_(stream) {
  if (given) {
    if (given_bytes < needed)
      invalid_argument("workspace: " + std::to_string(given_bytes) + " bytes given, " + what + " needs " +
                       std::to_string(needed));
    base_ = static_cast<char*>(given);
    return;
  }
  use_primary_context(device);
  owned_ = gpu_driver().alloc_async(needed, stream, "stream-ordered workspace allocation");
  base_ = reinterpret_cast<char*>(owned_);
}

Workspace::~Workspace() { gpu_driver().free_async(owned_, stream_); }

float* Workspace::take(std::size_t bytes) {
  float* p = reinterpret_cast<float*>(base_ + used_);
  used_ += aligned(bytes);
  return p;
}

}  // namespace kgen
