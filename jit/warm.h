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
  double compile_ms = 0;
  ResourceUsage resources;
  std::string error;  // one sentence plus the compiler log when !ok
};

struct WarmSummary {
  int compiled = 0, cached = 0, failed = 0;
  std::vector<WarmResult> results;  // in the order of the items
};

// Called after each item with (result, items done so far, total); from worker threads, serialised.
using WarmProgress = std::function<void(const WarmResult&, std::size_t, std::size_t)>;

// Builds every item through `builder` on `jobs` threads (0 = hardware concurrency).
WarmSummary warm(KernelBuilder& builder, const std::vector<WarmItem>& items, int jobs,
                 const WarmProgress& progress = {});

// Every variant of the named operators (all registered ones if `ops` is empty) for each target.
// Throws Error(invalid_argument) naming an unknown operator or target.
std::vector<WarmItem> warm_items(const std::vector<std::string>& ops, const std::vector<std::string>& archs);

}  // namespace kgen
