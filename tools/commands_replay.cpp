// `kgen replay`: writes or checks the replay table (runtime/jit/replay.h).
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "cache/binary_cache.h"
#include "jit/replay.h"
#include "tools/commands.h"

namespace kgen::cli {

void add_replay_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand(
      "replay",
      "Build every variant `kgen warm` builds (on the Blackwell targets, the built-in defaults `kgen warm --defaults` "
      "builds) and write or check the replay table: a digest of each kernel's machine code with its registers, spills "
      "and shared memory (tests/replay/table.tsv)");
  struct Opts {
    std::string archs = std::string(kReplayTableTargets), ops, write, check, dir;
    int jobs = 0;
    bool full = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--archs,--arch", o->archs, "Comma-separated targets")->capture_default_str();
  cmd->add_option("--ops,--op", o->ops, "Comma-separated operators (default: all); --check then compares only their rows");
  auto* write = cmd->add_option("--write", o->write,
                                 "Write the table to this file (with --ops or --archs, the file's rows of other operators "
                                 "and targets are kept)");
  cmd->add_option("--check", o->check, "Compare with the table in this file; exit 1 on any difference")->excludes(write);
  cmd->add_option("--jobs,-j", o->jobs, "Parallel compiles (default: all cores)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--cache-dir", o->dir, "Cache directory (default: KGEN_CACHE_DIR or ~/.cache/kgen)");
  cmd->add_flag("--full", o->full,
                "Build every kernel; by default a kernel whose compile inputs (source, included headers, compiler, "
                "options, target) match its row in the table is taken from the table");
  cmd->callback([o, &exit_code] {
    if (o->write.empty() && o->check.empty()) throw Error(Status::invalid_argument, "replay: give --write FILE or --check FILE");
    auto read_table = [](const std::string& path, const char* option) {
      std::ifstream in(path);
      if (!in) throw Error(Status::invalid_argument, std::string(option) + ": cannot read '" + path + "'");
      std::stringstream text;
      text << in.rdbuf();
      return parse_replay_table(text.str(), path);
    };
    std::vector<ReplayRow> expected, known, replaced;
    if (!o->check.empty()) expected = read_table(o->check, "--check");
    // --write reuses the rows of the table it replaces, where that table is readable, and keeps
    // its rows of the operators and targets it does not build.
    if (!o->write.empty() && std::filesystem::exists(o->write)) {
      try {
        replaced = read_table(o->write, "--write");
      } catch (const Error& e) {
        std::fprintf(stderr, "building every kernel, keeping no row: %s\n", e.what());
      }
    }
    if (!o->full) known = o->check.empty() ? replaced : expected;
    const auto ops = split_list(o->ops), archs = split_list(o->archs);
    auto items = replay_items(ops, archs);
    KernelBuilder builder(o->dir.empty() ? cache::default_cache_root() : std::filesystem::path(o->dir));
    std::size_t built = 0;
    auto rows = replay_rows(
        builder, items, o->jobs,
        [](const WarmResult&, std::size_t done, std::size_t total) {
          if (done == 1 || done % 200 == 0 || done == total) std::fprintf(stderr, "[%zu/%zu built]\n", done, total);
        },
        known, &built);
    std::fprintf(stderr, "%zu kernels: %zu built into %s, %zu taken from the table (same compile inputs)\n",
                 items.size(), built, builder.publish_cache().root().c_str(), items.size() - built);
    if (!o->write.empty()) {
      const std::size_t built_rows = rows.size();
      rows = merge_replay_rows(replaced, std::move(rows), ops, archs);
      std::ofstream out(o->write, std::ios::trunc);
      out << format_replay_table(rows);
      if (!out.flush()) throw Error(Status::invalid_argument, "--write: cannot write '" + o->write + "'");
      std::printf("wrote %zu rows to %s", rows.size(), o->write.c_str());
      if (rows.size() > built_rows) std::printf(" (%zu of other operators or targets kept)", rows.size() - built_rows);
      std::printf("\n");
      exit_code = kOk;
      return;
    }
    // With --ops or --archs, only the rows of those operators and targets are compared.
    std::vector<ReplayRow> compared;
    for (auto& r : expected)
      if (replay_row_selected(r, ops, archs)) compared.push_back(std::move(r));
    auto diff = diff_replay_tables(compared, rows);
    for (const auto& line : diff) std::printf("%s\n", line.c_str());
    if (diff.empty()) {
      std::printf("replay table matches: %zu rows\n", rows.size());
      exit_code = kOk;
    } else {
      std::printf("replay table differs from %s in %zu lines; if the change is intended, regenerate it with "
                  "`kgen replay --write %s` and commit it with the change\n",
                  o->check.c_str(), diff.size(), o->check.c_str());
      exit_code = kFailed;
    }
  });
}

}  // namespace kgen::cli
