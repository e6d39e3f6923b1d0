// Warm manifests (jit/manifest.h): valid files give the expected items; every malformed
// input is one Error(invalid_argument) naming the line, never a crash.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>

#include "generator/attention_forward.h"
#include "kgen/types.hpp"
#include "jit/manifest.h"

namespace kgen {
namespace {
namespace fs = std::filesystem;

class Manifest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kgen-manifest-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path write(const std::string& text) {
    const fs::path p = dir_ / ("m" + std::to_string(n_++) + ".jsonl");
    std::ofstream(p, std::ios::binary) << text;
    return p;
  }
  fs::path dir_;
  int n_ = 0;
};

TEST_F(Manifest, ExplicitConfigsGiveOneItemPerTarget) {
  const auto p = write(
      R"({"op":"attention_fwd","dtype":"bf16","head_dim":128,"causal":true,"config":"fa2:bm128:bn32:w4:s2"})" "\n"
      "\n"
      R"({"op":"attention_fwd","dtype":"fp32","head_dim":64,"config":"simt:bm4:bn32:dmax64"})" "\r\n"
      R"({"op":"attention_fwd","dtype":"fp32","head_dim":64,"causal":false,"config":"simt:bm4:bn32:dmax64"})" "\n");
  const auto items = read_manifest(p, {"sm_80", "sm_90a"});
  ASSERT_EQ(items.size(), 4u) << "the duplicate line compiles once";
  EXPECT_EQ(items[0].target.arch, "sm_80");
  EXPECT_EQ(items[1].target.arch, "sm_90a");
  EXPECT_EQ(items[0].source.variant, items[1].source.variant);
  EXPECT_NE(items[0].source.variant.find("bf16"), std::string::npos);
  EXPECT_NE(items[2].source.variant.find("simt"), std::string::npos);
}

TEST_F(Manifest, MissingConfigMeansTheWholeConfigSpace) {
  const auto p = write(R"({"op":"attention_fwd","dtype":"fp16","head_dim":64})" "\n");
  const auto items = read_manifest(p, {"sm_80"});
  const AttentionForwardSpec spec{DType::f16, 64, false};
  EXPECT_EQ(items.size(), attention_forward_config_space(spec, *parse_target("sm_80")).size());
  EXPECT_GT(items.size(), 1u);
}

struct BadCase {
  const char* name;
  const char* text;
  const char* line;  // expected "manifest:N:" prefix
  const char* why;   // expected substring
};

// Keeps ctest names stable (no pointer bytes in "# GetParam() = …").
void PrintTo(const BadCase& c, std::ostream* os) { *os << c.name; }

class BadManifest : public Manifest, public ::testing::WithParamInterface<BadCase> {};

TEST_P(BadManifest, IsOneClearInvalidArgumentError) {
  const BadCase& c = GetParam();
  const auto p = write(c.text);
  try {
    read_manifest(p, {"sm_80", "sm_90a"});
    FAIL() << c.name << ": no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::invalid_argument) << c.name;
    const std::string what = e.what();
    EXPECT_EQ(what.rfind(c.line, 0), 0u) << c.name << ": " << what;
    EXPECT_NE(what.find(c.why), std::string::npos) << c.name << ": " << what;
  }
}

const std::string kGood = R"({"op":"attention_fwd","dtype":"fp32","head_dim":64,"config":"simt:bm4:bn32:dmax64"})" "\n";
const std::string kGoodThenBad = kGood + kGood + "{\"op\":\"attention_fwd\"}\n";

INSTANTIATE_TEST_SUITE_P(
    Table, BadManifest,
    ::testing::Values(
        BadCase{"empty_file", "", "manifest:1:", "no variants"},
        BadCase{"only_blank_lines", "\n  \n\n", "manifest:3:", "no variants"},
        BadCase{"bad_json", "{\"op\":\"attention_fwd\",", "manifest:1:", "not valid JSON"},
        BadCase{"bad_json_line_2", "{\"op\":\"attention_fwd\",\"dtype\":\"fp32\",\"head_dim\":64}\n{oops}\n",
                "manifest:2:", "not valid JSON"},
        BadCase{"not_an_object", "[1,2,3]\n", "manifest:1:", "JSON object"},
        BadCase{"unknown_op", R"({"op":"conv2d","dtype":"bf16","head_dim":64})", "manifest:1:", "unknown op 'conv2d'"},
        BadCase{"missing_op", R"({"dtype":"bf16","head_dim":64})", "manifest:1:", "\"op\""},
        BadCase{"bad_dtype", R"({"op":"attention_fwd","dtype":"fp8","head_dim":64})", "manifest:1:", "unknown dtype 'fp8'"},
        BadCase{"dtype_not_string", R"({"op":"attention_fwd","dtype":16,"head_dim":64})", "manifest:1:", "\"dtype\""},
        BadCase{"head_dim_0", R"({"op":"attention_fwd","dtype":"bf16","head_dim":0})", "manifest:1:", "head_dim 0"},
        BadCase{"head_dim_300", R"({"op":"attention_fwd","dtype":"bf16","head_dim":300})", "manifest:1:", "head_dim 300"},
        BadCase{"head_dim_negative", R"({"op":"attention_fwd","dtype":"bf16","head_dim":-64})", "manifest:1:", "head_dim -64"},
        BadCase{"head_dim_float", R"({"op":"attention_fwd","dtype":"bf16","head_dim":64.5})", "manifest:1:", "integer"},
        BadCase{"head_dim_missing", R"({"op":"attention_fwd","dtype":"bf16"})", "manifest:1:", "integer"},
        BadCase{"causal_not_bool", R"({"op":"attention_fwd","dtype":"bf16","head_dim":64,"causal":"yes"})", "manifest:1:", "causal"},
        BadCase{"config_unparsable", R"({"op":"attention_fwd","dtype":"bf16","head_dim":64,"config":"fast"})", "manifest:1:", "cannot parse config 'fast'"},
        BadCase{"config_invalid", R"({"op":"attention_fwd","dtype":"fp32","head_dim":64,"config":"fa2:bm128:bn32:w4:s2"})",
                "manifest:1:", "is invalid for sm_80"},
        BadCase{"config_not_string", R"({"op":"attention_fwd","dtype":"bf16","head_dim":64,"config":7})", "manifest:1:", "\"config\""},
        BadCase{"unknown_key", R"({"op":"attention_fwd","dtype":"bf16","head_dim":64,"casual":true})", "manifest:1:", "unknown key 'casual'"},
        BadCase{"good_then_bad", kGoodThenBad.c_str(), "manifest:3:", "\"dtype\""}),
    [](const ::testing::TestParamInfo<BadCase>& info) { return std::string(info.param.name); });

TEST_F(Manifest, UnreadableFileAndBadArchAreInvalidArguments) {
  for (const fs::path& p : {dir_ / "does-not-exist.jsonl", dir_}) {
    try {
      read_manifest(p, {"sm_80"});
      FAIL() << p;
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), Status::invalid_argument);
      EXPECT_EQ(std::string(e.what()).rfind("manifest: ", 0), 0u) << e.what();
    }
  }
  try {
    read_manifest(write(kGood), {"sm_99"});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sm_99"), std::string::npos);
  }
}

}  // namespace
}  // namespace kgen
