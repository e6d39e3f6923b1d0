// kgen: the command-line front of the JIT kernel library.
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <sstream>

#include "cache/binary_cache.h"
#include "generator/attention_forward.h"
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

void add_show_config(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("show-config", "Print versions, devices, cache and environment");
  cmd->callback([&exit_code] {
    std::printf("kgen          %s\n", kgen::version());
    std::printf("templates     %.16s…\n", std::string(generator::templates_digest()).c_str());
    try {
      std::printf("compiler      %s\n", nvrtc_version().c_str());
    } catch (const std::exception& e) {
      std::printf("compiler      unavailable: %s\n", e.what());
    }
    std::printf("amd hiprtc    %s\n", hiprtc_description().c_str());
    std::printf("amd clang     %s\n", amd_clang_description().c_str());
    for (const Target& t : {*parse_target("gfx90a"), *parse_target("gfx942"), *parse_target("gfx950")}) {
      std::string compiler;
      try {
        compiler = amd_compiler_for(t).version();
      } catch (const std::exception& e) {
        compiler = std::string("none: ") + e.what();
      }
      std::printf("amd %-9s builds with %s\n", t.arch.c_str(), compiler.c_str());
    }
    int n = device_count();
    if (n == 0) {
      // One process uses one vendor's GPUs: the first driver that sees a GPU.
      std::string cuda_why, hip_why;
      cuda_gpu_driver().available(&cuda_why);
      hip_gpu_driver().available(&hip_why);
      std::printf("devices       none (CUDA: %s; HIP: %s)\n", cuda_why.c_str(), hip_why.c_str());
    }
    for (int i = 0; i < n; ++i) {
      const DeviceInfo& d = device_info(i);
      std::printf("device %d      %s, sm_%d%d (target %s), %d SMs, %d KB smem/block, %.1f GB\n", i,
                  d.name.c_str(), d.cc_major, d.cc_minor, d.target.arch.c_str(), d.sm_count,
                  d.max_smem_optin / 1024, d.total_memory / 1e9);
    }
    if (n > 0) {
      std::printf("driver        %s\n", gpu_driver().version().c_str());
    }
    // Read-only layers first (KGEN_CACHE_PATH), the writable root last; first hit wins.
    for (const auto& layer : KernelBuilder::global().layers())
      std::printf("cache layer   %s (%s, %s, %llu entries, %.1f MB)\n", layer.path.c_str(),
                  layer.exists ? "exists" : "not created yet", layer.writable ? "writable" : "read-only",
                  static_cast<unsigned long long>(layer.entries), layer.bytes / 1e6);
    auto db_files = default_tuning_db_files();
    if (db_files.empty()) std::printf("tuning db     none yet (shards go to %s)\n", default_tuning_shard_dir().c_str());
    for (const auto& f : db_files) std::printf("tuning db     %s\n", f.c_str());
    std::printf("autotune      %s (KGEN_AUTOTUNE)\n", std::string(to_string(autotune_mode())).c_str());
    std::printf("operators    ");
    for (const auto& op : operators()) std::printf(" %s", std::string(op.name).c_str());
    std::printf("\n");
    for (const char* var : {"KGEN_CACHE_DIR", "KGEN_CACHE_PATH", "KGEN_CACHE_MAX_BYTES", "KGEN_NO_JIT", "KGEN_TUNE_DB",
                            "KGEN_AUTOTUNE", "KGEN_LOG_LEVEL", "KGEN_NVRTC_PATH", "CUDA_HOME", "KGEN_AMD_COMPILER",
                            "KGEN_CLANG", "KGEN_AMD_COMPILE_TIMEOUT"}) {
      const char* v = std::getenv(var);
      std::printf("env %-21s %s\n", var, v ? v : "(unset)");
    }
    exit_code = kOk;
  });
}

void add_inspect(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("inspect", "Show the rendered source, PTX or ISA, or resource usage of one variant's kernels");
  struct Opts {
    std::string op = "attention_fwd", variant, dtype = "bf16", arch = "sm_90a", config, what = "resources";
    int head_dim = 128;
    bool causal = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--op", o->op, "Operator (kgen show-config lists them)")->capture_default_str();
  cmd->add_option("--variant", o->variant,
                  "Variant key, as in tuning records (e.g. attention_bwd.bf16.d128.causal, "
                  "lrpe_cosine.fwd.bf16.softmax_seq); attention_fwd: built from --dtype, --head-dim, --causal when absent")
      ->check(non_empty_value());
  cmd->add_option("--dtype", o->dtype, "attention_fwd without --variant: fp16, bf16 or fp32")->capture_default_str();
  cmd->add_option("--head-dim,-d", o->head_dim, "attention_fwd without --variant: head dimension")->capture_default_str();
  cmd->add_flag("--causal", o->causal, "attention_fwd without --variant: causal variant");
  cmd->add_option("--arch", o->arch, "Target (" + std::string(known_targets()) + ")")->capture_default_str();
  cmd->add_option("--config", o->config, "Config (default: the variant's heuristic for a b=1, h=16, n=4096 shape)")
      ->check(non_empty_value());
  cmd->add_option("--show", o->what, "source | ptx (NVIDIA) | isa (AMD: llvm-objdump -d) | resources | key")
      ->check(CLI::IsMember({"source", "ptx", "isa", "resources", "key"}))->capture_default_str();
  cmd->callback([o, &exit_code] {
    const OperatorInfo* op = find_operator(o->op);
    if (!op) throw Error(Status::invalid_argument, "--op: unknown operator '" + o->op + "'");
    auto target = parse_target(o->arch);
    if (!target)
      throw Error(Status::invalid_argument, "--arch: unknown target '" + o->arch + "' (known: " + std::string(known_targets()) + ")");
    const bool amd = target->vendor == Vendor::amd;
    if (o->what == "ptx" && amd) throw Error(Status::invalid_argument, "--show ptx: AMD targets have no PTX; use --show isa");
    if (o->what == "isa" && !amd) throw Error(Status::invalid_argument, "--show isa: for AMD targets; use --show ptx");
    std::string variant = o->variant;
    if (variant.empty()) {
      if (o->op != "attention_fwd") throw Error(Status::invalid_argument, "--variant: required for --op " + o->op);
      auto dtype = parse_dtype(o->dtype);
      if (!dtype) throw Error(Status::invalid_argument, "--dtype: unknown dtype '" + o->dtype + "'");
      AttentionForwardSpec spec{*dtype, o->head_dim, o->causal};
      if (auto why = check_attention_forward_spec(spec)) throw Error(Status::invalid_argument, "--head-dim: " + *why);
      variant = to_string(spec);
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
