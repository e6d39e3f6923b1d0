#include "jit/kernel_builder.h"

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <sstream>

#include "cache/cache_key.h"
#include "compiler/amd_code_object.h"
#include "cache/sha256.h"
#include "generator/embedded_templates.h"
#include "kgen/types.hpp"
#include "base/log.h"
#include "base/size.h"

namespace kgen {
namespace {

bool no_jit() {
  const char* v = std::getenv("KGEN_NO_JIT");
  return v && *v && std::string_view(v) != "0";
}

nlohmann::json resources_json(const ResourceUsage& r) {
  nlohmann::json j = {{"registers", r.registers},     {"spill_stores", r.spill_stores},
                      {"spill_loads", r.spill_loads}, {"stack_frame", r.stack_frame},
                      {"static_smem", r.static_smem}, {"serialized_wgmma", r.serialized_wgmma}};
  if (r.wave_size > 0) {  // AMD code objects
    j["agprs"] = r.agprs;
    j["sgprs"] = r.sgprs;
    j["wave_size"] = r.wave_size;
    j["max_threads"] = r.max_threads;
  }
  return j;
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
  r.agprs = j.value("agprs", 0);
  r.sgprs = j.value("sgprs", 0);
  r.wave_size = j.value("wave_size", 0);
  r.max_threads = j.value("max_threads", 0);
  r.parsed = r.registers >= 0;
  return r;
}

std::uint64_t max_bytes_from_env() { return byte_size_from_env("KGEN_CACHE_MAX_BYTES"); }

// Why an entry's metadata cannot be served under a key whose record is `record` (nullopt if it
// can): it must be an object with the fields this file writes, of the types it writes them with,
// and name the same key record, which ties the binary to its source, compiler, options and
// target.
std::optional<std::string> metadata_problem(const nlohmann::json& m, const std::string& record) {
  if (!m.is_object()) return "metadata is not a JSON object";
  for (const char* field : {"target", "entry", "key_record", "log"})
    if (!m.contains(field) || !m[field].is_string()) return std::string("metadata field '") + field + "' is missing or not a string";
  if (!m.contains("resources") || !m["resources"].is_object()) return "metadata field 'resources' is missing or not an object";
  for (const auto& [name, value] : m["resources"].items())
    if (name == "serialized_wgmma" ? !value.is_boolean() : !value.is_number_integer())
      return "metadata resource '" + name + "' has the wrong type";
  if (m["key_record"].get<std::string>() != record)
    return "metadata names other compile inputs than the key was computed from";
  return std::nullopt;
}

std::vector<std::filesystem::path> layers_from_env() {
  const char* v = std::getenv("KGEN_CACHE_PATH");
  return v ? parse_cache_path(v) : std::vector<std::filesystem::path>{};
}

std::vector<std::filesystem::path> with_root(std::vector<std::filesystem::path> layers,
                                             std::filesystem::path root) {
  layers.push_back(std::move(root));
  return layers;
}

// Why the CUBIN `image` cannot be for `target` (nullopt if it can); an ELF ABI version this
// check does not know is refused, since the target cannot be read from it. CUDA ELF: EI_OSABI 0x41, e_machine 190 (EM_CUDA); the SM
// is e_flags & 0xff up to ABI version 7 and (e_flags >> 8) & 0xff from version 8.
std::optional<std::string> cubin_target_mismatch(const std::vector<std::byte>& image, const Target& target) {
  auto u8 = [&](std::size_t i) { return std::to_integer<unsigned>(image[i]); };
  const unsigned machine = u8(18) | (u8(19) << 8);
  if (machine != 190) return "binary is not a CUDA ELF (e_machine " + std::to_string(machine) + ")";
  const unsigned abi = u8(8);
  const std::uint32_t flags = u8(48) | (u8(49) << 8) | (u8(50) << 16) | (static_cast<std::uint32_t>(u8(51)) << 24);
  int sm = -1;
  if (abi == 8) sm = static_cast<int>((flags >> 8) & 0xff);
  else if (abi >= 4 && abi <= 7) sm = static_cast<int>(flags & 0xff);
  if (sm < 0) return "CUBIN has ELF ABI version " + std::to_string(abi) + ", which kgen cannot check against " + target.arch;
  if (sm != target.sm) return "CUBIN is for sm_" + std::to_string(sm) + ", not " + target.arch;
  return std::nullopt;
}

// Why the AMD code object `image` cannot be for `target`: e_machine 224 (EM_AMDGPU), the
// processor from the mach byte of e_flags and the xnack/sramecc settings must spell target.arch.
std::optional<std::string> code_object_target_mismatch(const std::vector<std::byte>& image, const Target& target) {
  try {
    const AmdCodeObject co =
        read_amd_code_object(std::span(reinterpret_cast<const std::uint8_t*>(image.data()), image.size()));
    const std::string id = co.target.id();
    if (id != target.arch) return "code object is for " + id + ", not " + target.arch;
  } catch (const Error& e) {
    return std::string(e.what());
  }
  return std::nullopt;
}

// Why an AMD code object cannot be launched as `source` says (nullopt if it can, and on NVIDIA):
// kgen launches wave64 blocks of source.threads threads, so the code object must be built for
// wave64 and for exactly that block size (__launch_bounds__), or the launch fails or runs with
// the wrong register budget.
std::optional<std::string> amd_launch_mismatch(const ResourceUsage& r, const KernelSource& source, const Target& target) {
  if (target.vendor != Vendor::amd || !r.parsed || source.threads <= 0) return std::nullopt;
  if (r.wave_size != 64) return "code object is built for wave" + std::to_string(r.wave_size) + ", kgen launches wave64";
  if (r.max_threads != source.threads)
    return "code object is built for blocks of " + std::to_string(r.max_threads) + " threads, launched with " +
           std::to_string(source.threads) + " (__launch_bounds__ not honoured)";
  return std::nullopt;
}

// Why the binary `image` cannot be for `target`, by the vendor's ELF header.
std::optional<std::string> binary_target_mismatch(const std::vector<std::byte>& image, const Target& target) {
  auto u8 = [&](std::size_t i) { return std::to_integer<unsigned>(image[i]); };
  if (image.size() < 64 || u8(0) != 0x7f || u8(1) != 'E' || u8(2) != 'L' || u8(3) != 'F')
    return "binary is not an ELF file";
  if (u8(4) != 2 || u8(5) != 1) return "binary is not a 64-bit little-endian ELF file";
  return target.vendor == Vendor::amd ? code_object_target_mismatch(image, target) : cubin_target_mismatch(image, target);
}

}  // namespace

std::vector<std::filesystem::path> parse_cache_path(std::string_view value) {
  std::vector<std::filesystem::path> out;
  std::size_t start = 0;
  while (start <= value.size()) {
    std::size_t end = value.find(':', start);
    if (end == std::string_view::npos) end = value.size();
    if (end > start) out.emplace_back(std::string(value.substr(start, end - start)));
    start = end + 1;
  }
  return out;
}

std::string host_platform() {
#if defined(__linux__) && defined(__x86_64__)
  return "linux-x86_64";
#elif defined(__linux__) && defined(__aarch64__)
  return "linux-aarch64";
#else
  return "unknown";
#endif
}

KernelBuilder::KernelBuilder(std::filesystem::path cache_root)
    : KernelBuilder(std::move(cache_root), layers_from_env()) {}

KernelBuilder::KernelBuilder(std::filesystem::path cache_root, std::vector<std::filesystem::path> read_layers)
    : layers_(with_root(std::move(read_layers), std::move(cache_root))) {
  layers_.set_max_bytes(max_bytes_from_env());
}

std::optional<cache::CacheEntry> KernelBuilder::load_checked(const std::string& key, const KernelSource& source,
                                                             const Target& target) {
  for (std::size_t first = 0; first < layers_.size();) {
    std::size_t index = 0;
    auto entry = layers_.load(key, &index, first);
    if (!entry) return std::nullopt;
    std::optional<std::string> why = metadata_problem(entry->metadata, key_record(source, target));
    const nlohmann::json& m = entry->metadata;
    const std::string meta_target = !why ? m.value("target", "") : "";
    const std::string meta_entry = !why ? m.value("entry", "") : "";
    if (why) {
    } else if (meta_target != target.arch) {
      why = "metadata names target '" + meta_target + "' under a key computed for " + target.arch;
    } else if (meta_entry != source.entry) {
      why = "metadata names entry point '" + meta_entry + "', not " + source.entry;
    } else {
      why = binary_target_mismatch(entry->binary, target);
    }
    if (!why) return entry;
    // Never served; removed if the layer allows it. A later layer may still hold a good copy.
    layers_.layer(index).reject(key, *why + " (not served)");
    first = index + 1;
  }
  return std::nullopt;
}

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
      .add("compiler", compiler_for(target).version())
      .add("target", target.arch)
      .add_sorted("options", compiler_for(target).options(target, false))
      .add("platform", host_platform());
  return k.record();
}

std::string KernelBuilder::cache_key(const KernelSource& source, const Target& target) const {
  return cache::sha256_hex(key_record(source, target));
}

BuildOutcome KernelBuilder::build(const KernelSource& source, const Target& target, const BuildOptions& options) {
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
    promise.set_value(build_uncached(source, target, key, options));
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
                                           const std::string& key, const BuildOptions& options) {
  auto from_entry = [&](cache::CacheEntry&& e) {
    BuildOutcome out;
    out.key = key;
    out.image = std::move(e.binary);
    out.resources = resources_from_json(e.metadata.value("resources", nlohmann::json{}));
    out.log = e.metadata.value("log", "");
    out.from_cache = true;
    out.stored = true;
    return out;
  };
  if (auto hit = load_checked(key, source, target)) return from_entry(std::move(*hit));
  if (no_jit())
    throw Error(Status::compile_error, "KGEN_NO_JIT is set and " + source.variant + " for " +
                                           target.arch + " is not in the cache (key " +
                                           key.substr(0, 12) + "): pre-warm with `kgen warm`");
  // Another process may be compiling the same key: wait for its lock, then look again.
  // The lock lives in the layer publishes go to (the root if none is writable).
  auto lock = cache::KeyLock::acquire_for(publish_cache(), key, std::chrono::minutes(5));
  if (lock.held())
    if (auto hit = load_checked(key, source, target)) return from_entry(std::move(*hit));

  CompiledBinary bin = compiler_for(target).compile(source, target);
  if (auto why = amd_launch_mismatch(bin.resources, source, target))
    throw Error(Status::compile_error, source.variant + " for " + target.arch + ": " + *why);
  if (!bin.resources.parsed)
    log(LogLevel::warn, "no ptxas report for " + source.variant + " (registers and spills unknown): the compiler "
                        "log holds no 'Used N registers' line");
  BuildOutcome out;
  out.key = key;
  out.image = std::move(bin.image);
  out.resources = bin.resources;
  out.compile_ms = bin.compile_ms;
  out.log = bin.log;
  nlohmann::json meta = {
      {"op", source.op},          {"variant", source.variant},     {"entry", source.entry},
      {"target", target.arch},    {"compiler", compiler_for(target).version()},   {"kgen_version", KGEN_VERSION},
      {"threads", source.threads}, {"smem_bytes", source.smem_bytes},
      {"compile_ms", bin.compile_ms}, {"resources", resources_json(bin.resources)},
      {"source", source.source},  {"log", bin.log}, {"key_record", key_record(source, target)}};
  out.stored = layers_.publish(key, cache::CacheEntry{out.image, meta}, &out.store_error);
  lock.release_and_remove();
  if (!options.log_compile) return out;
  std::ostringstream line;
  line << "compiled " << source.variant << " for " << target.arch << " in "
       << static_cast<long>(bin.compile_ms) << " ms (key " << key.substr(0, 12) << ", "
       << bin.resources.registers << " registers, " << bin.resources.spill_stores
       << " B spilled" << (out.stored ? "" : ", not stored in the cache") << ")";
  log(LogLevel::info, line.str());
  return out;
}

}  // namespace kgen
