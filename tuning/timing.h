// Device-event timings of repeated runs, as the tuner and the benches report them.
#pragma once

namespace kgen {

struct Timing {
  double median_ms = 0, p20_ms = 0, p80_ms = 0, mean_ms = 0, std_ms = 0;
  int reps = 0;
};

}  // namespace kgen
