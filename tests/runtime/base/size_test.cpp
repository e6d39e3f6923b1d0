// Byte sizes (runtime/base/size.h): the one parser behind `kgen cache gc --max-bytes` and
// KGEN_CACHE_MAX_BYTES, so that "1G" is a gibibyte everywhere and a value that is not a size
// is an error naming where it came from, never a small number.
#include <gtest/gtest.h>

#include <cstdlib>

#include "base/size.h"

namespace kgen {
namespace {

TEST(ByteSize, ParsesBytesAndBinarySuffixes) {
  const std::pair<const char*, std::uint64_t> cases[] = {
      {"0", 0},
      {"1048576", 1048576},
      {"512K", 512ull << 10},
      {"64M", 64ull << 20},
      {"1G", 1ull << 30},
      {"2T", 2ull << 40},
      {"1g", 1ull << 30},
      {"1GB", 1ull << 30},
      {"1GiB", 1ull << 30},
      {"3kib", 3ull << 10},
      {"7b", 7},
      {"18446744073709551615", 18446744073709551615ull},
      {"16777215T", 16777215ull << 40},
  };
  for (const auto& [text, bytes] : cases) {
    std::string why;
    const auto got = parse_byte_size(text, "--max-bytes", &why);
    ASSERT_TRUE(got) << text << ": " << why;
    EXPECT_EQ(*got, bytes) << text;
  }
}

TEST(ByteSize, RefusesEmptyNegativeGarbageAndOverflowNamingTheArgument) {
  for (const char* text : {"", "-1", "-1G", "+5", "1Q", "G", "1.5G", " 1G", "1G ", "1 G", "0x10", "1GG", "1Gb2",
                           "1iB", "18446744073709551616", "16777216T", "99999999999999999999999"}) {
    std::string why;
    EXPECT_FALSE(parse_byte_size(text, "KGEN_CACHE_MAX_BYTES", &why)) << "'" << text << "'";
    EXPECT_EQ(why.rfind("KGEN_CACHE_MAX_BYTES: ", 0), 0u) << why;
  }
  EXPECT_FALSE(parse_byte_size("1Q", "--max-bytes"));  // no error text wanted
}

TEST(ByteSize, EnvironmentValueThatIsNotASizeReadsAsNoSize) {
  const char* var = "KGEN_TEST_BYTE_SIZE";
  unsetenv(var);
  EXPECT_EQ(byte_size_from_env(var), 0u);
  setenv(var, "", 1);
  EXPECT_EQ(byte_size_from_env(var), 0u);
  setenv(var, "1G", 1);
  EXPECT_EQ(byte_size_from_env(var), 1ull << 30);
  setenv(var, "1Q", 1);
  EXPECT_EQ(byte_size_from_env(var), 0u);
  unsetenv(var);
}

}  // namespace
}  // namespace kgen
