#include "tuning/tuning_decision.h"

#include <map>
#include <memory>
#include <mutex>

#include "driver/device.h"
#include "base/log.h"

namespace kgen {
namespace {

const TuningDatabase& tuning_database(int device) {
  static std::mutex mutex;
  static std::map<int, std::unique_ptr<TuningDatabase>> dbs;
  std::lock_guard lock(mutex);
  auto& db = dbs[device];
  if (!db) db = std::make_unique<TuningDatabase>(TuningDatabase::open(default_tuning_db_files(), TuningContext::current(device)));
  return *db;
}

}  // namespace

DecisionContext decision_context(int device) {
  const DeviceInfo& dev = device_info(device);
  DecisionContext ctx;
  ctx.target = dev.target;
  ctx.sm_count = dev.sm_count;
  ctx.device = device;
  ctx.db = &tuning_database(device);
  ctx.mode = autotune_mode();
  ctx.tune = [device](const TuningProblem& problem) { return autotune_and_record(problem, device); };
  return ctx;
}

ConfigDecision decide_config(const DecisionRequest& r, const DecisionContext& ctx) {
  const std::string op(r.problem->op());
  const std::string variant = r.problem->variant_key();
  const std::string bucket = r.problem->bucket();
  std::optional<ConfigDecision> chosen;
  auto tune_now = [&](const char* why) {
    if (!ctx.tune) return;
    if (auto c = ctx.tune(*r.problem)) chosen = ConfigDecision{*c, std::string("autotuned now (KGEN_AUTOTUNE=") + why + ")"};
  };
  if (ctx.mode == AutotuneMode::force) tune_now("force");
  if (!chosen && ctx.db)
    if (auto hit = ctx.db->lookup(op, variant, bucket)) {
      if (auto why = r.invalid(hit->record.config))
        log(LogLevel::warn, "tuning record " + hit->record.config + " for " + variant + " " + hit->record.bucket + " in " +
                                hit->source_file + " is not valid here (" + *why + "); ignored");
      else
        chosen = ConfigDecision{hit->record.config, std::string(hit->exact ? "exact" : "nearest") + " record " +
                                                        hit->record.bucket + " in " + hit->source_file};
    }
  if (!chosen && ctx.mode == AutotuneMode::on_miss) tune_now("on-miss");
  if (!chosen) chosen = ConfigDecision{r.heuristic(), "built-in heuristic"};
  log(LogLevel::info, op + " " + variant + " " + bucket + " -> " + chosen->config + " (" + chosen->source + ")");
  return *chosen;
}

}  // namespace kgen
