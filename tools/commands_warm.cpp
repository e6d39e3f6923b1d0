// `kgen warm`: compile kernel variants into the cache without a GPU, and say truthfully what
// ended up in the cache.
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <set>
#include <string>

#include "base/log.h"
#include "cache/binary_cache.h"
#include "generator/registry.h"
#include "jit/kernel_builder.h"
#include "jit/manifest.h"
#include "jit/warm.h"
#include "tools/commands.h"
#include "tuning/tuning_db.h"

namespace kgen::cli {
namespace {

// The winners recorded in tuning-database shards (any device class and operator) plus the
// built-in default of every recorded variant, for each target where they are valid; duplicates
// compile once. Records of operators this kgen does not know are skipped.
std::vector<WarmItem> tuning_db_warm_items(const std::vector<std::string>& paths, const std::vector<std::string>& archs) {
  std::vector<std::filesystem::path> files;
  for (const auto& p : paths) files.emplace_back(p);
  const std::vector<Target> targets = warm_targets(archs);
  std::vector<WarmItem> items;
  std::set<std::string> seen;
  for (const auto& file : expand_tuning_db_paths(files)) {
    TuningShard shard = read_tuning_shard(file);
    if (!shard.header) throw Error(Status::invalid_argument, "--db: " + file.string() + ": " + shard.header_error);
    for (const auto& line : shard.records) {
      const OperatorInfo* op = find_operator(line.record.op);
      if (!op) continue;
      for (const Target& target : targets) {
        auto kernels = recorded_kernels(*op, line.record.variant_key, line.record.config, target);
        if (!kernels)
          throw Error(Status::invalid_argument, "--db: " + file.string() + ":" + std::to_string(line.line) +
                                                    ": unknown variant or config '" + line.record.variant_key + "' / '" +
                                                    line.record.config + "'");
        for (auto& src : *kernels)
          if (seen.insert(src.variant + "@" + target.arch).second) items.push_back({std::move(src), target});
      }
    }
  }
  return items;
}

// "1h02m", "3m07s", "12s".
std::string duration_text(double seconds) {
  const long s = static_cast<long>(seconds + 0.5);
  char buf[32];
  if (s >= 3600) std::snprintf(buf, sizeof buf, "%ldh%02ldm", s / 3600, s / 60 % 60);
  else if (s >= 60) std::snprintf(buf, sizeof buf, "%ldm%02lds", s / 60, s % 60);
  else std::snprintf(buf, sizeof buf, "%lds", s);
  return buf;
}

// Reports each built kernel of a warm: one debug line per kernel, an error per failure, and a
// progress line (done/total, elapsed time, ETA, counts): on a terminal one line rewritten in
// place, otherwise one line every kPlainProgressEvery.
class WarmReporter {
 public:
  enum class Progress { none, terminal, plain };
  static constexpr std::chrono::seconds kPlainProgressEvery{5};

  explicit WarmReporter(Progress progress) : progress_(progress) {}
  ~WarmReporter() {
    if (progress_ == Progress::terminal) set_status_line("");
  }

  // Called by warm() after each item, serialised.
  void report(const WarmResult& r, std::size_t done, std::size_t total) {
    const std::string where = r.item->source.variant + " for " + r.item->target.arch;
    const std::string step = "[" + std::to_string(done) + "/" + std::to_string(total) + "] ";
    if (!r.ok) {
      ++failed_;
      log(LogLevel::error, step + "failed to build " + where + ": " + r.error);
    } else {
      ++(r.from_cache ? cached_ : compiled_);
      if (!r.stored) ++not_stored_;
      if (log_level() >= LogLevel::debug) {
        std::string line = step + (r.from_cache ? "cached " + where
                                                : "compiled " + where + " in " + std::to_string(long(r.compile_ms)) + " ms");
        line += " (key " + r.key.substr(0, 12);
        if (!r.from_cache)
          line += ", " + std::to_string(r.resources.registers) + " registers, " +
                  std::to_string(r.resources.spill_stores) + " B spilled";
        if (!r.stored) line += ", not stored: " + r.store_error;
        log(LogLevel::debug, line + ")");
      }
    }
    if (progress_ != Progress::none) draw(done, total);
  }

 private:
  void draw(std::size_t done, std::size_t total) {
    const auto now = std::chrono::steady_clock::now();
    if (progress_ == Progress::terminal) {
      if (done < total && now - last_draw_ < std::chrono::milliseconds(100)) return;
    } else if (done == total || now - last_draw_ < kPlainProgressEvery) {
      return;  // the summary line follows the last item
    }
    last_draw_ = now;
    const double elapsed = std::chrono::duration<double>(now - start_).count();
    // Times first: a narrow terminal cuts the line's end.
    std::string line = "warm [" + std::to_string(done) + "/" + std::to_string(total) + "] " + duration_text(elapsed);
    if (done > 0) line += ", ETA " + duration_text(elapsed / done * (total - done));
    line += " | compiled " + std::to_string(compiled_) + ", cached " + std::to_string(cached_) + ", failed " +
            std::to_string(failed_) + ", not stored " + std::to_string(not_stored_);
    if (progress_ == Progress::terminal) set_status_line(line);
    else print_above_status(stderr, line + "\n");
  }

  Progress progress_;
  int compiled_ = 0, cached_ = 0, failed_ = 0, not_stored_ = 0;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now(), last_draw_ = start_;
};

// Set by SIGINT during run_warm(): the workers take no more items.
std::atomic<bool> g_interrupted{false};

extern "C" void on_interrupt(int) { g_interrupted = true; }

// Catches SIGINT while alive (unless it was ignored, as for a background job): the first stops
// the warm after the compiles under way, a second one ends the process as before.
class InterruptGuard {
 public:
  InterruptGuard() {
    g_interrupted = false;
    struct sigaction action = {};
    action.sa_handler = on_interrupt;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESETHAND;
    if (sigaction(SIGINT, nullptr, &previous_) == 0 && previous_.sa_handler != SIG_IGN)
      installed_ = sigaction(SIGINT, &action, nullptr) == 0;
  }
  ~InterruptGuard() {
    if (installed_) sigaction(SIGINT, &previous_, nullptr);
  }
  InterruptGuard(const InterruptGuard&) = delete;
  InterruptGuard& operator=(const InterruptGuard&) = delete;

 private:
  struct sigaction previous_ = {};
  bool installed_ = false;
};

// One error line per cause of kernels missing from the cache, with the first reason given.
void explain_not_stored(const WarmSummary& summary) {
  const WarmResult* first_failed = nullptr;
  const WarmResult* first_evicted = nullptr;
  int evicted = 0;
  for (const WarmResult& r : summary.results) {
    if (!r.ok || r.stored) continue;
    const bool was_evicted = r.store_error.starts_with("evicted");
    evicted += was_evicted;
    const WarmResult*& first = was_evicted ? first_evicted : first_failed;
    if (!first) first = &r;
  }
  if (first_failed)
    log(LogLevel::error, std::to_string(summary.not_stored - evicted) + " built kernels were not stored in the cache (first: " +
                             first_failed->item->source.variant + " for " + first_failed->item->target.arch + ": " +
                             first_failed->store_error + ")");
  if (first_evicted)
    log(LogLevel::error, std::to_string(evicted) + " built kernels were " + first_evicted->store_error +
                             ": raise the cap or warm fewer variants");
}

}  // namespace

int run_warm(KernelBuilder& builder, const std::vector<WarmItem>& items, int jobs) {
  if (log_level() >= LogLevel::info) {
    std::printf("warming %zu variants into %s\n", items.size(), builder.publish_cache().root().c_str());
    std::fflush(stdout);
  }
  WarmSummary summary;
  {
    InterruptGuard guard;
    using Progress = WarmReporter::Progress;
    WarmReporter reporter(log_level() < LogLevel::info ? Progress::none
                          : stderr_is_terminal()       ? Progress::terminal
                                                       : Progress::plain);
    std::atomic<bool> told{false};
    WarmOptions options{
        .jobs = jobs,
        .progress = [&](const WarmResult& r, std::size_t done, std::size_t total) { reporter.report(r, done, total); },
        .build = BuildOptions{.log_compile = false},
        .cancelled = [&] {
          if (!g_interrupted) return false;
          if (!told.exchange(true)) log(LogLevel::warn, "interrupted: finishing the compiles under way (Ctrl-C again to stop now)");
          return true;
        }};
    summary = warm(builder, items, options);
  }
  explain_not_stored(summary);
  if (summary.cancelled) {
    std::printf("interrupted: compiled %d, cached %d of %zu (failed %d, not stored %d)\n", summary.compiled,
                summary.cached, items.size(), summary.failed, summary.not_stored);
    std::fflush(stdout);
    return kInterrupted;
  }
  std::printf("compiled %d, cached %d, failed %d, not stored %d\n", summary.compiled, summary.cached, summary.failed,
              summary.not_stored);
  std::fflush(stdout);
  return summary.failed || summary.not_stored ? kFailed : kOk;
}

void add_warm_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand(
      "warm",
      "Compile kernel variants into the cache without a GPU; exit 1 if any failed to build or was not stored");
  auto archs = std::make_shared<std::string>("sm_80,sm_90a");
  auto ops = std::make_shared<std::string>();
  auto jobs = std::make_shared<int>(0);
  auto dir = std::make_shared<std::string>();
  auto quiet = std::make_shared<bool>(false);
  auto verbose = std::make_shared<bool>(false);
  auto manifest = std::make_shared<std::string>();
  auto db = std::make_shared<std::vector<std::string>>();
  auto defaults = std::make_shared<bool>(false);
  auto all = std::make_shared<bool>(false);  // the callback holds it, as every option's variable
  cmd->add_option("--archs,--arch", *archs, "Comma-separated targets (" + std::string(known_targets()) + ")")
      ->capture_default_str()
      ->check(non_empty_list());
  auto* ops_opt = cmd->add_option("--ops,--op", *ops, "Comma-separated operators (default: all)")->check(non_empty_list());
  auto* manifest_opt =
      cmd->add_option("--manifest", *manifest,
                      "JSON Lines file, one {\"op\", \"variant\", \"config\"} per line, any operator (see runtime/jit/manifest.h)")
          ->excludes(ops_opt)
          ->check(non_empty_value());
  auto* db_opt = cmd->add_option("--db", *db, "Tuning database files or directories: compile their recorded winners plus "
                                              "each recorded spec's default, instead of whole config spaces")
                     ->excludes(ops_opt)
                     ->check(non_empty_value());
  auto* defaults_opt =
      cmd->add_flag("--defaults", *defaults,
                    "Only the built-in defaults of every operator for common calls (fp16/bf16, head dims 64 and 128, "
                    "both masks, each shape class the defaults tell apart): what `kgen demo` warms without a GPU")
          ->excludes(ops_opt, manifest_opt, db_opt);
  cmd->add_flag("--all", *all, "Every variant of every operator (or of --ops): the whole config space; the default")
      ->excludes(defaults_opt, manifest_opt, db_opt);
  cmd->add_option("--jobs,-j", *jobs, "Parallel compiles (default: all cores)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--cache-dir", *dir, "Cache directory (default: KGEN_CACHE_DIR or ~/.cache/kgen)")
      ->check(non_empty_value());
  auto* quiet_opt = cmd->add_flag("--quiet,-q", *quiet, "Print only errors and the summary line");
  cmd->add_flag("--verbose,-v", *verbose,
                "Log every kernel built: variant, compile time, key, registers, spills (as KGEN_LOG_LEVEL=debug)")
      ->excludes(quiet_opt);
  cmd->footer(
      "Without --ops, --manifest, --db or --defaults: every variant of every operator, thousands of kernels (over "
      "ten times --defaults). Ends with 'compiled N, cached M, failed F, not stored S'. A progress line (done/total, "
      "elapsed, ETA, counts) is rewritten in place on a terminal, printed every 5 s otherwise. Ctrl-C stops after "
      "the compiles under way, prints 'interrupted: compiled N, cached M of T (...)' and exits 130.");
  cmd->callback([=, &exit_code] {
    if (*quiet) set_log_level(LogLevel::error);
    if (*verbose) set_log_level(LogLevel::debug);
    std::vector<WarmItem> items;
    const std::vector<std::string> targets = parse_list(*archs, "--archs");
    if (!manifest->empty()) items = read_manifest(*manifest, targets);
    if (!db->empty()) {
      auto from_db = tuning_db_warm_items(*db, targets);
      items.insert(items.end(), std::make_move_iterator(from_db.begin()), std::make_move_iterator(from_db.end()));
    }
    if (*defaults) items = default_warm_items(targets);
    else if (*all || (manifest->empty() && db->empty())) items = warm_items(split_list(*ops), targets);
    KernelBuilder builder(dir->empty() ? cache::default_cache_root() : std::filesystem::path(*dir));
    exit_code = run_warm(builder, items, *jobs);
  });
}

}  // namespace kgen::cli
