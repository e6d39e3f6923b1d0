#include "ops/validate_only.h"

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

}  // namespace kgen
