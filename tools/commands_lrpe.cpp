// `kgen check lrpe|md_lrpe` (correctness sweep against the fp64 references) and
// `kgen bench lrpe|md_lrpe` (the reference reports' tables, docs/lrpe.md §4, with the device
// copy rate measured in the same run and each cell's share of the bandwidth floor).
#include <cstdio>
#include <memory>
#include <sstream>

#include "generator/lrpe.h"
#include "driver/device.h"
#include "check/lrpe_harness.h"
#include "tools/commands.h"

namespace kgen::cli {
namespace {

constexpr LrpeAct kAllActs[] = {LrpeAct::none, LrpeAct::relu, LrpeAct::sigmoid,
                                LrpeAct::silu, LrpeAct::softmax, LrpeAct::softmax_seq};

// "none,silu,softmax,softmax_seq" (also "softmax-1" / "softmax-2", the reports' dims).
std::vector<LrpeAct> parse_acts(const std::string& text) {
  std::vector<LrpeAct> out;
  for (const auto& s : split_list(text)) {
    auto act = parse_lrpe_act(s == "softmax-1" ? "softmax" : s == "softmax-2" ? "softmax_seq" : s);
    if (!act) throw Error(Status::invalid_argument, "--acts: unknown act '" + s + "' (none, relu, sigmoid, silu, softmax, softmax_seq)");
    out.push_back(*act);
  }
  return out;
}

// The reports' act part of a table name: "act_none", "act_softmax-dim_-2".
std::string act_title(LrpeAct act) {
  if (act == LrpeAct::softmax) return "act_softmax-dim_-1";
  if (act == LrpeAct::softmax_seq) return "act_softmax-dim_-2";
  return "act_" + std::string(lrpe_act_name(act));
}

const char* direction_name(LrpeDirection d) { return d == LrpeDirection::forward ? "fwd" : "bwd"; }

int check_one(const LrpeCase& c, int& passed) {
  HarnessCheck r;
  try {
    r = check_lrpe(c, 0);
  } catch (const Error& e) {
    std::printf("ERROR %s: %s\n", to_string(c).c_str(), e.what());
    return 1;
  }
  std::printf("%s %s\n%s\n", r.pass ? "PASS " : "FAIL ", to_string(c).c_str(), to_string(r).c_str());
  std::fflush(stdout);
  passed += r.pass;
  return r.pass ? 0 : 1;
}

int run_lrpe_check(LrpeOp op, const std::vector<DType>& dtypes, const std::vector<LrpeAct>& acts) {
  require_device();
  print_device_header();
  struct Shape {
    int b, h, n, d;
  };
  const Shape shapes[] = {{1, 1, 1, 1}, {2, 3, 33, 33}, {2, 4, 257, 48}, {2, 12, 1000, 128}, {1, 2, 4096, 64}};
  struct Grid {
    std::vector<int> sizes;
    int extra;
  };
  const Grid grids[] = {{{33}, 0}, {{16, 16}, 10}, {{4, 5, 6}, 0}, {{8, 8, 8}, 10}};
  int failed = 0, passed = 0;
  std::uint64_t seed = 1;
  for (DType t : dtypes)
    for (LrpeAct act : acts)
      for (LrpeDirection dir : {LrpeDirection::forward, LrpeDirection::backward}) {
        if (op == LrpeOp::cosine) {
          for (const Shape& s : shapes) {
            LrpeCase c;
            c.dtype = t, c.act = act, c.direction = dir, c.batch = s.b, c.heads = s.h, c.n = s.n, c.d = s.d;
            c.layout = seed % 2 ? Layout::bnhd : Layout::bhnd, c.theta_kind = static_cast<int>(seed % 3);
            c.offset = seed % 2 ? 0 : 777, c.seed = seed++;
            failed += check_one(c, passed);
          }
          continue;
        }
        for (const Grid& g : grids)
          for (bool cache : {false, true}) {
            LrpeCase c;
            c.op = LrpeOp::md_cosine, c.dtype = t, c.act = act, c.direction = dir, c.batch = 2, c.heads = 3, c.d = 64;
            c.grid = g.sizes, c.extra = g.extra, c.cache = cache, c.theta_kind = seed % 2 ? 0 : 2, c.seed = seed++;
            c.n = g.extra;
            int cells = 1;
            for (int v : g.sizes) cells *= v;
            c.n += cells;
            failed += check_one(c, passed);
          }
      }
  std::printf("passed %d, failed %d\n", passed, failed);
  return failed ? kFailed : kOk;
}

struct LrpeBenchOptions {
  std::string dtypes = "bf16", acts = "none,silu,softmax,softmax_seq", seqlens = "256,512,1024,2048,4096,8192,16384,32768";
  std::string directions = "fwd,bwd", dims = "1,2,3", extras = "0,10", configs;
  int batch = 12, heads = 12, dim = 128, warmup = 10, reps = 50;
  double copy_mib = 1024;
};

// One table cell: check on poisoned outputs, then time; text "0.123456 (87%)" or FAIL/ERROR.
std::string bench_cell(const LrpeCase& c, const std::string& config, double copy_rate, const LrpeBenchOptions& o,
                       std::unique_ptr<LrpeBench>& bench, int& failed, std::string& note) {
  try {
    if (!bench) bench = std::make_unique<LrpeBench>(c, 0);
    HarnessCheck check = bench->check(config);
    if (!check.pass) {
      ++failed;
      note = "FAIL " + to_string(c) + " " + config + ": " + check.failure();
      return "FAIL";
    }
    Timing t = bench->time(config, o.warmup, o.reps);
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

int run_lrpe_bench(LrpeOp op, const LrpeBenchOptions& o) {
  const auto dtypes = parse_dtypes(o.dtypes);
  const auto acts = parse_acts(o.acts);
  const auto seqlens = parse_int_list(o.seqlens, "--seqlens");
  std::vector<LrpeDirection> directions;
  for (const auto& d : split_list(o.directions)) {
    if (d != "fwd" && d != "bwd") throw Error(Status::invalid_argument, "--directions: expected fwd and/or bwd, got '" + d + "'");
    directions.push_back(d == "fwd" ? LrpeDirection::forward : LrpeDirection::backward);
  }
  const auto dims = parse_int_list(o.dims, "--dims");
  for (int m : dims)
    if (m > 3) throw Error(Status::invalid_argument, "--dims: grids have 1, 2 or 3 dims, got " + std::to_string(m));
  const auto extras = parse_int_list(o.extras, "--extras", 0);
  std::vector<std::string> configs = {""};
  std::stringstream in(o.configs);
  for (std::string c; std::getline(in, c, '|');)
    if (!c.empty()) configs.push_back(c);
  // md columns: the default, the default with the angle cache ("cache"), then the configs.
  std::vector<std::string> md_configs = {"", "cache"};
  md_configs.insert(md_configs.end(), configs.begin() + 1, configs.end());
  require_device();
  print_device_header();
  const double copy_rate = measure_copy_bandwidth(static_cast<std::size_t>(o.copy_mib * (1 << 20)), 0);
  std::printf("device copy rate %.3f TB/s (cuMemcpyDtoDAsync of %.0f MiB, bytes read + written, median of 20; this run)\n",
              copy_rate / 1e12, o.copy_mib);
  std::printf("cells: kernel-only median ms of %d reps after %d warm-up (CUDA events, inputs rotated beyond L2), each "
              "checked first on NaN-poisoned outputs against the fp64 reference; (%%) = floor time / measured time, floor = "
              "bytes of docs/lrpe.md §5 at the copy rate. bwd is the kgen backward alone (no autograd accumulation).\n",
              o.reps, o.warmup);
  std::printf("memory tables: MiB (2^20 bytes) of device memory one call holds, counted as the reference reports count "
              "their kernels' peak of live allocations: fwd x + theta (fp32) + o, bwd x + theta + dO + dx, plus the md "
              "angle cache (h, n, d) fp32 and the softmax-over-the-sequence statistics scratch; kgen allocates nothing "
              "else on the call path (the reports' bwd also counts o and autograd's x.grad accumulation: "
              "bench/compare_lrpe.py measures that under PyTorch).\n\n");
  int failed = 0;
  std::vector<std::string> notes;
  auto print_table = [&](const std::string& title, const std::vector<std::string>& columns,
                         const std::vector<std::pair<double, std::vector<std::string>>>& rows) {
    std::printf("%s:\n%10s", title.c_str(), "n");
    for (const auto& c : columns) std::printf("  %18s", c.c_str());
    std::printf("\n");
    for (std::size_t i = 0; i < rows.size(); ++i) {
      std::printf("%-3zu %6.1f", i, rows[i].first);
      for (const auto& cell : rows[i].second) std::printf("  %18s", cell.c_str());
      std::printf("\n");
    }
    std::printf("\n");
    std::fflush(stdout);
  };
  for (DType t : dtypes)
    for (LrpeAct act : acts)
      for (LrpeDirection dir : directions) {
        if (op == LrpeOp::cosine) {
          std::vector<std::pair<double, std::vector<std::string>>> rows, memory_rows;
          for (int n : seqlens) {
            LrpeCase c;
            c.dtype = t, c.act = act, c.direction = dir, c.batch = o.batch, c.heads = o.heads, c.n = n, c.d = o.dim;
            memory_rows.emplace_back(n, std::vector<std::string>{memory_cell(c)});
            std::unique_ptr<LrpeBench> bench;
            std::vector<std::string> cells;
            for (const auto& config : configs) {
              std::string note;
              cells.push_back(bench_cell(c, config, copy_rate, o, bench, failed, note));
              if (!note.empty()) notes.push_back(note);
            }
            rows.emplace_back(n, cells);
          }
          std::vector<std::string> columns;
          for (const auto& config : configs) columns.push_back(config.empty() ? "kgen" : "kgen " + config);
          const std::string tail = std::string(direction_name(dir)) + "-batch" + std::to_string(o.batch) + "-head" +
                                   std::to_string(o.heads) + "-dim" + std::to_string(o.dim) + "-" + act_title(act) + "-" +
                                   std::string(dtype_name(t));
          print_table("lrpe_cosine-speed-" + tail, columns, rows);
          print_table("lrpe_cosine-memory-" + tail, {"kgen"}, memory_rows);
          continue;
        }
        for (int m : dims)
          for (int extra : extras) {
            // The reports' sizes per dim: 1d n = N; 2d 16..128; 3d 4..32 (n^m positions).
            std::vector<int> sides;
            if (m == 1) sides = seqlens;
            if (m == 2) sides = {16, 32, 64, 128};
            if (m == 3) sides = {4, 8, 16, 32};
            std::vector<std::pair<double, std::vector<std::string>>> rows, memory_rows;
            for (int side : sides) {
              LrpeCase c;
              c.op = LrpeOp::md_cosine, c.dtype = t, c.act = act, c.direction = dir, c.batch = o.batch, c.heads = o.heads;
              c.d = o.dim, c.grid.assign(m, side), c.extra = extra;
              c.n = extra;
              int cells_n = 1;
              for (int v : c.grid) cells_n *= v;
              c.n += cells_n;
              // The default without and with the angle cache, then each --configs entry (":cache" ones
              // with the cache), each column on its own buffers.
              std::vector<std::string> cells, memory;
              std::unique_ptr<LrpeBench> benches[2];  // without / with the cache: inputs made once each
              for (const auto& config : md_configs) {
                c.cache = config == "cache" || config.ends_with(":cache");
                std::string note;
                cells.push_back(bench_cell(c, config == "cache" ? "" : config, copy_rate, o, benches[c.cache], failed, note));
                if (!note.empty()) notes.push_back(note);
                if (config.empty() || config == "cache") memory.push_back(memory_cell(c));
              }
              rows.emplace_back(side, cells);
              memory_rows.emplace_back(side, memory);
            }
            const std::string head = "md_lrpe_cosine-", tail = std::string(direction_name(dir)) + "-batch" +
                                     std::to_string(o.batch) + "-head" + std::to_string(o.heads) + "-dim" +
                                     std::to_string(o.dim) + "-" + std::string(dtype_name(t)) + "-" + std::to_string(m) +
                                     "d-l" + std::to_string(extra) + (act != LrpeAct::none ? "-" + act_title(act) : "");
            std::vector<std::string> columns;
            for (const auto& config : md_configs)
              columns.push_back(config.empty() ? "kgen" : config == "cache" ? "kgen cache" : "kgen " + config);
            print_table(head + "speed-" + tail, columns, rows);
            print_table(head + "memory-" + tail, {"kgen", "kgen cache"}, memory_rows);
          }
      }
  for (const auto& n : notes) std::printf("%s\n", n.c_str());
  return failed ? kFailed : kOk;
}

LrpeOp op_of(const std::string& name) { return name == "lrpe" ? LrpeOp::cosine : LrpeOp::md_cosine; }

}  // namespace

void add_lrpe_check_command(CLI::App& check, int& exit_code) {
  for (const char* name : {"lrpe", "md_lrpe"}) {
    auto* cmd = check.add_subcommand(name, std::string("Correctness sweep of ") + (name[0] == 'l' ? "lrpe_cosine" : "md_lrpe_cosine") +
                                               " (fwd and bwd) against the fp64 reference");
    auto dtypes = std::make_shared<std::string>("fp16,bf16,fp32");
    auto acts = std::make_shared<std::string>("none,relu,sigmoid,silu,softmax,softmax_seq");
    cmd->add_option("--dtypes", *dtypes, "Comma-separated dtypes")->capture_default_str();
    cmd->add_option("--acts", *acts, "Comma-separated acts")->capture_default_str();
    const LrpeOp op = op_of(name);
    cmd->callback([=, &exit_code] { exit_code = run_lrpe_check(op, parse_dtypes(*dtypes), parse_acts(*acts)); });
  }
}

void add_lrpe_bench_command(CLI::App& bench, int& exit_code) {
  for (const char* name : {"lrpe", "md_lrpe"}) {
    const bool md = name[0] == 'm';
    auto* cmd = bench.add_subcommand(name, std::string("Tables of ") + (md ? "md_lrpe_cosine" : "lrpe_cosine") +
                                               " in the reference reports' format (each cell checked first)");
    auto o = std::make_shared<LrpeBenchOptions>();
    if (md) o->acts = "none";
    cmd->add_option("--dtypes", o->dtypes, "Comma-separated dtypes")->capture_default_str();
    cmd->add_option("--acts", o->acts, "Comma-separated acts (none, relu, sigmoid, silu, softmax, softmax_seq)")->capture_default_str();
    cmd->add_option("--directions", o->directions, "Comma-separated directions: fwd,bwd")->capture_default_str();
    cmd->add_option("--seqlens", o->seqlens, md ? "1d grid sizes" : "Sequence lengths")->capture_default_str();
    cmd->add_option("--batch", o->batch, "Batch")->capture_default_str()->check(CLI::PositiveNumber);
    cmd->add_option("--heads", o->heads, "Heads")->capture_default_str()->check(CLI::PositiveNumber);
    cmd->add_option("--dim", o->dim, "Features d of x (o has 2d)")->capture_default_str()->check(CLI::Range(1, kLrpeMaxHeadDim));
    cmd->add_option("--warmup", o->warmup, "Untimed runs")->capture_default_str()->check(CLI::NonNegativeNumber);
    cmd->add_option("--reps", o->reps, "Timed runs")->capture_default_str()->check(CLI::PositiveNumber);
    cmd->add_option("--copy-mib", o->copy_mib, "Size of the copy that measures the device bandwidth")->capture_default_str();
    if (md) {
      cmd->add_option("--dims", o->dims, "Grid dims m to run (1, 2, 3)")->capture_default_str();
      cmd->add_option("--extras", o->extras, "Extra tokens l")->capture_default_str();
    }
    cmd->add_option("--configs", o->configs,
                    std::string("Also time these configs, '|'-separated (e.g. 'bp:t256:r1:v8:b4'") +
                        (md ? "; ':cache' ones run with the angle cache)" : ")"));
    const LrpeOp op = op_of(name);
    cmd->callback([=, &exit_code] { exit_code = run_lrpe_bench(op, *o); });
  }
}

}  // namespace kgen::cli
