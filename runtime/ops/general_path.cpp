#include "ops/general_path.h"

#include <mutex>
#include <set>

#include "base/log.h"

namespace kgen {

std::string general_path_reason(DType dtype, int head_dim, bool aligned16) {
  if (dtype == DType::f32) return "fp32 inputs (the tensor-core kernels take fp16 and bf16)";
  if (!aligned16) return "a view is not 16-byte aligned (tensor-core loads need 16-byte aligned pointers and strides)";
  return "head dim " + std::to_string(head_dim) + " is not a multiple of 8 up to 256 (the tensor-core kernels' head dims)";
}

void note_once(std::string_view key, const std::string& message) {
  static std::mutex mutex;
  static std::set<std::string, std::less<>> noted;
  {
    std::lock_guard lock(mutex);
    if (!noted.emplace(key).second) return;
  }
  log(LogLevel::info, message);
}

void note_general_path(std::string_view op, const std::string& variant, const std::string& why) {
  note_once(std::string(op) + " " + variant + " general",
            variant + " runs on the general path (fp32 SIMT, no tensor cores): " + why);
}

}  // namespace kgen
