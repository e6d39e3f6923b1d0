#include "cache/archive.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zstd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <thread>

#include "cache/entry_format.h"
#include "cache/sha256.h"

namespace kgen::cache {
namespace fs = std::filesystem;
namespace {

constexpr char kArchiveMagic[8] = {'K', 'G', 'E', 'N', 'A', 'R', 'C', '\n'};
constexpr std::uint32_t kMaxKeyBytes = 128;
constexpr std::uint64_t kHeaderBytes = sizeof kArchiveMagic + 4;
// zstd level 9 with long-distance matching over a 128 MiB window: kgen's kernels repeat each
// other's code across entries, which only a window that spans many entries finds (a cache of
// 275 MB: 7.4x smaller, against 5.5x without it and 4.4x at level 3). 2^27 is the largest window
// a zstd decoder accepts without being told, so `zstd -d` reads the body too.
constexpr int kZstdLevel = 9;
constexpr int kZstdWindowLog = 27;

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

// Writes v as `width` little-endian bytes to a writer (FdWriter, BodyWriter).
template <class Writer>
void put_le(Writer& w, std::uint64_t v, int width) {
  char b[8];
  for (int i = 0; i < width; ++i) b[i] = static_cast<char>((v >> (8 * i)) & 0xFF);
  w.write(b, static_cast<std::size_t>(width));
}

// The archive body's bytes, written to `out` as they are or through a zstd compressor.
class BodyWriter {
 public:
  BodyWriter(FdWriter& out, bool compress) : out_(out) {
    if (!compress) return;
    cctx_ = ZSTD_createCCtx();
    if (!cctx_) throw std::runtime_error("zstd: cannot allocate a compressor");
    set(ZSTD_c_compressionLevel, kZstdLevel);
    set(ZSTD_c_enableLongDistanceMatching, 1);
    set(ZSTD_c_windowLog, kZstdWindowLog);
    set(ZSTD_c_checksumFlag, 1);
    // Worker threads where the library has them (a single-threaded libzstd refuses; that is fine).
    ZSTD_CCtx_setParameter(cctx_, ZSTD_c_nbWorkers, static_cast<int>(std::min(4u, std::thread::hardware_concurrency())));
    buffer_.resize(ZSTD_CStreamOutSize());
  }
  ~BodyWriter() { ZSTD_freeCCtx(cctx_); }
  BodyWriter(const BodyWriter&) = delete;
  BodyWriter& operator=(const BodyWriter&) = delete;

  void write(const void* data, std::size_t n) {
    bytes_ += n;
    if (cctx_) compress(data, n, ZSTD_e_continue);
    else out_.write(data, n);
  }
  // Ends the compressed stream. Throws if compression failed.
  void finish() {
    if (cctx_) compress(nullptr, 0, ZSTD_e_end);
  }
  std::uint64_t bytes() const { return bytes_; }

 private:
  void set(ZSTD_cParameter p, int value) {
    const std::size_t r = ZSTD_CCtx_setParameter(cctx_, p, value);
    if (ZSTD_isError(r)) throw std::runtime_error(std::string("zstd: ") + ZSTD_getErrorName(r));
  }
  void compress(const void* data, std::size_t n, ZSTD_EndDirective mode) {
    ZSTD_inBuffer in{data, n, 0};
    for (;;) {
      ZSTD_outBuffer o{buffer_.data(), buffer_.size(), 0};
      const std::size_t left = ZSTD_compressStream2(cctx_, &o, &in, mode);
      if (ZSTD_isError(left)) throw std::runtime_error(std::string("zstd: ") + ZSTD_getErrorName(left));
      out_.write(buffer_.data(), o.pos);
      if (mode == ZSTD_e_end ? left == 0 : in.pos == in.size) return;
    }
  }
  FdWriter& out_;
  ZSTD_CCtx* cctx_ = nullptr;
  std::string buffer_;
  std::uint64_t bytes_ = 0;
};

// The archive body read from `in` after the header: its bytes as they are (version 1) or
// decompressed (version 2). offset() counts body bytes; damage() says why a compressed body
// stopped early.
class BodyReader {
 public:
  BodyReader(std::istream& in, bool compressed) : in_(in) {
    if (!compressed) return;
    dctx_ = ZSTD_createDCtx();
    if (!dctx_) throw std::runtime_error("zstd: cannot allocate a decompressor");
    ZSTD_DCtx_setParameter(dctx_, ZSTD_d_windowLogMax, kZstdWindowLog);
    file_buffer_.resize(ZSTD_DStreamInSize());
    out_.resize(ZSTD_DStreamOutSize());
  }
  ~BodyReader() { ZSTD_freeDCtx(dctx_); }
  BodyReader(const BodyReader&) = delete;
  BodyReader& operator=(const BodyReader&) = delete;

  // Reads exactly n bytes; false where the body ends (or stops being readable) first.
  bool read(void* dst, std::size_t n) {
    auto* p = static_cast<char*>(dst);
    if (!dctx_) {
      in_.read(p, static_cast<std::streamsize>(n));
      offset_ += static_cast<std::uint64_t>(in_.gcount());
      return static_cast<std::size_t>(in_.gcount()) == n;
    }
    while (n > 0) {
      if (!fill()) return false;
      const std::size_t take = std::min(n, out_end_ - out_pos_);
      std::memcpy(p, out_.data() + out_pos_, take);
      out_pos_ += take, p += take, n -= take, offset_ += take;
    }
    return true;
  }
  // The next byte, or -1 at the end of the body.
  int get() {
    unsigned char c;
    return read(&c, 1) ? c : -1;
  }
  bool get_le(int width, std::uint64_t* v) {
    unsigned char b[8];
    if (!read(b, static_cast<std::size_t>(width))) return false;
    *v = 0;
    for (int i = width; i-- > 0;) *v = (*v << 8) | b[i];
    return true;
  }
  // True when no byte is left (and, compressed, the stream ended cleanly).
  bool at_end() { return dctx_ ? !fill() && damage_.empty() : in_.peek() == std::char_traits<char>::eof(); }
  std::uint64_t offset() const { return offset_; }
  bool compressed() const { return dctx_ != nullptr; }
  const std::string& damage() const { return damage_; }

 private:
  // Makes at least one decompressed byte available; false at the end of the body or on damage.
  bool fill() {
    while (out_pos_ == out_end_) {
      if (!damage_.empty()) return false;
      if (input_.pos == input_.size && !flushing_) {
        if (!file_ended_) {
          in_.read(file_buffer_.data(), static_cast<std::streamsize>(file_buffer_.size()));
          const auto got = static_cast<std::size_t>(in_.gcount());
          if (got > 0) input_ = ZSTD_inBuffer{file_buffer_.data(), got, 0};
          else file_ended_ = true;
        }
        if (file_ended_ && input_.pos == input_.size) {
          if (frame_open_) damage_ = "the compressed data ends inside a frame";
          return false;
        }
      }
      ZSTD_outBuffer o{out_.data(), out_.size(), 0};
      const std::size_t r = ZSTD_decompressStream(dctx_, &o, &input_);
      if (ZSTD_isError(r)) {
        damage_ = std::string("zstd: ") + ZSTD_getErrorName(r);
        return false;
      }
      frame_open_ = r != 0;
      flushing_ = o.pos == o.size;
      out_pos_ = 0, out_end_ = o.pos;
    }
    return true;
  }
  std::istream& in_;
  ZSTD_DCtx* dctx_ = nullptr;
  std::string file_buffer_, out_;
  ZSTD_inBuffer input_{nullptr, 0, 0};
  std::size_t out_pos_ = 0, out_end_ = 0;
  bool file_ended_ = false, frame_open_ = false, flushing_ = false;
  std::uint64_t offset_ = 0;
  std::string damage_;
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

}  // namespace

ExportReport export_archive(BinaryCache& cache, const fs::path& archive, bool compress) {
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
    put_le(out, compress ? kArchiveVersion : kArchiveVersionPlain, 4);
    BodyWriter body(out, compress);
    for (const std::string& key : cache.keys()) {
      auto file = cache.read_verified_file(key);
      if (!file) {
        ++report.corrupt_skipped;
        continue;
      }
      body.write("M", 1);
      put_le(body, key.size(), 4);
      body.write(key.data(), key.size());
      put_le(body, file->size(), 8);
      body.write(file->data(), file->size());
      const Sha256Digest digest = Sha256().update(*file).finish();
      body.write(digest.data(), digest.size());
      ++report.exported;
    }
    body.write("E", 1);
    put_le(body, report.exported, 8);
    body.finish();
    report.body_bytes = body.bytes();
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
    unsigned char version_bytes[4] = {};
    if (!in.read(magic, sizeof magic) || std::memcmp(magic, kArchiveMagic, sizeof magic) != 0) {
      report.error = archive.string() + " is not a kgen cache archive (bad magic)";
      return report;
    }
    std::uint64_t version = 0;
    if (in.read(reinterpret_cast<char*>(version_bytes), 4))
      for (int i = 4; i-- > 0;) version = (version << 8) | version_bytes[i];
    if (version != kArchiveVersion && version != kArchiveVersionPlain) {
      report.error = archive.string() + ": unsupported archive version " + std::to_string(version) +
                     " (this kgen reads versions " + std::to_string(kArchiveVersionPlain) + " and " +
                     std::to_string(kArchiveVersion) + ")";
      return report;
    }
    BodyReader body(in, version == kArchiveVersion);
    // Where the body stops being readable: the decoder's reason for a compressed body, else `why`.
    auto stopped = [&](const std::string& where, const std::string& why) {
      report.error = body.damage().empty() ? where + ": " + why
                                           : where + ": compressed data damaged (" + body.damage() + "; import stopped)";
    };
    for (;;) {
      const std::uint64_t offset = kHeaderBytes + body.offset();
      const int tag = body.get();
      if (tag < 0) {
        if (!body.damage().empty()) stopped("after member " + std::to_string(report.members), "");
        else report.error = "archive truncated after " + std::to_string(report.members) + " members (no trailer)";
        return report;
      }
      if (tag == 'E') {
        std::uint64_t count = 0;
        if (!body.get_le(8, &count)) {
          stopped("trailer", "archive truncated in its trailer");
        } else if (count != report.members) {
          report.error = "trailer says " + std::to_string(count) + " members, archive holds " +
                         std::to_string(report.members);
        } else if (!body.at_end()) {
          report.error = body.damage().empty() ? "unexpected bytes after the trailer"
                                               : "after the trailer: compressed data damaged (" + body.damage() + ")";
        } else if (body.compressed() && in.peek() != std::char_traits<char>::eof()) {
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
      if (!body.get_le(4, &key_size) || key_size > kMaxKeyBytes) {
        stopped(where, "bad key length (archive damaged; import stopped)");
        return report;
      }
      std::string key(key_size, '\0');
      if (!body.read(key.data(), key_size) || !body.get_le(8, &entry_size)) {
        stopped(where, "truncated (import stopped)");
        return report;
      }
      if (!body.compressed() && entry_size > file_size - std::min(file_size, kHeaderBytes + body.offset())) {
        report.error = where + ": length runs past the end of the archive (truncated or damaged; import stopped)";
        return report;
      }
      if (entry_size > kMaxEntryBytes) {
        report.error = where + ": a member of " + std::to_string(entry_size) +
                       " bytes is larger than any entry kgen writes (damaged; import stopped)";
        return report;
      }
      // Read in pieces, so that a compressed body that claims a large member and ends early
      // never made kgen allocate the whole claim.
      std::vector<std::byte> entry;
      bool whole = true;
      for (std::uint64_t have = 0; whole && have < entry_size;) {
        const std::uint64_t piece = std::min<std::uint64_t>(entry_size - have, 16u << 20);
        entry.resize(have + piece);
        whole = body.read(entry.data() + have, piece);
        have += piece;
      }
      Sha256Digest digest{};
      if (!whole || !body.read(digest.data(), digest.size())) {
        stopped(where, "truncated (import stopped)");
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
