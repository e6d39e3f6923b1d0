// `kgen cache ls|stat|verify|gc|clear|export|import`.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <system_error>

#include "base/size.h"
#include "cache/archive.h"
#include "cache/binary_cache.h"
#include "cache/fs_guard.h"
#include "tools/commands.h"

namespace kgen::cli {
namespace {

// Why `root` cannot serve `kgen cache <command>` (nullopt when it can): it must be a readable
// directory that the cache's rules accept (cache/fs_guard.h: owned by this user or root, not
// writable by others). With `create` (import), a missing root is created first, private.
std::optional<std::string> unusable_root(const std::filesystem::path& root, bool create) {
  constexpr cache::DirRule kRootRule{.follow_link = true, .root_may_own = true};
  std::error_code ec;
  if (create && !root.parent_path().empty()) std::filesystem::create_directories(root.parent_path(), ec);
  if (!create && std::filesystem::status(root, ec).type() == std::filesystem::file_type::not_found)
    return "cache root " + root.string() + " does not exist";
  const std::string why = create ? cache::ensure_directory(root, kRootRule) : cache::check_directory(root, kRootRule);
  if (!why.empty()) return "cache root " + why;
  std::filesystem::directory_iterator entries(root, ec);
  if (ec) return "cache root " + root.string() + " cannot be read: " + ec.message();
  return std::nullopt;
}

// The cache root of `kgen cache <command>`, or nullopt after printing why it cannot serve
// (exit_code set to kFailed).
std::optional<std::filesystem::path> usable_root(const std::filesystem::path& root, const char* command, int& exit_code,
                                                 bool create = false) {
  if (auto why = unusable_root(root, create)) {
    std::fprintf(stderr, "kgen cache %s: %s\n", command, why->c_str());
    exit_code = kFailed;
    return std::nullopt;
  }
  return root;
}

// The size `kgen cache gc` shrinks to: --max-bytes, else KGEN_CACHE_MAX_BYTES; nullopt after
// printing why neither gives one (exit_code set to kUsage).
std::optional<std::uint64_t> gc_limit(const std::string& option, int& exit_code) {
  std::string why;
  std::optional<std::uint64_t> limit;
  if (!option.empty()) {
    limit = parse_byte_size(option, "--max-bytes", &why);
    if (limit == 0u) why = "--max-bytes: 0 would remove every entry; `kgen cache clear` does that";
  } else if (const char* env = std::getenv("KGEN_CACHE_MAX_BYTES"); env && *env) {
    limit = parse_byte_size(env, "KGEN_CACHE_MAX_BYTES", &why);
    if (limit == 0u) why = "KGEN_CACHE_MAX_BYTES: 0 sets no size cap; give --max-bytes";
  } else {
    why = "give --max-bytes or set KGEN_CACHE_MAX_BYTES";
  }
  if (limit && *limit != 0) return limit;
  std::fprintf(stderr, "kgen cache gc: %s\n", why.c_str());
  exit_code = kUsage;
  return std::nullopt;
}

}  // namespace

namespace {

// A string field of an entry's metadata as it may reach a terminal: control characters and
// escape sequences written into the entry print as \xNN; "?" when the field is missing or not a
// string.
std::string printable_field(const nlohmann::json& metadata, const char* name) {
  if (!metadata.is_object() || !metadata.contains(name) || !metadata[name].is_string()) return "?";
  std::string out;
  for (unsigned char c : metadata[name].get<std::string>()) {
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      char hex[5];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    }
  }
  return out;
}

}  // namespace

void add_cache_commands(CLI::App& app, int& exit_code) {
  auto* cache_cmd = app.add_subcommand("cache", "Inspect and maintain the on-disk binary cache");
  cache_cmd->require_subcommand(1);
  auto dir = std::make_shared<std::string>();
  cache_cmd->add_option("--cache-dir", *dir, "Cache directory (default: KGEN_CACHE_DIR or ~/.cache/kgen)")
      ->check(non_empty_value());
  auto root = [dir] { return dir->empty() ? cache::default_cache_root() : std::filesystem::path(*dir); };

  cache_cmd->add_subcommand("ls", "List entries (key, size, variant, target)")->callback([root, &exit_code] {
    const auto path = usable_root(root(), "ls", exit_code);
    if (!path) return;
    cache::BinaryCache c(*path);
    for (const auto& e : c.list()) {
      const std::string variant = printable_field(e.metadata, "variant");
      const std::string target = printable_field(e.metadata, "target");
      std::printf("%.16s  %8llu  %-8s %s\n", e.key.c_str(), static_cast<unsigned long long>(e.size_bytes),
                  target.c_str(), variant.c_str());
    }
    exit_code = kOk;
  });
  auto stat_json = std::make_shared<bool>(false);
  auto* stat = cache_cmd->add_subcommand("stat", "Print the entry count and total size");
  stat->add_flag("--json", *stat_json, "Print {\"root\", \"entries\", \"bytes\"} as one JSON object instead");
  stat->callback([root, stat_json, &exit_code] {
    const auto path = usable_root(root(), "stat", exit_code);
    if (!path) return;
    cache::BinaryCache c(*path);
    const std::size_t entries = c.list().size();
    const std::uint64_t bytes = c.total_bytes();
    if (*stat_json)
      std::printf("%s\n", nlohmann::ordered_json{{"root", c.root().string()}, {"entries", entries}, {"bytes", bytes}}.dump().c_str());
    else
      std::printf("root     %s\nentries  %zu\nbytes    %llu\n", c.root().c_str(), entries,
                  static_cast<unsigned long long>(bytes));
    exit_code = kOk;
  });
  cache_cmd->add_subcommand("verify", "Read every entry, remove corrupt ones; non-zero exit if any were corrupt")
      ->callback([root, &exit_code] {
        const auto path = usable_root(root(), "verify", exit_code);
        if (!path) return;
        cache::BinaryCache c(*path);
        auto r = c.verify();
        std::printf("entries %llu, corrupt %llu\n", static_cast<unsigned long long>(r.checked),
                    static_cast<unsigned long long>(r.corrupt_removed));
        exit_code = r.corrupt_removed ? kFailed : kOk;
      });
  auto max_bytes = std::make_shared<std::string>();
  auto* gc = cache_cmd->add_subcommand("gc", "Evict least recently used entries down to a size");
  gc->add_option("--max-bytes", *max_bytes,
                 "Size to shrink to: bytes, or with K, M, G or T (powers of 1024) (default: KGEN_CACHE_MAX_BYTES)")
      ->type_name("SIZE")
      ->check(non_empty_value());
  gc->callback([root, max_bytes, &exit_code] {
    const auto limit = gc_limit(*max_bytes, exit_code);
    if (!limit) return;
    const auto path = usable_root(root(), "gc", exit_code);
    if (!path) return;
    cache::BinaryCache c(*path);
    auto r = c.gc(*limit);
    std::printf("removed %llu entries, %llu -> %llu bytes\n", static_cast<unsigned long long>(r.removed),
                static_cast<unsigned long long>(r.bytes_before), static_cast<unsigned long long>(r.bytes_after));
    exit_code = kOk;
  });
  auto export_file = std::make_shared<std::string>();
  auto no_compress = std::make_shared<bool>(false);
  auto* exp = cache_cmd->add_subcommand("export", "Write every verified entry to one archive file (format: cache/archive.h)");
  exp->add_option("FILE", *export_file, "Archive to write (replaced atomically)")->required();
  exp->add_flag("--no-compress", *no_compress,
                "Write the members as they are (archive version 1) instead of compressing them with zstd");
  exp->callback([root, export_file, no_compress, &exit_code] {
    const auto path = usable_root(root(), "export", exit_code);
    if (!path) return;
    cache::BinaryCache c(*path);
    const auto r = cache::export_archive(c, *export_file, !*no_compress);
    if (!r.error.empty()) {
      std::fprintf(stderr, "kgen cache export: %s\n", r.error.c_str());
      exit_code = kFailed;
      return;
    }
    std::printf("exported %llu entries to %s (%llu bytes%s), corrupt %llu\n",
                static_cast<unsigned long long>(r.exported), export_file->c_str(),
                static_cast<unsigned long long>(r.bytes),
                *no_compress ? "" : (", zstd; " + std::to_string(r.body_bytes) + " before").c_str(),
                static_cast<unsigned long long>(r.corrupt_skipped));
    exit_code = r.corrupt_skipped ? kFailed : kOk;
  });
  auto import_file = std::make_shared<std::string>();
  auto* imp = cache_cmd->add_subcommand("import", "Verify and publish every entry of an archive; exit 1 if any member was bad");
  imp->add_option("FILE", *import_file, "Archive written by `kgen cache export`")->required();
  imp->callback([root, import_file, &exit_code] {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(*import_file, ec)) {
      std::fprintf(stderr, "kgen cache import: no such archive file '%s'\n", import_file->c_str());
      exit_code = kUsage;
      return;
    }
    const auto path = usable_root(root(), "import", exit_code, /*create=*/true);
    if (!path) return;
    cache::BinaryCache c(*path);
    const auto r = cache::import_archive(c, *import_file);
    for (const auto& p : r.problems) std::fprintf(stderr, "kgen cache import: %s\n", p.c_str());
    if (!r.error.empty()) std::fprintf(stderr, "kgen cache import: %s\n", r.error.c_str());
    std::printf("imported %llu entries (%llu already present), corrupt %llu, failed %llu\n",
                static_cast<unsigned long long>(r.imported), static_cast<unsigned long long>(r.already_present),
                static_cast<unsigned long long>(r.corrupt_skipped), static_cast<unsigned long long>(r.publish_failed));
    exit_code = r.ok() ? kOk : kFailed;
  });
  cache_cmd->add_subcommand("clear", "Delete every entry")->callback([root, &exit_code] {
    const auto path = usable_root(root(), "clear", exit_code);
    if (!path) return;
    cache::BinaryCache c(*path);
    std::printf("removed %llu entries\n", static_cast<unsigned long long>(c.clear()));
    exit_code = kOk;
  });
}

}  // namespace kgen::cli
