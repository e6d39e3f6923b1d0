#include "jit/warm.h"

#include <atomic>
#include <mutex>
#include <thread>

#include "generator/registry.h"
#include "kgen/types.hpp"

namespace kgen {

WarmSummary warm(KernelBuilder& builder, const std::vector<WarmItem>& items, const WarmOptions& options) {
  WarmSummary summary;
  summary.results.resize(items.size());
  int jobs = options.jobs;
  if (jobs <= 0) jobs = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  jobs = std::min<int>(jobs, std::max<std::size_t>(1, items.size()));
  std::atomic<std::size_t> next{0};
  std::atomic<bool> cancelled{false};
  std::mutex mutex;
  std::size_t done = 0;
  const WarmProgress& progress = options.progress;
  auto worker = [&] {
    while (true) {
      if (options.cancelled && !cancelled && options.cancelled()) cancelled = true;
      if (cancelled) return;
      const std::size_t i = next.fetch_add(1);
      if (i >= items.size()) return;
      WarmResult r;
      r.item = &items[i];
      try {
        BuildOutcome b = builder.build(items[i].source, items[i].target, options.build);
        r.ok = true;
        r.from_cache = b.from_cache;
        r.stored = b.stored;
        r.compile_ms = b.compile_ms;
        r.resources = b.resources;
        r.key = std::move(b.key);
        r.store_error = std::move(b.store_error);
      } catch (const std::exception& e) {
        r.error = e.what();
      }
      std::lock_guard lock(mutex);
      summary.results[i] = r;
      (r.ok ? (r.from_cache ? summary.cached : summary.compiled) : summary.failed)++;
      ++done;
      if (progress) progress(summary.results[i], done, items.size());
    }
  };
  std::vector<std::thread> pool;
  for (int t = 0; t < jobs; ++t) pool.emplace_back(worker);
  for (auto& t : pool) t.join();
  summary.cancelled = done < items.size();
  // A size cap below what was warmed evicts entries published earlier in this run.
  for (WarmResult& r : summary.results) {
    if (r.ok && r.stored && !builder.layered().contains(r.key)) {
      r.stored = false;
      r.store_error = "evicted from the cache before warm ended";
      if (const std::uint64_t cap = builder.layered().max_bytes())
        r.store_error += " (size cap " + std::to_string(cap) + " bytes, KGEN_CACHE_MAX_BYTES)";
      ++summary.evicted;
    }
    if (r.ok && !r.stored) ++summary.not_stored;
  }
  return summary;
}

WarmSummary warm(KernelBuilder& builder, const std::vector<WarmItem>& items, int jobs, const WarmProgress& progress,
                 const BuildOptions& build_options) {
  return warm(builder, items, WarmOptions{jobs, progress, build_options, {}});
}

std::vector<Target> warm_targets(const std::vector<std::string>& archs) {
  std::vector<Target> targets;
  for (const auto& arch : archs) {
    auto target = parse_target(arch);
    if (!target) throw Error(Status::invalid_argument, "--archs: unknown target '" + arch + "' (known: " + std::string(known_targets()) + ")");
    targets.push_back(*target);
  }
  if (targets.empty()) throw Error(Status::invalid_argument, "--archs: no target given");
  return targets;
}

std::vector<WarmItem> warm_items(const std::vector<std::string>& ops, const std::vector<std::string>& archs) {
  std::vector<const OperatorInfo*> chosen;
  if (ops.empty())
    for (const auto& op : operators()) chosen.push_back(&op);
  for (const auto& name : ops) {
    const OperatorInfo* op = find_operator(name);
    if (!op) throw Error(Status::invalid_argument, "--ops: unknown operator '" + name + "' (known: " + operator_names() + ")");
    chosen.push_back(op);
  }
  std::vector<WarmItem> items;
  for (const Target& target : warm_targets(archs))
    for (const OperatorInfo* op : chosen)
      for (auto& src : op->all_variants(target)) items.push_back({std::move(src), target});
  return items;
}

std::vector<WarmItem> default_warm_items(const std::vector<std::string>& archs) {
  std::vector<WarmItem> items;
  for (const Target& target : warm_targets(archs))
    for (const OperatorInfo& op : operators())
      for (auto& src : op.default_variants(target)) items.push_back({std::move(src), target});
  return items;
}

}  // namespace kgen
