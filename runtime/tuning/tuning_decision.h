// Launch-path config decisions for every operator when the caller names no config: the
// precedence (KGEN_AUTOTUNE=force > a tuning-database record valid for the call > KGEN_AUTOTUNE=
// on-miss > the built-in heuristic; an explicit config, checked by the op, comes before all of
// them), the per-device database, and the per-process table that lets a hot launch skip both.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <utility>

#include "generator/target.h"
#include "tuning/autotune.h"
#include "tuning/tuning_db.h"

namespace kgen {

// What a decision may consult besides the call. Tests build one by hand (no GPU needed).
struct DecisionContext {
  Target target;
  int sm_count = 0;
  int device = 0;
  const TuningDatabase* db = nullptr;  // nullptr: no database
  AutotuneMode mode = AutotuneMode::off;
  // Tunes a problem and records its winner (KGEN_AUTOTUNE); empty: never tunes.
  std::function<std::optional<std::string>(const TuningProblem&)> tune;
};

// GPU `device`'s context: its target and SM count, the tuning database of
// default_tuning_db_files() (opened once per device and process), autotune_mode(), and
// autotune_and_record. Throws Error(no_device) without a GPU.
DecisionContext decision_context(int device);

// What one decision needs from the op.
struct DecisionRequest {
  const TuningProblem* problem = nullptr;  // op, variant key and bucket; what KGEN_AUTOTUNE tunes
  // Why a recorded config cannot serve this call (nullopt when it can).
  std::function<std::optional<std::string>(const std::string& config)> invalid;
  // The built-in heuristic's config, as text.
  std::function<std::string()> heuristic;
};

struct ConfigDecision {
  std::string config;  // canonical text
  std::string source;  // "exact record nq4096... in FILE", "built-in heuristic", "autotuned now (...)"
};

// Decides by the precedence above; an invalid record is ignored with one warning naming it. Logs
// one info line (op, variant, bucket, config, source). Uncached: launch paths cache through a
// DecisionTable.
ConfigDecision decide_config(const DecisionRequest& request, const DecisionContext& context);

// The key of one cached decision: the op's spec fields packed by the op (runtime/jit/kernel_table's
// KeyPacker), the numbers of its shape bucket (runtime/ops/buckets: the same rule as the database's
// text), the device, and the op's shape class (what its heuristic reads of the exact shape beyond
// the bucket, e.g. attention_forward_shape_class: calls of one bucket may differ there).
struct DecisionKey {
  std::uint64_t spec = 0;
  std::array<long long, 4> bucket{};
  int device = 0;
  int shape_class = 0;
  bool operator==(const DecisionKey&) const = default;
};

struct DecisionKeyHash {
  std::size_t operator()(const DecisionKey& k) const noexcept {
    std::size_t h = static_cast<std::size_t>(k.spec);
    for (long long v : k.bucket) h = h * 1000003u ^ static_cast<std::size_t>(v);
    h = h * 1000003u ^ static_cast<std::size_t>(k.device);
    return h * 1000003u ^ static_cast<std::size_t>(k.shape_class);
  }
};

// One op's decisions for this process: get() returns the stored config of `key`, or runs
// `decide` (outside the lock: a decision may tune, and tuning launches other ops) and stores its
// result; concurrent first calls may both decide, the first stored wins. Thread-safe.
template <class Config>
class DecisionTable {
 public:
  template <class Decide>
  Config get(const DecisionKey& key, Decide&& decide) {
    {
      std::shared_lock lock(mutex_);
      if (auto it = table_.find(key); it != table_.end()) return it->second;
    }
    Config config = decide();
    std::unique_lock lock(mutex_);
    return table_.emplace(key, std::move(config)).first->second;
  }

 private:
  std::shared_mutex mutex_;
  std::unordered_map<DecisionKey, Config, DecisionKeyHash> table_;
};

}  // namespace kgen
