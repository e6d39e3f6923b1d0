// `kgen check` and `kgen bench` for every operator (the sweep options of tools/sweep.h, shared
// with `kgen tune`), and `kgen demo` (the README's main job).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <unistd.h>
#include <memory>
#include <sstream>

#include "kgen/kgen.hpp"
#include "cache/binary_cache.h"
#include "check/attention_backward_harness.h"
#include "check/lrpe_harness.h"
#include "ops/attention_forward.h"
#include "check/attention_harness.h"
#include "driver/cuda_driver.h"
#include "driver/device.h"
#include "jit/kernel_builder.h"
#include "jit/warm.h"
#include "tools/commands.h"
#include "tools/sweep.h"

namespace kgen::cli {

std::vector<DType> parse_dtypes(const std::string& text) {
  std::vector<DType> out;
  for (const auto& s : parse_list(text, "--dtypes")) {
    auto t = parse_dtype(s);
    if (!t) throw Error(Status::invalid_argument, "--dtypes: unknown dtype '" + s + "'");
    out.push_back(*t);
  }
  return out;
}

void require_device() {
  std::string why;
  if (!cuda_available(&why)) throw Error(Status::no_device, why);
}

void print_device_header() {
  const DeviceInfo& d = device_info(0);
  std::printf("device: %s (sm_%d%d, %d SMs, max SM clock %d MHz), kgen %s\n", d.name.c_str(), d.cc_major,
              d.cc_minor, d.sm_count, d.sm_clock_khz / 1000, kgen::version());
}

void BenchRows::columns(std::vector<std::string> names, std::string table) {
  columns_ = std::move(names);
  table_ = std::move(table);
  if (json_) return;
  std::string header = "|", rule = "|";
  for (const std::string& c : columns_) header += " " + c + " |", rule += "---|";
  std::printf("%s\n%s\n", header.c_str(), rule.c_str());
}

void BenchRows::row(const std::vector<std::string>& cells) {
  if (!json_) {
    std::string line = "|";
    for (const std::string& c : cells) line += " " + c + " |";
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
    return;
  }
  nlohmann::ordered_json r = nlohmann::ordered_json::object();
  if (!table_.empty()) r["table"] = table_;
  for (std::size_t i = 0; i < cells.size(); ++i) {
    const std::string name = i < columns_.size() ? columns_[i] : "column " + std::to_string(i);
    const std::string& cell = cells[i];
    std::size_t used = 0;
    double number = 0;
    try {
      number = std::stod(cell, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (cell == "–") r[name] = nullptr;
    else if (!cell.empty() && used == cell.size()) r[name] = number;
    else r[name] = cell;
  }
  rows_.push_back(std::move(r));
}

void BenchRows::finish() const {
  if (json_) std::printf("%s\n", rows_.dump(2).c_str());
}

namespace {

// printf into a string: one table cell.
std::string cell(const char* format, double value) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, value);
  return buf;
}

// One case of `kgen check` for any operator: its title, how to make its harness bench (inputs
// and reference), and the configs to check on it ("" = the default choice, first).
struct CheckItem {
  std::string title;
  std::function<std::unique_ptr<HarnessBench>()> make;
  std::vector<std::string> configs;
};

std::vector<CheckItem> check_items(const SweepOptions& o) {
  std::vector<std::string> configs = {""};
  for (const std::string& c : sweep_configs(o)) configs.push_back(c);
  std::vector<CheckItem> items;
  if (o.family() == OpFamily::lrpe) {
    for (const LrpeCase& c : lrpe_cases(o)) {
      // md configs with ':cache' run with the angle cache, the others without.
      std::vector<std::string> own;
      for (const std::string& config : configs)
        if (config.empty() || c.op != LrpeOp::md_cosine || config.ends_with(":cache") == c.cache) own.push_back(config);
      items.push_back({to_string(c), [c]() -> std::unique_ptr<HarnessBench> { return std::make_unique<LrpeBench>(c, 0); },
                       own});
    }
    return items;
  }
  const std::string op = o.op();
  const bool dbl = op == "attention_double_bwd";
  for (const AttentionCase& c : attention_cases(o)) {
    if (op == "attention_fwd") {
      items.push_back({to_string(c),
                       [c]() -> std::unique_ptr<HarnessBench> { return std::make_unique<AttentionForwardBench>(c, 0); },
                       configs});
      continue;
    }
    // The backward in both modes (atomic and deterministic dQ) unless --deterministic picks one;
    // the double backward has one.
    const std::vector<bool> modes = dbl ? std::vector<bool>{false}
                                        : o.flag("deterministic") ? std::vector<bool>{true} : std::vector<bool>{false, true};
    for (bool deterministic : modes) {
      BackwardBenchOptions b;
      b.deterministic = deterministic;
      items.push_back({to_string(c) + " [" + to_string(b, dbl) + "]",
                       [c, b, dbl]() -> std::unique_ptr<HarnessBench> {
                         if (dbl) return std::make_unique<AttentionDoubleBackwardBench>(c, b);
                         return std::make_unique<AttentionBackwardBench>(c, b);
                       },
                       configs});
    }
  }
  return items;
}

// `kgen check --op X`: every case and config checked once on NaN-poisoned outputs.
int run_check(const SweepOptions& o) {
  // Arguments first, so a typo is named even on a machine without a GPU.
  o.validate();
  const std::vector<CheckItem> items = check_items(o);
  if (o.flag("list")) {
    for (const CheckItem& item : items)
      for (const std::string& config : item.configs) std::printf("%s%s\n", item.title.c_str(), config.empty() ? "" : (" " + config).c_str());
    return kOk;
  }
  require_device();
  print_device_header();
  int failed = 0, passed = 0;
  for (const CheckItem& item : items) {
    std::unique_ptr<HarnessBench> bench;
    for (const std::string& config : item.configs) {
      const std::string title = item.title + (config.empty() ? "" : " " + config);
      try {
        if (!bench) bench = item.make();
        const HarnessCheck r = bench->check(config);
        std::printf("%s %s\n%s\n", r.pass ? "PASS " : "FAIL ", title.c_str(), to_string(r).c_str());
        (r.pass ? passed : failed)++;
      } catch (const Error& e) {
        std::printf("ERROR %s: %s\n", title.c_str(), e.what());
        ++failed;
      }
      std::fflush(stdout);
    }
  }
  std::printf("passed %d, failed %d\n", passed, failed);
  return failed ? kFailed : kOk;
}

// bf16, 128, no, 4096, 4, 16 and then `more`: a bench row, the problem columns first.
std::vector<std::string> row_cells(const AttentionCase& c, std::vector<std::string> more) {
  std::vector<std::string> cells = {std::string(dtype_name(c.dtype)), std::to_string(c.head_dim), c.causal ? "yes" : "no",
                                    std::to_string(c.n_q), std::to_string(c.batch), std::to_string(c.heads_q)};
  cells.insert(cells.end(), more.begin(), more.end());
  return cells;
}

// One row of `kgen bench --op attention_bwd|attention_double_bwd` per config: check, then time.
int bench_gradients(const std::string& op, const AttentionCase& c, const SweepOptions& o,
                    const std::vector<std::string>& configs, BenchRows& rows) {
  const bool dbl = op == "attention_double_bwd";
  BackwardBenchOptions b;
  b.deterministic = o.flag("deterministic");
  std::unique_ptr<AttentionGradientBench> bench;
  if (dbl) bench = std::make_unique<AttentionDoubleBackwardBench>(c, b);
  else bench = std::make_unique<AttentionBackwardBench>(c, b);
  int failed = 0;
  for (const std::string& config : configs) {
    const std::string name = config.empty() ? "default" : config;
    try {  // a config invalid for this case is its own ERROR row; the others still run
      HarnessCheck check = bench->check(config);
      if (!check.pass) {
        rows.row(row_cells(c, {name, "FAIL", "–", "–", "–"}));
        std::fprintf(rows.json() ? stderr : stdout, "%s\n", to_string(check).c_str());
        ++failed;
        continue;
      }
      Timing t = bench->time(config, o.integer("warmup", 0), o.integer("reps", 1));
      const double flops = dbl ? attention_double_backward_flops(c) : attention_backward_flops(c);
      rows.row(row_cells(c, {name, cell("pass (rel_l2 ≤ %.1e)", check.worst_rel_l2()), cell("%.3f", t.median_ms),
                             cell("%.3f", t.p20_ms) + "–" + cell("%.3f", t.p80_ms),
                             cell("%.1f", flops / (t.median_ms * 1e-3) / 1e12)}));
    } catch (const Error& e) {
      rows.row(row_cells(c, {name, std::string("ERROR ") + e.what(), "–", "–", "–"}));
      ++failed;
    }
  }
  return failed;
}

// Times every config ("" = the launch's own choice) on the forward case `c`, each checked first;
// one table row each. Returns the number of failed rows.
int bench_forward_case(const AttentionCase& c, const SweepOptions& o, const std::vector<std::string>& configs,
                       BenchRows& rows) {
  int failed = 0;
  std::unique_ptr<AttentionForwardBench> bench;
  for (const std::string& forced : configs) {
    std::string config = forced;
    try {
      if (!bench) bench = std::make_unique<AttentionForwardBench>(c, 0);
      if (config.empty()) {
        AttentionForwardCall call;
        call.spec = {c.dtype, c.head_dim, c.causal};
        call.shape = {c.batch, c.heads_q, c.heads_kv, c.n_q, c.n_k};
        config = to_string(choose_attention_forward_config(call, {}));
      }
      HarnessCheck check = bench->check(forced);
      if (!check.pass) {
        rows.row(row_cells(c, {config, "FAIL (" + check.failure() + ")", "–", "–", "–", "–", "–", "–"}));
        ++failed;
        continue;
      }
      Timing timing = bench->time(forced, o.integer("warmup", 0), o.integer("reps", 1));
      double tflops = attention_forward_flops(c) / (timing.median_ms * 1e-3) / 1e12;
      // Live memory of the call: q, k, v, o and lse (the forward allocates no workspace).
      const double e = dtype_bytes(c.dtype);
      double mib = (2.0 * c.batch * c.heads_q * c.n_q * c.head_dim * e + 2.0 * c.batch * c.heads_kv * c.n_k * c.head_dim * e +
                    4.0 * c.batch * c.heads_q * c.n_q) / (1 << 20);
      rows.row(row_cells(c, {config, cell("pass (rel_l2 %.1e)", check.get("o").rel_l2), cell("%.3f", timing.mean_ms),
                             cell("%.3f", timing.std_ms), cell("%.3f", timing.median_ms),
                             cell("%.3f", timing.p20_ms) + "–" + cell("%.3f", timing.p80_ms), cell("%.1f", tflops),
                             cell("%.0f", mib)}));
    } catch (const Error& e) {
      rows.row(row_cells(c, {config.empty() ? "–" : config, std::string("ERROR ") + e.what(), "–", "–", "–", "–", "–", "–"}));
      ++failed;
    }
  }
  return failed;
}

// "b·n = 16384 tokens, h·d = 2048" or the explicit batch and heads.
std::string attention_sweep_shape(const SweepOptions& o) {
  std::string s = o.given("batch") ? "b = " + o.value("batch") : "b·n = " + o.value("tokens") + " tokens";
  s += o.given("heads") ? ", h = " + o.value("heads") : ", h·d = " + o.value("hidden");
  if (o.given("heads-kv")) s += ", h_kv = " + o.value("heads-kv");
  return s;
}

int run_attention_bench(const SweepOptions& o, BenchRows& rows) {
  // Arguments first, so a typo is named even on a machine without a GPU.
  const std::vector<AttentionCase> cases = attention_cases(o);
  std::vector<std::string> configs = {""};
  for (const std::string& c : sweep_configs(o)) configs.push_back(c);
  const int warmup = o.integer("warmup", 0), reps = o.integer("reps", 1);
  require_device();
  if (!rows.json()) print_device_header();
  const std::string op = o.op();
  std::vector<std::string> columns = {"dtype", "d", "causal", "n", "b", "h", "config", "check"};
  if (op != "attention_fwd") {
    const bool dbl = op == "attention_double_bwd";
    if (!rows.json())
      std::printf("%s%s, %s; median of %d reps after %d warm-up; every row checked first (%s)\n\n", op.c_str(),
                  o.flag("deterministic") ? " (deterministic)" : "", attention_sweep_shape(o).c_str(), reps, warmup,
                  dbl ? attention_double_backward_flops_convention().c_str() : "backward FLOPs = 2.5 × forward");
    columns.insert(columns.end(), {"median ms", "p20–p80 ms", "TFLOPS"});
  } else {
    if (!rows.json())
      std::printf("attention_fwd, %s; median of %d reps after %d warm-up; every row checked first\n\n",
                  attention_sweep_shape(o).c_str(), reps, warmup);
    columns.insert(columns.end(), {"fwd mean ms", "fwd std ms", "median ms", "p20–p80 ms", "TFLOPS", "live MiB"});
  }
  rows.columns(columns);
  int failed = 0;
  for (const AttentionCase& c : cases) {
    if (op == "attention_fwd") {
      failed += bench_forward_case(c, o, configs, rows);
      continue;
    }
    try {
      failed += bench_gradients(op, c, o, configs, rows);
    } catch (const Error& e) {
      rows.row(row_cells(c, {"–", std::string("ERROR ") + e.what(), "–", "–", "–"}));
      ++failed;
    }
  }
  return failed ? kFailed : kOk;
}

// Host time of `calls` calls of `fn`, each timed alone; the stream is drained every 256 calls
// outside the timed region so the launch queue never fills. Returns the median in µs.
template <class Fn>
double median_host_us(Fn&& fn, CUstream stream, int calls) {
  std::vector<double> us;
  us.reserve(calls);
  for (int i = 0; i < calls; ++i) {
    if (i % 256 == 0) cuda_check(cuda_driver().cuStreamSynchronize(stream), "cuStreamSynchronize");
    auto t0 = std::chrono::steady_clock::now();
    fn();
    auto t1 = std::chrono::steady_clock::now();
    us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  cuda_check(cuda_driver().cuStreamSynchronize(stream), "cuStreamSynchronize");
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

// First-call cost (cold compile, disk-cache hit, in-memory hit) and the host overhead of a hot
// kgen launch against a bare cuLaunchKernel of the same kernel with the same arguments.
int run_launch_bench(int calls, BenchRows& rows) {
  require_device();
  if (!rows.json()) print_device_header();
  const CudaDriver& cu = cuda_driver();
  use_primary_context(0);
  const Target target = device_info(0).target;
  AttentionForwardSpec spec{DType::bf16, 128, false};
  AttentionForwardConfig config = attention_forward_default_config(spec, {1, 1, 1, 16, 16}, target, device_info(0).sm_count);
  KernelSource src = render_attention_forward(spec, config);

  // 1. First call: cold compile and disk hit in a fresh cache directory, module load included.
  auto dir = std::filesystem::temp_directory_path() / ("kgen-first-call-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  auto timed_build = [&](bool expect_hit) {
    KernelBuilder builder(dir);
    auto t0 = std::chrono::steady_clock::now();
    BuildOutcome b = builder.build(src, target);
    auto t1 = std::chrono::steady_clock::now();
    load_kernel(0, b.image, src.entry, src.threads, src.smem_bytes);
    auto t2 = std::chrono::steady_clock::now();
    if (b.from_cache != expect_hit) throw Error(Status::internal, "first-call benchmark: unexpected cache state");
    return std::pair{std::chrono::duration<double, std::milli>(t1 - t0).count(),
                     std::chrono::duration<double, std::milli>(t2 - t1).count()};
  };
  auto [cold_build, cold_load] = timed_build(false);
  auto [disk_build, disk_load] = timed_build(true);
  std::filesystem::remove_all(dir);

  // 2. Hot launches on a tiny problem (b = h = 1, n = 16, d = 128: the kernel itself is a few µs).
  const std::int64_t shape[4] = {1, 1, 16, 128}, lshape[3] = {1, 1, 16};
  CUdeviceptr buf[5];
  for (int i = 0; i < 4; ++i) cuda_check(cu.cuMemAlloc(&buf[i], 16 * 128 * 2), "cuMemAlloc");
  cuda_check(cu.cuMemAlloc(&buf[4], 16 * 4), "cuMemAlloc");
  for (int i = 0; i < 3; ++i) cuda_check(cu.cuMemsetD32(buf[i], 0x3c003c00u, 16 * 128 / 2), "cuMemsetD32");
  auto view = [&](int i) { return make_contiguous_view(reinterpret_cast<void*>(buf[i]), DType::bf16, 4, shape, 0); };
  TensorView q = view(0), k = view(1), v = view(2), o = view(3);
  TensorView lse = make_contiguous_view(reinterpret_cast<void*>(buf[4]), DType::f32, 3, lshape, 0);
  CUstream stream;
  cuda_check(cu.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  AttentionOptions opt;
  auto t0 = std::chrono::steady_clock::now();
  attention_forward(q, k, v, o, &lse, opt, stream);  // decision + kernel resolution on first use
  double first_api_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  AttentionForwardLaunch prepared = prepare_attention_forward(q, k, v, o, &lse, opt);
  void* args[] = {prepared.kernel_params()};
  auto bare = [&] {
    cuda_check(cu.cuLaunchKernel(static_cast<CUfunction>(prepared.kernel.function), prepared.grid.x, prepared.grid.y, prepared.grid.z,
                                 prepared.kernel.threads, 1, 1, prepared.kernel.smem_bytes, stream, args, nullptr),
               "cuLaunchKernel");
  };
  auto full = [&] { attention_forward(q, k, v, o, &lse, opt, stream); };
  for (int i = 0; i < 200; ++i) full(), bare();
  // Interleave the two measurements in rounds so clock or queue drift hits both alike.
  std::vector<double> bare_us, kgen_us;
  for (int round = 0; round < 5; ++round) {
    bare_us.push_back(median_host_us(bare, stream, calls / 5));
    kgen_us.push_back(median_host_us(full, stream, calls / 5));
  }
  std::sort(bare_us.begin(), bare_us.end());
  std::sort(kgen_us.begin(), kgen_us.end());
  cu.cuStreamDestroy(stream);
  for (auto b : buf) cu.cuMemFree(b);

  if (!rows.json()) std::printf("\nfirst call of %s (%s), fresh cache directory:\n", src.variant.c_str(), target.arch.c_str());
  rows.columns({"path", "build ms", "module load ms", "total ms"}, rows.json() ? "first call" : "");
  rows.row({"cold compile (NVRTC) + publish", cell("%.1f", cold_build), cell("%.2f", cold_load), cell("%.1f", cold_build + cold_load)});
  rows.row({"disk-cache hit", cell("%.2f", disk_build), cell("%.2f", disk_load), cell("%.2f", disk_build + disk_load)});
  rows.row({"first kgen::attention_forward in this process (decision, cache lookup, load, launch)", "–", "–",
            cell("%.2f", first_api_ms)});
  if (!rows.json())
    std::printf("\nhost time per launch (median of 5 rounds of %d calls each, b=h=1 n=16 d=128):\n", calls / 5);
  rows.columns({"launch", "µs/call"}, rows.json() ? "host time per launch" : "");
  rows.row({"bare cuLaunchKernel (same kernel, same args)", cell("%.2f", bare_us[2])});
  rows.row({"kgen::attention_forward, hot (in-memory hit)", cell("%.2f", kgen_us[2])});
  rows.row({"kgen overhead", cell("%.2f", kgen_us[2] - bare_us[2])});
  return kOk;
}

}  // namespace

int run_sweep_check(const SweepOptions& o) { return run_check(o); }

int run_sweep_bench(const SweepOptions& o) {
  o.validate();
  if (o.flag("list")) {
    std::vector<std::string> titles;
    if (o.family() == OpFamily::lrpe)
      for (const LrpeCase& c : lrpe_cases(o)) titles.push_back(to_string(c));
    else
      for (const AttentionCase& c : attention_cases(o)) titles.push_back(to_string(c));
    for (const std::string& t : titles) std::printf("%s\n", t.c_str());
    for (const std::string& c : sweep_configs(o)) std::printf("config %s\n", c.c_str());
    return kOk;
  }
  BenchRows rows(o.flag("json"));
  int rc = kOk;
  if (o.flag("launch")) {
    rc = run_launch_bench(10000, rows);
  } else if (o.family() == OpFamily::lrpe) {
    rc = run_lrpe_bench(o, rows);
  } else {
    rc = run_attention_bench(o, rows);
    // attention_fwd --warmup 0 asks for the cost of first calls too: cold compile, disk hit, in-memory hit.
    if (o.op() == "attention_fwd" && o.integer("warmup", 0) == 0 && rc == kOk) rc = run_launch_bench(10000, rows);
  }
  rows.finish();
  return rc;
}

void add_gpu_commands(CLI::App& app, int& exit_code) {
  auto* check = app.add_subcommand("check", "Correctness sweep of an operator on the GPU against the fp64 reference");
  auto check_options = add_sweep_options(*check, SweepCommand::check);
  check->footer(sweep_footer(SweepCommand::check));
  auto* bench = app.add_subcommand("bench", "Time an operator on its standard sweep (each row checked first)");
  auto bench_options = add_sweep_options(*bench, SweepCommand::bench);
  bench->footer(sweep_footer(SweepCommand::bench));
  add_lrpe_aliases(*check, *bench, exit_code);
  check->callback([check, check_options, &exit_code] {
    if (!check->get_subcommands().empty()) return;  // an alias sub-command ran instead
    exit_code = run_sweep_check(*check_options);
  });
  bench->callback([bench, bench_options, &exit_code] {
    if (!bench->get_subcommands().empty()) return;  // an alias sub-command ran instead
    exit_code = run_sweep_bench(*bench_options);
  });

  auto* demo = app.add_subcommand(
      "demo", "Main job: verify and time default shapes on a GPU, or pre-warm the defaults for sm_80/sm_90a without one");
  demo->callback([&exit_code] {
    std::string why;
    if (cuda_available(&why)) {
      int rc = run_check(*sweep_options_from(SweepCommand::check, "--dtypes bf16,fp16 --head-dims 64,128 --quick"));
      BenchRows rows(/*json=*/false);
      int rc2 = run_attention_bench(*sweep_options_from(SweepCommand::bench, "--dtypes bf16 --seqlens 2048,8192"), rows);
      exit_code = rc || rc2 ? kFailed : kOk;
      return;
    }
    // Without a GPU: the kernels that common calls run with the built-in defaults, so that their
    // first calls on an A100 or H100 sharing this cache load them instead of compiling; every
    // variant is `kgen warm`, over ten times as many.
    std::printf("no GPU found (%s)\npre-warming the cache with every operator's defaults for sm_80 and sm_90a instead\n",
                why.c_str());
    const std::vector<std::string> archs = {"sm_80", "sm_90a"};
    KernelBuilder& builder = KernelBuilder::global();
    exit_code = run_warm(builder, default_warm_items(archs), 0);
    const cache::BinaryCache& cache = builder.cache();
    const std::uint64_t bytes = cache.total_bytes();
    std::printf("the cache at %s holds %llu entries, %llu bytes (%.1f MiB)\n", cache.root().c_str(),
                static_cast<unsigned long long>(cache.entry_count()), static_cast<unsigned long long>(bytes),
                static_cast<double>(bytes) / (1 << 20));
    std::printf("`kgen warm` builds every variant of every operator (%zu kernels for sm_80 and sm_90a), "
                "`kgen warm --defaults` these defaults again\n",
                warm_items({}, archs).size());
  });
}

}  // namespace kgen::cli
