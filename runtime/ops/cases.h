// What the descriptions of calls share (each operator's own is in its runtime/ops/<op>_tuning.h:
// shape, dtype, layout, config, input seed, what the tuner tunes and the checking layer checks).
// Plain data; no device is needed to make one.
#pragma once

namespace kgen {

// The order of a 4-d (batch, heads, n, d) tensor's dims in memory.
enum class Layout { bhnd, bnhd };

}  // namespace kgen
