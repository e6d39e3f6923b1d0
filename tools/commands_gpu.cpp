// `kgen check` and `kgen bench` of every operator with a sweep (tools/sweep.h: the options,
// shared with `kgen tune`, and what each operator runs), and `kgen demo` (the README's main job).
#include <cstdio>
#include <memory>

#include "kgen/kgen.hpp"
#include "cache/binary_cache.h"
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

// `kgen check --op X`: every case and config checked once on NaN-poisoned outputs.
int run_check(const SweepOptions& o) {
  // Arguments first, so a typo is named even on a machine without a GPU.
  o.validate();
  std::vector<std::string> configs = {""};
  for (const std::string& c : sweep_configs(o)) configs.push_back(c);
  const std::vector<CheckItem> items = find_sweep_operator(o.op())->check_items(o, configs);
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

}  // namespace

int run_sweep_check(const SweepOptions& o) { return run_check(o); }

int run_sweep_bench(const SweepOptions& o) {
  o.validate();
  if (o.flag("list")) {
    for (const std::string& t : find_sweep_operator(o.op())->case_titles(o)) std::printf("%s\n", t.c_str());
    for (const std::string& c : sweep_configs(o)) std::printf("config %s\n", c.c_str());
    return kOk;
  }
  BenchRows rows(o.flag("json"));
  const int rc = find_sweep_operator(o.op())->bench(o, rows);
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
  // The alias sub-commands (`kgen check lrpe` for `kgen check --op lrpe_cosine`).
  for (const SweepOperator* op : sweep_operators()) {
    if (!op->alias) continue;
    const std::string to = std::string(" --op ") + op->name;
    auto* c = check->add_subcommand(op->alias, "Alias of `kgen check" + to + "`");
    auto alias_check = add_sweep_options(*c, SweepCommand::check, op->name);
    c->callback([alias_check, &exit_code] { exit_code = run_sweep_check(*alias_check); });
    auto* b = bench->add_subcommand(op->alias, "Alias of `kgen bench" + to + "` (--dim: --head-dims)");
    auto alias_bench = add_sweep_options(*b, SweepCommand::bench, op->name);
    b->callback([alias_bench, &exit_code] { exit_code = run_sweep_bench(*alias_bench); });
  }
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
      // The first operator's (--op's default): its correctness list at two head dims, then its table.
      int rc = run_check(*sweep_options_from(SweepCommand::check, "--dtypes bf16,fp16 --head-dims 64,128 --quick"));
      int rc2 = run_sweep_bench(*sweep_options_from(SweepCommand::bench, "--dtypes bf16 --seqlens 2048,8192"));
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
    const cache::BinaryCache& cache = builder.publish_cache();
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
