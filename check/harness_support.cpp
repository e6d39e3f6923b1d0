#include "check/harness_support.h"

#include <utility>

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
  return timing_of(std::move(ms));
}

}  // namespace kgen
