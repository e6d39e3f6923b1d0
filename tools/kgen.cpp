// kgen: the command-line front of the JIT kernel library.
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cache/binary_cache.h"
#include "generator/embedded_templates.h"
#include "generator/registry.h"
#include "kgen/kgen.hpp"
#include "driver/gpu_driver.h"
#include "driver/device.h"
#include "jit/kernel_builder.h"
#include "compiler/amd_compilers.h"
#include "compiler/nvrtc.h"
#include "tuning/tuning_db.h"
#include "tools/commands.h"

namespace kgen::cli {

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

std::vector<std::string> parse_list(const std::string& text, const char* option) {
  std::vector<std::string> out = split_list(text);
  if (out.empty()) throw Error(Status::invalid_argument, std::string(option) + ": empty list '" + text + "'");
  return out;
}

std::vector<int> parse_int_list(const std::string& text, const char* option, int min) {
  std::vector<int> out;
  for (const auto& s : parse_list(text, option)) {
    std::size_t used = 0;
    int v = min - 1;
    try {
      v = std::stoi(s, &used);
    } catch (const std::exception&) {
    }
    if (used != s.size() || v < min)
      throw Error(Status::invalid_argument, std::string(option) + ": '" + s + "' is not an integer >= " + std::to_string(min));
    out.push_back(v);
  }
  return out;
}

CLI::Validator non_empty_value() {
  return CLI::Validator([](std::string& v) { return v.empty() ? std::string("empty value") : std::string(); }, "");
}

CLI::Validator non_empty_list() {
  return CLI::Validator(
      [](std::string& v) { return split_list(v).empty() ? "empty list '" + v + "'" : std::string(); }, "");
}

namespace {

// What `kgen show-config` reports, as one JSON object: version, templates digest, compilers,
// targets (the AMD targets' compiler), devices, cache layers, tuning databases, operators and
// the environment variables kgen reads.
nlohmann::ordered_json show_config() {
  nlohmann::ordered_json j;
  j["version"] = kgen::version();
  j["templates_digest"] = std::string(generator::templates_digest());
  try {
    j["compilers"]["nvrtc"] = nvrtc_version();
  } catch (const std::exception& e) {
    j["compilers"]["nvrtc"] = std::string("unavailable: ") + e.what();
  }
  j["compilers"]["hiprtc"] = hiprtc_description();
  j["compilers"]["amd_clang"] = amd_clang_description();
  j["targets"] = nlohmann::ordered_json::object();
  for (const Target& t : {*parse_target("gfx90a"), *parse_target("gfx942"), *parse_target("gfx950")}) {
    std::string compiler;
    try {
      compiler = amd_compiler_for(t).version();
    } catch (const std::exception& e) {
      compiler = std::string("none: ") + e.what();
    }
    j["targets"][t.arch] = compiler;
  }
  j["devices"] = nlohmann::ordered_json::array();
  const int n = device_count();
  if (n == 0) {
    // One process uses one vendor's GPUs: the first driver that sees a GPU.
    std::string cuda_why, hip_why;
    cuda_gpu_driver().available(&cuda_why);
    hip_gpu_driver().available(&hip_why);
    j["no_device"] = "CUDA: " + cuda_why + "; HIP: " + hip_why;
  }
  for (int i = 0; i < n; ++i) {
    const DeviceInfo& d = device_info(i);
    j["devices"].push_back({{"index", i}, {"name", d.name}, {"sm", d.cc_major * 10 + d.cc_minor},
                            {"target", d.target.arch}, {"sm_count", d.sm_count},
                            {"smem_per_block_bytes", d.max_smem_optin}, {"memory_bytes", d.total_memory}});
  }
  if (n > 0) j["driver"] = gpu_driver().version();
  // Read-only layers first (KGEN_CACHE_PATH), the writable root last; first hit wins.
  j["cache_layers"] = nlohmann::ordered_json::array();
  for (const auto& layer : KernelBuilder::global().layers())
    j["cache_layers"].push_back({{"path", layer.path.string()}, {"exists", layer.exists}, {"writable", layer.writable},
                                 {"entries", layer.entries}, {"bytes", layer.bytes}});
  j["tuning_dbs"] = nlohmann::ordered_json::array();
  for (const auto& f : default_tuning_db_files()) j["tuning_dbs"].push_back(f);
  j["tuning_shard_dir"] = default_tuning_shard_dir();
  j["autotune"] = std::string(to_string(autotune_mode()));
  j["operators"] = nlohmann::ordered_json::array();
  for (const auto& op : operators()) j["operators"].push_back(std::string(op.name));
  j["env"] = nlohmann::ordered_json::object();
  for (const char* var : {"KGEN_CACHE_DIR", "KGEN_CACHE_PATH", "KGEN_CACHE_MAX_BYTES", "KGEN_NO_JIT", "KGEN_TUNE_DB",
                          "KGEN_AUTOTUNE", "KGEN_LOG_LEVEL", "KGEN_NVRTC_PATH", "CUDA_HOME", "KGEN_AMD_COMPILER",
                          "KGEN_CLANG", "KGEN_AMD_COMPILE_TIMEOUT"}) {
    const char* v = std::getenv(var);
    j["env"][var] = v ? nlohmann::ordered_json(v) : nlohmann::ordered_json(nullptr);
  }
  return j;
}

void print_show_config(const nlohmann::ordered_json& j) {
  auto str = [](const nlohmann::ordered_json& v) { return v.get<std::string>(); };
  std::printf("kgen          %s\n", str(j["version"]).c_str());
  std::printf("templates     %.16s…\n", str(j["templates_digest"]).c_str());
  std::printf("compiler      %s\n", str(j["compilers"]["nvrtc"]).c_str());
  std::printf("amd hiprtc    %s\n", str(j["compilers"]["hiprtc"]).c_str());
  std::printf("amd clang     %s\n", str(j["compilers"]["amd_clang"]).c_str());
  for (const auto& [arch, compiler] : j["targets"].items())
    std::printf("amd %-9s builds with %s\n", arch.c_str(), str(compiler).c_str());
  if (j.contains("no_device")) std::printf("devices       none (%s)\n", str(j["no_device"]).c_str());
  for (const auto& d : j["devices"])
    std::printf("device %d      %s, sm_%d (target %s), %d SMs, %d KB smem/block, %.1f GB\n", d["index"].get<int>(),
                str(d["name"]).c_str(), d["sm"].get<int>(), str(d["target"]).c_str(), d["sm_count"].get<int>(),
                d["smem_per_block_bytes"].get<int>() / 1024, d["memory_bytes"].get<double>() / 1e9);
  if (j.contains("driver")) std::printf("driver        %s\n", str(j["driver"]).c_str());
  for (const auto& l : j["cache_layers"])
    std::printf("cache layer   %s (%s, %s, %llu entries, %.1f MB)\n", str(l["path"]).c_str(),
                l["exists"].get<bool>() ? "exists" : "not created yet", l["writable"].get<bool>() ? "writable" : "read-only",
                l["entries"].get<unsigned long long>(), l["bytes"].get<double>() / 1e6);
  if (j["tuning_dbs"].empty()) std::printf("tuning db     none yet (shards go to %s)\n", str(j["tuning_shard_dir"]).c_str());
  for (const auto& f : j["tuning_dbs"]) std::printf("tuning db     %s\n", str(f).c_str());
  std::printf("autotune      %s (KGEN_AUTOTUNE)\n", str(j["autotune"]).c_str());
  std::printf("operators    ");
  for (const auto& op : j["operators"]) std::printf(" %s", str(op).c_str());
  std::printf("\n");
  for (const auto& [var, v] : j["env"].items())
    std::printf("env %-21s %s\n", var.c_str(), v.is_null() ? "(unset)" : str(v).c_str());
}

void add_show_config(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("show-config", "Print versions, devices, cache and environment");
  auto json = std::make_shared<bool>(false);
  cmd->add_flag("--json", *json,
                "Print one JSON object (version, templates_digest, compilers, targets, devices, cache_layers, "
                "tuning_dbs, autotune, operators, env) instead of text");
  cmd->callback([json, &exit_code] {
    const nlohmann::ordered_json j = show_config();
    if (*json) std::printf("%s\n", j.dump(2).c_str());
    else print_show_config(j);
    exit_code = kOk;
  });
}

void add_inspect(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("inspect", "Show the rendered source, PTX or ISA, or resource usage of one variant's kernels");
  struct Opts {
    std::string op, variant, dtype = "bf16", arch = "sm_90a", config, what = "resources", explain;
    int head_dim = 128;
    bool causal = false;
  };
  auto o = std::make_shared<Opts>();
  o->op = std::string(operators().front().name);
  // The operators whose variant --dtype, --head-dim and --causal give, and the examples of keys.
  std::string shape_ops, examples;
  for (const OperatorInfo& op : operators()) {
    if (op.shape_variant) shape_ops += (shape_ops.empty() ? "" : ", ") + std::string(op.name);
    if (!op.help_variant.empty()) examples += (examples.empty() ? "" : ", ") + std::string(op.help_variant);
  }
  cmd->add_option("--op", o->op, "Operator (kgen show-config lists them)")->capture_default_str();
  cmd->add_option("--variant", o->variant,
                  "Variant key, as in tuning records (e.g. " + examples + "); " + shape_ops +
                      ": built from --dtype, --head-dim, --causal when absent")
      ->check(non_empty_value());
  cmd->add_option("--dtype", o->dtype, shape_ops + " without --variant: fp16, bf16 or fp32")->capture_default_str();
  cmd->add_option("--head-dim,-d", o->head_dim, shape_ops + " without --variant: head dimension")->capture_default_str();
  cmd->add_flag("--causal", o->causal, shape_ops + " without --variant: causal variant");
  cmd->add_option("--arch", o->arch, "Target (" + std::string(known_targets()) + ")")->capture_default_str();
  cmd->add_option("--config", o->config, "Config (default: the variant's heuristic for a b=1, h=16, n=4096 shape)")
      ->check(non_empty_value());
  cmd->add_option("--explain", o->explain, "Print what each field of the config CONFIG of --op means, then exit")
      ->check(non_empty_value());
  cmd->add_option("--show", o->what, "source | ptx (NVIDIA) | isa (AMD: llvm-objdump -d) | resources | key")
      ->check(CLI::IsMember({"source", "ptx", "isa", "resources", "key"}))->capture_default_str();
  cmd->callback([o, &exit_code] {
    const OperatorInfo* op = find_operator(o->op);
    if (!op) throw Error(Status::invalid_argument, "--op: unknown operator '" + o->op + "'");
    if (!o->explain.empty()) {
      const auto fields = op->explain_config(o->explain);
      if (!fields)
        throw Error(Status::invalid_argument, "--explain: '" + o->explain + "' is not a config of " + o->op);
      std::printf("%s (%s)\n", o->explain.c_str(), o->op.c_str());
      for (const ConfigField& f : *fields) std::printf("  %-8s %s\n", f.text.c_str(), f.meaning.c_str());
      exit_code = kOk;
      return;
    }
    auto target = parse_target(o->arch);
    if (!target)
      throw Error(Status::invalid_argument, "--arch: unknown target '" + o->arch + "' (known: " + std::string(known_targets()) + ")");
    const bool amd = target->vendor == Vendor::amd;
    if (o->what == "ptx" && amd) throw Error(Status::invalid_argument, "--show ptx: AMD targets have no PTX; use --show isa");
    if (o->what == "isa" && !amd) throw Error(Status::invalid_argument, "--show isa: for AMD targets; use --show ptx");
    std::string variant = o->variant;
    if (variant.empty()) {
      if (!op->shape_variant) throw Error(Status::invalid_argument, "--variant: required for --op " + o->op);
      auto dtype = parse_dtype(o->dtype);
      if (!dtype) throw Error(Status::invalid_argument, "--dtype: unknown dtype '" + o->dtype + "'");
      std::string why;
      variant = op->shape_variant(*dtype, o->head_dim, o->causal, &why);
      if (variant.empty()) throw Error(Status::invalid_argument, "--head-dim: " + why);
    }
    ConfigKernels found = op->config_kernels(variant, o->config, *target);
    if (found.problem != ConfigKernels::Problem::none)
      throw Error(Status::invalid_argument,
                  std::string(found.problem == ConfigKernels::Problem::unknown_variant ? "--variant: " : "--config: ") +
                      found.error);
    for (const KernelSource& src : found.kernels) {
      if (found.kernels.size() > 1 && o->what != "resources") std::cout << "// ===== " << src.variant << "\n";
      if (o->what == "source") {
        std::cout << src.source;
      } else if (o->what == "ptx") {
        CompiledBinary b = compiler_for(*target).compile(src, *target, /*ptx=*/true);
        std::cout.write(reinterpret_cast<const char*>(b.image.data()), b.image.size());
      } else if (o->what == "isa") {
        BuildOutcome b = KernelBuilder::global().build(src, *target);
        std::cout << amd_disassembly(b.image, *target);
      } else if (o->what == "key") {
        KernelBuilder& builder = KernelBuilder::global();
        std::cout << "key    " << builder.cache_key(src, *target) << "\nrecord " << builder.key_record(src, *target) << "\n";
      } else {
        BuildOutcome b = KernelBuilder::global().build(src, *target);
        const ResourceUsage& r = b.resources;
        std::printf("variant      %s\ntarget       %s\nthreads      %d\nsmem         %d B dynamic, %d B static\n"
                    "registers    %d\nspills       %d B stores, %d B loads\nstack frame  %d B\n%s\n",
                    src.variant.c_str(), target->arch.c_str(), src.threads, src.smem_bytes, r.static_smem,
                    r.registers, r.spill_stores, r.spill_loads, r.stack_frame,
                    b.from_cache ? "(from cache)" : ("(compiled in " + std::to_string(long(b.compile_ms)) + " ms)").c_str());
        if (amd)
          std::printf("amd          %d VGPRs, %d AGPRs, %d SGPRs, %d B LDS, %d B scratch per lane, wave %d, "
                      "built for %d threads\n",
                      r.registers, r.agprs, r.sgprs, r.static_smem, r.stack_frame, r.wave_size, r.max_threads);
        std::printf("--- compiler log ---\n%s\n", b.log.c_str());
      }
    }
    exit_code = kOk;
  });
}

}  // namespace
}  // namespace kgen::cli

int main(int argc, char** argv) {
  using namespace kgen::cli;
  CLI::App app{"kgen: JIT kernel generator and runtime for attention-family GPU kernels"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("kgen ") + kgen::version());
  int exit_code = kOk;
  add_warm_command(app, exit_code);
  add_show_config(app, exit_code);
  add_inspect(app, exit_code);
  add_cache_commands(app, exit_code);
  add_gpu_commands(app, exit_code);
  add_tune_commands(app, exit_code);
  add_replay_command(app, exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? kOk : kUsage;
  } catch (const kgen::Error& e) {
    std::fprintf(stderr, "kgen: %s\n", e.what());
    if (e.status() == kgen::Status::invalid_argument) return kUsage;
    if (e.status() == kgen::Status::no_device) return kNoDevice;
    return kFailed;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kgen: %s\n", e.what());
    return kFailed;
  }
  return exit_code;
}
