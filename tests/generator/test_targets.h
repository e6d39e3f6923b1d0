// The targets the generator tests render for.
#pragma once

#include "generator/target.h"

namespace kgen::test_targets {

inline Target sm80() { return *parse_target("sm_80"); }
inline Target sm90a() { return *parse_target("sm_90a"); }

}  // namespace kgen::test_targets
