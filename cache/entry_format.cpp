#include "cache/entry_format.h"

#include <algorithm>
#include <cstring>

#include "cache/sha256.h"

namespace kgen::cache::detail {
namespace {

void put_u32(std::vector<std::byte>& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<std::byte>((v >> (8 * i)) & 0xFF));
}

void put_u64(std::vector<std::byte>& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<std::byte>((v >> (8 * i)) & 0xFF));
}

void put_bytes(std::vector<std::byte>& out, std::span<const std::byte> bytes) {
  out.insert(out.end(), bytes.begin(), bytes.end());
}

std::uint64_t get_le(std::span<const std::byte> bytes, std::uint64_t offset, std::uint64_t width) {
  std::uint64_t v = 0;
  for (std::uint64_t i = width; i-- > 0;) v = (v << 8) | std::to_integer<std::uint64_t>(bytes[offset + i]);
  return v;
}

std::span<const std::byte> as_bytes(std::string_view s) {
  return std::as_bytes(std::span(s.data(), s.size()));
}

std::string_view as_text(std::span<const std::byte> bytes, std::uint64_t offset, std::uint64_t n) {
  return {reinterpret_cast<const char*>(bytes.data()) + offset, static_cast<std::size_t>(n)};
}

}  // namespace

std::vector<std::byte> encode_entry(std::string_view key, std::string_view metadata_json,
                                    std::span<const std::byte> binary) {
  std::vector<std::byte> out;
  out.reserve(kMinEntryBytes + key.size() + metadata_json.size() + binary.size());
  put_bytes(out, kMagic);
  put_u32(out, kFormatVersion);
  put_u64(out, key.size());
  put_bytes(out, as_bytes(key));
  put_u64(out, metadata_json.size());
  put_bytes(out, as_bytes(metadata_json));
  put_u64(out, binary.size());
  put_bytes(out, binary);
  const Sha256Digest sum = Sha256().update(out).finish();
  put_bytes(out, sum);
  return out;
}

ParseStatus parse_layout(std::span<const std::byte> prefix, std::uint64_t file_size,
                         EntryLayout* layout, std::uint64_t* need, std::string* why) {
  auto corrupt = [&](const char* what) {
    *why = what;
    return ParseStatus::kCorrupt;
  };
  if (file_size < kMinEntryBytes) return corrupt("file shorter than the smallest entry");
  // `left` = bytes of the file not yet accounted for; each length must fit in it, which also
  // rules out overflow of the running offset.
  std::uint64_t offset = 0;
  std::uint64_t left = file_size - 32;  // the checksum
  auto take = [&](std::uint64_t n) {
    if (n > left) return false;
    offset += n;
    left -= n;
    return true;
  };
  auto available = [&](std::uint64_t end) {
    if (end <= prefix.size()) return true;
    *need = end;
    return false;
  };

  if (!available(5 + 4 + 8)) return ParseStatus::kNeedMore;
  if (!std::equal(kMagic.begin(), kMagic.end(), prefix.begin())) return corrupt("bad magic");
  if (get_le(prefix, 5, 4) != kFormatVersion) return corrupt("unsupported format version");
  take(5 + 4);
  const std::uint64_t key_size = get_le(prefix, offset, 8);
  if (!take(8) || !take(key_size)) return corrupt("key length exceeds file size");
  const std::uint64_t key_offset = offset - key_size;

  if (!available(offset + 8)) return ParseStatus::kNeedMore;
  const std::uint64_t meta_size = get_le(prefix, offset, 8);
  if (!take(8) || !take(meta_size)) return corrupt("metadata length exceeds file size");
  const std::uint64_t meta_offset = offset - meta_size;

  if (!available(offset + 8)) return ParseStatus::kNeedMore;
  const std::uint64_t binary_size = get_le(prefix, offset, 8);
  if (!take(8)) return corrupt("binary length field missing");
  if (binary_size != left) return corrupt("lengths do not add up to the file size");

  layout->key = as_text(prefix, key_offset, key_size);
  layout->metadata_json = as_text(prefix, meta_offset, meta_size);
  layout->binary_offset = offset;
  layout->binary_size = binary_size;
  return ParseStatus::kOk;
}

bool checksum_matches(std::span<const std::byte> file) {
  if (file.size() < kSha256Bytes) return false;
  const auto body = file.first(file.size() - kSha256Bytes);
  const Sha256Digest sum = Sha256().update(body).finish();
  return std::memcmp(sum.data(), file.data() + body.size(), kSha256Bytes) == 0;
}

}  // namespace kgen::cache::detail
