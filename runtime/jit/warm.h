// Compiling many variants on a bounded thread pool, without a device: `kgen warm`.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "generator/kernel_source.h"
#include "generator/target.h"
#include "jit/kernel_builder.h"

namespace kgen {

struct WarmItem {
  KernelSource source;
  Target target;
};

struct WarmResult {
  const WarmItem* item = nullptr;
  bool ok = false;
  bool from_cache = false;
  // The binary is in the cache (see BuildOutcome::stored); after warm() returns, also false for
  // an entry that was evicted before the end (a size cap smaller than what was warmed).
  bool stored = false;
  double compile_ms = 0;
  ResourceUsage resources;
  std::string key;          // cache key (empty when !ok)
  std::string error;        // one sentence plus the compiler log when !ok
  std::string store_error;  // why the binary is not in the cache, when ok && !stored
};

struct WarmSummary {
  int compiled = 0, cached = 0, failed = 0;
  // WarmOptions::cancelled stopped the workers before every item was taken: the results of the
  // items not taken keep item == nullptr.
  bool cancelled = false;
  // Built (compiled or cached) but not in the cache when warm() returned: the publish failed,
  // or the entry was evicted again. `evicted` counts the latter.
  int not_stored = 0, evicted = 0;
  std::vector<WarmResult> results;  // in the order of the items
};

// Called after each item with (result, items done so far, total); from worker threads, serialised.
// `result.stored` is the publish's outcome; evictions are known only when warm() returns.
using WarmProgress = std::function<void(const WarmResult&, std::size_t, std::size_t)>;

struct WarmOptions {
  int jobs = 0;  // threads; 0 = hardware concurrency
  WarmProgress progress;
  BuildOptions build;
  // Asked before each item is taken: once it returns true the workers take no more items and
  // warm() returns when the builds under way have ended. Called from worker threads.
  std::function<bool()> cancelled;
};

// Builds every item through `builder` on `options.jobs` threads, then checks that each built
// item's entry is still in the cache.
WarmSummary warm(KernelBuilder& builder, const std::vector<WarmItem>& items, const WarmOptions& options);
// The same, with only the thread count, progress and build options.
WarmSummary warm(KernelBuilder& builder, const std::vector<WarmItem>& items, int jobs,
                 const WarmProgress& progress = {}, const BuildOptions& build_options = {});

// The targets named by `archs` ("sm_80", "sm_90a", …). Throws Error(invalid_argument) naming an
// unknown one, or saying that none was given.
std::vector<Target> warm_targets(const std::vector<std::string>& archs);

// Every variant of the named operators (all registered ones if `ops` is empty) for each target.
// Throws Error(invalid_argument) naming an unknown operator or target.
std::vector<WarmItem> warm_items(const std::vector<std::string>& ops, const std::vector<std::string>& archs);

// The kernels of every registered operator's built-in defaults for each target
// (OperatorInfo::default_variants): what a deployment's common calls run, a small part of
// warm_items({}, archs). Throws Error(invalid_argument) naming an unknown target.
std::vector<WarmItem> default_warm_items(const std::vector<std::string>& archs);

}  // namespace kgen
