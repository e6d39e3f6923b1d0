#include "cache/archive.h"

#include <unistd.h>

#include <array>
#include <cstring>
#include <fstream>

#include "cache/entry_format.h"
#include "cache/sha256.h"

namespace kgen::cache {
namespace fs = std::filesystem;
namespace {

constexpr char kArchiveMagic[8] = {'K', 'G', 'E', 'N', 'A', 'R', 'C', '\n'};
constexpr std::uint32_t kMaxKeyBytes = 128;

void put_le(std::ostream& out, std::uint64_t v, int width) {
  char b[8];
  for (int i = 0; i < width; ++i) b[i] = static_cast<char>((v >> (8 * i)) & 0xFF);
  out.write(b, width);
}

bool get_le(std::istream& in, int width, std::uint64_t* v) {
  unsigned char b[8];
  if (!in.read(reinterpret_cast<char*>(b), width)) return false;
  *v = 0;
  for (int i = width; i-- > 0;) *v = (*v << 8) | b[i];
  return true;
}

}  // namespace

ExportReport export_archive(BinaryCache& cache, const fs::path& archive) {
  ExportReport report;
  fs::path tmp = archive;
  tmp += ".tmp." + std::to_string(::getpid());
  try {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) {
      report.error = "cannot write " + tmp.string() + ": " + std::strerror(errno);
      return report;
    }
    out.write(kArchiveMagic, sizeof kArchiveMagic);
    put_le(out, kArchiveVersion, 4);
    for (const std::string& key : cache.keys()) {
      auto file = cache.read_verified_file(key);
      if (!file) {
        ++report.corrupt_skipped;
        continue;
      }
      out.put('M');
      put_le(out, key.size(), 4);
      out.write(key.data(), static_cast<std::streamsize>(key.size()));
      put_le(out, file->size(), 8);
      out.write(reinterpret_cast<const char*>(file->data()), static_cast<std::streamsize>(file->size()));
      const Sha256Digest digest = Sha256().update(*file).finish();
      out.write(reinterpret_cast<const char*>(digest.data()), digest.size());
      ++report.exported;
    }
    out.put('E');
    put_le(out, report.exported, 8);
    out.flush();
    if (!out) {
      report.error = "cannot write " + tmp.string() + ": " + std::strerror(errno);
    } else {
      out.close();
      std::error_code ec;
      fs::rename(tmp, archive, ec);
      if (ec) report.error = "cannot rename to " + archive.string() + ": " + ec.message();
      else report.bytes = fs::file_size(archive, ec);
    }
  } catch (const std::exception& e) {
    report.error = e.what();
  }
  if (!report.error.empty()) {
    std::error_code ec;
    fs::remove(tmp, ec);
  }
  return report;
}

ImportReport import_archive(BinaryCache& cache, const fs::path& archive) {
  ImportReport report;
  try {
    std::ifstream in(archive, std::ios::binary);
    if (!in) {
      report.error = "cannot open " + archive.string() + ": " + std::strerror(errno);
      return report;
    }
    std::error_code ec;
    const std::uint64_t file_size = fs::file_size(archive, ec);
    if (ec) {
      report.error = "cannot read " + archive.string() + ": " + ec.message();
      return report;
    }
    char magic[sizeof kArchiveMagic] = {};
    std::uint64_t version = 0;
    if (!in.read(magic, sizeof magic) || std::memcmp(magic, kArchiveMagic, sizeof magic) != 0) {
      report.error = archive.string() + " is not a kgen cache archive (bad magic)";
      return report;
    }
    if (!get_le(in, 4, &version) || version != kArchiveVersion) {
      report.error = archive.string() + ": unsupported archive version " + std::to_string(version) +
                     " (this kgen reads version " + std::to_string(kArchiveVersion) + ")";
      return report;
    }
    for (;;) {
      const std::uint64_t offset = static_cast<std::uint64_t>(in.tellg());
      const int tag = in.get();
      if (tag == std::char_traits<char>::eof()) {
        report.error = "archive truncated after " + std::to_string(report.members) +
                       " members (no trailer)";
        return report;
      }
      if (tag == 'E') {
        std::uint64_t count = 0;
        if (!get_le(in, 8, &count)) {
          report.error = "archive truncated in its trailer";
        } else if (count != report.members) {
          report.error = "trailer says " + std::to_string(count) + " members, archive holds " +
                         std::to_string(report.members);
        } else if (in.peek() != std::char_traits<char>::eof()) {
          report.error = "unexpected bytes after the trailer";
        }
        return report;
      }
      const std::string where = "member " + std::to_string(report.members + 1) + " at byte " + std::to_string(offset);
      if (tag != 'M') {
        report.error = where + ": bad member tag (archive damaged; import stopped)";
        return report;
      }
      std::uint64_t key_size = 0, entry_size = 0;
      if (!get_le(in, 4, &key_size) || key_size > kMaxKeyBytes) {
        report.error = where + ": bad key length (archive damaged; import stopped)";
        return report;
      }
      std::string key(key_size, '\0');
      if (!in.read(key.data(), static_cast<std::streamsize>(key_size)) || !get_le(in, 8, &entry_size) ||
          entry_size > file_size - static_cast<std::uint64_t>(in.tellg())) {
        report.error = where + ": length runs past the end of the archive (truncated or damaged; import stopped)";
        return report;
      }
      std::vector<std::byte> entry(entry_size);
      Sha256Digest digest{};
      if (!in.read(reinterpret_cast<char*>(entry.data()), static_cast<std::streamsize>(entry_size)) ||
          !in.read(reinterpret_cast<char*>(digest.data()), digest.size())) {
        report.error = where + ": truncated (import stopped)";
        return report;
      }
      ++report.members;
      auto bad = [&](const std::string& why) {
        ++report.corrupt_skipped;
        report.problems.push_back(where + " (key " + key.substr(0, 16) + "): " + why + "; skipped");
      };
      if (!is_valid_key(key)) {
        bad("invalid key");
        continue;
      }
      if (Sha256().update(entry).finish() != digest) {
        bad("member checksum mismatch");
        continue;
      }
      detail::EntryLayout layout;
      std::uint64_t need = 0;
      std::string why;
      if (detail::parse_layout(entry, entry.size(), &layout, &need, &why) != detail::ParseStatus::kOk) {
        bad("entry is malformed: " + why);
        continue;
      }
      if (layout.key != key) {
        bad("entry holds key " + std::string(layout.key).substr(0, 16));
        continue;
      }
      if (!detail::checksum_matches(entry)) {
        bad("entry checksum mismatch");
        continue;
      }
      CacheEntry decoded;
      decoded.metadata = nlohmann::json::parse(layout.metadata_json, nullptr, false);
      if (decoded.metadata.is_discarded()) {
        bad("entry metadata is not valid JSON");
        continue;
      }
      decoded.binary.assign(entry.begin() + static_cast<std::ptrdiff_t>(layout.binary_offset),
                            entry.begin() + static_cast<std::ptrdiff_t>(layout.binary_offset + layout.binary_size));
      // An existing entry counts only if it verifies (a corrupt one is removed and replaced).
      const bool existed = cache.read_verified_file(key).has_value();
      if (!cache.publish(key, decoded)) {
        ++report.publish_failed;
        report.problems.push_back(where + " (key " + key.substr(0, 16) + "): the cache refused it (see the log)");
        continue;
      }
      ++report.imported;
      if (existed) ++report.already_present;
    }
  } catch (const std::exception& e) {
    report.error = e.what();
  }
  return report;
}

}  // namespace kgen::cache
