#include "cache/sha256.h"

#include <openssl/evp.h>

#include <stdexcept>
#include <utility>

namespace kgen::cache {

struct Sha256::Context {
  EVP_MD_CTX* md = nullptr;
  bool finished = false;
  ~Context() { EVP_MD_CTX_free(md); }
};

Sha256::Sha256() : ctx_(std::make_unique<Context>()) {
  ctx_->md = EVP_MD_CTX_new();
  if (ctx_->md == nullptr || EVP_DigestInit_ex(ctx_->md, EVP_sha256(), nullptr) != 1) {
    throw std::runtime_error("kgen cache: OpenSSL SHA-256 initialisation failed");
  }
}

Sha256::~Sha256() = default;
Sha256::Sha256(Sha256&&) noexcept = default;
Sha256& Sha256::operator=(Sha256&&) noexcept = default;

Sha256& Sha256::update(std::span<const std::byte> data) {
  if (ctx_->finished) throw std::logic_error("kgen cache: Sha256::update after finish");
  if (!data.empty() && EVP_DigestUpdate(ctx_->md, data.data(), data.size()) != 1) {
    throw std::runtime_error("kgen cache: OpenSSL SHA-256 update failed");
  }
  return *this;
}

Sha256& Sha256::update(std::string_view text) {
  return update(std::as_bytes(std::span(text.data(), text.size())));
}

Sha256Digest Sha256::finish() {
  if (ctx_->finished) throw std::logic_error("kgen cache: Sha256::finish called twice");
  Sha256Digest out{};
  unsigned int len = 0;
  if (EVP_DigestFinal_ex(ctx_->md, reinterpret_cast<unsigned char*>(out.data()), &len) != 1 ||
      len != out.size()) {
    throw std::runtime_error("kgen cache: OpenSSL SHA-256 finalisation failed");
  }
  ctx_->finished = true;
  return out;
}

std::string Sha256::finish_hex() {
  const Sha256Digest d = finish();
  return to_hex(d);
}

std::string to_hex(std::span<const std::byte> digest) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(digest.size() * 2);
  for (std::byte b : digest) {
    const auto v = std::to_integer<unsigned>(b);
    hex.push_back(kDigits[v >> 4]);
    hex.push_back(kDigits[v & 0xF]);
  }
  return hex;
}

std::string sha256_hex(std::span<const std::byte> data) { return Sha256().update(data).finish_hex(); }

std::string sha256_hex(std::string_view text) { return Sha256().update(text).finish_hex(); }

}  // namespace kgen::cache
