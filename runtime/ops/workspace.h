// Scratch memory of one operator call, the same for every operator: the caller's workspace
// (checked to be large enough, naming the argument) or, when none is given, stream-ordered
// memory of the device's pool, freed on the call's stream after the call's launches are queued.
#pragma once

#include <cstddef>

#include "driver/gpu_driver.h"

namespace kgen {

class Workspace {
 public:
  // `needed` bytes for `what` ("this call", "softmax over the sequence"); `given` and
  // `given_bytes` are the caller's workspace (nullptr: allocate on `stream` of `device`).
  // Throws Error(invalid_argument) "workspace: N bytes given, <what> needs M" when too small.
  Workspace(void* given, std::size_t given_bytes, std::size_t needed, int device, GpuStream stream, const char* what);
  ~Workspace();
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;

  // The next `bytes` of the workspace, 256-byte aligned; sizes add up as aligned(bytes).
  float* take(std::size_t bytes);
  static std::size_t aligned(std::size_t bytes) { return (bytes + 255) / 256 * 256; }

 private:
  GpuStream stream_;
  char* base_ = nullptr;
  DevicePtr owned_ = 0;
  std::size_t used_ = 0;
};

}  // namespace kgen
