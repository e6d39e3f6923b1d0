// `kgen check`, `kgen bench` and `kgen demo` (the README's main job).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <unistd.h>
#include <memory>
#include <sstream>

#include "kgen/kgen.hpp"
#include "check/attention_backward_harness.h"
#include "ops/attention_forward.h"
#include "check/attention_harness.h"
#include "driver/cuda_driver.h"
#include "driver/device.h"
#include "jit/kernel_builder.h"
#include "jit/warm.h"
#include "tools/commands.h"

namespace kgen::cli {

std::vector<DType> parse_dtypes(const std::string& text) {
  std::vector<DType> out;
  for (const auto& s : split_list(text)) {
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

namespace {

std::vector<bool> parse_causal(const std::string& text) {
  if (text == "both") return {false, true};
  if (text == "yes") return {true};
  if (text == "no") return {false};
  throw Error(Status::invalid_argument, "--causal: expected yes, no or both, got '" + text + "'");
}

// The correctness sweep of docs/attention.md §5.6: odd sizes, n_q != n_k both ways, causal, GQA,
// BNHD, more than one wave.
std::vector<AttentionCase> check_cases(const std::vector<DType>& dtypes, const std::vector<int>& head_dims, bool quick) {
  struct Shape { int b, hq, hkv, nq, nk; };
  std::vector<Shape> shapes = {{1, 1, 1, 1, 1}, {1, 2, 1, 7, 7}, {2, 4, 1, 63, 63}, {1, 8, 1, 1000, 1000},
                               {1, 2, 2, 1337, 1000}, {1, 4, 4, 1000, 1337}, {1, 2, 2, 65, 17}};
  if (!quick) shapes.push_back({4, 32, 4, 2048, 2048});
  std::uint64_t seed = 1;
  std::vector<AttentionCase> cases;
  for (DType t : dtypes)
    for (int d : head_dims)
      for (bool causal : {false, true})
        for (const Shape& s : shapes) {
          AttentionCase c;
          c.dtype = t, c.head_dim = d, c.causal = causal;
          c.batch = s.b, c.heads_q = s.hq, c.heads_kv = s.hkv, c.n_q = s.nq, c.n_k = s.nk;
          c.layout = (seed % 2) ? Layout::bnhd : Layout::bhnd;
          c.seed = seed++;
          cases.push_back(c);
        }
  return cases;
}

// The attention operators `kgen check` and `kgen bench` serve (--op).
enum class AttentionOp { forward, backward, double_backward };

AttentionOp parse_attention_op(const std::string& text) {
  if (text == "attention_fwd") return AttentionOp::forward;
  if (text == "attention_bwd") return AttentionOp::backward;
  if (text == "attention_double_bwd") return AttentionOp::double_backward;
  throw Error(Status::invalid_argument,
              "--op: '" + text + "' is not attention_fwd, attention_bwd or attention_double_bwd");
}

// Checks of the backward or double backward: every output against the reference, both kgen
// modes for the backward (atomic dQ, deterministic) and every cotangent present.
int run_gradient_check(AttentionOp op, const std::vector<DType>& dtypes, const std::vector<int>& head_dims, bool quick) {
  int failed = 0, passed = 0;
  for (const auto& c : check_cases(dtypes, head_dims, quick)) {
    for (bool deterministic : {false, true}) {
      if (op == AttentionOp::double_backward && deterministic) continue;
      BackwardBenchOptions o;
      o.deterministic = deterministic;
      GradientCheck r;
      try {
        r = op == AttentionOp::backward ? check_attention_backward(c, o, 0) : check_attention_double_backward(c, o, 0);
      } catch (const Error& e) {
        std::printf("ERROR %-60s %s\n", to_string(c).c_str(), e.what());
        ++failed;
        continue;
      }
      std::printf("%s %-60s [%s]\n%s\n", r.pass ? "PASS " : "FAIL ", to_string(c).c_str(),
                  to_string(o, op == AttentionOp::double_backward).c_str(), to_string(r).c_str());
      std::fflush(stdout);
      (r.pass ? passed : failed)++;
    }
  }
  std::printf("passed %d, failed %d\n", passed, failed);
  return failed ? kFailed : kOk;
}

int run_check(AttentionOp op, const std::vector<DType>& dtypes, const std::vector<int>& head_dims, bool quick) {
  require_device();
  print_device_header();
  if (op != AttentionOp::forward) return run_gradient_check(op, dtypes, head_dims, quick);
  int failed = 0, passed = 0;
  for (const auto& c : check_cases(dtypes, head_dims, quick)) {
    AttentionCheck r;
    try {
      r = check_attention_forward(c, 0);
    } catch (const Error& e) {
      std::printf("ERROR %-60s %s\n", to_string(c).c_str(), e.what());
      ++failed;
      continue;
    }
    std::printf("%s %-60s [%s] o: %s | lse: %s\n", r.pass ? "PASS " : "FAIL ", to_string(c).c_str(),
                r.reference.c_str(), to_string(r.o).c_str(), to_string(r.lse).c_str());
    std::fflush(stdout);
    (r.pass ? passed : failed)++;
  }
  std::printf("passed %d, failed %d\n", passed, failed);
  return failed ? kFailed : kOk;
}

struct BenchOptions {
  std::string op = "attention_fwd";
  std::string dtypes = "bf16", head_dims = "64,128", seqlens = "512,1024,2048,4096,8192,16384", causal = "both";
  std::string configs;  // "|"-separated explicit configs to time beside the default ("" = default only)
  int tokens = 16384, hidden = 2048, warmup = 5, reps = 30;
};

// The default ("") first, then each explicit config of a "|"-separated list.
std::vector<std::string> bench_configs(const std::string& text) {
  std::vector<std::string> out = {""};
  std::stringstream in(text);
  for (std::string c; std::getline(in, c, '|');)
    if (!c.empty()) out.push_back(c);
  return out;
}

// The standard sweep's problem for (dtype, d, causal, n): b·n = o.tokens, h·d = o.hidden.
AttentionCase sweep_case(const BenchOptions& o, DType t, int d, bool causal, int n) {
  AttentionCase c;
  c.dtype = t, c.head_dim = d, c.causal = causal, c.n_q = c.n_k = n;
  c.batch = std::max(1, o.tokens / n);
  c.heads_q = c.heads_kv = std::max(1, o.hidden / d);
  return c;
}

// "| bf16 | 128 | no | 4096 | 4 | 16 | ": the problem columns of a bench row.
std::string row_prefix(const AttentionCase& c) {
  return "| " + std::string(dtype_name(c.dtype)) + " | " + std::to_string(c.head_dim) + " | " +
         (c.causal ? "yes" : "no") + " | " + std::to_string(c.n_q) + " | " + std::to_string(c.batch) + " | " +
         std::to_string(c.heads_q) + " | ";
}

// One row of `kgen bench --op attention_bwd|attention_double_bwd`: check, then time.
bool bench_gradients(AttentionOp op, const AttentionCase& c, const BenchOptions& o, const std::string& row) {
  const bool dbl = op == AttentionOp::double_backward;
  std::unique_ptr<AttentionGradientBench> bench;
  if (dbl) bench = std::make_unique<AttentionDoubleBackwardBench>(c);
  else bench = std::make_unique<AttentionBackwardBench>(c);
  bool ok = true;
  for (const std::string& config : bench_configs(o.configs)) {
    const std::string name = config.empty() ? "default" : config;
    GradientCheck check = bench->check(config);
    if (!check.pass) {
      std::printf("%s%s | FAIL | – | – | – |\n%s\n", row.c_str(), name.c_str(), to_string(check).c_str());
      ok = false;
      continue;
    }
    double worst = 0;
    for (const auto& out : check.outputs) worst = std::max(worst, out.rel_l2);
    Timing t = bench->time(config, o.warmup, o.reps);
    const double flops = dbl ? attention_double_backward_flops(c) : attention_backward_flops(c);
    std::printf("%s%s | pass (rel_l2 ≤ %.1e) | %.3f | %.3f–%.3f | %.1f |\n", row.c_str(), name.c_str(), worst,
                t.median_ms, t.p20_ms, t.p80_ms, flops / (t.median_ms * 1e-3) / 1e12);
    std::fflush(stdout);
  }
  return ok;
}

// Times every config of `o.configs` ("" = the launch's own choice) on the forward case `c`, each
// checked first; one table row each. Returns the number of failed rows.
int bench_forward_case(const AttentionCase& c, const BenchOptions& o, const std::string& row) {
  const DType t = c.dtype;
  const int d = c.head_dim, n = c.n_q;
  const bool causal = c.causal;
  int failed = 0;
  std::unique_ptr<AttentionForwardBench> bench;
  for (const std::string& forced : bench_configs(o.configs)) {
    std::string config = forced;
    try {
      if (!bench) bench = std::make_unique<AttentionForwardBench>(c, 0);
      if (config.empty()) {
        AttentionForwardCall call;
        call.spec = {t, d, causal};
        call.shape = {c.batch, c.heads_q, c.heads_kv, n, n};
        config = to_string(choose_attention_forward_config(call, {}));
      }
      AttentionCheck check = bench->check(forced);
      if (!check.pass) {
        std::printf("%s%s | FAIL (%s) | – | – | – | – | – | – |\n", row.c_str(), config.c_str(),
                    (check.o.pass ? check.lse.why : check.o.why).c_str());
        ++failed;
        continue;
      }
      Timing timing = bench->time(forced, o.warmup, o.reps);
      double tflops = attention_forward_flops(c) / (timing.median_ms * 1e-3) / 1e12;
      // Live memory of the call: q, k, v, o and lse (the forward allocates no workspace).
      double mib = (2.0 * c.batch * c.heads_q * n * d * dtype_bytes(t) + 2.0 * c.batch * c.heads_kv * n * d * dtype_bytes(t) +
                    4.0 * c.batch * c.heads_q * n) / (1 << 20);
      std::printf("%s%s | pass (rel_l2 %.1e) | %.3f | %.3f | %.3f | %.3f–%.3f | %.1f | %.0f |\n", row.c_str(), config.c_str(),
                  check.o.rel_l2, timing.mean_ms, timing.std_ms, timing.median_ms, timing.p20_ms, timing.p80_ms, tflops, mib);
    } catch (const Error& e) {
      std::printf("%s%s | ERROR %s | – | – | – | – | – | – |\n", row.c_str(), config.empty() ? "–" : config.c_str(), e.what());
      ++failed;
    }
    std::fflush(stdout);
  }
  return failed;
}

int run_bench(const BenchOptions& o) {
  // Arguments first, so a typo is named even on a machine without a GPU.
  const AttentionOp op = parse_attention_op(o.op);
  const auto dtypes = parse_dtypes(o.dtypes);
  const auto head_dims = parse_int_list(o.head_dims, "--head-dims");
  const auto causal_flags = parse_causal(o.causal);
  const auto seqlens = parse_int_list(o.seqlens, "--seqlens");
  require_device();
  print_device_header();
  if (op != AttentionOp::forward) {
    const bool dbl = op == AttentionOp::double_backward;
    std::printf("%s, b·n = %d tokens, h·d = %d; median of %d reps after %d warm-up; every row checked first (%s)\n\n",
                o.op.c_str(), o.tokens, o.hidden, o.reps, o.warmup,
                dbl ? attention_double_backward_flops_convention().c_str() : "backward FLOPs = 2.5 × forward");
    std::printf("| dtype | d | causal | n | b | h | config | check | median ms | p20–p80 ms | TFLOPS |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
  } else {
    std::printf("attention_fwd, b·n = %d tokens, h·d = %d; median of %d reps after %d warm-up; every row checked first\n\n",
                o.tokens, o.hidden, o.reps, o.warmup);
    std::printf("| dtype | d | causal | n | b | h | config | check | fwd mean ms | fwd std ms | median ms | p20–p80 ms | TFLOPS | live MiB |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  }
  int failed = 0;
  for (DType t : dtypes)
    for (int d : head_dims)
      for (bool causal : causal_flags)
        for (int n : seqlens) {
          const AttentionCase c = sweep_case(o, t, d, causal, n);
          const std::string row = row_prefix(c);
          if (op == AttentionOp::forward) {
            failed += bench_forward_case(c, o, row);
            continue;
          }
          try {
            if (!bench_gradients(op, c, o, row)) ++failed;
          } catch (const Error& e) {
            std::printf("%s– | ERROR %s | – | – | – |\n", row.c_str(), e.what());
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
int run_launch_bench(int calls) {
  require_device();
  print_device_header();
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
  void* args[] = {&prepared.params};
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

  std::printf("\nfirst call of %s (%s), fresh cache directory:\n", src.variant.c_str(), target.arch.c_str());
  std::printf("| path | build ms | module load ms | total ms |\n|---|---|---|---|\n");
  std::printf("| cold compile (NVRTC) + publish | %.1f | %.2f | %.1f |\n", cold_build, cold_load, cold_build + cold_load);
  std::printf("| disk-cache hit | %.2f | %.2f | %.2f |\n", disk_build, disk_load, disk_build + disk_load);
  std::printf("| first kgen::attention_forward in this process (decision, cache lookup, load, launch) | – | – | %.2f |\n", first_api_ms);
  std::printf("\nhost time per launch (median of 5 rounds of %d calls each, b=h=1 n=16 d=128):\n", calls / 5);
  std::printf("| launch | µs/call |\n|---|---|\n| bare cuLaunchKernel (same kernel, same args) | %.2f |\n", bare_us[2]);
  std::printf("| kgen::attention_forward, hot (in-memory hit) | %.2f |\n| kgen overhead | %.2f |\n", kgen_us[2], kgen_us[2] - bare_us[2]);
  return kOk;
}

}  // namespace

void add_gpu_commands(CLI::App& app, int& exit_code) {
  auto* check = app.add_subcommand("check", "Correctness sweep of an attention operator on the GPU against the fp64 reference");
  auto check_op = std::make_shared<std::string>("attention_fwd");
  check->add_option("--op", *check_op, "attention_fwd, attention_bwd or attention_double_bwd")->capture_default_str();
  auto dtypes = std::make_shared<std::string>("fp16,bf16,fp32");
  auto dims = std::make_shared<std::string>("32,64,96,128,256,80");
  auto quick = std::make_shared<bool>(false);
  check->add_option("--dtypes", *dtypes, "Comma-separated dtypes")->capture_default_str();
  check->add_option("--head-dims", *dims, "Comma-separated head dims")->capture_default_str();
  check->add_flag("--quick", *quick, "Skip the large shapes");
  add_lrpe_check_command(*check, exit_code);
  check->callback([=, &exit_code] {
    if (check->get_subcommands().size()) return;  // `kgen check lrpe|md_lrpe` ran instead
    const AttentionOp op = parse_attention_op(*check_op);
    exit_code = run_check(op, parse_dtypes(*dtypes), parse_int_list(*dims, "--head-dims"), *quick); });

  auto* bench = app.add_subcommand("bench", "Time an attention operator on the standard sweep (each row checked first)");
  auto o = std::make_shared<BenchOptions>();
  bench->add_option("--op", o->op, "attention_fwd, attention_bwd or attention_double_bwd")->capture_default_str();
  bench->add_option("--dtypes", o->dtypes, "Comma-separated dtypes")->capture_default_str();
  bench->add_option("--head-dims", o->head_dims, "Comma-separated head dims")->capture_default_str();
  bench->add_option("--seqlens", o->seqlens, "Comma-separated sequence lengths")->capture_default_str();
  bench->add_option("--causal", o->causal, "yes, no or both")->capture_default_str();
  bench->add_option("--tokens", o->tokens, "b·n per row")->capture_default_str()->check(CLI::PositiveNumber);
  bench->add_option("--hidden", o->hidden, "h·d per row")->capture_default_str()->check(CLI::PositiveNumber);
  bench->add_option("--warmup", o->warmup, "Untimed runs")->capture_default_str()->check(CLI::NonNegativeNumber);
  bench->add_option("--reps", o->reps, "Timed runs")->capture_default_str()->check(CLI::PositiveNumber);
  bench->add_option("--configs", o->configs, "Also time these configs, '|'-separated (invalid ones are reported per row)");
  auto launch = std::make_shared<bool>(false);
  bench->add_flag("--launch", *launch, "Measure first-call cost (cold compile, disk hit, in-memory hit) and hot launch overhead instead");
  add_lrpe_bench_command(*bench, exit_code);
  bench->callback([o, launch, bench, &exit_code] {
    if (bench->get_subcommands().size()) return;  // `kgen bench lrpe|md_lrpe` ran instead
    if (*launch) {
      exit_code = run_launch_bench(10000);
      return;
    }
    exit_code = run_bench(*o);
    // --warmup 0 asks for the cost of first calls too: cold compile, disk hit, in-memory hit.
    if (o->warmup == 0 && exit_code == kOk) exit_code = run_launch_bench(10000);
  });

  auto* demo = app.add_subcommand("demo", "Main job: verify and time default shapes on a GPU, or pre-warm sm_80/sm_90a without one");
  demo->callback([&exit_code] {
    std::string why;
    if (cuda_available(&why)) {
      int rc = run_check(AttentionOp::forward, {DType::bf16, DType::f16}, {64, 128}, /*quick=*/true);
      BenchOptions o;
      o.dtypes = "bf16";
      o.seqlens = "2048,8192";
      int rc2 = run_bench(o);
      exit_code = rc || rc2 ? kFailed : kOk;
      return;
    }
    std::printf("no GPU found (%s)\npre-warming the cache for sm_80 and sm_90a instead\n", why.c_str());
    exit_code = run_warm(KernelBuilder::global(), warm_items({}, {"sm_80", "sm_90a"}), 0);
  });
}

}  // namespace kgen::cli
