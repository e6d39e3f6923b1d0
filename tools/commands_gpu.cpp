// `kgen check`, `kgen bench` and `kgen demo` (the README's main job).
#include <cstdio>
#include <memory>
#include <sstream>

#include "kgen/kgen.hpp"
#include "runtime/attention_forward.h"
#include "runtime/attention_harness.h"
#include "runtime/cuda_driver.h"
#include "runtime/device.h"
#include "runtime/kernel_builder.h"
#include "runtime/warm.h"
#include "tools/commands.h"

namespace kgen::cli {
namespace {

std::vector<int> parse_ints(const std::string& text, const char* option) {
  std::vector<int> out;
  for (const auto& s : split_list(text)) {
    try {
      std::size_t used = 0;
      int v = std::stoi(s, &used);
      if (used != s.size() || v <= 0) throw std::invalid_argument(s);
      out.push_back(v);
    } catch (const std::exception&) {
      throw Error(Status::invalid_argument, std::string(option) + ": '" + s + "' is not a positive integer");
    }
  }
  return out;
}

std::vector<DType> parse_dtypes(const std::string& text) {
  std::vector<DType> out;
  for (const auto& s : split_list(text)) {
    auto t = parse_dtype(s);
    if (!t) throw Error(Status::invalid_argument, "--dtypes: unknown dtype '" + s + "'");
    out.push_back(*t);
  }
  return out;
}

std::vector<bool> parse_causal(const std::string& text) {
  if (text == "both") return {false, true};
  if (text == "yes") return {true};
  if (text == "no") return {false};
  throw Error(Status::invalid_argument, "--causal: expected yes, no or both, got '" + text + "'");
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

// The correctness sweep of attention.md §5.6: odd sizes, n_q != n_k both ways, causal, GQA,
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

int run_check(const std::vector<DType>& dtypes, const std::vector<int>& head_dims, bool quick) {
  require_device();
  print_device_header();
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

int run_bench(const BenchOptions& o) {
  require_device();
  print_device_header();
  std::printf("attention_fwd, b·n = %d tokens, h·d = %d; median of %d reps after %d warm-up; every row checked first\n\n",
              o.tokens, o.hidden, o.reps, o.warmup);
  std::printf("| dtype | d | causal | n | b | h | config | check | median ms | p20–p80 ms | TFLOPS |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
  int failed = 0;
  for (DType t : parse_dtypes(o.dtypes))
    for (int d : parse_ints(o.head_dims, "--head-dims"))
      for (bool causal : parse_causal(o.causal))
        for (int n : parse_ints(o.seqlens, "--seqlens"))
         for (const std::string& forced : bench_configs(o.configs)) {
          AttentionCase c;
          c.config = forced;
          c.dtype = t, c.head_dim = d, c.causal = causal, c.n_q = c.n_k = n;
          c.batch = std::max(1, o.tokens / n);
          c.heads_q = c.heads_kv = std::max(1, o.hidden / d);
          CheckedTiming r;
          try {
            r = check_and_time_attention_forward(c, 0, o.warmup, o.reps);
          } catch (const Error& e) {
            std::printf("| %s | %d | %s | %d | %d | %d | – | ERROR %s | – | – | – |\n", std::string(dtype_name(t)).c_str(), d,
                        causal ? "yes" : "no", n, c.batch, c.heads_q, e.what());
            ++failed;
            continue;
          }
          std::string config = forced;
          if (config.empty()) {
            AttentionForwardSpec spec{t, d, causal};
            AttentionShape shape{c.batch, c.heads_q, c.heads_kv, n, n};
            config = to_string(attention_forward_default_config(spec, shape, device_info(0).target, device_info(0).sm_count));
          }
          if (!r.check.pass) {
            std::printf("| %s | %d | %s | %d | %d | %d | %s | FAIL (%s) | – | – | – |\n", std::string(dtype_name(t)).c_str(), d,
                        causal ? "yes" : "no", n, c.batch, c.heads_q, config.c_str(),
                        (r.check.o.pass ? r.check.lse.why : r.check.o.why).c_str());
            ++failed;
            continue;
          }
          double tflops = attention_forward_flops(c) / (r.timing.median_ms * 1e-3) / 1e12;
          std::printf("| %s | %d | %s | %d | %d | %d | %s | pass (rel_l2 %.1e) | %.3f | %.3f–%.3f | %.1f |\n",
                      std::string(dtype_name(t)).c_str(), d, causal ? "yes" : "no", n, c.batch, c.heads_q, config.c_str(),
                      r.check.o.rel_l2, r.timing.median_ms, r.timing.p20_ms, r.timing.p80_ms, tflops);
          std::fflush(stdout);
        }
  return failed ? kFailed : kOk;
}

}  // namespace

void add_gpu_commands(CLI::App& app, int& exit_code) {
  auto* check = app.add_subcommand("check", "Correctness sweep of attention_fwd on the GPU against the fp64 reference");
  auto dtypes = std::make_shared<std::string>("fp16,bf16,fp32");
  auto dims = std::make_shared<std::string>("32,64,96,128,256,80");
  auto quick = std::make_shared<bool>(false);
  check->add_option("--dtypes", *dtypes, "Comma-separated dtypes")->capture_default_str();
  check->add_option("--head-dims", *dims, "Comma-separated head dims")->capture_default_str();
  check->add_flag("--quick", *quick, "Skip the large shapes");
  check->callback([=, &exit_code] { exit_code = run_check(parse_dtypes(*dtypes), parse_ints(*dims, "--head-dims"), *quick); });

  auto* bench = app.add_subcommand("bench", "Time attention_fwd on the standard sweep (each row checked first)");
  auto o = std::make_shared<BenchOptions>();
  bench->add_option("--dtypes", o->dtypes, "Comma-separated dtypes")->capture_default_str();
  bench->add_option("--head-dims", o->head_dims, "Comma-separated head dims")->capture_default_str();
  bench->add_option("--seqlens", o->seqlens, "Comma-separated sequence lengths")->capture_default_str();
  bench->add_option("--causal", o->causal, "yes, no or both")->capture_default_str();
  bench->add_option("--tokens", o->tokens, "b·n per row")->capture_default_str()->check(CLI::PositiveNumber);
  bench->add_option("--hidden", o->hidden, "h·d per row")->capture_default_str()->check(CLI::PositiveNumber);
  bench->add_option("--warmup", o->warmup, "Untimed runs")->capture_default_str()->check(CLI::NonNegativeNumber);
  bench->add_option("--reps", o->reps, "Timed runs")->capture_default_str()->check(CLI::PositiveNumber);
  bench->add_option("--configs", o->configs, "Also time these configs, '|'-separated (invalid ones are reported per row)");
  bench->callback([o, &exit_code] { exit_code = run_bench(*o); });

  auto* demo = app.add_subcommand("demo", "Main job: verify and time default shapes on a GPU, or pre-warm sm_80/sm_90a without one");
  demo->callback([&exit_code] {
    std::string why;
    if (cuda_available(&why)) {
      int rc = run_check({DType::bf16, DType::f16}, {64, 128}, /*quick=*/true);
      BenchOptions o;
      o.dtypes = "bf16";
      o.seqlens = "2048,8192";
      int rc2 = run_bench(o);
      exit_code = rc || rc2 ? kFailed : kOk;
      return;
    }
    std::printf("no GPU found (%s)\npre-warming the cache for sm_80 and sm_90a instead\n", why.c_str());
    auto items = warm_items({}, {"sm_80", "sm_90a"});
    KernelBuilder& builder = KernelBuilder::global();
    auto s = warm(builder, items, 0, [](const WarmResult& r, std::size_t done, std::size_t total) {
      if (!r.ok) std::printf("FAILED %s for %s\n%s\n", r.item->source.variant.c_str(), r.item->target.arch.c_str(), r.error.c_str());
      if (done % 20 == 0 || done == total) std::printf("[%zu/%zu]\n", done, total);
      std::fflush(stdout);
    });
    std::printf("compiled %d, cached %d, failed %d (cache: %s)\n", s.compiled, s.cached, s.failed, builder.cache().root().c_str());
    exit_code = s.failed ? kFailed : kOk;
  });
}

}  // namespace kgen::cli
