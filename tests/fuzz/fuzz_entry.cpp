// The cache entry parser (cache/entry_format.h) on arbitrary bytes, whole and as a prefix, and
// the cache's reader on the same bytes as a file at an entry's path.
#include <vector>

#include "cache/binary_cache.h"
#include "cache/cache_key.h"
#include "cache/entry_format.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace kgen::cache;
  const auto* bytes = reinterpret_cast<const std::byte*>(data);
  const std::span<const std::byte> whole(bytes, size);
  detail::EntryLayout layout;
  std::uint64_t need = 0;
  std::string why;
  if (detail::parse_layout(whole, size, &layout, &need, &why) == detail::ParseStatus::kOk)
    (void)detail::checksum_matches(whole);
  // A prefix of half the file, as list() reads it.
  (void)detail::parse_layout(whole.first(size / 2), size, &layout, &need, &why);

  static BinaryCache cache(kgen::fuzz::scratch() / "cache");
  static const std::string key = CacheKeyBuilder().add("fuzz", "entry").digest();
  if (!cache.make_directories().empty()) std::abort();
  std::filesystem::create_directories(cache.entry_path(key).parent_path());
  std::ofstream(cache.entry_path(key), std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  (void)cache.load(key);
  (void)cache.list();
  return 0;
}
