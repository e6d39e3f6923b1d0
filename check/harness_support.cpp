#include "check/harness_support.h"

#include <cmath>

namespace kgen {

Timing time_runs(const std::function<void(int)>& run, int warmup, int reps, CUstream stream) {
  const CudaDriver& cu = cuda_driver();
  for (int i = 0; i < warmup; ++i) run(i);
  std::vector<CUevent> events(2 * reps);
  for (auto& e : events) cuda_check(cu.cuEventCreate(&e, CU_EVENT_DEFAULT), "cuEventCreate");
  for (int r = 0; r < reps; ++r) {
    cu.cuEventRecord(events[2 * r], stream);
    run(r);
    cu.cuEventRecord(events[2 * r + 1], stream);
  }
  CUresult sync = cu.cuStreamSynchronize(stream);
  std::vector<double> ms(reps);
  for (int r = 0; r < reps && sync == CUDA_SUCCESS; ++r) {
    float t = 0;
    cu.cuEventElapsedTime(&t, events[2 * r], events[2 * r + 1]);
    ms[r] = t;
  }
  for (auto& e : events) cu.cuEventDestroy(e);
  cuda_check(sync, "timed runs");
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
