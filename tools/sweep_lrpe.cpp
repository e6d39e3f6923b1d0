// The sweeps of lrpe_cosine and md_lrpe_cosine (tools/sweep.h): their options and defaults, the
// cases of `kgen check`, `bench` and `tune`, and the bench tables (the reference reports' format,
// docs/lrpe.md §4, with the device copy rate measured in the same run and each cell's share of
// the bandwidth floor). `kgen check|bench lrpe|md_lrpe` stand for their --op.
#include <algorithm>
#include <cstdio>
#include <memory>

#include "check/lrpe_harness.h"
#include "driver/device.h"
#include "generator/lrpe.h"
#include "ops/lrpe_tuning.h"
#include "tools/commands.h"
#include "tools/sweep.h"

namespace kgen::cli {
namespace {

// "64x64" → {64, 64} (--grids).
std::vector<int> parse_grid(const std::string& text) {
  std::vector<int> sizes;
  std::string part;
  for (std::size_t i = 0; i <= text.size(); ++i) {
    if (i < text.size() && text[i] != 'x') {
      part += text[i];
      continue;
    }
    auto v = part.empty() ? std::vector<int>{} : parse_int_list(part, "--grids");
    if (v.size() != 1) throw Error(Status::invalid_argument, "--grids: '" + text + "' is not a grid like 64x64");
    sizes.push_back(v[0]);
    part.clear();
  }
  if (sizes.size() > 3) throw Error(Status::invalid_argument, "--grids: '" + text + "' has more than 3 dims");
  return sizes;
}

std::vector<LrpeAct> parse_acts(const std::string& text) {
  std::vector<LrpeAct> out;
  for (const auto& s : parse_list(text, "--acts")) {
    // "softmax-1" / "softmax-2": the reference reports' dims.
    auto act = parse_lrpe_act(s == "softmax-1" ? "softmax" : s == "softmax-2" ? "softmax_seq" : s);
    if (!act) throw Error(Status::invalid_argument, "--acts: unknown act '" + s + "' (none, relu, sigmoid, silu, softmax, softmax_seq)");
    out.push_back(*act);
  }
  return out;
}

std::vector<LrpeDirection> parse_directions(const std::string& text) {
  std::vector<LrpeDirection> out;
  for (const auto& d : parse_list(text, "--directions")) {
    if (d != "fwd" && d != "bwd") throw Error(Status::invalid_argument, "--directions: expected fwd and/or bwd, got '" + d + "'");
    out.push_back(d == "fwd" ? LrpeDirection::forward : LrpeDirection::backward);
  }
  return out;
}

// An md case of `grid` with `extra` tokens first.
LrpeCase md_case(const std::vector<int>& grid, int extra) {
  LrpeCase c;
  c.op = LrpeOp::md_cosine, c.grid = grid, c.extra = extra;
  long long cells = 1;
  for (int v : grid) cells *= v;
  if (cells + extra >= (1LL << 31))
    throw Error(Status::invalid_argument, "--grids: a grid of " + std::to_string(cells) + " positions is too large");
  c.n = static_cast<int>(extra + cells);
  return c;
}

// The md grids of the options: --grids and one 1-d grid per --seqlens entry; when neither is
// given, the command's defaults of both. The old `bench md_lrpe --dims` keeps those of its dims.
std::vector<std::vector<int>> md_grids(const SweepOptions& o) {
  const bool explicit_shapes = o.given("grids") || o.given("seqlens");
  std::vector<std::vector<int>> grids;
  if (!explicit_shapes || o.given("seqlens"))
    for (int n : parse_int_list(o.value("seqlens"), "--seqlens")) grids.push_back({n});
  if (!explicit_shapes || o.given("grids"))
    for (const auto& g : parse_list(o.value("grids"), "--grids")) grids.push_back(parse_grid(g));
  if (o.given("dims")) {
    const auto dims = parse_int_list(o.value("dims"), "--dims");
    for (int m : dims)
      if (m > 3) throw Error(Status::invalid_argument, "--dims: grids have 1, 2 or 3 dims, got " + std::to_string(m));
    std::erase_if(grids, [&](const std::vector<int>& g) { return std::find(dims.begin(), dims.end(), int(g.size())) == dims.end(); });
  }
  return grids;
}

// The lrpe cases of `op`: `kgen check` without a shape option runs the correctness list of
// docs/lrpe.md §6; otherwise dtype × act × direction × d × (n, or grid × extra tokens) at --batch
// × --heads. `kgen check` runs md cases with and without the angle cache.
std::vector<LrpeCase> lrpe_cases(LrpeOp op, const SweepOptions& o) {
  const auto dtypes = parse_dtypes(o.value("dtypes"));
  const auto acts = parse_acts(o.value("acts"));
  const auto directions = parse_directions(o.value("directions"));
  const bool check = o.command() == SweepCommand::check;
  // The shapes: (b, h, n, d) for lrpe_cosine, grid and extra tokens (b, h, d fixed) for md.
  std::vector<LrpeCase> shapes;
  auto shape = [&](int b, int h, int n, int d) {
    LrpeCase c;
    c.batch = b, c.heads = h, c.n = n, c.d = d;
    return c;
  };
  if (o.uses_check_list()) {
    // docs/lrpe.md §6.
    if (op == LrpeOp::cosine) {
      for (const LrpeCase& c : {shape(1, 1, 1, 1), shape(2, 3, 33, 33), shape(2, 4, 257, 48), shape(2, 12, 1000, 128),
                                shape(1, 2, 4096, 64)})
        shapes.push_back(c);
    } else {
      const std::pair<std::vector<int>, int> grids[] = {{{33}, 0}, {{16, 16}, 10}, {{4, 5, 6}, 0}, {{8, 8, 8}, 10}};
      for (const auto& [grid, extra] : grids) {
        LrpeCase c = md_case(grid, extra);
        c.batch = 2, c.heads = 3, c.d = 64;
        shapes.push_back(c);
      }
    }
  } else {
    const int batch = o.integer("batch", 1), heads = o.integer("heads", 1);
    for (int d : parse_int_list(o.value("head-dims"), "--head-dims")) {
      if (op == LrpeOp::cosine) {
        for (int n : parse_int_list(o.value("seqlens"), "--seqlens")) shapes.push_back(shape(batch, heads, n, d));
        continue;
      }
      // Grouped as the reports' tables: per grid dims m (in order of first appearance), per extra
      // tokens l, the grids of m dims.
      const auto extras = parse_int_list(o.value("extras"), "--extras", 0);
      const auto grids = md_grids(o);
      std::vector<std::size_t> dims;
      for (const auto& g : grids)
        if (std::find(dims.begin(), dims.end(), g.size()) == dims.end()) dims.push_back(g.size());
      for (std::size_t m : dims)
        for (int extra : extras)
          for (const auto& grid : grids) {
            if (grid.size() != m) continue;
            LrpeCase c = md_case(grid, extra);
            c.batch = batch, c.heads = heads, c.d = d;
            shapes.push_back(c);
          }
    }
  }
  std::vector<LrpeCase> cases;
  std::uint64_t seed = 1;
  for (DType t : dtypes)
    for (LrpeAct act : acts)
      for (LrpeDirection dir : directions)
        for (const LrpeCase& s : shapes)
          for (bool cache : {false, true}) {
            // check runs md with and without the angle cache; bench adds the cache as a column.
            if (cache && !(check && op == LrpeOp::md_cosine)) continue;
            LrpeCase c = s;
            c.op = op, c.dtype = t, c.act = act, c.direction = dir, c.cache = cache;
            if (check) {  // layouts, theta shapes and offsets vary from case to case
              if (op == LrpeOp::cosine) {
                c.layout = seed % 2 ? Layout::bnhd : Layout::bhnd, c.theta_kind = static_cast<int>(seed % 3);
                c.offset = seed % 2 ? 0 : 777;
              } else {
                c.theta_kind = seed % 2 ? 0 : 2;
              }
            }
            c.seed = seed++;
            cases.push_back(c);
          }
  return cases;
}

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

// `kgen bench` of `op`: per table of the reports (direction, shape, dtype, act) a speed table
// (one column per config) and a memory table.
int run_lrpe_bench(LrpeOp op, const SweepOptions& o, BenchRows& out) {
  // Arguments first, so a typo is named even on a machine without a GPU.
  const std::vector<LrpeCase> cases = lrpe_cases(op, o);
  const bool md = op == LrpeOp::md_cosine;
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
  const std::string head = std::string(lrpe_op_name(op)) + "-";
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

std::vector<std::string> case_titles(LrpeOp op, const SweepOptions& o) {
  std::vector<std::string> titles;
  for (const LrpeCase& c : lrpe_cases(op, o)) titles.push_back(to_string(c));
  return titles;
}

std::vector<CheckItem> check_items(LrpeOp op, const SweepOptions& o, const std::vector<std::string>& configs) {
  std::vector<CheckItem> items;
  for (const LrpeCase& c : lrpe_cases(op, o)) {
    // md configs with ':cache' run with the angle cache, the others without.
    std::vector<std::string> own;
    for (const std::string& config : configs)
      if (config.empty() || c.op != LrpeOp::md_cosine || config.ends_with(":cache") == c.cache) own.push_back(config);
    items.push_back({to_string(c), [c]() -> std::unique_ptr<HarnessBench> { return std::make_unique<LrpeBench>(c, 0); },
                     own});
  }
  return items;
}

std::vector<std::unique_ptr<TuningProblem>> tuning_problems(LrpeOp op, const SweepOptions& o) {
  std::vector<std::unique_ptr<TuningProblem>> out;
  for (const LrpeCase& c : lrpe_cases(op, o)) out.push_back(lrpe_tuning(c));
  return out;
}

const SweepFamily kLrpeFamily{
    "lrpe",
    "lrpe_cosine: --dtypes × --acts × --directions × --head-dims × --seqlens at --batch × --heads; md_lrpe_cosine: the "
    "same with --grids × --extras (and --seqlens as 1-d grids) instead of --seqlens.",
    "lrpe: --head-dims, --seqlens, --batch, --heads, --grids, --extras",
    "docs/lrpe.md §6",
    "theta shapes, the md angle cache",
    "",
    {{"seqlens", "lrpe_cosine n; md_lrpe_cosine 1-d grids of n positions"}}};

const std::vector<SweepDefault> kLrpeDefaults = {
    {"head-dims", kEvery, "128"},
    {"seqlens", kCheck | kBench, "256,512,1024,2048,4096,8192,16384,32768"},
    {"seqlens", kTune, "4096"},
    {"batch", kEvery, "12"},
    {"heads", kEvery, "12"},
    {"acts", kCheck, "none,relu,sigmoid,silu,softmax,softmax_seq"},
    {"acts", kTune, "none,silu,softmax,softmax_seq"},
    {"directions", kEvery, "fwd,bwd"},
    {"warmup", kBench, "10"},
    {"reps", kBench, "50"},
    {"copy-mib", kBench, "1024"},
};

std::vector<SweepDefault> lrpe_defaults(std::vector<SweepDefault> more) {
  std::vector<SweepDefault> out = kLrpeDefaults;
  out.insert(out.end(), more.begin(), more.end());
  return out;
}

// The operator `op`'s sweep, known on the command line also as `check|bench alias`.
SweepOperator lrpe_sweep(LrpeOp op, const char* alias, std::vector<std::string_view> more_options,
                         std::vector<SweepDefault> more_defaults) {
  std::vector<std::string_view> options = {"head-dims", "seqlens", "batch", "heads", "acts", "directions", "copy-mib"};
  options.insert(options.end(), more_options.begin(), more_options.end());
  return {lrpe_op_name(op).data(),
          &kLrpeFamily,
          alias,
          options,
          lrpe_defaults(std::move(more_defaults)),
          {"head-dims", "seqlens", "batch", "heads", "grids", "extras"},
          [op](const SweepOptions& o, const std::vector<std::string>& configs) { return check_items(op, o, configs); },
          [op](const SweepOptions& o) { return case_titles(op, o); },
          [op](const SweepOptions& o) { return tuning_problems(op, o); },
          [op](const SweepOptions& o, BenchRows& rows) { return run_lrpe_bench(op, o, rows); }};
}

const bool lrpe_sweep_registered = [] {
  register_sweep_operator(lrpe_sweep(LrpeOp::cosine, "lrpe", {}, {{"acts", kBench, "none,silu,softmax,softmax_seq"}}));
  register_sweep_operator(lrpe_sweep(LrpeOp::md_cosine, "md_lrpe", {"grids", "extras", "dims"},
                                     {{"acts", kBench, "none"},
                                      {"grids", kCheck | kBench, "16x16,32x32,64x64,128x128,4x4x4,8x8x8,16x16x16,32x32x32"},
                                      {"grids", kTune, "64x64,16x16x16"},
                                      {"extras", kCheck | kBench, "0,10"},
                                      {"extras", kTune, "0"}}));
  return true;
}();

}  // namespace
}  // namespace kgen::cli
