#include "cache/cache_key.h"

#include <algorithm>

#include "cache/sha256.h"

namespace kgen::cache {

CacheKeyBuilder::CacheKeyBuilder() { add("schema", kSchemaVersion); }

void CacheKeyBuilder::append_item(std::string_view s) {
  record_ += std::to_string(s.size());
  record_ += ':';
  record_ += s;
}

CacheKeyBuilder& CacheKeyBuilder::add(std::string_view field, std::string_view value) {
  append_item(field);
  append_item(value);
  return *this;
}

CacheKeyBuilder& CacheKeyBuilder::add_sorted(std::string_view field,
                                             std::vector<std::string> values) {
  std::sort(values.begin(), values.end());
  std::string nested;
  for (const std::string& v : values) {
    nested += std::to_string(v.size());
    nested += ':';
    nested += v;
  }
  return add(field, nested);
}

std::string CacheKeyBuilder::digest() const { return sha256_hex(record_); }

}  // namespace kgen::cache
