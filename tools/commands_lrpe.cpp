// The tables of `kgen bench --op lrpe_cosine|md_lrpe_cosine` (the reference reports' format,
// docs/lrpe.md §4, with the device copy rate measured in the same run and each cell's share of
// the bandwidth floor), and the aliases `kgen check|bench lrpe|md_lrpe` of `--op`.
#include <cstdio>
#include <memory>

#include "check/lrpe_harness.h"
#include "driver/device.h"
#include "generator/lrpe.h"
#include "tools/commands.h"
#include "tools/sweep.h"

namespace kgen::cli {
namespace {

// The reports' act part of a table name: "act_none", "act_softmax-dim_-2".
std::string act_title(LrpeAct act) {
  if (act == LrpeAct::softmax) return "act_softmax-dim_-1";
  if (act == LrpeAct::softmax_seq) return "act_softmax-dim_-2";
  return "act_" + std::string(lrpe_act_name(act));
}

const char* direction_name(LrpeDirection d) { return d == LrpeDirection::forward ? "fwd" : "bwd"; }

// One table cell: check on poisoned outputs, then time; text "0.123456 (87%)" or FAIL/ERROR.
std::string bench_cell(const LrpeCase& c, const std::string& config, double copy_rate, int warmup, int reps,
                       std::unique_ptr<LrpeBench>& bench, int& failed, std::string& note) {
  try {
    if (!bench) bench = std::make_unique<LrpeBench>(c, 0);
    HarnessCheck check = bench->check(config);
    if (!check.pass) {
      ++failed;
      note = "FAIL " + to_string(c) + " " + config + ": " + check.failure();
      return "FAIL";
    }
    Timing t = bench->time(config, warmup, reps);
    const double floor_ms = lrpe_floor_bytes(c) / copy_rate * 1e3;
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.6f (%3.0f%%)", t.median_ms, 100.0 * floor_ms / t.median_ms);
    return buf;
  } catch (const Error& e) {
    ++failed;
    note = "ERROR " + to_string(c) + " " + config + ": " + e.what();
    return "ERROR";
  }
}

// One memory-table cell: MiB of lrpe_footprint_bytes.
std::string memory_cell(const LrpeCase& c) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6f", double(lrpe_footprint_bytes(c, 0)) / (1 << 20));
  return buf;
}

// The table a case's row belongs to (the name after "-speed-" / "-memory-").
std::string table_tail(const LrpeCase& c) {
  std::string tail = std::string(direction_name(c.direction)) + "-batch" + std::to_string(c.batch) + "-head" +
                     std::to_string(c.heads) + "-dim" + std::to_string(c.d) + "-";
  if (c.op == LrpeOp::cosine) return tail + act_title(c.act) + "-" + std::string(dtype_name(c.dtype));
  return tail + std::string(dtype_name(c.dtype)) + "-" + std::to_string(c.grid.size()) + "d-l" + std::to_string(c.extra) +
         (c.act != LrpeAct::none ? "-" + act_title(c.act) : "");
}

// A row's label: n, or the md grid's side (its sizes when they differ), as the reports print it.
std::string row_label(const LrpeCase& c) {
  char buf[32];
  if (c.op == LrpeOp::cosine) {
    std::snprintf(buf, sizeof buf, "%.1f", double(c.n));
    return buf;
  }
  bool square = true;
  for (int v : c.grid) square = square && v == c.grid[0];
  if (square) {
    std::snprintf(buf, sizeof buf, "%.1f", double(c.grid[0]));
    return buf;
  }
  std::string s;
  for (int v : c.grid) s += (s.empty() ? "" : "x") + std::to_string(v);
  return s;
}

using Rows = std::vector<std::pair<std::string, std::vector<std::string>>>;

// One table in the reference reports' format, or with --json its rows ("table", "n", a field per column).
void print_table(const std::string& title, const std::vector<std::string>& columns, const Rows& rows, BenchRows& out) {
  if (out.json()) {
    std::vector<std::string> names = {"n"};
    names.insert(names.end(), columns.begin(), columns.end());
    out.columns(names, title);
    for (const auto& [label, cells] : rows) {
      std::vector<std::string> row = {label};
      row.insert(row.end(), cells.begin(), cells.end());
      out.row(row);
    }
    return;
  }
  std::printf("%s:\n%10s", title.c_str(), "n");
  for (const auto& c : columns) std::printf("  %18s", c.c_str());
  std::printf("\n");
  for (std::size_t i = 0; i < rows.size(); ++i) {
    std::printf("%-3zu %6s", i, rows[i].first.c_str());
    for (const auto& cell : rows[i].second) std::printf("  %18s", cell.c_str());
    std::printf("\n");
  }
  std::printf("\n");
  std::fflush(stdout);
}

}  // namespace

int run_lrpe_bench(const SweepOptions& o, BenchRows& out) {
  // Arguments first, so a typo is named even on a machine without a GPU.
  const std::vector<LrpeCase> cases = lrpe_cases(o);
  const bool md = o.op() == "md_lrpe_cosine";
  // Columns: the default; md also the default with the angle cache ("cache"); then each config
  // (md ':cache' ones with the cache), each column on its own buffers.
  std::vector<std::string> configs = {""};
  if (md) configs.push_back("cache");
  for (const std::string& c : sweep_configs(o)) configs.push_back(c);
  std::vector<std::string> columns;
  for (const auto& config : configs) columns.push_back(config.empty() ? "kgen" : "kgen " + config);
  const std::vector<std::string> memory_columns = md ? std::vector<std::string>{"kgen", "kgen cache"} : std::vector<std::string>{"kgen"};
  const int warmup = o.integer("warmup", 0), reps = o.integer("reps", 1), copy_mib = o.integer("copy-mib", 1);
  require_device();
  const double copy_rate = measure_copy_bandwidth(static_cast<std::size_t>(copy_mib) << 20, 0);
  if (!out.json()) {
    print_device_header();
    std::printf("device copy rate %.3f TB/s (cuMemcpyDtoDAsync of %d MiB, bytes read + written, median of 20; this run)\n",
                copy_rate / 1e12, copy_mib);
    std::printf("cells: kernel-only median ms of %d reps after %d warm-up (CUDA events, inputs rotated beyond L2), each "
                "checked first on NaN-poisoned outputs against the fp64 reference; (%%) = floor time / measured time, floor = "
                "bytes of docs/lrpe.md §5 at the copy rate. bwd is the kgen backward alone (no autograd accumulation).\n",
                reps, warmup);
    std::printf("memory tables: MiB (2^20 bytes) of device memory one call holds, counted as the reference reports count "
                "their kernels' peak of live allocations: fwd x + theta (fp32) + o, bwd x + theta + dO + dx, plus the md "
                "angle cache (h, n, d) fp32 and the softmax-over-the-sequence statistics scratch; kgen allocates nothing "
                "else on the call path (the reports' bwd also counts o and autograd's x.grad accumulation: "
                "bench/compare_lrpe.py measures that under PyTorch).\n\n");
  }
  const std::string head = md ? "md_lrpe_cosine-" : "lrpe_cosine-";
  int failed = 0;
  std::vector<std::string> notes;
  std::string tail;  // the table being filled; printed when the next row belongs to another
  Rows rows, memory_rows;
  auto flush = [&] {
    if (rows.empty()) return;
    print_table(head + "speed-" + tail, columns, rows, out);
    print_table(head + "memory-" + tail, memory_columns, memory_rows, out);
    rows.clear(), memory_rows.clear();
  };
  for (const LrpeCase& base : cases) {
    if (table_tail(base) != tail) flush();
    tail = table_tail(base);
    std::vector<std::string> cells, memory;
    std::unique_ptr<LrpeBench> benches[2];  // without / with the angle cache: inputs made once each
    for (const std::string& config : configs) {
      LrpeCase c = base;
      c.cache = md && (config == "cache" || config.ends_with(":cache"));
      std::string note;
      cells.push_back(bench_cell(c, config == "cache" ? "" : config, copy_rate, warmup, reps, benches[c.cache], failed, note));
      if (!note.empty()) notes.push_back(note);
      if (config.empty() || config == "cache") memory.push_back(memory_cell(c));
    }
    rows.emplace_back(row_label(base), cells);
    memory_rows.emplace_back(row_label(base), memory);
  }
  flush();
  for (const auto& n : notes) std::fprintf(out.json() ? stderr : stdout, "%s\n", n.c_str());
  return failed ? kFailed : kOk;
}

void add_lrpe_aliases(CLI::App& check, CLI::App& bench, int& exit_code) {
  for (const auto& [alias, op] : {std::pair<const char*, const char*>{"lrpe", "lrpe_cosine"}, {"md_lrpe", "md_lrpe_cosine"}}) {
    const std::string to = std::string(" --op ") + op;
    auto* c = check.add_subcommand(alias, "Alias of `kgen check" + to + "`");
    auto check_options = add_sweep_options(*c, SweepCommand::check, op);
    c->callback([check_options, &exit_code] { exit_code = run_sweep_check(*check_options); });
    auto* b = bench.add_subcommand(alias, "Alias of `kgen bench" + to + "` (--dim: --head-dims)");
    auto bench_options = add_sweep_options(*b, SweepCommand::bench, op);
    b->callback([bench_options, &exit_code] { exit_code = run_sweep_bench(*bench_options); });
  }
}

}  // namespace kgen::cli
