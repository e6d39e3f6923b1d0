#include "tuning/bench_registry.h"

#include <map>
#include <mutex>
#include <string>

#include "kgen/types.hpp"

namespace kgen {
namespace {

std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}

std::map<std::string, ProblemBenchHooks, std::less<>>& registry() {
  static std::map<std::string, ProblemBenchHooks, std::less<>> r;
  return r;
}

}  // namespace

void install_problem_bench(std::string_view op, ProblemBenchHooks hooks) {
  std::lock_guard lock(registry_mutex());
  registry()[std::string(op)] = std::move(hooks);
}

const ProblemBenchHooks& problem_bench(std::string_view op) {
  std::lock_guard lock(registry_mutex());
  auto it = registry().find(op);
  if (it == registry().end())
    throw Error(Status::internal, "no bench is installed for operator '" + std::string(op) +
                                      "': tuning needs kgen's checking layer linked into the program");
  return it->second;  // entries are never erased, so the reference outlives the lock
}

}  // namespace kgen
