// Warm manifests (runtime/jit/manifest.h): valid files give the expected items; every malformed
// input is one Error(invalid_argument) naming the line, never a crash.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <set>

#include "generator/attention_forward.h"
#include "generator/registry.h"
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
      R"({"op":"attention_fwd","variant":"attention_fwd.bf16.d128.causal","config":"fa2:bm128:bn32:w4:s2"})" "\n"
      "\n"
      R"({"op":"attention_fwd","variant":"attention_fwd.fp32.d64.full","config":"simt:bm4:bn32:dmax64"})" "\r\n"
      R"({"config":"simt:bm4:bn32:dmax64","variant":"attention_fwd.fp32.d64.full","op":"attention_fwd"})" "\n");
  const auto items = read_manifest(p, {"sm_80", "sm_90a"});
  ASSERT_EQ(items.size(), 4u) << "the duplicate line compiles once";
  EXPECT_EQ(items[0].target.arch, "sm_80");
  EXPECT_EQ(items[1].target.arch, "sm_90a");
  EXPECT_EQ(items[0].source.variant, items[1].source.variant);
  EXPECT_NE(items[0].source.variant.find("bf16"), std::string::npos);
  EXPECT_NE(items[2].source.variant.find("simt"), std::string::npos);
}

// One line per registered operator: each line gives exactly the kernels the registry lists for
// that variant and config (every kernel of a backward call), in manifest order.
TEST_F(Manifest, OneLinePerOperatorGivesThatOperatorsKernels) {
  struct Line {
    const char* op;
    const char* variant;
    const char* config;
  };
  const Line lines[] = {
      {"attention_fwd", "attention_fwd.fp32.d32.full", "simt:bm4:bn32:dmax32"},
      {"attention_bwd", "attention_bwd.bf16.d64.causal.deterministic", "fa2:bm64:bn128:w8"},
      {"attention_double_bwd", "attention_double_bwd.fp16.d64.full", "fa2:bm64:bn32:w4"},
      {"lrpe_cosine", "lrpe_cosine.bwd.bf16.softmax_seq", "bp:t128:r2:v8"},
      {"md_lrpe_cosine", "md_lrpe_cosine.fwd.bf16.none.cache", "bp:t256:r2:v8:cache"},
      {"paged_append", "paged_append.bf16.rotary_interleaved", "ap:t256:v4"},
  };
  std::string text;
  for (const Line& l : lines)
    text += std::string(R"({"op":")") + l.op + R"(","variant":")" + l.variant + R"(","config":")" + l.config + "\"}\n";
  const auto items = read_manifest(write(text), {"sm_80"});
  const Target sm80 = *parse_target("sm_80");
  std::size_t at = 0;
  for (const Line& l : lines) {
    const OperatorInfo* op = find_operator(l.op);
    ASSERT_NE(op, nullptr) << l.op;
    const ConfigKernels expected = op->config_kernels(l.variant, l.config, sm80);
    ASSERT_EQ(expected.problem, ConfigKernels::Problem::none) << l.variant << ": " << expected.error;
    ASSERT_FALSE(expected.kernels.empty());
    for (const KernelSource& k : expected.kernels) {
      ASSERT_LT(at, items.size()) << l.op;
      EXPECT_EQ(items[at].source.op, k.op) << l.op;
      EXPECT_EQ(items[at].source.variant, k.variant) << l.op;
      EXPECT_EQ(items[at].source.entry, k.entry) << l.op;
      EXPECT_EQ(items[at].target.arch, "sm_80");
      ++at;
    }
  }
  EXPECT_EQ(at, items.size());
  EXPECT_EQ(std::size(lines), operators().size()) << "a new operator needs its line here";
}

TEST_F(Manifest, MissingConfigMeansTheWholeConfigSpace) {
  const auto p = write(R"({"op":"attention_fwd","variant":"attention_fwd.fp16.d64.full"})" "\n");
  const auto items = read_manifest(p, {"sm_80"});
  const AttentionForwardSpec spec{DType::f16, 64, false};
  EXPECT_EQ(items.size(), attention_forward_config_space(spec, *parse_target("sm_80")).size());
  EXPECT_GT(items.size(), 1u);
}

TEST_F(Manifest, MissingConfigOfAnyOperatorFollowsItsRegistryConfigSpace) {
  const Target sm90a = *parse_target("sm_90a");
  for (const auto& [name, variant] : {std::pair{"attention_bwd", "attention_bwd.bf16.d128.full"},
                                      std::pair{"lrpe_cosine", "lrpe_cosine.fwd.fp16.silu"}}) {
    const OperatorInfo* op = find_operator(name);
    const ConfigSpace space = op->config_space(variant, sm90a);
    ASSERT_TRUE(space.error.empty()) << space.error;
    ASSERT_GT(space.configs.size(), 1u) << variant;
    std::set<std::string> kernels;
    for (const auto& c : space.configs)
      for (const auto& k : op->config_kernels(variant, c, sm90a).kernels) kernels.insert(k.variant);
    const auto items = read_manifest(
        write(std::string(R"({"op":")") + name + R"(","variant":")" + variant + "\"}\n"), {"sm_90a"});
    std::set<std::string> got;
    for (const auto& item : items) got.insert(item.source.variant);
    EXPECT_EQ(got, kernels) << variant;
    EXPECT_EQ(items.size(), kernels.size()) << variant << ": kernels shared by configs compile once";
  }
}

struct BadCase {
  const char* name;
  const char* text;
  const char* line;  // expected "manifest:N: " prefix, with the field when a value is bad
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

const std::string kGood = R"({"op":"attention_fwd","variant":"attention_fwd.fp32.d64.full","config":"simt:bm4:bn32:dmax64"})" "\n";
const std::string kGoodThenJunk = kGood + "{oops}\n";
const std::string kGoodThenBad = kGood + kGood + R"({"op":"lrpe_cosine","variant":"lrpe_cosine.fwd.bf16.gelu"})" "\n";

INSTANTIATE_TEST_SUITE_P(
    Table, BadManifest,
    ::testing::Values(
        BadCase{"empty_file", "", "manifest:1:", "no variants"},
        BadCase{"only_blank_lines", "\n  \n\n", "manifest:3:", "no variants"},
        BadCase{"bad_json", "{\"op\":\"attention_fwd\",", "manifest:1:", "not valid JSON"},
        BadCase{"bad_json_line_2", kGoodThenJunk.c_str(), "manifest:2:", "not valid JSON"},
        BadCase{"not_an_object", "[1,2,3]\n", "manifest:1:", "JSON object"},
        BadCase{"unknown_op", R"({"op":"conv2d","variant":"conv2d.bf16"})", "manifest:1: \"op\":", "unknown operator 'conv2d'"},
        BadCase{"missing_op", R"({"variant":"attention_fwd.bf16.d64.full"})", "manifest:1: \"op\":", "missing"},
        BadCase{"op_not_string", R"({"op":1,"variant":"attention_fwd.bf16.d64.full"})", "manifest:1: \"op\":", "string"},
        BadCase{"missing_variant", R"({"op":"attention_bwd"})", "manifest:1: \"variant\":", "missing"},
        BadCase{"variant_not_string", R"({"op":"attention_fwd","variant":64})", "manifest:1: \"variant\":", "string"},
        BadCase{"unknown_variant", R"({"op":"lrpe_cosine","variant":"lrpe_cosine.fwd.bf16.gelu"})", "manifest:1: \"variant\":",
                "unknown variant key 'lrpe_cosine.fwd.bf16.gelu'"},
        BadCase{"variant_of_another_op", R"({"op":"attention_bwd","variant":"attention_fwd.bf16.d64.full","config":"fa2:bm64:bn128:w8"})",
                "manifest:1: \"variant\":", "(op attention_bwd)"},
        BadCase{"unsupported_head_dim", R"({"op":"attention_fwd","variant":"attention_fwd.bf16.d300.full"})",
                "manifest:1: \"variant\":", "300"},
        BadCase{"config_unparsable", R"({"op":"attention_double_bwd","variant":"attention_double_bwd.bf16.d64.full","config":"fast"})",
                "manifest:1: \"config\":", "cannot parse config 'fast'"},
        BadCase{"config_invalid", R"({"op":"attention_fwd","variant":"attention_fwd.fp32.d64.full","config":"fa2:bm128:bn32:w4:s2"})",
                "manifest:1: \"config\":", "invalid for sm_80"},
        BadCase{"config_needs_the_cache_variant", R"({"op":"md_lrpe_cosine","variant":"md_lrpe_cosine.fwd.bf16.none","config":"bp:t256:r2:v8:cache"})",
                "manifest:1: \"config\":", ":cache needs the .cache variant"},
        BadCase{"config_not_string", R"({"op":"attention_fwd","variant":"attention_fwd.bf16.d64.full","config":7})",
                "manifest:1: \"config\":", "non-empty string"},
        BadCase{"config_empty", R"({"op":"attention_fwd","variant":"attention_fwd.bf16.d64.full","config":""})",
                "manifest:1: \"config\":", "non-empty string"},
        BadCase{"unknown_key", R"({"op":"attention_fwd","variant":"attention_fwd.bf16.d64.full","confg":"x"})", "manifest:1:",
                "unknown key \"confg\""},
        BadCase{"old_field_keys", R"({"op":"attention_fwd","dtype":"bf16","head_dim":64})", "manifest:1:",
                "unknown key \"dtype\""},
        BadCase{"good_then_bad", kGoodThenBad.c_str(), "manifest:3: \"variant\":", "gelu"}),
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
