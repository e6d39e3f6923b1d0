// Encoding and decoding of one cache entry file; the grammar is in binary_cache.h.
// Internal to cache/: pure functions over bytes, no I/O.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kgen::cache::detail {

inline constexpr std::array<std::byte, 5> kMagic = {std::byte{'K'}, std::byte{'G'},
                                                    std::byte{'E'}, std::byte{'N'},
                                                    std::byte{0x01}};
inline constexpr std::uint32_t kFormatVersion = 1;
// magic + version + key length + metadata length + binary length + checksum.
inline constexpr std::uint64_t kMinEntryBytes = 5 + 4 + 8 + 8 + 8 + 32;

// Returns the complete entry file for (key, metadata JSON text, binary), checksum included.
std::vector<std::byte> encode_entry(std::string_view key, std::string_view metadata_json,
                                    std::span<const std::byte> binary);

// Where the parts of an entry lie inside its file; views point into the parsed bytes.
struct EntryLayout {
  std::string_view key;
  std::string_view metadata_json;
  std::uint64_t binary_offset = 0;
  std::uint64_t binary_size = 0;
};

enum class ParseStatus { kOk, kNeedMore, kCorrupt };

// Parses magic, version and the three lengths from `prefix` (the first bytes of a file of
// `file_size` bytes) and checks that the lengths add up to exactly file_size. kNeedMore: `prefix`
// is too short, read at least *need bytes. kCorrupt: *why says what is wrong. The checksum is not
// checked here.
ParseStatus parse_layout(std::span<const std::byte> prefix, std::uint64_t file_size,
                         EntryLayout* layout, std::uint64_t* need, std::string* why);

// Returns true if the last 32 bytes of `file` are the SHA-256 of the bytes before them.
bool checksum_matches(std::span<const std::byte> file);

}  // namespace kgen::cache::detail
