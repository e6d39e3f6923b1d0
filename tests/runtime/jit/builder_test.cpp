// Cache keys of the kernel builder, cache hits, corrupt-entry recovery, KGEN_NO_JIT.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "generator/attention_forward.h"
#include "jit/kernel_builder.h"

namespace kgen {
namespace {

class BuilderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("kgen-builder-" + std::to_string(::getpid()) + "-" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
  Target target_ = *parse_target("sm_80");
  KernelSource source_ = render_attention_forward({DType::f32, 64, false}, {.path = ForwardPath::simt, .block_m = 4, .block_n = 32, .stages = 1, .max_head_dim = 64});
};

TEST_F(BuilderTest, KeyIsStableAndSensitiveToEveryInput) {
  KernelBuilder b(dir_);
  const std::string key = b.cache_key(source_, target_);
  EXPECT_EQ(key.size(), 64u);
  EXPECT_EQ(key, KernelBuilder(dir_ / "elsewhere").cache_key(source_, target_)) << "paths must not enter keys";
  KernelSource other = source_;
  other.source += " ";
  EXPECT_NE(b.cache_key(other, target_), key);
  other = source_;
  other.entry = "other_entry";
  EXPECT_NE(b.cache_key(other, target_), key);
  EXPECT_NE(b.cache_key(source_, *parse_target("sm_90a")), key);
  EXPECT_NE(b.cache_key(source_, *parse_target("sm_86")), key);
  const std::string record = b.key_record(source_, target_);
  for (const char* field : {"kgen_version", "templates", "source", "compiler", "target", "options", "platform"})
    EXPECT_NE(record.find(field), std::string::npos) << field;
}

TEST_F(BuilderTest, SecondBuildIsACacheHitWithTheSameBinary) {
  KernelBuilder b(dir_);
  auto first = b.build(source_, target_);
  EXPECT_FALSE(first.from_cache);
  EXPECT_GT(first.image.size(), 0u);
  KernelBuilder fresh(dir_);  // a new process sees the entry on disk
  auto second = fresh.build(source_, target_);
  EXPECT_TRUE(second.from_cache);
  EXPECT_EQ(second.image, first.image);
  EXPECT_EQ(second.resources.registers, first.resources.registers);
}

TEST_F(BuilderTest, CorruptEntryIsRemovedAndRecompiled) {
  KernelBuilder b(dir_);
  auto first = b.build(source_, target_);
  auto path = b.cache().entry_path(first.key);
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(std::filesystem::file_size(path) / 2));
    char c = 0;
    f.read(&c, 1);
    f.seekp(-1, std::ios::cur);
    c ^= 0x5a;
    f.write(&c, 1);
  }
  KernelBuilder fresh(dir_);
  auto again = fresh.build(source_, target_);
  EXPECT_FALSE(again.from_cache);
  EXPECT_EQ(fresh.cache().stats().corrupt_removed, 1u);
  EXPECT_EQ(again.image, first.image);
}

TEST_F(BuilderTest, NoJitTurnsAMissIntoAnError) {
  ::setenv("KGEN_NO_JIT", "1", 1);
  KernelBuilder b(dir_);
  try {
    b.build(source_, target_);
    ::unsetenv("KGEN_NO_JIT");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    ::unsetenv("KGEN_NO_JIT");
    EXPECT_EQ(e.status(), Status::compile_error);
    EXPECT_NE(std::string(e.what()).find("kgen warm"), std::string::npos);
  }
}

TEST_F(BuilderTest, ThreadsAskingForOneKeyShareOneCompile) {
  KernelBuilder b(dir_);
  std::vector<std::thread> threads;
  std::atomic<int> compiled{0};
  std::vector<std::vector<std::byte>> images(6);
  for (int i = 0; i < 6; ++i)
    threads.emplace_back([&, i] {
      auto r = b.build(source_, target_);
      if (!r.from_cache) ++compiled;
      images[i] = r.image;
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(compiled.load(), 1);
  for (const auto& im : images) EXPECT_EQ(im, images[0]);
}

}  // namespace
}  // namespace kgen
