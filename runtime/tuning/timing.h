// Device-event timings of repeated runs, as the tuner and the benches report them.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

namespace kgen {

struct Timing {
  double median_ms = 0, p20_ms = 0, p80_ms = 0, mean_ms = 0, std_ms = 0;
  int reps = 0;
};

// The Timing of runs that took `ms` each (reps = ms.size(); all zero when there are none).
inline Timing timing_of(std::vector<double> ms) {
  Timing t;
  if (ms.empty()) return t;
  std::sort(ms.begin(), ms.end());
  const int n = static_cast<int>(ms.size());
  double mean = 0, var = 0;
  for (double x : ms) mean += x / n;
  for (double x : ms) var += (x - mean) * (x - mean) / std::max(1, n - 1);
  t.median_ms = ms[ms.size() / 2], t.p20_ms = ms[ms.size() / 5], t.p80_ms = ms[(ms.size() * 4) / 5];
  t.mean_ms = mean, t.std_ms = std::sqrt(var), t.reps = n;
  return t;
}

}  // namespace kgen
