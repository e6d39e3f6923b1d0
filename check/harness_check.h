// The verdict of one checked run, the same for every operator's harness (attention forward,
// backward and double backward, lrpe): one named comparison per output, the determinism
// verdict where two runs were compared, and the overall pass (docs/attention.md §5).
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "check/metrics.h"
#include "tuning/timing.h"

namespace kgen {

struct NamedComparison {
  std::string name;  // "o", "lse", "dq", "q_bar", "dx", "angles", ...
  Comparison result;
};

struct HarnessCheck {
  std::string config;     // the config that ran ("" = kgen's default choice)
  std::string reference;  // which reference, over which rows
  std::vector<NamedComparison> outputs;
  bool determinism_checked = false;  // ran twice (deterministic mode)
  bool bitwise_equal = true;         // and both runs wrote the same bits
  bool pass = false;                 // some output was compared, every one passes, and bitwise_equal

  // Appends output `name`'s comparison. A row-rule failure's reason gets the row's place in the
  // tensor from `row_name(index among the compared rows)`, e.g. "(b 0, h 3, i 17)".
  void add(std::string name, Comparison c, const std::function<std::string(std::size_t)>& row_name = {});
  // Sets `pass` from the outputs and the determinism verdict.
  void finish();
  // The comparison of output `name`; throws std::out_of_range for an unknown name.
  const Comparison& get(const std::string& name) const;
  bool has(const std::string& name) const;
  // "dq: <why>" of the first failing output, "two runs wrote different bits", or "" on pass.
  std::string failure() const;
  // The largest rel_l2 among the outputs.
  double worst_rel_l2() const;
};

// "reference: ..., config ...", then one line per output ("  dq: rel_l2 ...") and the
// determinism verdict when checked.
std::string to_string(const HarnessCheck& c);

// One problem's inputs and reference on a device, computed once, against which any number of
// configs are checked (outputs NaN-poisoned before each run) and timed: what every operator's
// harness offers (AttentionForwardBench, AttentionGradientBench, LrpeBench) to `kgen check`,
// `kgen bench` and the tuner.
class HarnessBench {
 public:
  virtual ~HarnessBench() = default;
  // Runs `config` ("" = the default choice) once on poisoned outputs and compares with the reference.
  virtual HarnessCheck check(const std::string& config) = 0;
  // Median/p20/p80 of `reps` device-event-timed runs after `warmup`, inputs rotated beyond L2.
  // Does not check: callers check() the config first (docs/attention.md §5 rule 1).
  virtual Timing time(const std::string& config, int warmup, int reps) = 0;
};

// "(b 1, h 3, i 17)": a row of a (b, h, n, d) tensor, for HarnessCheck::add's row names.
std::string bhi_name(int b, int h, int i);

}  // namespace kgen
