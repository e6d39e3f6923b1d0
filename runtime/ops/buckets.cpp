#include "ops/buckets.h"

namespace kgen {

std::string ShapeBucket::text() const {
  std::string t;
  for (std::size_t i = 0; i < names.size() && names[i]; ++i) {
    if (i) t += '.';
    t += names[i];
    t += std::to_string(values[i]);
  }
  return t;
}

}  // namespace kgen
