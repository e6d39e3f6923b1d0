#include <gtest/gtest.h>

#include <string>

#include "cache/sha256.h"

namespace kgen::cache {
namespace {

TEST(Sha256, KnownVectors) {
  EXPECT_EQ(sha256_hex(std::string_view("")),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex(std::string_view("abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex(std::string_view("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST(Sha256, IncrementalMatchesOneShot) {
  std::string text(100000, '\0');
  for (std::size_t i = 0; i < text.size(); ++i) text[i] = static_cast<char>(i * 31 + 7);
  Sha256 h;
  for (std::size_t off = 0; off < text.size(); off += 777) {
    h.update(std::string_view(text).substr(off, 777));
  }
  EXPECT_EQ(h.finish_hex(), sha256_hex(text));
}

TEST(Sha256, ByteSpanOverloadMatchesText) {
  const std::string text = "kgen";
  EXPECT_EQ(sha256_hex(std::as_bytes(std::span(text.data(), text.size()))), sha256_hex(text));
}

}  // namespace
}  // namespace kgen::cache
