#include "cache/archive.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "cache/entry_format.h"
#include "cache/sha256.h"

namespace kgen::cache {
namespace fs = std::filesystem;
namespace {

constexpr char kArchiveMagic[8] = {'K', 'G', 'E', 'N', 'A', 'R', 'C', '\n'};
constexpr std::uint32_t kMaxKeyBytes = 128;

// Buffered writes to a descriptor; ok() is false after the first failed write.
class FdWriter {
 public:
  explicit FdWriter(int fd) : fd_(fd) {}
  void write(const void* data, std::size_t n) {
    const auto* p = static_cast<const char*>(data);
    if (buffer_.size() + n > kBuffer) flush();
    if (n >= kBuffer) write_through(p, n);
    else buffer_.append(p, n);
  }
  void put(char c) { write(&c, 1); }
  void put_le(std::uint64_t v, int width) {
    char b[8];
    for (int i = 0; i < width; ++i) b[i] = static_cast<char>((v >> (8 * i)) & 0xFF);
    write(b, static_cast<std::size_t>(width));
  }
  bool flush() {
    write_through(buffer_.data(), buffer_.size());
    buffer_.clear();
    return ok_;
  }
  bool ok() const { return ok_; }

 private:
  static constexpr std::size_t kBuffer = 1 << 20;
  void write_through(const char* p, std::size_t n) {
    while (ok_ && n > 0) {
      const ssize_t w = ::write(fd_, p, n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        ok_ = false;
        return;
      }
      p += w;
      n -= static_cast<std::size_t>(w);
    }
  }
  int fd_;
  bool ok_ = true;
  std::string buffer_;
};

// A new, unnamed file in `dir` (O_TMPFILE: nothing is left behind if the process dies before
// it is named), or, where the file system has no O_TMPFILE, a fresh mkstemp file whose name goes
// to *named. Never follows or truncates an existing file.
int open_staging_file(const fs::path& dir, const fs::path& archive, fs::path* named) {
  const int fd = ::open(dir.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0644);
  if (fd >= 0 || (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL)) return fd;
  std::string templ = archive.string() + ".tmp.XXXXXX";
  const int named_fd = ::mkostemp(templ.data(), O_CLOEXEC);
  if (named_fd >= 0) {
    ::fchmod(named_fd, 0644);
    *named = templ;
  }
  return named_fd;
}

// Gives the unnamed staging file `fd` the name `archive`, replacing what is there (a link
// there is replaced, not followed): linked under a fresh temporary name, then renamed.
std::string publish_staging_file(int fd, const fs::path& archive) {
  for (int attempt = 0; attempt < 16; ++attempt) {
    const std::string tmp = archive.string() + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(attempt);
    const std::string proc = "/proc/self/fd/" + std::to_string(fd);
    if (::linkat(AT_FDCWD, proc.c_str(), AT_FDCWD, tmp.c_str(), AT_SYMLINK_FOLLOW) != 0) {
      if (errno == EEXIST) continue;
      return "cannot name the archive " + tmp + ": " + std::strerror(errno);
    }
    if (::rename(tmp.c_str(), archive.c_str()) != 0) {
      const std::string why = "cannot rename to " + archive.string() + ": " + std::strerror(errno);
      ::unlink(tmp.c_str());
      return why;
    }
    return "";
  }
  return "cannot name the archive next to " + archive.string() + ": every temporary name is taken";
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
  const fs::path dir = archive.has_parent_path() ? archive.parent_path() : fs::path(".");
  fs::path named;  // set only where the staging file has a name (no O_TMPFILE)
  const int fd = open_staging_file(dir, archive, &named);
  if (fd < 0) {
    report.error = "cannot write in " + dir.string() + ": " + std::strerror(errno);
    return report;
  }
  try {
    FdWriter out(fd);
    out.write(kArchiveMagic, sizeof kArchiveMagic);
    out.put_le(kArchiveVersion, 4);
    for (const std::string& key : cache.keys()) {
      auto file = cache.read_verified_file(key);
      if (!file) {
        ++report.corrupt_skipped;
        continue;
      }
      out.put('M');
      out.put_le(key.size(), 4);
      out.write(key.data(), key.size());
      out.put_le(file->size(), 8);
      out.write(file->data(), file->size());
      const Sha256Digest digest = Sha256().update(*file).finish();
      out.write(digest.data(), digest.size());
      ++report.exported;
    }
    out.put('E');
    out.put_le(report.exported, 8);
    if (!out.flush() || ::fsync(fd) != 0) {
      report.error = "cannot write the archive " + archive.string() + ": " + std::strerror(errno);
    } else if (!named.empty()) {
      if (::rename(named.c_str(), archive.c_str()) != 0)
        report.error = "cannot rename to " + archive.string() + ": " + std::strerror(errno);
    } else {
      report.error = publish_staging_file(fd, archive);
    }
    if (report.error.empty()) {
      std::error_code ec;
      report.bytes = fs::file_size(archive, ec);
    }
  } catch (const std::exception& e) {
    report.error = e.what();
  }
  ::close(fd);
  if (!report.error.empty() && !named.empty()) ::unlink(named.c_str());
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
      if (entry_size > kMaxEntryBytes) {
        report.error = where + ": a member of " + std::to_string(entry_size) +
                       " bytes is larger than any entry kgen writes (damaged; import stopped)";
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
