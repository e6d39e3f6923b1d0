#include "jit/warm.h"

#include <atomic>
#include <mutex>
#include <thread>

#include "generator/registry.h"
#include "kgen/types.hpp"

namespace kgen {

WarmSummary warm(KernelBuilder& builder, const std::vector<WarmItem>& items, int jobs,
                 const WarmProgress& progress) {
  WarmSummary summary;
  summary.results.resize(items.size());
  if (jobs <= 0) jobs = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  jobs = std::min<int>(jobs, std::max<std::size_t>(1, items.size()));
  std::atomic<std::size_t> next{0};
  std::mutex mutex;
  std::size_t done = 0;
  auto worker = [&] {
    for (std::size_t i; (i = next.fetch_add(1)) < items.size();) {
      WarmResult r;
      r.item = &items[i];
      try {
        BuildOutcome b = builder.build(items[i].source, items[i].target);
        r.ok = true;
        r.from_cache = b.from_cache;
        r.compile_ms = b.compile_ms;
        r.resources = b.resources;
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
  return summary;
}

std::vector<WarmItem> warm_items(const std::vector<std::string>& ops, const std::vector<std::string>& archs) {
  std::vector<const OperatorInfo*> chosen;
  if (ops.empty())
    for (const auto& op : operators()) chosen.push_back(&op);
  for (const auto& name : ops) {
    const OperatorInfo* op = find_operator(name);
    if (!op) {
      std::string known;
      for (const auto& o : operators()) known += (known.empty() ? "" : ", ") + std::string(o.name);
      throw Error(Status::invalid_argument, "--ops: unknown operator '" + name + "' (known: " + known + ")");
    }
    chosen.push_back(op);
  }
  std::vector<WarmItem> items;
  for (const auto& arch : archs) {
    auto target = parse_target(arch);
    if (!target) throw Error(Status::invalid_argument, "--arch: unknown target '" + arch + "' (known: sm_80, sm_86, sm_89, sm_90, sm_90a)");
    for (const OperatorInfo* op : chosen)
      for (auto& src : op->all_variants(*target)) items.push_back({std::move(src), *target});
  }
  return items;
}

}  // namespace kgen
