// The tuning database: which config won for (op, variant, shape bucket) on a device class.
//
// Storage: JSON Lines shards, human-readable, separate from the binary cache. Line 1 of every
// shard is a header, every other non-blank line one record:
//
//   {"kgen_tuning_db":1,"kgen_version":"0.1.0","compiler":"nvrtc 13.0",
//    "device":{"name":"NVIDIA H100 80GB HBM3","arch":"sm_90a","sm_count":132}}
//   {"op":"attention_fwd","variant":"attention_fwd.bf16.d128.causal","bucket":"nq4096.nk4096.g1.bh64",
//    "config":"fa2:bm128:bn64:w4:s2","median_ms":0.412,"p20_ms":0.409,"p80_ms":0.418,"margin":0.031,
//    "runner_up":"fa2:bm64:bn64:w4:s2","reps":200,"tuned_at":"2025-06-01T12:34:56.789Z"}
//
// (each on one line). A record may carry its own "device" object; without one it belongs to
// the header's device class. Writers only append (one shard per writer, one write(2) + fsync
// per line), so a crash leaves at most one torn last line, which readers skip with a warning.
//
// Precedence ("the newest wins") among records with the same (op, variant, bucket, device
// class): the greater `tuned_at` (ISO 8601 UTC, compared as text); on equal `tuned_at` the
// record on the later line of its shard; then the greater serialized line. This does not
// depend on the order shards are given in, so merges of shuffled inputs are byte-identical.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>


namespace kgen {

struct DeviceInfo;

// The part of a device that tuning results transfer across: same name, target and SM count.
struct DeviceClass {
  std::string name;  // "NVIDIA H100 80GB HBM3"
  std::string arch;  // "sm_90a"
  int sm_count = 0;
  bool operator==(const DeviceClass&) const = default;
  // The class of a queried device.
  static DeviceClass from(const DeviceInfo& info);
};

// "NVIDIA H100 80GB HBM3 (sm_90a, 132 SMs)".
std::string to_string(const DeviceClass& d);

// What a shard must have been written under to be used by this process.
struct TuningContext {
  std::string kgen_version;  // "0.1.0"; shards must share the major version ("0")
  std::string compiler;      // "nvrtc 13.0"; must match exactly
  DeviceClass device;        // must match exactly
  // kgen's version, the version of the compiler of its target and the class of device
  // `ordinal`. Throws kgen::Error (no_device / compile_error) when the driver or the compiler is
  // unavailable.
  static TuningContext current(int ordinal = 0);
};

// One tuning result.
struct TuningRecord {
  std::string op;           // "attention_fwd"
  std::string variant_key;  // what changes the kernel source, TuningProblem::variant_key(): "attention_fwd.bf16.d128.causal"
  std::string bucket;       // shape bucket by the op's rule below: "nq4096.nk4096.g1.bh64"
  std::string config;       // winning config string: "fa2:bm128:bn64:w4:s2"
  double median_ms = 0, p20_ms = 0, p80_ms = 0;
  double margin = 0;        // runner-up median / winner median - 1 (0 without runner-up)
  std::string runner_up;    // runner-up config string, empty when there was none
  int reps = 0;             // timed repetitions per candidate
  std::string tuned_at;     // ISO 8601 UTC; the writer stamps now when empty
  std::optional<DeviceClass> device;  // nullopt: the device class of the shard's header
};

// ---- shape buckets ----------------------------------------------------------------------
//
// The per-operator bucket rules live with the operators (runtime/ops/buckets.h).

// The smallest power of two >= n (1 for n <= 1).
long long next_pow2(long long n);

// Distance between two buckets of one op: the sum over components of
// weight * |log2(a) - log2(b)|, weight 4 for the sequence lengths nq/nk/n, 1 for any other component. Buckets are
// "<name><positive integer>" components joined by '.'; +infinity when either cannot be parsed
// or their component names differ.
double bucket_distance(std::string_view a, std::string_view b);

// ---- the database -----------------------------------------------------------------------

struct LookupResult {
  TuningRecord record;
  bool exact = false;       // false: the nearest bucket of the same op, variant and device class
  std::string source_file;  // shard the record was read from
};

// Header of one shard.
struct TuningShardHeader {
  int schema = 0;
  std::string kgen_version, compiler;
  DeviceClass device;
};

// Why a header cannot be used under `ctx` ("compiler nvrtc 12.4 != nvrtc 13.0"), naming the
// first mismatching field of: kgen_tuning_db (schema), kgen_version (major), compiler,
// device.name, device.arch, device.sm_count. nullopt when compatible.
std::optional<std::string> header_mismatch(const TuningShardHeader& header, const TuningContext& ctx);

// One shard as read from disk, before any header check.
struct TuningShard {
  std::filesystem::path path;
  std::optional<TuningShardHeader> header;  // nullopt: unreadable, empty or bad header
  std::string header_error;                 // why, when header is nullopt
  struct Line {
    TuningRecord record;
    int line = 0;  // 1-based line number in the file
  };
  std::vector<Line> records;  // records' device filled in from the header when absent
  int malformed_lines = 0;
  std::vector<std::string> warnings;  // "tuning db FILE:LINE: malformed line skipped: why" (first 5, then a count)
};

// Reads one shard without logging (never throws for I/O or parse problems: they are reported in
// header_error / warnings; open() and merge log the warnings of shards they use).
TuningShard read_tuning_shard(const std::filesystem::path& path);

class TuningDatabase {
 public:
  TuningDatabase();  // empty
  ~TuningDatabase();
  TuningDatabase(TuningDatabase&&) noexcept;
  TuningDatabase& operator=(TuningDatabase&&) noexcept;

  // Reads `files` (JSON Lines shards) once. A shard whose header does not match `ctx` is
  // skipped with one warning naming the field; malformed lines are skipped with a warning
  // naming file:line; missing files are skipped with a warning. Never throws for file content.
  static TuningDatabase open(const std::vector<std::filesystem::path>& files, const TuningContext& ctx);

  // The record for `bucket` of (op, variant_key) on the context's device class: the exact
  // bucket if present, else the nearest by bucket_distance (ties: the larger bucket, by its
  // components' values in order, then by text). Thread-safe (the database is immutable).
  std::optional<LookupResult> lookup(std::string_view op, std::string_view variant_key,
                                     std::string_view bucket) const;

  // Every winning record (all device classes), sorted by (op, variant, bucket, device).
  std::vector<LookupResult> records() const;

  int shards_read() const;     // shards whose header matched
  int shards_skipped() const;  // shards skipped (mismatch, unreadable, bad header)
  int lines_skipped() const;   // malformed lines in read shards

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Appends records to one new shard "<dir>/shard-<UTC time>-<pid>-<random>.jsonl", created
// (with its header) on the first append. Thread-safe. Throws kgen::Error(cache_error) when the
// directory or file cannot be created or written.
class TuningShardWriter {
 public:
  TuningShardWriter(std::filesystem::path dir, TuningContext ctx);
  ~TuningShardWriter();
  TuningShardWriter(const TuningShardWriter&) = delete;
  TuningShardWriter& operator=(const TuningShardWriter&) = delete;

  // Appends `record` as one line (a single write(2), then fsync). Stamps `tuned_at` with the
  // current UTC time (strictly increasing within this writer) when empty.
  void append(const TuningRecord& record);

  // The shard's path (decided at construction; the file exists after the first append).
  const std::filesystem::path& path() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

struct MergeStats {
  int records = 0;          // records written
  int shards_merged = 0;    // inputs whose header matched
  int shards_skipped = 0;   // inputs skipped (mismatch, unreadable, bad header)
  int lines_skipped = 0;    // malformed lines in merged inputs
};

// Combines `inputs` into `output`: the newest record per (op, variant, bucket, device class)
// wins, records from every device class are kept, output sorted by (op, variant, bucket,
// device) and written atomically (temp file in the same directory, fsync, rename). The
// header is `expect` when given, else the first input with a readable header; inputs whose
// header does not match it are skipped with a warning naming the field. `output` may be one
// of the inputs. Throws kgen::Error(invalid_argument) when no input can be read and no
// `expect` is given, Error(cache_error) when the output cannot be written.
MergeStats merge_tuning_shards(const std::vector<std::filesystem::path>& inputs,
                               const std::filesystem::path& output,
                               const std::optional<TuningContext>& expect = std::nullopt);

// One record as its JSON line (no newline), in the canonical key order.
std::string to_json_line(const TuningRecord& record);
// One header as its JSON line (no newline).
std::string to_json_line(const TuningShardHeader& header);

// ---- locations --------------------------------------------------------------------------

// Each path that is a directory becomes its *.jsonl files sorted by name (not recursive); any
// other path is kept as given (a missing file is reported when it is read), except that a
// missing path ending in '/' (a directory not created yet) contributes nothing.
std::vector<std::filesystem::path> expand_tuning_db_paths(const std::vector<std::filesystem::path>& paths);

// The files to read: KGEN_TUNE_DB (':'-separated; a directory contributes its *.jsonl files
// sorted by name, a file itself; empty parts ignored) when set and non-empty, else the
// *.jsonl files of default_tuning_shard_dir() (none if it does not exist).
std::vector<std::filesystem::path> default_tuning_db_files();

// Where writers create shards: the first KGEN_TUNE_DB part that is an existing directory or
// ends in '/', else ${XDG_CACHE_HOME:-$HOME/.cache}/kgen/tuning. (With KGEN_TUNE_DB listing
// only files, new results go to the default directory, which is then not read back.)
std::filesystem::path default_tuning_shard_dir();

// ---- KGEN_AUTOTUNE ----------------------------------------------------------------------

// off: never tune on a launch (default); on_miss: tune when lookup finds no record at all;
// force: tune every (spec, bucket) once per process, ignoring the database.
enum class AutotuneMode { off, on_miss, force };

// "off" | "on-miss" (also "on_miss") | "force", case-insensitive; nullopt otherwise.
std::optional<AutotuneMode> parse_autotune_mode(std::string_view text);
// The mode for a KGEN_AUTOTUNE value: unset or empty -> off; invalid -> one warning naming
// the value, off.
AutotuneMode autotune_mode_from(const char* value);
// autotune_mode_from(getenv("KGEN_AUTOTUNE")), read once per process.
AutotuneMode autotune_mode();
std::string_view to_string(AutotuneMode mode);  // "off", "on-miss", "force"

}  // namespace kgen
