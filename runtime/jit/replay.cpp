#include "jit/replay.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <sstream>
#include <string_view>
#include <tuple>

#include "cache/cache_key.h"
#include "cache/sha256.h"
#include "compiler/compiler.h"
#include "generator/embedded_templates.h"
#include "generator/registry.h"
#include "kgen/types.hpp"

namespace kgen {
namespace {

constexpr std::uint64_t kShfExecInstr = 0x4;
constexpr const char* kHeader =
    "target\top\tvariant\tentry\tcode_sha256\tregisters\tspill_bytes\tstatic_smem\tdynamic_smem\tthreads\tstack_bytes\t"
    "serialized_wgmma\tinputs_sha256";
constexpr std::size_t kFields = 13;

std::uint64_t read_le(const std::vector<std::byte>& image, std::size_t at, int bytes) {
  if (at + bytes > image.size()) throw Error(Status::internal, "binary is truncated inside its ELF headers");
  std::uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | std::to_integer<std::uint64_t>(image[at + i]);
  return v;
}

auto row_key(const ReplayRow& r) { return std::tie(r.target, r.op, r.variant); }

std::string format_row(const ReplayRow& r) {
  std::ostringstream s;
  s << r.target << '\t' << r.op << '\t' << r.variant << '\t' << r.entry << '\t' << r.code_sha256 << '\t' << r.registers
    << '\t' << r.spill_bytes << '\t' << r.static_smem << '\t' << r.dynamic_smem << '\t' << r.threads << '\t'
    << r.stack_bytes << '\t' << (r.serialized_wgmma ? 1 : 0) << '\t' << r.inputs_sha256;
  return s.str();
}

// The embedded headers named by `#include "kgen_device/…"` lines of `text` (every such line,
// whatever preprocessor branch it sits in: an over-approximation costs a compile, never a miss).
void add_included_headers(std::string_view text, const std::map<std::string_view, std::string_view>& headers,
                          std::set<std::string_view>& seen) {
  for (std::size_t at = text.find("#include"); at != std::string_view::npos; at = text.find("#include", at + 8)) {
    const std::size_t open = text.find_first_of("\"<\n", at + 8);
    if (open == std::string_view::npos || text[open] == '\n') continue;
    const std::size_t close = text.find_first_of(text[open] == '"' ? "\"\n" : ">\n", open + 1);
    if (close == std::string_view::npos || text[close] == '\n') continue;
    auto it = headers.find(text.substr(open + 1, close - open - 1));
    if (it == headers.end() || !seen.insert(it->first).second) continue;
    add_included_headers(it->second, headers, seen);
  }
}

}  // namespace

std::string code_digest(const std::vector<std::byte>& image) {
  auto u8 = [&](std::size_t i) { return std::to_integer<unsigned>(image[i]); };
  if (image.size() < 64 || u8(0) != 0x7f || u8(1) != 'E' || u8(2) != 'L' || u8(3) != 'F' || u8(4) != 2 || u8(5) != 1)
    throw Error(Status::internal, "binary is not a 64-bit little-endian ELF file");
  const std::uint64_t shoff = read_le(image, 0x28, 8);
  const std::uint64_t shentsize = read_le(image, 0x3a, 2);
  const std::uint64_t shnum = read_le(image, 0x3c, 2);
  cache::Sha256 h;
  int sections = 0;
  for (std::uint64_t i = 0; i < shnum; ++i) {
    const std::size_t sh = shoff + i * shentsize;
    const std::uint64_t flags = read_le(image, sh + 8, 8);
    if (!(flags & kShfExecInstr)) continue;
    const std::uint64_t offset = read_le(image, sh + 24, 8);
    const std::uint64_t size = read_le(image, sh + 32, 8);
    if (offset + size > image.size()) throw Error(Status::internal, "binary is truncated inside a code section");
    const std::uint64_t size_le = size;  // hosts kgen builds on are little-endian
    h.update(std::as_bytes(std::span(&size_le, 1)));
    h.update(std::span(image).subspan(offset, size));
    ++sections;
  }
  if (sections == 0) throw Error(Status::internal, "binary has no code section");
  return h.finish_hex();
}

std::string inputs_digest(const KernelSource& source, const Target& target) {
  static const auto headers = [] {
    std::map<std::string_view, std::string_view> m;
    for (const auto& t : generator::embedded_templates()) m.emplace(t.name, t.text);
    return m;
  }();
  std::set<std::string_view> included;
  add_included_headers(source.source, headers, included);
  const Compiler& compiler = compiler_for(target);
  cache::CacheKeyBuilder k;
  k.add("source", cache::sha256_hex(source.source))
      .add("entry", source.entry)
      .add("compiler", compiler.version())
      .add("target", target.arch)
      .add_sorted("options", compiler.options(target, false));
  for (std::string_view name : included) k.add(std::string(name), cache::sha256_hex(headers.at(name)));
  return cache::sha256_hex(k.record());
}

std::vector<ReplayRow> replay_rows(KernelBuilder& builder, const std::vector<WarmItem>& items, int jobs,
                                   const WarmProgress& progress, const std::vector<ReplayRow>& known,
                                   std::size_t* built) {
  std::map<std::tuple<std::string, std::string, std::string>, const ReplayRow*> by_key;
  for (const auto& r : known) by_key[row_key(r)] = &r;
  std::vector<ReplayRow> rows;
  rows.reserve(items.size());
  std::vector<WarmItem> to_build;
  std::vector<std::string> to_build_inputs;
  for (const auto& item : items) {
    std::string inputs = inputs_digest(item.source, item.target);
    auto it = by_key.find({item.target.arch, item.source.op, item.source.variant});
    if (it != by_key.end() && it->second->inputs_sha256 == inputs) {
      rows.push_back(*it->second);
      continue;
    }
    to_build.push_back(item);
    to_build_inputs.push_back(std::move(inputs));
  }
  if (built) *built = to_build.size();
  WarmSummary summary = warm(builder, to_build, jobs, progress);
  for (const auto& r : summary.results)
    if (!r.ok) throw Error(Status::compile_error, r.item->source.variant + " for " + r.item->target.arch + ": " + r.error);
  for (std::size_t i = 0; i < to_build.size(); ++i) {
    const WarmItem& item = to_build[i];
    BuildOutcome b = builder.build(item.source, item.target);  // a cache hit: warm just published it
    ReplayRow row;
    row.target = item.target.arch;
    row.op = item.source.op;
    row.variant = item.source.variant;
    row.entry = item.source.entry;
    row.code_sha256 = code_digest(b.image);
    row.registers = b.resources.registers;
    row.spill_bytes = b.resources.spill_stores + b.resources.spill_loads;
    row.static_smem = b.resources.static_smem;
    row.dynamic_smem = item.source.smem_bytes;
    row.threads = item.source.threads;
    row.stack_bytes = b.resources.stack_frame;
    row.serialized_wgmma = b.resources.serialized_wgmma;
    row.inputs_sha256 = to_build_inputs[i];
    rows.push_back(std::move(row));
  }
  std::sort(rows.begin(), rows.end(), [](const ReplayRow& a, const ReplayRow& b) { return row_key(a) < row_key(b); });
  return rows;
}

bool replay_defaults_only(const Target& target) { return target.vendor == Vendor::nvidia && target.sm >= 100; }

std::vector<WarmItem> replay_items(const std::vector<std::string>& ops, const std::vector<std::string>& archs) {
  std::vector<WarmItem> items;
  for (const Target& target : warm_targets(archs)) {
    if (!replay_defaults_only(target)) {
      auto all = warm_items(ops, {target.arch});
      items.insert(items.end(), std::make_move_iterator(all.begin()), std::make_move_iterator(all.end()));
      continue;
    }
    for (const auto& name : ops)
      if (!find_operator(name))
        throw Error(Status::invalid_argument, "--ops: unknown operator '" + name + "' (known: " + operator_names() + ")");
    for (auto& item : default_warm_items({target.arch}))
      if (ops.empty() || std::find(ops.begin(), ops.end(), item.source.op) != ops.end()) items.push_back(std::move(item));
  }
  return items;
}

bool replay_row_selected(const ReplayRow& row, const std::vector<std::string>& ops, const std::vector<std::string>& archs) {
  auto named = [](const std::vector<std::string>& names, const std::string& x) {
    return names.empty() || std::find(names.begin(), names.end(), x) != names.end();
  };
  return named(ops, row.op) && named(archs, row.target);
}

std::vector<ReplayRow> merge_replay_rows(const std::vector<ReplayRow>& table, std::vector<ReplayRow> rows,
                                         const std::vector<std::string>& ops, const std::vector<std::string>& archs) {
  for (const auto& r : table)
    if (!replay_row_selected(r, ops, archs)) rows.push_back(r);
  std::stable_sort(rows.begin(), rows.end(), [](const ReplayRow& a, const ReplayRow& b) { return row_key(a) < row_key(b); });
  return rows;
}

std::string format_replay_table(const std::vector<ReplayRow>& rows) {
  std::string out = std::string(kHeader) + "\n";
  for (const auto& r : rows) out += format_row(r) + "\n";
  return out;
}

std::vector<ReplayRow> parse_replay_table(const std::string& text, const std::string& where) {
  std::vector<ReplayRow> rows;
  std::istringstream in(text);
  std::string line;
  int number = 0;
  auto bad = [&](const std::string& why) {
    return Error(Status::invalid_argument, where + ":" + std::to_string(number) + ": " + why);
  };
  while (std::getline(in, line)) {
    ++number;
    if (number == 1) {
      if (line != kHeader) throw bad("not a replay table header (expected '" + std::string(kHeader) + "')");
      continue;
    }
    if (line.empty()) continue;
    std::vector<std::string> f;
    std::istringstream fields(line);
    for (std::string x; std::getline(fields, x, '\t');) f.push_back(x);
    if (f.size() != kFields)
      throw bad("expected " + std::to_string(kFields) + " tab-separated fields, found " + std::to_string(f.size()));
    ReplayRow r;
    r.target = f[0];
    r.op = f[1];
    r.variant = f[2];
    r.entry = f[3];
    r.code_sha256 = f[4];
    try {
      r.registers = std::stoi(f[5]);
      r.spill_bytes = std::stoi(f[6]);
      r.static_smem = std::stoi(f[7]);
      r.dynamic_smem = std::stoi(f[8]);
      r.threads = std::stoi(f[9]);
      r.stack_bytes = std::stoi(f[10]);
    } catch (const std::exception&) {
      throw bad("a resource field is not an integer");
    }
    if (f[11] != "0" && f[11] != "1") throw bad("serialized_wgmma is not 0 or 1");
    r.serialized_wgmma = f[11] == "1";
    r.inputs_sha256 = f[12];
    rows.push_back(std::move(r));
  }
  if (number == 0) throw bad("empty file");
  return rows;
}

std::vector<std::string> diff_replay_tables(const std::vector<ReplayRow>& expected, const std::vector<ReplayRow>& actual) {
  std::map<std::tuple<std::string, std::string, std::string>, std::string> old_rows, new_rows;
  for (const auto& r : expected) old_rows[row_key(r)] = format_row(r);
  for (const auto& r : actual) new_rows[row_key(r)] = format_row(r);
  std::vector<std::string> out;
  for (const auto& [key, line] : old_rows) {
    auto it = new_rows.find(key);
    if (it == new_rows.end()) out.push_back("- " + line);
    else if (it->second != line) {
      out.push_back("- " + line);
      out.push_back("+ " + it->second);
    }
  }
  for (const auto& [key, line] : new_rows)
    if (!old_rows.count(key)) out.push_back("+ " + line);
  return out;
}

}  // namespace kgen
