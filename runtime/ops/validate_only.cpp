#include "ops/validate_only.h"

#include <cstdlib>
#include <string_view>

namespace kgen {
namespace {
thread_local bool validating = false;
}  // namespace

bool validate_only() { return validating; }

bool set_validate_only(bool on) {
  const bool previous = validating;
  validating = on;
  return previous;
}

void end_of_validation() {
  if (validating) throw ValidationComplete{};
}

bool check_indices_requested() {
  const char* env = std::getenv("KGEN_CHECK_INDICES");
  return env != nullptr && std::string_view(env) == "1" && !validating;
}

}  // namespace kgen
