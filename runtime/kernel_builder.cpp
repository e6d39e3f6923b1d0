#include "runtime/kernel_builder.h"

#include <cstdlib>
#include <sstream>

#include "cache/cache_key.h"
#include "cache/sha256.h"
#include "generator/embedded_templates.h"
#include "kgen/types.hpp"
#include "runtime/log.h"

namespace kgen {
namespace {

bool no_jit() {
  const char* v = std::getenv("KGEN_NO_JIT");
  return v && *v && std::string_view(v) != "0";
}

nlohmann::json resources_json(const ResourceUsage& r) {
  return {{"registers", r.registers},     {"spill_stores", r.spill_stores},
          {"spill_loads", r.spill_loads}, {"stack_frame", r.stack_frame},
          {"static_smem", r.static_smem}, {"serialized_wgmma", r.serialized_wgmma}};
}

ResourceUsage resources_from_json(const nlohmann::json& j) {
  ResourceUsage r;
  if (!j.is_object()) return r;
  r.registers = j.value("registers", -1);
  r.spill_stores = j.value("spill_stores", 0);
  r.spill_loads = j.value("spill_loads", 0);
  r.stack_frame = j.value("stack_frame", 0);
  r.static_smem = j.value("static_smem", 0);
  r.serialized_wgmma = j.value("serialized_wgmma", false);
  r.parsed = r.registers >= 0;
  return r;
}

}  // namespace

std::string host_platform() {
#if defined(__linux__) && defined(__x86_64__)
  return "linux-x86_64";
#elif defined(__linux__) && defined(__aarch64__)
  return "linux-aarch64";
#else
  return "unknown";
#endif
}

KernelBuilder::KernelBuilder(std::filesystem::path cache_root) : cache_(std::move(cache_root)) {}

KernelBuilder& KernelBuilder::global() {
  static KernelBuilder builder(cache::default_cache_root());
  return builder;
}

std::string KernelBuilder::key_record(const KernelSource& source, const Target& target) const {
  cache::CacheKeyBuilder k;
  k.add("kgen_version", KGEN_VERSION)
      .add("templates", generator::templates_digest())
      .add("source", cache::sha256_hex(source.source))
      .add("entry", source.entry)
      .add("compiler", nvrtc_version())
      .add("target", target.arch)
      .add_sorted("options", compile_options(target, false))
      .add("platform", host_platform());
  return k.record();
}

std::string KernelBuilder::cache_key(const KernelSource& source, const Target& target) const {
  return cache::sha256_hex(key_record(source, target));
}

BuildOutcome KernelBuilder::build(const KernelSource& source, const Target& target) {
  const std::string key = cache_key(source, target);
  std::promise<BuildOutcome> promise;
  std::shared_future<BuildOutcome> future;
  bool owner = false;
  {
    std::lock_guard lock(mutex_);
    auto it = in_flight_.find(key);
    if (it == in_flight_.end()) {
      future = promise.get_future().share();
      in_flight_.emplace(key, future);
      owner = true;
    } else {
      future = it->second;
    }
  }
  if (!owner) {  // another thread compiles this key: wait for it; this call compiled nothing
    BuildOutcome shared = future.get();
    shared.from_cache = true;
    shared.compile_ms = 0;
    return shared;
  }
  try {
    promise.set_value(build_uncached(source, target, key));
  } catch (...) {
    promise.set_exception(std::current_exception());
  }
  {
    std::lock_guard lock(mutex_);
    in_flight_.erase(key);
  }
  return future.get();
}

BuildOutcome KernelBuilder::build_uncached(const KernelSource& source, const Target& target,
                                           const std::string& key) {
  auto from_entry = [&](cache::CacheEntry&& e) {
    BuildOutcome out;
    out.key = key;
    out.image = std::move(e.binary);
    out.resources = resources_from_json(e.metadata.value("resources", nlohmann::json{}));
    out.log = e.metadata.value("log", "");
    out.from_cache = true;
    return out;
  };
  if (auto hit = cache_.load(key)) return from_entry(std::move(*hit));
  if (no_jit())
    throw Error(Status::compile_error, "KGEN_NO_JIT is set and " + source.variant + " for " +
                                           target.arch + " is not in the cache (key " +
                                           key.substr(0, 12) + "): pre-warm with `kgen warm`");
  // Another process may be compiling the same key: wait for its lock, then look again.
  auto lock = cache::KeyLock::acquire_for(cache_, key, std::chrono::minutes(5));
  if (lock.held())
    if (auto hit = cache_.load(key)) return from_entry(std::move(*hit));

  CompiledBinary bin = compile(source, target);
  BuildOutcome out;
  out.key = key;
  out.image = std::move(bin.image);
  out.resources = bin.resources;
  out.compile_ms = bin.compile_ms;
  out.log = bin.log;
  nlohmann::json meta = {
      {"op", source.op},          {"variant", source.variant},     {"entry", source.entry},
      {"target", target.arch},    {"compiler", nvrtc_version()},   {"kgen_version", KGEN_VERSION},
      {"threads", source.threads}, {"smem_bytes", source.smem_bytes},
      {"compile_ms", bin.compile_ms}, {"resources", resources_json(bin.resources)},
      {"source", source.source},  {"log", bin.log}};
  cache_.publish(key, cache::CacheEntry{out.image, meta});
  std::ostringstream line;
  line << "compiled " << source.variant << " for " << target.arch << " in "
       << static_cast<long>(bin.compile_ms) << " ms (key " << key.substr(0, 12) << ", "
       << bin.resources.registers << " registers, " << bin.resources.spill_stores
       << " B spilled)";
  log(LogLevel::info, line.str());
  return out;
}

}  // namespace kgen
