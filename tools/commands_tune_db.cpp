#include "tools/commands_tune_db.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tuning/tuning_db.h"
#include "tools/commands.h"

namespace kgen::cli {

namespace {

namespace fs = std::filesystem;

std::string fixed(double v, int digits) {
  if (std::isnan(v)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

// Prints rows as left-aligned columns separated by two spaces.
void print_table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<std::size_t> width;
  for (const auto& row : rows)
    for (std::size_t i = 0; i < row.size(); ++i) {
      if (width.size() <= i) width.push_back(0);
      width[i] = std::max(width[i], row[i].size());
    }
  for (const auto& row : rows) {
    std::string out;
    for (std::size_t i = 0; i < row.size(); ++i) {
      out += row[i];
      if (i + 1 < row.size()) out += std::string(width[i] - row[i].size() + 2, ' ');
    }
    std::printf("%s\n", out.c_str());
  }
}

void add_merge(CLI::App& tune, int& exit_code) {
  auto* cmd = tune.add_subcommand("merge", "Merge tuning db shards into one file (newest record per key wins)");
  auto out = std::make_shared<std::string>();
  auto in = std::make_shared<std::vector<std::string>>();
  cmd->add_option("OUT", *out, "Output file (written atomically; may also be an input)")->required()->check(non_empty_value());
  cmd->add_option("IN", *in, "Input shards or directories of *.jsonl shards")->required()->check(non_empty_value());
  cmd->callback([out, in, &exit_code] {
    std::vector<fs::path> paths(in->begin(), in->end());
    auto files = expand_tuning_db_paths(paths);
    MergeStats s = merge_tuning_shards(files, *out);
    std::printf("merged %d records from %d shards, skipped %d\n", s.records, s.shards_merged, s.shards_skipped);
    exit_code = kOk;
  });
}

void add_show(CLI::App& tune, int& exit_code) {
  auto* cmd = tune.add_subcommand("show", "Print the tuning database as a table (newest record per key)");
  auto db = std::make_shared<std::vector<std::string>>();
  cmd->add_option("--db", *db, "Shards or directories (default: KGEN_TUNE_DB or ~/.cache/kgen/tuning)")
      ->check(non_empty_value());
  cmd->callback([db, &exit_code] {
    std::vector<fs::path> files;
    if (db->empty()) {
      files = default_tuning_db_files();
    } else {
      std::vector<fs::path> paths(db->begin(), db->end());
      files = expand_tuning_db_paths(paths);
    }
    if (files.empty()) {
      std::printf("no tuning db shards (KGEN_TUNE_DB or %s)\n", default_tuning_shard_dir().c_str());
      exit_code = kOk;
      return;
    }
    // Shards are grouped by header (kgen version, compiler, device); each group is shown as
    // the database a process with that context would see, foreign-device records included.
    std::map<std::string, std::pair<TuningContext, std::vector<fs::path>>> groups;
    int unreadable = 0;
    for (const fs::path& f : files) {
      TuningShard s = read_tuning_shard(f);
      if (!s.header) {
        std::printf("%s: skipped: %s\n", f.c_str(), s.header_error.c_str());
        ++unreadable;
        continue;
      }
      auto& g = groups[to_json_line(*s.header)];
      g.first = TuningContext{s.header->kgen_version, s.header->compiler, s.header->device};
      g.second.push_back(f);
    }
    for (const auto& [key, group] : groups) {
      const auto& [ctx, paths] = group;
      TuningDatabase d = TuningDatabase::open(paths, ctx);
      auto records = d.records();
      std::printf("\n%s, kgen %s, %s: %zu records from %d shards\n", ctx.compiler.c_str(), ctx.kgen_version.c_str(),
                  to_string(ctx.device).c_str(), records.size(), d.shards_read());
      if (records.empty()) continue;
      std::vector<std::vector<std::string>> rows = {
          {"OP", "VARIANT", "BUCKET", "CONFIG", "MEDIAN_MS", "P20_MS", "P80_MS", "MARGIN", "RUNNER_UP", "REPS", "TUNED_AT", "DEVICE"}};
      for (const auto& r : records) {
        const TuningRecord& t = r.record;
        bool foreign = t.device && !(*t.device == ctx.device);
        rows.push_back({t.op, t.variant_key, t.bucket, t.config, fixed(t.median_ms, 4), fixed(t.p20_ms, 4),
                        fixed(t.p80_ms, 4), std::isnan(t.margin) ? "-" : fixed(100 * t.margin, 1) + "%",
                        t.runner_up.empty() ? "-" : t.runner_up, std::to_string(t.reps),
                        t.tuned_at.empty() ? "-" : t.tuned_at, foreign ? to_string(*t.device) : "="});
      }
      print_table(rows);
    }
    (void)unreadable;
    exit_code = kOk;
  });
}

}  // namespace

void add_tune_db_commands(CLI::App& tune_cmd, int& exit_code) {
  add_merge(tune_cmd, exit_code);
  add_show(tune_cmd, exit_code);
}

}  // namespace kgen::cli
