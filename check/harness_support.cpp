#include "check/harness_support.h"

#include <cmath>

namespace kgen {

Timing time_runs(const std::function<void(int)>& run, int warmup, int reps, GpuStream stream) {
  const GpuDriver& gpu = gpu_driver();
  for (int i = 0; i < warmup; ++i) run(i);
  // Destroyed on every path, a failed run's included.
  struct Events {
    std::vector<GpuEvent> e;
    ~Events() {
      for (GpuEvent x : e) gpu_driver().destroy_event(x);
    }
  } events;
  for (int i = 0; i < 2 * reps; ++i) events.e.push_back(gpu.create_event());
  for (int r = 0; r < reps; ++r) {
    gpu.record(events.e[2 * r], stream);
    run(r);
    gpu.record(events.e[2 * r + 1], stream);
  }
  gpu.synchronize(stream, "timed runs");
  std::vector<double> ms(reps);
  for (int r = 0; r < reps; ++r) ms[r] = gpu.elapsed_ms(events.e[2 * r], events.e[2 * r + 1]);
  std::sort(ms.begin(), ms.end());
  double mean = 0, var = 0;
  for (double x : ms) mean += x / reps;
  for (double x : ms) var += (x - mean) * (x - mean) / std::max(1, reps - 1);
  Timing t;
  t.median_ms = ms[ms.size() / 2], t.p20_ms = ms[ms.size() / 5], t.p80_ms = ms[(ms.size() * 4) / 5];
  t.mean_ms = mean, t.std_ms = std::sqrt(var), t.reps = reps;
  return t;
}

}  // namespace kgen
