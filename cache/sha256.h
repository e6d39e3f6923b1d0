// SHA-256 over bytes, one-shot and incremental (OpenSSL EVP underneath, not exposed here).
#pragma once

#include <array>
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>

namespace kgen::cache {

inline constexpr std::size_t kSha256Bytes = 32;
using Sha256Digest = std::array<std::byte, kSha256Bytes>;

// Returns the lowercase hex SHA-256 (64 characters) of `data`.
std::string sha256_hex(std::span<const std::byte> data);

// Returns the lowercase hex SHA-256 (64 characters) of the bytes of `text`.
std::string sha256_hex(std::string_view text);

// Returns `digest` as 64 lowercase hex characters.
std::string to_hex(std::span<const std::byte> digest);

// Incremental SHA-256: update() any number of times, then finish() once; throws
// std::runtime_error only if OpenSSL itself fails (allocation), never for input.
class Sha256 {
 public:
  // Starts a fresh digest.
  Sha256();
  ~Sha256();
  Sha256(Sha256&&) noexcept;
  Sha256& operator=(Sha256&&) noexcept;
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  // Appends `data` to the message.
  Sha256& update(std::span<const std::byte> data);
  // Appends the bytes of `text` to the message.
  Sha256& update(std::string_view text);
  // Returns the digest of everything appended; the object must not be updated afterwards.
  Sha256Digest finish();
  // Returns finish() as lowercase hex.
  std::string finish_hex();

 private:
  struct Context;
  std::unique_ptr<Context> ctx_;
};

}  // namespace kgen::cache
