// The numbers of config and spec strings (generator/config_text.h): unsigned decimals up to
// kMaxConfigNumber in every parser, so that no field, and no product of two fields in the
// validity checks, overflows int (the parsers take text from users, tuning databases and
// manifests).
#include <gtest/gtest.h>

#include "generator/attention_backward.h"
#include "generator/attention_forward.h"
#include "generator/config_text.h"
#include "generator/lrpe.h"

namespace kgen {
namespace {

TEST(ConfigText, NumbersAreUnsignedDecimalsWithinTheBound) {
  int v = -1;
  EXPECT_TRUE(parse_prefixed_int("bm64", "bm", v));
  EXPECT_EQ(v, 64);
  EXPECT_TRUE(parse_prefixed_int("w4096", "w", v));
  EXPECT_EQ(v, kMaxConfigNumber);
  v = 7;
  for (const char* bad : {"bm", "bm-64", "bm+64", "bm 64", "bm64x", "bm0x40", "bm4097", "bm2147483647", "bm2147483648",
                          "bm99999999999999999999", "x64"})
    EXPECT_FALSE(parse_prefixed_int(bad, "bm", v)) << bad;
  EXPECT_EQ(v, 7) << "a refused field leaves the output alone";
}

TEST(ConfigText, EveryParserRefusesNegativeAndHugeFields) {
  for (const char* bad : {"fa2:bm64:bn64:w-4:s2", "fa2:bm64:bn64:w4:s2147483647", "wg:bm-64:bn64:s2",
                          "mfma:bm64:bn64:w134217730", "simt:bm4:bn32:dmax-32"})
    EXPECT_FALSE(parse_attention_forward_config(bad)) << bad;
  // wg's warpgroups are keys / 64 · column splits: 134217727 · 2147483647 overflowed.
  for (const char* bad : {"wg:bm64:bn2147483647:c2147483647", "mfma:bm32:bn64:w134217730", "fa2:bm64:bn128:w-8",
                          "wg:bm64:bn128:a2:t:x-2", "simt:w4:dmax4294967296"})
    EXPECT_FALSE(parse_attention_backward_config(bad)) << bad;
  // occupancy · threads overflowed to a negative count and passed the check.
  for (const char* bad : {"sp:t256:r1:v8:o8388608", "bp:t-256:r1:v8", "sp:t256:r1:v8:b-2"})
    EXPECT_FALSE(parse_lrpe_config(bad)) << bad;
  EXPECT_FALSE(parse_attention_forward_spec("attention_fwd.bf16.d-128.full"));
  EXPECT_FALSE(parse_attention_backward_spec("attention_bwd.bf16.d4294967360.full"));
  // The forms kgen writes still parse.
  EXPECT_TRUE(parse_attention_forward_config("fa2:bm64:bn64:w4:s2"));
  EXPECT_TRUE(parse_attention_backward_config("wg:bm64:bn128:a2:t:l:w:p:g8"));
  EXPECT_TRUE(parse_lrpe_config("sp:t256:r1:v8:b4:o2"));
}

// A config built in code skips the parser: its check alone must refuse products that overflow.
TEST(ConfigText, ChecksRefuseFieldsWhoseProductsOverflow) {
  LrpeConfig c;
  c.threads = 256, c.rows = 1, c.vec = 8, c.fold = 1, c.occupancy = 8388608;  // · 256 = 2^31
  EXPECT_TRUE(check_lrpe_config({LrpeOp::cosine, LrpeDirection::forward, DType::bf16, LrpeAct::none}, c));
  const AttentionBackwardConfig dbl = DoubleBackwardFa2Config{.rows = 64, .tile = 32, .warps = 268435460};  // · 16 wraps to 64
  EXPECT_TRUE(check_attention_double_backward_config({DType::f16, 64, false}, dbl, *parse_target("sm_80")));
}

}  // namespace
}  // namespace kgen
