// Canonical cache keys: a length-prefixed record of (field, value) pairs, hashed with SHA-256.
//
// Record grammar (the digest is sha256_hex(record)):
//   record := item("schema") item(kSchemaVersion) { item(field) item(value) }
//   item(s) := decimal(len(s)) ":" s        e.g. "3:abc", "0:"
// Every item carries its own length, so no two different (field, value) sequences produce the
// same record ("ab"+"c" and "a"+"bc" differ).
//
// The caller adds fields in one fixed order, always the same for a given kind of entry; the
// builder does not sort them, because the order is part of the key. The runtime's order
// (jit-runtime.md §3) is: kgen version, templates hash, rendered source hash, compiler name and
// version, exact target, sorted canonical options, host platform. Never add paths, mtimes or
// hostnames. Changing kSchemaVersion or the record grammar invalidates every existing key.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kgen::cache {

// Version of the key record layout; the builder adds it first, automatically.
inline constexpr std::string_view kSchemaVersion = "1";

class CacheKeyBuilder {
 public:
  // Starts a record that already holds ("schema", kSchemaVersion).
  CacheKeyBuilder();

  // Appends one field and its value to the record, each length-prefixed.
  CacheKeyBuilder& add(std::string_view field, std::string_view value);

  // Appends `field` whose value is the record of `values` sorted (each item length-prefixed),
  // so option lists given in any order give the same key.
  CacheKeyBuilder& add_sorted(std::string_view field, std::vector<std::string> values);

  // Returns the lowercase hex SHA-256 of record(): the cache key (64 characters).
  [[nodiscard]] std::string digest() const;

  // Returns the canonical record bytes, for debugging (`kgen inspect` prints it).
  [[nodiscard]] const std::string& record() const { return record_; }

 private:
  void append_item(std::string_view s);
  std::string record_;
};

}  // namespace kgen::cache
