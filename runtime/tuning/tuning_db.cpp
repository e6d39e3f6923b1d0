#include "tuning/tuning_db.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <limits>
#include <map>
#include <mutex>
#include <random>
#include <tuple>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "kgen/types.hpp"
#include "driver/device.h"
#include "base/log.h"
#include "compiler/compiler.h"

namespace kgen {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

namespace {

constexpr int kSchema = 1;
constexpr int kMaxLineWarningsPerFile = 5;

void warn(const std::string& message) { log(LogLevel::warn, message); }

std::string major_of(const std::string& version) { return version.substr(0, version.find('.')); }

std::string random_hex() {
  static std::mutex m;
  static std::mt19937_64 rng = [] {
    std::random_device rd;
    std::seed_seq seq{rd(), rd(), static_cast<unsigned>(::getpid()),
                      static_cast<unsigned>(std::chrono::steady_clock::now().time_since_epoch().count())};
    return std::mt19937_64(seq);
  }();
  std::lock_guard lock(m);
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(rng()));
  return buf;
}

// UTC time as "2025-06-01T12:34:56.789Z" (with_ms) or "20250601T123456Z" (compact).
std::string utc_time(std::chrono::system_clock::time_point t, bool compact) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
  std::time_t secs = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[40];
  if (compact) {
    std::strftime(buf, sizeof buf, "%Y%m%dT%H%M%SZ", &tm);
    return buf;
  }
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%S", &tm);
  std::snprintf(buf, sizeof buf, "%s.%03dZ", date, static_cast<int>(ms % 1000));
  return buf;
}

ojson device_json(const DeviceClass& d) {
  ojson j;
  j["name"] = d.name;
  j["arch"] = d.arch;
  j["sm_count"] = d.sm_count;
  return j;
}

// Reads a device object; nullopt (with `why`) when malformed.
std::optional<DeviceClass> parse_device(const nlohmann::json& j, std::string& why) {
  if (!j.is_object()) {
    why = "\"device\" is not an object";
    return std::nullopt;
  }
  DeviceClass d;
  auto name = j.find("name"), arch = j.find("arch"), sms = j.find("sm_count");
  if (name == j.end() || !name->is_string() || arch == j.end() || !arch->is_string() || sms == j.end() ||
      !sms->is_number_integer()) {
    why = "\"device\" needs string name, string arch and integer sm_count";
    return std::nullopt;
  }
  d.name = name->get<std::string>();
  d.arch = arch->get<std::string>();
  d.sm_count = sms->get<int>();
  return d;
}

// NaN/inf are written as JSON null; null reads back as NaN.
bool read_number(const nlohmann::json& j, const char* key, double& out, std::string& why) {
  auto it = j.find(key);
  if (it == j.end()) return true;
  if (it->is_null()) {
    out = std::numeric_limits<double>::quiet_NaN();
    return true;
  }
  if (!it->is_number()) {
    why = std::string("\"") + key + "\" is not a number";
    return false;
  }
  out = it->get<double>();
  return true;
}

bool read_string(const nlohmann::json& j, const char* key, std::string& out, bool required, std::string& why) {
  auto it = j.find(key);
  if (it == j.end()) {
    if (required) why = std::string("missing \"") + key + "\"";
    return !required;
  }
  if (!it->is_string()) {
    why = std::string("\"") + key + "\" is not a string";
    return false;
  }
  out = it->get<std::string>();
  if (required && out.empty()) {
    why = std::string("\"") + key + "\" is empty";
    return false;
  }
  return true;
}

std::optional<TuningRecord> parse_record(const std::string& line, std::string& why) {
  nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    why = "not valid JSON";
    return std::nullopt;
  }
  if (!j.is_object()) {
    why = "not a JSON object";
    return std::nullopt;
  }
  if (j.contains("kgen_tuning_db")) {
    why = "a second header";
    return std::nullopt;
  }
  TuningRecord r;
  if (!read_string(j, "op", r.op, true, why) || !read_string(j, "variant", r.variant_key, true, why) ||
      !read_string(j, "bucket", r.bucket, true, why) || !read_string(j, "config", r.config, true, why) ||
      !read_string(j, "runner_up", r.runner_up, false, why) || !read_string(j, "tuned_at", r.tuned_at, false, why) ||
      !read_number(j, "median_ms", r.median_ms, why) || !read_number(j, "p20_ms", r.p20_ms, why) ||
      !read_number(j, "p80_ms", r.p80_ms, why) || !read_number(j, "margin", r.margin, why))
    return std::nullopt;
  if (auto it = j.find("reps"); it != j.end()) {
    if (!it->is_number_integer()) {
      why = "\"reps\" is not an integer";
      return std::nullopt;
    }
    r.reps = it->get<int>();
  }
  if (auto it = j.find("device"); it != j.end()) {
    auto d = parse_device(*it, why);
    if (!d) return std::nullopt;
    r.device = std::move(d);
  }
  return r;
}

std::optional<TuningShardHeader> parse_header(const std::string& line, std::string& why) {
  nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    why = "first line is not a JSON object";
    return std::nullopt;
  }
  auto schema = j.find("kgen_tuning_db");
  if (schema == j.end() || !schema->is_number_integer()) {
    why = "first line is not a kgen tuning db header (no integer \"kgen_tuning_db\")";
    return std::nullopt;
  }
  TuningShardHeader h;
  h.schema = schema->get<int>();
  if (!read_string(j, "kgen_version", h.kgen_version, true, why) || !read_string(j, "compiler", h.compiler, true, why))
    return std::nullopt;
  auto dev = j.find("device");
  if (dev == j.end()) {
    why = "header has no \"device\"";
    return std::nullopt;
  }
  auto d = parse_device(*dev, why);
  if (!d) return std::nullopt;
  h.device = std::move(*d);
  return h;
}

// Identity of a record for "newest wins".
using RecordKey = std::tuple<std::string, std::string, std::string, std::string, std::string, int>;

RecordKey key_of(const TuningRecord& r) {
  const DeviceClass& d = *r.device;
  return {r.op, r.variant_key, r.bucket, d.name, d.arch, d.sm_count};
}

struct Candidate {
  TuningRecord record;  // device always set
  std::string source;   // file path
  int line = 0;
  std::string canonical;  // to_json_line with device explicit
};

// True when `b` supersedes `a` (see the precedence rule in tuning_db.h).
bool newer(const Candidate& a, const Candidate& b) {
  if (a.record.tuned_at != b.record.tuned_at) return a.record.tuned_at < b.record.tuned_at;
  if (a.line != b.line) return a.line < b.line;
  if (a.canonical != b.canonical) return a.canonical < b.canonical;
  return a.source < b.source;
}

void offer(std::map<RecordKey, Candidate>& winners, const TuningShard& shard, const TuningShard::Line& l) {
  Candidate c{l.record, shard.path.string(), l.line, to_json_line(l.record)};
  RecordKey key = key_of(c.record);
  auto it = winners.find(key);
  if (it == winners.end()) {
    winners.emplace(std::move(key), std::move(c));
  } else if (newer(it->second, c)) {
    it->second = std::move(c);
  }
}

TuningContext context_of(const TuningShardHeader& h) { return {h.kgen_version, h.compiler, h.device}; }

void fsync_dir(const fs::path& dir) {
  int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

// Writes all of `data` to `fd`; false on error (errno set).
bool write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

[[noreturn]] void io_error(const std::string& what, const fs::path& path) {
  throw Error(Status::cache_error, "tuning db: cannot " + what + " " + path.string() + ": " + std::strerror(errno));
}

// Parses "nq4096" into ("nq", 4096).
bool parse_component(std::string_view c, std::string& name, long long& value) {
  std::size_t i = 0;
  while (i < c.size() && (std::isalpha(static_cast<unsigned char>(c[i])) || c[i] == '_')) ++i;
  if (i == 0 || i == c.size()) return false;
  value = 0;
  for (std::size_t k = i; k < c.size(); ++k) {
    if (!std::isdigit(static_cast<unsigned char>(c[k]))) return false;
    value = value * 10 + (c[k] - '0');
    if (value > (1LL << 50)) return false;
  }
  if (value <= 0) return false;
  name.assign(c.substr(0, i));
  return true;
}

bool parse_bucket(std::string_view b, std::vector<std::pair<std::string, long long>>& out) {
  out.clear();
  while (true) {
    std::size_t dot = b.find('.');
    std::string name;
    long long value = 0;
    if (!parse_component(b.substr(0, dot), name, value)) return false;
    out.emplace_back(std::move(name), value);
    if (dot == std::string_view::npos) return true;
    b.remove_prefix(dot + 1);
  }
}

}  // namespace

// ---- device classes and context -----------------------------------------------------------

DeviceClass DeviceClass::from(const DeviceInfo& info) {
  std::string arch = info.target.arch;
  if (arch.empty()) arch = "sm_" + std::to_string(info.cc_major) + std::to_string(info.cc_minor);
  return {info.name, arch, info.sm_count};
}

std::string to_string(const DeviceClass& d) {
  return d.name + " (" + d.arch + ", " + std::to_string(d.sm_count) + " SMs)";
}

TuningContext TuningContext::current(int ordinal) {
  const DeviceInfo& d = device_info(ordinal);
  return {KGEN_VERSION, compiler_for(d.target).version(), DeviceClass::from(d)};
}

// ---- buckets --------------------------------------------------------------------------------

long long next_pow2(long long n) {
  long long p = 1;
  while (p < n) p <<= 1;
  return p;
}

double bucket_distance(std::string_view a, std::string_view b) {
  constexpr double inf = std::numeric_limits<double>::infinity();
  std::vector<std::pair<std::string, long long>> ca, cb;
  if (!parse_bucket(a, ca) || !parse_bucket(b, cb) || ca.size() != cb.size()) return inf;
  double d = 0;
  for (std::size_t i = 0; i < ca.size(); ++i) {
    if (ca[i].first != cb[i].first) return inf;
    double w = (ca[i].first == "nq" || ca[i].first == "nk" || ca[i].first == "n") ? 4.0 : 1.0;
    d += w * std::fabs(std::log2(double(ca[i].second)) - std::log2(double(cb[i].second)));
  }
  return d;
}

// ---- JSON lines -----------------------------------------------------------------------------

std::string to_json_line(const TuningRecord& r) {
  ojson j;
  j["op"] = r.op;
  j["variant"] = r.variant_key;
  j["bucket"] = r.bucket;
  j["config"] = r.config;
  j["median_ms"] = r.median_ms;
  j["p20_ms"] = r.p20_ms;
  j["p80_ms"] = r.p80_ms;
  j["margin"] = r.margin;
  j["runner_up"] = r.runner_up;
  j["reps"] = r.reps;
  j["tuned_at"] = r.tuned_at;
  if (r.device) j["device"] = device_json(*r.device);
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string to_json_line(const TuningShardHeader& h) {
  ojson j;
  j["kgen_tuning_db"] = h.schema;
  j["kgen_version"] = h.kgen_version;
  j["compiler"] = h.compiler;
  j["device"] = device_json(h.device);
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::optional<std::string> header_mismatch(const TuningShardHeader& h, const TuningContext& ctx) {
  if (h.schema != kSchema)
    return "kgen_tuning_db " + std::to_string(h.schema) + " != " + std::to_string(kSchema);
  if (major_of(h.kgen_version) != major_of(ctx.kgen_version))
    return "kgen_version " + h.kgen_version + " != " + ctx.kgen_version + " (major version differs)";
  if (h.compiler != ctx.compiler) return "compiler " + h.compiler + " != " + ctx.compiler;
  if (h.device.name != ctx.device.name) return "device.name " + h.device.name + " != " + ctx.device.name;
  if (h.device.arch != ctx.device.arch) return "device.arch " + h.device.arch + " != " + ctx.device.arch;
  if (h.device.sm_count != ctx.device.sm_count)
    return "device.sm_count " + std::to_string(h.device.sm_count) + " != " + std::to_string(ctx.device.sm_count);
  return std::nullopt;
}

TuningShard read_tuning_shard(const fs::path& path) {
  TuningShard shard;
  shard.path = path;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    shard.header_error = std::string("cannot open: ") + std::strerror(errno);
    return shard;
  }
  std::string line;
  int number = 0;
  bool have_header = false;
  while (std::getline(in, line)) {
    ++number;
    bool torn = in.eof();  // the last line had no newline
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    if (!have_header) {
      have_header = true;
      std::string why;
      shard.header = parse_header(line, why);
      if (!shard.header) {
        shard.header_error = "line " + std::to_string(number) + ": " + why + (torn ? " (torn line)" : "");
        return shard;
      }
      continue;
    }
    std::string why;
    auto record = parse_record(line, why);
    if (!record) {
      if (++shard.malformed_lines <= kMaxLineWarningsPerFile)
        shard.warnings.push_back("tuning db " + path.string() + ":" + std::to_string(number) +
                                 ": malformed line skipped: " + why + (torn ? " (torn last line)" : ""));
      continue;
    }
    if (!record->device) record->device = shard.header->device;
    shard.records.push_back({std::move(*record), number});
  }
  if (shard.malformed_lines > kMaxLineWarningsPerFile)
    shard.warnings.push_back("tuning db " + path.string() + ": " + std::to_string(shard.malformed_lines - kMaxLineWarningsPerFile) +
         " more malformed lines skipped");
  if (!have_header) shard.header_error = "empty file";
  return shard;
}

std::vector<fs::path> expand_tuning_db_paths(const std::vector<fs::path>& paths) {
  std::vector<fs::path> out;
  for (const fs::path& p : paths) {
    std::error_code ec;
    bool dir_syntax = !p.empty() && p.native().back() == '/';
    if (dir_syntax && !fs::exists(p, ec)) continue;  // a directory not created yet
    if (fs::is_directory(p, ec)) {
      std::vector<fs::path> files;
      for (auto it = fs::directory_iterator(p, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
        std::error_code ec2;
        if (it->path().extension() == ".jsonl" && it->is_regular_file(ec2)) files.push_back(it->path());
      }
      std::sort(files.begin(), files.end());
      out.insert(out.end(), files.begin(), files.end());
    } else {
      out.push_back(p);
    }
  }
  return out;
}

// ---- database -----------------------------------------------------------------------------

struct TuningDatabase::Impl {
  TuningContext ctx;
  std::map<RecordKey, Candidate> winners;  // all device classes
  // (op, variant) -> winners on ctx.device
  std::map<std::pair<std::string, std::string>, std::vector<const Candidate*>, std::less<>> by_variant;
  int shards_read = 0, shards_skipped = 0, lines_skipped = 0;
};

TuningDatabase::TuningDatabase() : impl_(std::make_unique<Impl>()) {}
TuningDatabase::~TuningDatabase() = default;
TuningDatabase::TuningDatabase(TuningDatabase&&) noexcept = default;
TuningDatabase& TuningDatabase::operator=(TuningDatabase&&) noexcept = default;

TuningDatabase TuningDatabase::open(const std::vector<fs::path>& files, const TuningContext& ctx) {
  TuningDatabase db;
  Impl& d = *db.impl_;
  d.ctx = ctx;
  for (const fs::path& file : files) {
    TuningShard shard = read_tuning_shard(file);
    if (!shard.header) {
      ++d.shards_skipped;
      LogLevel level = shard.header_error == "empty file" ? LogLevel::debug : LogLevel::warn;
      log(level, "tuning db shard " + file.string() + " skipped: " + shard.header_error);
      continue;
    }
    if (auto why = header_mismatch(*shard.header, ctx)) {
      ++d.shards_skipped;
      warn("tuning db shard " + file.string() + " skipped: " + *why);
      continue;
    }
    ++d.shards_read;
    d.lines_skipped += shard.malformed_lines;
    for (const std::string& w : shard.warnings) warn(w);
    for (const auto& line : shard.records) offer(d.winners, shard, line);
  }
  for (const auto& [key, c] : d.winners)
    if (*c.record.device == ctx.device) d.by_variant[{c.record.op, c.record.variant_key}].push_back(&c);
  log(LogLevel::debug, "tuning db: " + std::to_string(d.winners.size()) + " records from " +
                           std::to_string(d.shards_read) + " shards, skipped " + std::to_string(d.shards_skipped));
  return db;
}

std::optional<LookupResult> TuningDatabase::lookup(std::string_view op, std::string_view variant_key,
                                                   std::string_view bucket) const {
  const Impl& d = *impl_;
  auto it = d.by_variant.find(std::pair<std::string, std::string>(op, variant_key));
  if (it == d.by_variant.end()) return std::nullopt;
  const Candidate* best = nullptr;
  double best_distance = std::numeric_limits<double>::infinity();
  std::vector<std::pair<std::string, long long>> best_parts, parts;
  for (const Candidate* c : it->second) {
    if (c->record.bucket == bucket) return LookupResult{c->record, true, c->source};
    double dist = bucket_distance(bucket, c->record.bucket);
    if (!std::isfinite(dist)) continue;
    parse_bucket(c->record.bucket, parts);
    bool take = false;
    if (!best || dist < best_distance - 1e-9) {
      take = true;
    } else if (dist <= best_distance + 1e-9) {  // tie: the larger bucket, then the text
      std::vector<long long> a, b;
      for (auto& p : parts) a.push_back(p.second);
      for (auto& p : best_parts) b.push_back(p.second);
      take = a > b || (a == b && c->record.bucket > best->record.bucket);
    }
    if (take) {
      best = c;
      best_distance = std::min(best_distance, dist);
      best_parts = parts;
    }
  }
  if (!best) return std::nullopt;
  return LookupResult{best->record, false, best->source};
}

std::vector<LookupResult> TuningDatabase::records() const {
  std::vector<LookupResult> out;
  for (const auto& [key, c] : impl_->winners)
    out.push_back({c.record, true, c.source});
  return out;
}

int TuningDatabase::shards_read() const { return impl_->shards_read; }
int TuningDatabase::shards_skipped() const { return impl_->shards_skipped; }
int TuningDatabase::lines_skipped() const { return impl_->lines_skipped; }

// ---- writer ---------------------------------------------------------------------------------

struct TuningShardWriter::Impl {
  fs::path dir, path;
  TuningContext ctx;
  std::mutex m;
  int fd = -1;
  std::chrono::sys_time<std::chrono::milliseconds> last_stamp{};
};

TuningShardWriter::TuningShardWriter(fs::path dir, TuningContext ctx) : impl_(std::make_unique<Impl>()) {
  impl_->dir = std::move(dir);
  impl_->ctx = std::move(ctx);
  impl_->path = impl_->dir / ("shard-" + utc_time(std::chrono::system_clock::now(), true) + "-" +
                              std::to_string(::getpid()) + "-" + random_hex() + ".jsonl");
}

TuningShardWriter::~TuningShardWriter() {
  if (impl_ && impl_->fd >= 0) ::close(impl_->fd);
}

const fs::path& TuningShardWriter::path() const { return impl_->path; }

void TuningShardWriter::append(const TuningRecord& record) {
  Impl& w = *impl_;
  std::lock_guard lock(w.m);
  if (w.fd < 0) {
    std::error_code ec;
    fs::create_directories(w.dir, ec);
    if (ec) throw Error(Status::cache_error, "tuning db: cannot create " + w.dir.string() + ": " + ec.message());
    int fd = ::open(w.path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) io_error("create", w.path);
    TuningShardHeader h{kSchema, w.ctx.kgen_version, w.ctx.compiler, w.ctx.device};
    if (!write_all(fd, to_json_line(h) + "\n") || ::fsync(fd) != 0) {
      int e = errno;
      ::close(fd);
      ::unlink(w.path.c_str());
      errno = e;
      io_error("write", w.path);
    }
    fsync_dir(w.dir);
    w.fd = fd;
    log(LogLevel::debug, "tuning db: writing shard " + w.path.string());
  }
  TuningRecord r = record;
  if (r.device && *r.device == w.ctx.device) r.device.reset();
  if (r.tuned_at.empty()) {
    auto now = std::chrono::time_point_cast<std::chrono::milliseconds>(std::chrono::system_clock::now());
    if (now <= w.last_stamp) now = w.last_stamp + std::chrono::milliseconds(1);
    w.last_stamp = now;
    r.tuned_at = utc_time(now, false);
  }
  std::string line = to_json_line(r) + "\n";
  if (!write_all(w.fd, line) || ::fsync(w.fd) != 0) io_error("append to", w.path);
}

// ---- merge ----------------------------------------------------------------------------------

MergeStats merge_tuning_shards(const std::vector<fs::path>& inputs, const fs::path& output,
                               const std::optional<TuningContext>& expect) {
  MergeStats stats;
  std::vector<TuningShard> shards;
  for (const fs::path& in : inputs) shards.push_back(read_tuning_shard(in));

  std::optional<TuningShardHeader> out_header;
  if (expect) out_header = TuningShardHeader{kSchema, expect->kgen_version, expect->compiler, expect->device};
  for (const TuningShard& s : shards)
    if (!out_header && s.header && s.header->schema == kSchema) out_header = s.header;
  if (!out_header) throw Error(Status::invalid_argument, "tune merge: no input has a readable tuning db header");
  TuningContext ref = context_of(*out_header);

  std::map<RecordKey, Candidate> winners;
  for (const TuningShard& s : shards) {
    if (!s.header) {
      ++stats.shards_skipped;
      warn("tuning db shard " + s.path.string() + " skipped: " + s.header_error);
      continue;
    }
    if (auto why = header_mismatch(*s.header, ref)) {
      ++stats.shards_skipped;
      warn("tuning db shard " + s.path.string() + " skipped: " + *why);
      continue;
    }
    ++stats.shards_merged;
    stats.lines_skipped += s.malformed_lines;
    for (const std::string& w : s.warnings) warn(w);
    for (const auto& line : s.records) offer(winners, s, line);
  }

  std::string text = to_json_line(*out_header) + "\n";
  for (auto& [key, c] : winners) {
    TuningRecord r = c.record;
    if (*r.device == out_header->device) r.device.reset();
    text += to_json_line(r) + "\n";
    ++stats.records;
  }

  fs::path dir = output.parent_path();
  fs::path tmp = (dir.empty() ? fs::path(".") : dir) /
                 ("." + output.filename().string() + ".tmp-" + std::to_string(::getpid()) + "-" + random_hex());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) io_error("create", tmp);
  bool ok = write_all(fd, text) && ::fsync(fd) == 0;
  int e = errno;
  ok = (::close(fd) == 0) && ok;
  if (!ok || ::rename(tmp.c_str(), output.c_str()) != 0) {
    if (ok) e = errno;
    ::unlink(tmp.c_str());
    errno = e;
    io_error("write", output);
  }
  fsync_dir(dir);
  return stats;
}

// ---- locations ------------------------------------------------------------------------------

namespace {

std::vector<std::string> env_parts() {
  std::vector<std::string> parts;
  const char* v = std::getenv("KGEN_TUNE_DB");
  if (!v) return parts;
  std::string s = v;
  std::size_t start = 0;
  while (start <= s.size()) {
    std::size_t colon = s.find(':', start);
    if (colon == std::string::npos) colon = s.size();
    if (colon > start) parts.push_back(s.substr(start, colon - start));
    start = colon + 1;
  }
  return parts;
}

fs::path xdg_tuning_dir() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg == '/') return fs::path(xdg) / "kgen" / "tuning";
  if (const char* home = std::getenv("HOME"); home && *home) return fs::path(home) / ".cache" / "kgen" / "tuning";
  return fs::path(".kgen-cache") / "tuning";
}

}  // namespace

std::vector<fs::path> default_tuning_db_files() {
  auto parts = env_parts();
  if (parts.empty()) {
    std::error_code ec;
    fs::path dir = xdg_tuning_dir();
    if (!fs::is_directory(dir, ec)) return {};
    return expand_tuning_db_paths({dir});
  }
  std::vector<fs::path> paths(parts.begin(), parts.end());
  return expand_tuning_db_paths(paths);
}

fs::path default_tuning_shard_dir() {
  for (const std::string& p : env_parts()) {
    std::error_code ec;
    if (p.back() == '/' || fs::is_directory(p, ec)) return fs::path(p);
  }
  return xdg_tuning_dir();
}

// ---- KGEN_AUTOTUNE ---------------------------------------------------------------------------

std::optional<AutotuneMode> parse_autotune_mode(std::string_view text) {
  std::string s(text);
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (s == "off") return AutotuneMode::off;
  if (s == "on-miss" || s == "on_miss") return AutotuneMode::on_miss;
  if (s == "force") return AutotuneMode::force;
  return std::nullopt;
}

AutotuneMode autotune_mode_from(const char* value) {
  if (!value || !*value) return AutotuneMode::off;
  if (auto m = parse_autotune_mode(value)) return *m;
  warn(std::string("KGEN_AUTOTUNE=") + value + " is not off, on-miss or force; autotuning stays off");
  return AutotuneMode::off;
}

AutotuneMode autotune_mode() {
  static const AutotuneMode mode = autotune_mode_from(std::getenv("KGEN_AUTOTUNE"));
  return mode;
}

std::string_view to_string(AutotuneMode mode) {
  switch (mode) {
    case AutotuneMode::off: return "off";
    case AutotuneMode::on_miss: return "on-miss";
    case AutotuneMode::force: return "force";
  }
  return "off";
}

}  // namespace kgen
