// The sweeps of attention_fwd, attention_bwd and attention_double_bwd (tools/sweep.h): their
// options and defaults, the cases of `kgen check`, `bench` and `tune`, the bench tables, and
// attention_fwd's first-call and launch-overhead tables.
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <unistd.h>

#include "check/attention_backward_harness.h"
#include "check/attention_harness.h"
#include "driver/cuda_driver.h"
#include "driver/device.h"
#include "jit/kernel_builder.h"
#include "kgen/kgen.hpp"
#include "ops/attention_forward.h"
#include "ops/attention_tuning.h"
#include "tools/commands.h"
#include "tools/sweep.h"

namespace kgen::cli {
namespace {

std::vector<bool> parse_causal(const std::string& text) {
  if (text == "both") return {false, true};
  if (text == "yes") return {true};
  if (text == "no") return {false};
  throw Error(Status::invalid_argument, "--causal: expected yes, no or both, got '" + text + "'");
}

AttentionCase attention_case(DType t, int d, bool causal, int b, int hq, int hkv, int nq, int nk) {
  AttentionCase c;
  c.dtype = t, c.head_dim = d, c.causal = causal;
  c.batch = b, c.heads_q = hq, c.heads_kv = hkv, c.n_q = nq, c.n_k = nk;
  return c;
}

// The attention cases of the options. `kgen check` without a shape option runs the correctness
// list of docs/attention.md §5.6; otherwise dtype × head dim × causal × n, with b = --batch or
// --tokens / n and h = --heads or --hidden / d.
std::vector<AttentionCase> attention_cases(const SweepOptions& o) {
  const auto dtypes = parse_dtypes(o.value("dtypes"));
  const auto head_dims = parse_int_list(o.value("head-dims"), "--head-dims");
  const auto causal = parse_causal(o.value("causal"));
  std::vector<AttentionCase> cases;
  if (o.uses_check_list()) {
    // docs/attention.md §5.6: odd sizes, n_q != n_k both ways, causal, GQA, more than one wave;
    // the layout alternates from case to case.
    struct Shape { int b, hq, hkv, nq, nk; };
    std::vector<Shape> shapes = {{1, 1, 1, 1, 1}, {1, 2, 1, 7, 7}, {2, 4, 1, 63, 63}, {1, 8, 1, 1000, 1000},
                                 {1, 2, 2, 1337, 1000}, {1, 4, 4, 1000, 1337}, {1, 2, 2, 65, 17}};
    if (!o.flag("quick")) shapes.push_back({4, 32, 4, 2048, 2048});
    for (DType t : dtypes)
      for (int d : head_dims)
        for (bool c : causal)
          for (const Shape& s : shapes) cases.push_back(attention_case(t, d, c, s.b, s.hq, s.hkv, s.nq, s.nk));
  } else {
    const auto seqlens = parse_int_list(o.value("seqlens"), "--seqlens");
    const int batch = o.integer("batch", 1), heads = o.integer("heads", 1), heads_kv = o.integer("heads-kv", 1);
    const int tokens = o.integer("tokens", 1), hidden = o.integer("hidden", 1), q_len = o.integer("q-len", 1);
    for (DType t : dtypes)
      for (int d : head_dims)
        for (bool c : causal)
          for (int n : seqlens) {
            const int hq = heads ? heads : std::max(1, hidden / d);
            if (heads_kv && hq % heads_kv)
              throw Error(Status::invalid_argument, "--heads-kv: " + std::to_string(heads_kv) + " does not divide " +
                                                        std::to_string(hq) + " query heads");
            cases.push_back(attention_case(t, d, c, batch ? batch : std::max(1, tokens / n), hq, heads_kv ? heads_kv : hq,
                                           q_len ? q_len : n, n));
          }
  }
  // check covers BNHD views: the layout alternates; bench and tune time BHND.
  std::uint64_t seed = 1;
  for (AttentionCase& c : cases) {
    if (o.command() == SweepCommand::check) c.layout = seed % 2 ? Layout::bnhd : Layout::bhnd;
    c.seed = seed++;
  }
  return cases;
}

std::vector<std::string> case_titles(const SweepOptions& o) {
  std::vector<std::string> titles;
  for (const AttentionCase& c : attention_cases(o)) titles.push_back(to_string(c));
  return titles;
}

std::vector<CheckItem> forward_check_items(const SweepOptions& o, const std::vector<std::string>& configs) {
  std::vector<CheckItem> items;
  for (const AttentionCase& c : attention_cases(o))
    items.push_back({to_string(c),
                     [c]() -> std::unique_ptr<HarnessBench> { return std::make_unique<AttentionForwardBench>(c, 0); },
                     configs});
  return items;
}

// The backward in both modes (atomic and deterministic dQ) unless --deterministic picks one; the
// double backward has one.
std::vector<CheckItem> gradient_check_items(const SweepOptions& o, const std::vector<std::string>& configs, bool dbl) {
  std::vector<CheckItem> items;
  const std::vector<bool> modes = dbl ? std::vector<bool>{false}
                                      : o.flag("deterministic") ? std::vector<bool>{true} : std::vector<bool>{false, true};
  for (const AttentionCase& c : attention_cases(o))
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
  return items;
}

// printf into a string: one table cell.
std::string cell(const char* format, double value) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, value);
  return buf;
}

// bf16, 128, no, 4096, 4, 16 and then `more`: a bench row, the problem columns first.
std::vector<std::string> row_cells(const AttentionCase& c, std::vector<std::string> more) {
  std::vector<std::string> cells = {std::string(dtype_name(c.dtype)), std::to_string(c.head_dim), c.causal ? "yes" : "no",
                                    std::to_string(c.n_q), std::to_string(c.batch), std::to_string(c.heads_q)};
  cells.insert(cells.end(), more.begin(), more.end());
  return cells;
}

// One row of `kgen bench --op attention_bwd|attention_double_bwd` per config: check, then time.
int bench_gradients(bool dbl, const AttentionCase& c, const SweepOptions& o, const std::vector<std::string>& configs,
                    BenchRows& rows) {
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

// The bench table of one of the three operators: `forward` (the forward's columns) or the
// gradients' (`dbl`: the double backward).
int run_attention_bench(const SweepOptions& o, BenchRows& rows, bool forward, bool dbl) {
  // Arguments first, so a typo is named even on a machine without a GPU.
  const std::vector<AttentionCase> cases = attention_cases(o);
  std::vector<std::string> configs = {""};
  for (const std::string& c : sweep_configs(o)) configs.push_back(c);
  const int warmup = o.integer("warmup", 0), reps = o.integer("reps", 1);
  require_device();
  if (!rows.json()) print_device_header();
  const std::string op = o.op();
  std::vector<std::string> columns = {"dtype", "d", "causal", "n", "b", "h", "config", "check"};
  if (!forward) {
    if (!rows.json())
      std::printf("%s%s, %s; median of %d reps after %d warm-up; every row checked first (%s)\n\n", op.c_str(),
                  o.flag("deterministic") ? " (deterministic)" : "", attention_sweep_shape(o).c_str(), reps, warmup,
                  dbl ? attention_double_backward_flops_convention().c_str() : "backward FLOPs = 2.5 × forward");
    columns.insert(columns.end(), {"median ms", "p20–p80 ms", "TFLOPS"});
  } else {
    if (!rows.json())
      std::printf("%s, %s; median of %d reps after %d warm-up; every row checked first\n\n", op.c_str(),
                  attention_sweep_shape(o).c_str(), reps, warmup);
    columns.insert(columns.end(), {"fwd mean ms", "fwd std ms", "median ms", "p20–p80 ms", "TFLOPS", "live MiB"});
  }
  rows.columns(columns);
  int failed = 0;
  for (const AttentionCase& c : cases) {
    if (forward) {
      failed += bench_forward_case(c, o, configs, rows);
      continue;
    }
    try {
      failed += bench_gradients(dbl, c, o, configs, rows);
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
  // 3. Where a hot call's host time goes, on this shape and on a decode shape (b = 1, h = 8, one
  // query row against 512 keys): validation alone, the config choice, the whole preparation
  // (validation, config, kernel lookup, parameters, tensor maps) and the launch of a prepared call.
  const std::int64_t dq_shape[4] = {1, 8, 1, 128}, dkv_shape[4] = {1, 8, 512, 128}, dl_shape[3] = {1, 8, 1};
  CUdeviceptr dbuf[5];
  cuda_check(cu.cuMemAlloc(&dbuf[0], 8 * 128 * 2), "cuMemAlloc");
  cuda_check(cu.cuMemAlloc(&dbuf[1], 8 * 512 * 128 * 2), "cuMemAlloc");
  cuda_check(cu.cuMemAlloc(&dbuf[2], 8 * 512 * 128 * 2), "cuMemAlloc");
  cuda_check(cu.cuMemAlloc(&dbuf[3], 8 * 128 * 2), "cuMemAlloc");
  cuda_check(cu.cuMemAlloc(&dbuf[4], 8 * 4), "cuMemAlloc");
  for (int i = 0; i < 3; ++i) cuda_check(cu.cuMemsetD32(dbuf[i], 0x3c003c00u, (i ? 8 * 512 : 8) * 128 / 2), "cuMemsetD32");
  auto dview = [&](int i, const std::int64_t* sh) {
    return make_contiguous_view(reinterpret_cast<void*>(dbuf[i]), DType::bf16, 4, sh, 0);
  };
  struct StageCase {
    const char* name;
    TensorView q, k, v, o, lse;
  };
  const StageCase stage_cases[] = {
      {"b=h=1 n=16", q, k, v, o, lse},
      {"decode b=1 h=8 n_q=1 n_k=512", dview(0, dq_shape), dview(1, dkv_shape), dview(2, dkv_shape), dview(3, dq_shape),
       make_contiguous_view(reinterpret_cast<void*>(dbuf[4]), DType::f32, 3, dl_shape, 0)}};
  std::vector<std::array<double, 5>> stage_us;
  std::vector<std::string> stage_configs;
  for (const StageCase& sc : stage_cases) {
    const AttentionForwardCall call = validate_attention_forward(sc.q, sc.k, sc.v, sc.o, &sc.lse, opt);
    AttentionForwardLaunch ready = prepare_attention_forward(sc.q, sc.k, sc.v, sc.o, &sc.lse, opt);
    stage_configs.push_back(to_string(ready.config));
    auto validate = [&] { (void)validate_attention_forward(sc.q, sc.k, sc.v, sc.o, &sc.lse, opt); };
    auto choose = [&] { (void)choose_attention_forward_config(call, opt); };
    auto prepare = [&] { (void)prepare_attention_forward(sc.q, sc.k, sc.v, sc.o, &sc.lse, opt); };
    auto launch = [&] { launch_attention_forward(ready, 0, stream); };
    auto whole = [&] { attention_forward(sc.q, sc.k, sc.v, sc.o, &sc.lse, opt, stream); };
    for (int i = 0; i < 200; ++i) validate(), choose(), prepare(), launch(), whole();
    std::array<double, 5> med{};
    const std::array<std::function<void()>, 5> fns = {validate, choose, prepare, launch, whole};
    for (int f = 0; f < 5; ++f) med[f] = median_host_us(fns[f], stream, calls / 5);
    stage_us.push_back(med);
  }
  cu.cuStreamDestroy(stream);
  for (auto b : buf) cu.cuMemFree(b);
  for (auto b : dbuf) cu.cuMemFree(b);

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
  if (!rows.json())
    std::printf("\nwhere a hot kgen::attention_forward's host time goes (median µs of %d calls each):\n", calls / 5);
  rows.columns({"shape", "config", "validate", "choose config", "prepare", "launch prepared", "whole call"},
               rows.json() ? "host time per stage" : "");
  for (std::size_t i = 0; i < stage_us.size(); ++i) {
    const auto& m = stage_us[i];
    rows.row({stage_cases[i].name, stage_configs[i], cell("%.2f", m[0]), cell("%.2f", m[1]), cell("%.2f", m[2]),
              cell("%.2f", m[3]), cell("%.2f", m[4])});
  }
  return kOk;
}

// `kgen bench --op attention_fwd`: the table, then with --warmup 0 the cost of first calls too
// (cold compile, disk hit, in-memory hit); --launch: those alone.
int bench_forward(const SweepOptions& o, BenchRows& rows) {
  if (o.flag("launch")) return run_launch_bench(10000, rows);
  int rc = run_attention_bench(o, rows, /*forward=*/true, /*dbl=*/false);
  if (o.integer("warmup", 0) == 0 && rc == kOk) rc = run_launch_bench(10000, rows);
  return rc;
}

std::vector<std::unique_ptr<TuningProblem>> forward_problems(const SweepOptions& o) {
  std::vector<std::unique_ptr<TuningProblem>> out;
  for (const AttentionCase& c : attention_cases(o)) out.push_back(attention_forward_tuning(c));
  return out;
}

const SweepFamily kAttentionFamily{
    "attention",
    "attention_fwd|attention_bwd|attention_double_bwd: --dtypes × --head-dims × --causal × --seqlens, b = --batch "
    "(or --tokens / n), h = --heads (or --hidden / d).",
    "attention: --seqlens, --batch, --heads, --heads-kv, --tokens, --hidden, --q-len",
    "docs/attention.md §5.6",
    "odd sizes, both layouts, GQA",
    "attention_bwd --deterministic tunes that mode.",
    {{"seqlens", "attention n_q = n_k"}}};

const std::vector<std::string_view> kAttentionOptions = {"head-dims", "causal", "seqlens", "batch", "heads", "heads-kv",
                                                         "q-len", "tokens", "hidden", "quick"};
const std::vector<SweepDefault> kAttentionDefaults = {
    {"head-dims", kCheck, "32,64,96,128,256,80"},
    {"head-dims", kBench, "64,128"},
    {"head-dims", kTune, "128"},
    {"causal", kEvery, "both"},
    {"seqlens", kCheck | kBench, "512,1024,2048,4096,8192,16384"},
    {"seqlens", kTune, "1024,4096,16384"},
    {"tokens", kEvery, "16384"},
    {"hidden", kEvery, "2048"},
    {"warmup", kBench, "5"},
    {"reps", kBench, "30"},
};
const std::vector<std::string_view> kAttentionCheckList = {"seqlens", "batch", "heads", "heads-kv", "tokens", "hidden", "q-len"};

std::vector<std::string_view> with(std::vector<std::string_view> options, std::string_view more) {
  options.push_back(more);
  return options;
}

const bool attention_sweep_registered = [] {
  register_sweep_operator({"attention_fwd", &kAttentionFamily, nullptr, with(kAttentionOptions, "launch"),
                           kAttentionDefaults, kAttentionCheckList, forward_check_items, case_titles, forward_problems,
                           bench_forward});
  register_sweep_operator(
      {"attention_bwd", &kAttentionFamily, nullptr, with(kAttentionOptions, "deterministic"), kAttentionDefaults,
       kAttentionCheckList,
       [](const SweepOptions& o, const std::vector<std::string>& configs) { return gradient_check_items(o, configs, false); },
       case_titles,
       [](const SweepOptions& o) {
         std::vector<std::unique_ptr<TuningProblem>> out;
         for (const AttentionCase& c : attention_cases(o)) out.push_back(attention_backward_tuning(c, o.flag("deterministic")));
         return out;
       },
       [](const SweepOptions& o, BenchRows& rows) { return run_attention_bench(o, rows, false, false); }});
  register_sweep_operator(
      {"attention_double_bwd", &kAttentionFamily, nullptr, kAttentionOptions, kAttentionDefaults, kAttentionCheckList,
       [](const SweepOptions& o, const std::vector<std::string>& configs) { return gradient_check_items(o, configs, true); },
       case_titles,
       [](const SweepOptions& o) {
         std::vector<std::unique_ptr<TuningProblem>> out;
         for (const AttentionCase& c : attention_cases(o)) out.push_back(attention_double_backward_tuning(c));
         return out;
       },
       [](const SweepOptions& o, BenchRows& rows) { return run_attention_bench(o, rows, false, true); }});
  return true;
}();

}  // namespace
}  // namespace kgen::cli
