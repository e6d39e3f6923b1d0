// Cache archives: ship a pre-warmed cache as one file (`kgen cache export|import`).
//
// Archive grammar (integers little-endian, fixed width):
//   archive  := magic version body
//   magic    := "KGENARC" 0x0A                  8 bytes
//   version  := u32                             1: body as is; 2: body compressed (zstd, written)
//   body     := member* trailer                 version 2: one zstd stream of those bytes
//   member   := 'M' u32(k) key[k] u64(n) entry[n] digest
//   entry    := one complete cache entry file (grammar in binary_cache.h; self-verifying)
//   digest   := byte[32]                        SHA-256 of entry[n]
//   trailer  := 'E' u64(count)                  number of members before it
// A missing trailer means the archive was truncated. Members are independent: import checks
// each member's digest, then the entry's own magic, key, lengths and checksum, and publishes it
// through BinaryCache::publish (temp file + rename, so each import is atomic); a bad member is
// reported and skipped. Only a broken frame (a length running past the end of the file, or
// compressed data that does not decode) stops the import, since the next member cannot be found.
// Export writes version 2 (zstd with long-distance matching: similar kernels of different
// entries compress against each other) unless asked for version 1; import reads both.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "cache/binary_cache.h"

namespace kgen::cache {

inline constexpr std::uint32_t kArchiveVersion = 2;       // compressed body, what export writes
inline constexpr std::uint32_t kArchiveVersionPlain = 1;  // uncompressed body

struct ExportReport {
  std::uint64_t exported = 0;         // members written
  std::uint64_t corrupt_skipped = 0;  // entries that failed verification (removed, not exported)
  std::uint64_t bytes = 0;            // archive size
  std::uint64_t body_bytes = 0;       // members and trailer before compression
  std::string error;                  // non-empty: the archive could not be written (nothing left behind)
};

struct ImportReport {
  std::uint64_t members = 0;          // members read (good or bad)
  std::uint64_t imported = 0;         // entries now present (new or already there)
  std::uint64_t already_present = 0;  // of those, already in the cache
  std::uint64_t corrupt_skipped = 0;  // members that failed a check (skipped)
  std::uint64_t publish_failed = 0;   // good members the cache refused (read-only, full disk)
  std::vector<std::string> problems;  // one sentence per bad member or framing problem
  std::string error;                  // non-empty: the archive is unusable or was cut short
  bool ok() const { return error.empty() && corrupt_skipped == 0 && publish_failed == 0; }
};

// Writes every verified entry of `cache` to `archive` (via a temp file + rename), compressed
// (version 2) unless `compress` is false (version 1). Never throws.
ExportReport export_archive(BinaryCache& cache, const std::filesystem::path& archive, bool compress = true);

// Verifies and publishes every member of `archive` (version 1 or 2) into `cache`. Never throws.
ImportReport import_archive(BinaryCache& cache, const std::filesystem::path& archive);

}  // namespace kgen::cache
