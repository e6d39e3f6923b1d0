// The shape bucket of a call: what only changes the shape of a call, so that tuning records made
// for one shape serve its neighbours. Variant keys carry what changes the source.
//
// One rule per operator (in its runtime/ops/<op>_tuning.h) gives both forms of its bucket: the
// numbers a launch path's decision table keys on (no string is built on a hot launch) and the
// text the tuning database records.
#pragma once

#include <array>
#include <string>

namespace kgen {

// Up to four named numbers; names[i] == nullptr ends the list.
struct ShapeBucket {
  std::array<const char*, 4> names{};
  std::array<long long, 4> values{};
  // "nq4096.nk4096.g1.bh64": each name followed by its value, joined by '.'.
  std::string text() const;
};

}  // namespace kgen
