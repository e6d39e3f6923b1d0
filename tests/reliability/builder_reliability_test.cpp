// Reliability of the kernel builder over the on-disk cache: truncated, bit-flipped and
// wrong-target entries are detected, removed, counted and recompiled; layers (KGEN_CACHE_PATH)
// and a read-only root are never fatal; KGEN_CACHE_MAX_BYTES is honoured.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <string>

#include "generator/attention_forward.h"
#include "jit/kernel_builder.h"

namespace kgen {
namespace {
namespace fs = std::filesystem;

class BuilderReliability : public ::testing::Test {
 protected:
  void SetUp() override {
    ::unsetenv("KGEN_CACHE_PATH");
    ::unsetenv("KGEN_CACHE_MAX_BYTES");
    ::unsetenv("KGEN_NO_JIT");
    // One directory per test, named without the '/' of parameterised test names (a nested
    // directory would leave its parent behind after TearDown).
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::replace(name.begin(), name.end(), '/', '_');
    dir_ = fs::temp_directory_path() / ("kgen-reliability-" + std::to_string(::getpid()) + "-" + name);
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Builds source_ for `target` into `root` once and returns the outcome.
  BuildOutcome prime(const fs::path& root, const Target& target) {
    KernelBuilder b(root, {});
    BuildOutcome out = b.build(source_, target);
    EXPECT_FALSE(out.from_cache);
    return out;
  }
  // Puts `entry` in place of the entry under `key` (a self-consistent file: own key, checksum).
  static void replace_entry(KernelBuilder& b, const std::string& key, const cache::CacheEntry& entry) {
    ASSERT_TRUE(b.cache().remove(key));
    ASSERT_TRUE(b.cache().publish(key, entry));
  }
  static int elf_sm(const std::vector<std::byte>& image) {
    return static_cast<int>(std::to_integer<unsigned>(image.at(49)));  // ELF ABI 8: e_flags bits 8..15
  }

  fs::path dir_;
  Target sm80_ = *parse_target("sm_80");
  Target sm90a_ = *parse_target("sm_90a");
  KernelSource source_ = render_attention_forward({DType::f32, 64, false}, {.path = ForwardPath::simt, .block_m = 4, .block_n = 32, .stages = 1, .max_head_dim = 64});
};

enum class Damage { truncate_half, truncate_to_header, flip_header, flip_metadata, flip_binary, flip_checksum, empty };
const char* const kDamageNames[] = {"truncate_half", "truncate_to_header", "flip_header", "flip_metadata",
                                    "flip_binary", "flip_checksum", "empty"};
void PrintTo(Damage d, std::ostream* os) { *os << kDamageNames[static_cast<int>(d)]; }

class DamagedEntry : public BuilderReliability, public ::testing::WithParamInterface<Damage> {};

TEST_P(DamagedEntry, IsDetectedRemovedCountedAndRecompiled) {
  const fs::path root = dir_ / "root";
  const BuildOutcome first = prime(root, sm80_);
  const fs::path path = KernelBuilder(root, {}).cache().entry_path(first.key);
  const auto size = fs::file_size(path);
  auto flip = [&](std::uintmax_t at) {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(at));
    char c = 0;
    f.read(&c, 1);
    f.seekp(static_cast<std::streamoff>(at));
    c = static_cast<char>(c ^ 0x10);
    f.write(&c, 1);
  };
  switch (GetParam()) {
    case Damage::truncate_half: fs::resize_file(path, size / 2); break;
    case Damage::truncate_to_header: fs::resize_file(path, 20); break;
    case Damage::flip_header: flip(6); break;
    case Damage::flip_metadata: flip(9 + 8 + 64 + 8 + 10); break;
    case Damage::flip_binary: flip(size - 32 - 100); break;
    case Damage::flip_checksum: flip(size - 5); break;
    case Damage::empty: fs::resize_file(path, 0); break;
  }
  KernelBuilder fresh(root, {});
  const BuildOutcome again = fresh.build(source_, sm80_);
  EXPECT_FALSE(again.from_cache) << "a damaged entry must not be served";
  EXPECT_EQ(fresh.stats().corrupt_removed, 1u);
  EXPECT_EQ(again.image, first.image);
  // Republished and sound: a third builder hits.
  KernelBuilder third(root, {});
  EXPECT_TRUE(third.build(source_, sm80_).from_cache);
  EXPECT_EQ(third.cache().verify().corrupt_removed, 0u);
}

INSTANTIATE_TEST_SUITE_P(AllDamage, DamagedEntry,
                         ::testing::Values(Damage::truncate_half, Damage::truncate_to_header, Damage::flip_header,
                                           Damage::flip_metadata, Damage::flip_binary, Damage::flip_checksum,
                                           Damage::empty),
                         [](const ::testing::TestParamInfo<Damage>& info) {
                           return std::string(kDamageNames[static_cast<int>(info.param)]);
                         });

// "Wrong arch" with content-addressed keys: the key covers the target, so an honest writer never
// produces one. It takes an entry re-keyed by something else (a buggy or hand-made import, a
// copy tool, a key-function bug): a file that verifies (own key, checksum) but holds another
// target's metadata and CUBIN. The builder checks both before serving.
TEST_F(BuilderReliability, WrongArchEntryUnderAnotherTargetsKeyIsNeverServed) {
  const fs::path root = dir_ / "root";
  const BuildOutcome sm80 = prime(root, sm80_);
  ASSERT_EQ(elf_sm(sm80.image), 80);
  KernelBuilder b(root, {});
  const std::string key90 = b.cache_key(source_, sm90a_);
  auto e80 = b.cache().load(sm80.key);
  ASSERT_TRUE(e80.has_value());
  ASSERT_EQ(e80->metadata["target"], "sm_80");
  ASSERT_TRUE(b.cache().publish(key90, *e80));  // self-consistent file, wrong content

  KernelBuilder fresh(root, {});
  const BuildOutcome out = fresh.build(source_, sm90a_);
  EXPECT_FALSE(out.from_cache);
  EXPECT_EQ(fresh.stats().corrupt_removed, 1u);
  EXPECT_EQ(elf_sm(out.image), 90);
  auto now = fresh.cache().load(key90);
  ASSERT_TRUE(now.has_value());
  EXPECT_EQ(now->metadata["target"], "sm_90a");
}

TEST_F(BuilderReliability, ForgedMetadataOverAWrongArchCubinIsCaughtByTheElfHeader) {
  const fs::path root = dir_ / "root";
  const BuildOutcome sm80 = prime(root, sm80_);
  KernelBuilder b(root, {});
  const std::string key90 = b.cache_key(source_, sm90a_);
  auto e = b.cache().load(sm80.key);
  ASSERT_TRUE(e.has_value());
  e->metadata["target"] = "sm_90a";  // metadata lies; the CUBIN is sm_80
  e->metadata["key_record"] = b.key_record(source_, sm90a_);
  ASSERT_TRUE(b.cache().publish(key90, *e));
  KernelBuilder fresh(root, {});
  const BuildOutcome out = fresh.build(source_, sm90a_);
  EXPECT_FALSE(out.from_cache);
  EXPECT_EQ(fresh.stats().corrupt_removed, 1u);
  EXPECT_EQ(elf_sm(out.image), 90);
}

TEST_F(BuilderReliability, NonCubinOrWrongEntryPointIsNeverServed) {
  const fs::path root = dir_ / "root";
  const BuildOutcome first = prime(root, sm80_);
  KernelBuilder b(root, {});
  auto good = b.cache().load(first.key);
  ASSERT_TRUE(good.has_value());
  for (int variant = 0; variant < 2; ++variant) {
    cache::CacheEntry bad = *good;
    if (variant == 0) bad.binary.assign(4096, std::byte{0x41});
    else bad.metadata["entry"] = "some_other_kernel";
    ASSERT_NO_FATAL_FAILURE(replace_entry(b, first.key, bad));
    KernelBuilder fresh(root, {});
    const BuildOutcome out = fresh.build(source_, sm80_);
    EXPECT_FALSE(out.from_cache) << variant;
    EXPECT_EQ(fresh.stats().corrupt_removed, 1u) << variant;
    EXPECT_EQ(out.image, first.image);
  }
}

// A binary is tied to its compile inputs: another kernel's binary, with metadata that names the
// same target and entry point, is not served under this kernel's key.
TEST_F(BuilderReliability, AnotherKernelsBinaryUnderThisKeyIsNeverServed) {
  const fs::path root = dir_ / "root";
  const BuildOutcome mine = prime(root, sm80_);
  const KernelSource other = render_attention_forward({DType::f32, 64, true}, {.path = ForwardPath::simt, .block_m = 4, .block_n = 32, .stages = 1, .max_head_dim = 64});
  ASSERT_EQ(other.entry, source_.entry);
  KernelBuilder b(root, {});
  const BuildOutcome theirs = b.build(other, sm80_);
  ASSERT_NE(theirs.image, mine.image);
  auto e = b.cache().load(theirs.key);
  ASSERT_TRUE(e.has_value());
  ASSERT_TRUE(b.cache().remove(mine.key));
  ASSERT_TRUE(b.cache().publish(mine.key, *e));  // self-consistent file, another kernel's code
  KernelBuilder fresh(root, {});
  const BuildOutcome out = fresh.build(source_, sm80_);
  EXPECT_FALSE(out.from_cache);
  EXPECT_EQ(fresh.stats().corrupt_removed, 1u);
  EXPECT_EQ(out.image, mine.image);
}

// Metadata of the wrong JSON types (a hand-edited or foreign entry) is rebuilt, never fatal.
TEST_F(BuilderReliability, MetadataOfTheWrongTypesIsRebuiltNotFatal) {
  const fs::path root = dir_ / "root";
  const BuildOutcome first = prime(root, sm80_);
  KernelBuilder b(root, {});
  auto good = b.cache().load(first.key);
  ASSERT_TRUE(good.has_value());
  const std::vector<std::pair<std::string, nlohmann::json>> damage = {
      {"log", 5}, {"resources", "none"}, {"target", nullptr}, {"key_record", 1}};
  for (const auto& [field, value] : damage) {
    cache::CacheEntry bad = *good;
    bad.metadata[field] = value;
    ASSERT_NO_FATAL_FAILURE(replace_entry(b, first.key, bad));
    KernelBuilder fresh(root, {});
    BuildOutcome out;
    ASSERT_NO_THROW(out = fresh.build(source_, sm80_)) << field;
    EXPECT_FALSE(out.from_cache) << field;
    EXPECT_EQ(out.image, first.image) << field;
    EXPECT_TRUE(fresh.build(source_, sm80_).from_cache) << field << ": the rebuilt entry is served";
  }
  cache::CacheEntry bad = *good;
  bad.metadata["resources"]["registers"] = "many";
  ASSERT_NO_FATAL_FAILURE(replace_entry(b, first.key, bad));
  KernelBuilder fresh(root, {});
  EXPECT_FALSE(fresh.build(source_, sm80_).from_cache);
}

TEST_F(BuilderReliability, ACubinOfAnUnknownElfAbiIsNeverServed) {
  const fs::path root = dir_ / "root";
  const BuildOutcome first = prime(root, sm80_);
  KernelBuilder b(root, {});
  auto e = b.cache().load(first.key);
  ASSERT_TRUE(e.has_value());
  e->binary.at(8) = std::byte{0x2a};  // EI_ABIVERSION: no SM can be read from e_flags
  ASSERT_NO_FATAL_FAILURE(replace_entry(b, first.key, *e));
  KernelBuilder fresh(root, {});
  EXPECT_FALSE(fresh.build(source_, sm80_).from_cache);
  EXPECT_EQ(fresh.stats().corrupt_removed, 1u);
}

TEST_F(BuilderReliability, NoLockFileOutlivesItsBuild) {
  const fs::path root = dir_ / "root";
  prime(root, sm80_);
  prime(root, sm90a_);
  std::size_t locks = 0;
  for ([[maybe_unused]] const auto& f : fs::directory_iterator(root / "v1" / "locks")) ++locks;
  EXPECT_EQ(locks, 0u);
}

TEST_F(BuilderReliability, PrewarmedLayerIsReadFirstAndNeverWritten) {
  const fs::path image = dir_ / "image", root = dir_ / "root";
  const BuildOutcome warm = prime(image, sm80_);
  ::setenv("KGEN_CACHE_PATH", (dir_ / "missing").string().append(":").append(image.string()).c_str(), 1);
  KernelBuilder b(root);
  ::unsetenv("KGEN_CACHE_PATH");
  const auto layers = b.layers();
  ASSERT_EQ(layers.size(), 3u);
  EXPECT_EQ(layers[0].path, dir_ / "missing");
  EXPECT_FALSE(layers[0].exists);
  EXPECT_EQ(layers[1].path, image);
  EXPECT_EQ(layers[1].entries, 1u);
  EXPECT_EQ(layers[2].path, root);
  const BuildOutcome hit = b.build(source_, sm80_);
  EXPECT_TRUE(hit.from_cache);
  EXPECT_EQ(hit.image, warm.image);
  EXPECT_EQ(b.cache().root(), root);
  EXPECT_EQ(b.cache().entry_count(), 0u) << "a hit in a layer is not copied";
}

TEST_F(BuilderReliability, BadEntryInAFrontLayerFallsThroughToAGoodOneBehind) {
  const fs::path front = dir_ / "front", root = dir_ / "root";
  const BuildOutcome good = prime(root, sm80_);
  {
    KernelBuilder b(front, {});
    auto e = KernelBuilder(root, {}).cache().load(good.key);
    ASSERT_TRUE(e.has_value());
    e->metadata["target"] = "sm_86";
    ASSERT_TRUE(b.cache().publish(good.key, *e));
  }
  KernelBuilder b(root, {front});
  const BuildOutcome out = b.build(source_, sm80_);
  EXPECT_TRUE(out.from_cache);
  EXPECT_EQ(out.image, good.image);
  EXPECT_EQ(b.stats().corrupt_removed, 1u);
}

TEST_F(BuilderReliability, ReadOnlyRootIsNeverFatalAndLogsOnce) {
  std::ofstream(dir_ / "file") << "x";  // nothing can be created below a regular file, even as root
  KernelBuilder b(dir_ / "file" / "cache", {});
  EXPECT_TRUE(b.layers().at(0).writable == false);
  ::testing::internal::CaptureStderr();
  const BuildOutcome a = b.build(source_, sm80_);
  const BuildOutcome again = b.build(source_, sm80_);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_FALSE(a.from_cache);
  EXPECT_FALSE(again.from_cache);
  EXPECT_GT(a.image.size(), 0u);
  std::size_t lines = 0;
  for (std::size_t at = 0; (at = err.find("kgen [warn] cache:", at)) != std::string::npos; ++at) ++lines;
  EXPECT_EQ(lines, 1u) << err;
}

TEST_F(BuilderReliability, CorruptEntryIsLoggedAsAWarningThroughKgensLog) {
  const fs::path root = dir_ / "root";
  const BuildOutcome first = prime(root, sm80_);
  fs::resize_file(KernelBuilder(root, {}).cache().entry_path(first.key), 100);
  ::testing::internal::CaptureStderr();
  KernelBuilder(root, {}).build(source_, sm80_);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("kgen [warn] cache: corrupt entry"), std::string::npos) << err;
}

TEST_F(BuilderReliability, SizeCapFromTheEnvironment) {
  ::setenv("KGEN_CACHE_MAX_BYTES", "123456", 1);
  KernelBuilder b(dir_ / "root", {});
  EXPECT_EQ(b.layered().max_bytes(), 123456u);
  ::setenv("KGEN_CACHE_MAX_BYTES", "lots", 1);
  KernelBuilder c(dir_ / "root", {});
  EXPECT_EQ(c.layered().max_bytes(), 0u) << "not a number: no cap (and a warning)";
  ::setenv("KGEN_CACHE_MAX_BYTES", "1G", 1);  // the same parser as `kgen cache gc` (gc read this as 1 byte)
  KernelBuilder g(dir_ / "root", {});
  EXPECT_EQ(g.layered().max_bytes(), std::uint64_t{1} << 30);
  ::setenv("KGEN_CACHE_MAX_BYTES", "1", 1);
  KernelBuilder tiny(dir_ / "root", {});
  const BuildOutcome out = tiny.build(source_, sm80_);  // publish, then evicted by the cap
  EXPECT_GT(out.image.size(), 0u);
  EXPECT_EQ(tiny.layered().cap_evictions(), 1u);
  EXPECT_EQ(tiny.cache().total_bytes(), 0u);
  ::unsetenv("KGEN_CACHE_MAX_BYTES");
}

TEST(CachePath, ParsesColonSeparatedLayers) {
  EXPECT_EQ(parse_cache_path(""), std::vector<fs::path>{});
  EXPECT_EQ(parse_cache_path("/a"), std::vector<fs::path>{"/a"});
  EXPECT_EQ(parse_cache_path("/a::/b:"), (std::vector<fs::path>{"/a", "/b"}));
}

}  // namespace
}  // namespace kgen
