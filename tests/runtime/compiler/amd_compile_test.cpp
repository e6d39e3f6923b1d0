// Deviceless AMD compiles: every AMD variant is in the AMD replay table (built by clang-22 for
// gfx90a, gfx942 and gfx950), without scratch; the compiler choice, its refusals, the builder's launch-bounds check, and the cache's
// wrong-target guard for AMD code objects.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string_view>

#include "compiler/amd_code_object.h"
#include "compiler/amd_compilers.h"
#include "generator/embedded_templates.h"
#include "generator/registry.h"
#include "jit/replay.h"
#include "jit/warm.h"

namespace kgen {
namespace {

std::filesystem::path test_cache() { return std::filesystem::path(KGEN_TEST_CACHE_DIR); }

bool have_clang() { return amd_clang_description().find("unavailable") == std::string::npos; }
bool have_hiprtc() { return hiprtc_description().find("unavailable") == std::string::npos; }

KernelSource small_kernel() {
  return {"test", "amd_small", "#include \"kgen_device/core/warp.cuh\"\n"
          "extern \"C\" __global__ void __launch_bounds__(64) k(float* x) { x[threadIdx.x] = kgen::warp32_sum(x[threadIdx.x]); }\n",
          "k", 64, 0};
}

// Every AMD variant `kgen warm` builds is a row of the AMD replay table (tests/replay/amd.tsv,
// which the replay.amd test checks against real compiles of every kernel whose inputs changed):
// no scratch, no VGPR spills, shared memory within the target's limit. The kernel builder itself
// refuses a code object not built for wave64 and the launched block size.
TEST(AmdCompile, EveryVariantIsInTheAmdReplayTableWithoutScratch) {
  std::ifstream in(KGEN_AMD_REPLAY_TABLE);
  std::stringstream text;
  text << in.rdbuf();
  std::map<std::pair<std::string, std::string>, ReplayRow> table;
  for (auto& row : parse_replay_table(text.str(), KGEN_AMD_REPLAY_TABLE)) {
    auto key = std::make_pair(row.target, row.variant);
    table.emplace(std::move(key), std::move(row));
  }
  const auto items = warm_items({}, {"gfx90a", "gfx942", "gfx950"});
  ASSERT_GT(items.size(), 100u);
  for (const WarmItem& item : items) {
    const std::string where = item.source.variant + " " + item.target.arch;
    auto it = table.find({item.target.arch, item.source.variant});
    if (it == table.end()) {
      ADD_FAILURE() << where << " is not in the AMD replay table (`kgen replay --arch gfx90a,gfx942,gfx950 --write "
                    << KGEN_AMD_REPLAY_TABLE << "`)";
      continue;
    }
    const ReplayRow& row = it->second;
    EXPECT_EQ(row.stack_bytes, 0) << where << ": scratch";
    EXPECT_EQ(row.spill_bytes, 0) << where << ": VGPR spills";
    EXPECT_EQ(row.threads, item.source.threads) << where;
    EXPECT_LE(row.static_smem + row.dynamic_smem, item.target.max_smem_per_block) << where;
  }
}

// The builder's own check: a code object built for another block size than the launch's is not
// served (or stored).
TEST(AmdCompile, ACodeObjectForAnotherBlockSizeIsRefused) {
  if (!have_clang()) GTEST_SKIP() << amd_clang_description();
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("kgen-amd-bounds-" + std::to_string(::getpid()));
  KernelBuilder builder(dir, {});
  KernelSource wrong = small_kernel();
  wrong.threads = 128;  // __launch_bounds__(64)
  try {
    builder.build(wrong, *parse_target("gfx942"));
    ADD_FAILURE() << "a code object for 64-thread blocks was accepted for a 128-thread launch";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::compile_error);
    EXPECT_NE(std::string(e.what()).find("blocks of 64 threads"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(builder.build(small_kernel(), *parse_target("gfx942")));
  fs::remove_all(dir);
}

// Another local user may create the shared path earlier versions wrote the templates to, with
// headers of their own: clang must never include them (issue: planted device code).
TEST(AmdCompile, APlantedTemplateTreeInTheTempDirectoryIsNeverIncluded) {
  if (!have_clang()) GTEST_SKIP() << amd_clang_description();
  namespace fs = std::filesystem;
  const fs::path tmp = fs::temp_directory_path() / ("kgen-planted-" + std::to_string(::getpid()));
  fs::remove_all(tmp);
  const fs::path planted = tmp / ("kgen-templates-" + std::string(generator::templates_digest()).substr(0, 16));
  fs::create_directories(planted / "kgen_device" / "core");
  std::ofstream(planted / ".complete") << "";
  std::ofstream(planted / "kgen_device" / "core" / "warp.cuh") << "#error planted header included\n";
  const char* saved = std::getenv("TMPDIR");
  const std::string saved_value = saved ? saved : "";
  ::setenv("TMPDIR", tmp.c_str(), 1);
  const Target gfx942 = *parse_target("gfx942");
  EXPECT_NO_THROW(amd_clang_compiler().compile(small_kernel(), gfx942));
  saved ? ::setenv("TMPDIR", saved_value.c_str(), 1) : ::unsetenv("TMPDIR");
  // The compile's own tree is private (mkdtemp). It is made once per process, so it is here only
  // when no earlier test of this process compiled with clang (ctest runs each test alone).
  std::size_t trees = 0;
  for (const auto& e : fs::directory_iterator(tmp))
    if (e.path().filename().string().starts_with("kgen-templates-") && e.path() != planted) {
      ++trees;
      EXPECT_EQ(fs::status(e.path()).permissions() & (fs::perms::group_all | fs::perms::others_all), fs::perms::none);
    }
  EXPECT_LE(trees, 1u);
  fs::remove_all(tmp);
}

TEST(AmdCompile, ReportsCompilerErrorsWithTheLogFromBothBackends) {
  const Target gfx90a = *parse_target("gfx90a");
  KernelSource bad{"test", "broken", "extern \"C\" __global__ void k() { this_is_not_hip; }", "k", 64, 0};
  for (const Compiler* c : {&hiprtc_compiler(), &amd_clang_compiler()}) {
    if (c == &hiprtc_compiler() ? !have_hiprtc() : !have_clang()) continue;
    try {
      c->compile(bad, gfx90a);
      FAIL() << "expected a compile error from " << c->version();
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), Status::compile_error);
      EXPECT_NE(std::string(e.what()).find("this_is_not_hip"), std::string::npos) << e.what();
    }
  }
}

TEST(AmdCompile, BothBackendsReadResourcesFromTheCodeObject) {
  for (const Compiler* c : {&hiprtc_compiler(), &amd_clang_compiler()}) {
    if (c == &hiprtc_compiler() ? !have_hiprtc() : !have_clang()) continue;
    for (const char* arch : {"gfx90a", "gfx90a:xnack+"}) {
      const Target target = *parse_target(arch);
      const CompiledBinary b = c->compile(small_kernel(), target);
      const AmdCodeObject co =
          read_amd_code_object(std::span(reinterpret_cast<const std::uint8_t*>(b.image.data()), b.image.size()));
      EXPECT_EQ(co.target.id(), target.arch) << c->version();
      EXPECT_TRUE(b.resources.parsed);
      EXPECT_GT(b.resources.registers, 0);
      EXPECT_EQ(b.resources.max_threads, 64);
      EXPECT_EQ(b.resources.wave_size, 64);
    }
  }
}

// The selection rule on every combination of what was found: clang wherever it is found, hiprtc
// only without clang and where it allows the target, KGEN_AMD_COMPILER over both.
TEST(AmdCompile, ClangIsChosenWhereverItIsFoundAndHiprtcOnlyWithoutIt) {
  constexpr std::string_view none, missing = "not found";
  EXPECT_EQ(choose_amd_backend("", none, none), AmdBackend::clang);
  EXPECT_EQ(choose_amd_backend("", none, missing), AmdBackend::clang);
  EXPECT_EQ(choose_amd_backend("", missing, none), AmdBackend::hiprtc);
  // Neither: clang, whose compile names what to install.
  EXPECT_EQ(choose_amd_backend("", missing, missing), AmdBackend::clang);
  for (std::string_view clang_why : {none, missing})
    for (std::string_view hiprtc_why : {none, missing}) {
      EXPECT_EQ(choose_amd_backend("hiprtc", clang_why, hiprtc_why), AmdBackend::hiprtc);
      EXPECT_EQ(choose_amd_backend("clang", clang_why, hiprtc_why), AmdBackend::clang);
    }
  for (std::string_view bad : {"nvrtc", "Clang", "hiprtc "}) {
    try {
      choose_amd_backend(bad, none, none);
      ADD_FAILURE() << "KGEN_AMD_COMPILER='" << bad << "' was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), Status::invalid_argument);
      EXPECT_NE(std::string(e.what()).find("KGEN_AMD_COMPILER"), std::string::npos) << e.what();
    }
  }
}

// On this machine: clang for every AMD target where it is found (gfx90a too, where ROCm 5.2's
// hiprtc is also installed); the setting forces hiprtc, which refuses a target off its allow-list
// with a sentence that names the setting, and rejects a value it does not know.
TEST(AmdCompile, TheDefaultBackendIsClangAndTheSettingForcesEither) {
  if (!have_clang()) GTEST_SKIP() << amd_clang_description();
  ::unsetenv("KGEN_AMD_COMPILER");
  for (const char* arch : {"gfx90a", "gfx90a:xnack+", "gfx942", "gfx950"})
    EXPECT_EQ(amd_compiler_for(*parse_target(arch)).version(), amd_clang_compiler().version()) << arch;
  EXPECT_EQ(amd_clang_refusal(), "");
  ::setenv("KGEN_AMD_COMPILER", "hiprtc", 1);
  const Target gfx942 = *parse_target("gfx942");
  EXPECT_EQ(&amd_compiler_for(gfx942), &hiprtc_compiler());
  if (have_hiprtc()) {
    EXPECT_EQ(&amd_compiler_for(*parse_target("gfx90a")), &hiprtc_compiler());
    try {
      hiprtc_compiler().compile(small_kernel(), gfx942);
      ADD_FAILURE() << hiprtc_description() << " compiled for gfx942";
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), Status::compile_error);
      EXPECT_NE(std::string(e.what()).find("KGEN_AMD_COMPILER=clang"), std::string::npos) << e.what();
    }
  }
  ::setenv("KGEN_AMD_COMPILER", "rocm", 1);
  EXPECT_THROW(amd_compiler_for(gfx942), Error);
  ::unsetenv("KGEN_AMD_COMPILER");
}

TEST(AmdCompile, CacheKeysNeverShareAcrossTargetsOrVendors) {
  if (!have_clang()) GTEST_SKIP() << amd_clang_description();
  KernelBuilder builder(test_cache());
  const KernelSource src = small_kernel();
  std::vector<std::string> keys;
  for (const char* arch : {"gfx90a", "gfx90a:xnack+", "gfx942", "gfx942:sramecc+:xnack-", "gfx950", "sm_80", "sm_86",
                           "sm_89", "sm_90", "sm_90a"})
    keys.push_back(builder.cache_key(src, *parse_target(arch)));
  for (std::size_t i = 0; i < keys.size(); ++i)
    for (std::size_t j = i + 1; j < keys.size(); ++j) EXPECT_NE(keys[i], keys[j]) << i << " " << j;
  // The backend is part of the record: forcing the other compiler gives another key.
  const Target gfx90a = *parse_target("gfx90a");
  const std::string clang_key = builder.cache_key(src, gfx90a);
  EXPECT_NE(builder.key_record(src, gfx90a).find("clang"), std::string::npos);
  if (have_hiprtc()) {
    ::setenv("KGEN_AMD_COMPILER", "hiprtc", 1);
    EXPECT_NE(builder.key_record(src, gfx90a).find("hiprtc"), std::string::npos);
    EXPECT_NE(builder.cache_key(src, gfx90a), clang_key);
    ::unsetenv("KGEN_AMD_COMPILER");
  }
}

TEST(AmdCompile, CacheRejectsACodeObjectForAnotherTargetAndRebuilds) {
  if (!have_clang()) GTEST_SKIP() << amd_clang_description();
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("kgen-amd-guard-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  ::setenv("KGEN_AMD_COMPILER", "clang", 1);
  KernelBuilder builder(dir);
  const KernelSource src = small_kernel();
  const Target gfx942 = *parse_target("gfx942"), gfx950 = *parse_target("gfx950");
  // The gfx950 code object under gfx942's key, with metadata that claims gfx942: only the ELF
  // header tells.
  const BuildOutcome other = builder.build(src, gfx950);
  cache::CacheEntry planted = *builder.cache().load(other.key);
  planted.metadata["target"] = "gfx942";
  ASSERT_TRUE(builder.cache().publish(builder.cache_key(src, gfx942), planted));
  KernelBuilder fresh(dir);
  const BuildOutcome rebuilt = fresh.build(src, gfx942);
  EXPECT_FALSE(rebuilt.from_cache) << "a gfx950 code object was served for gfx942";
  EXPECT_EQ(fresh.stats().corrupt_removed, 1u);
  const AmdCodeObject co = read_amd_code_object(
      std::span(reinterpret_cast<const std::uint8_t*>(rebuilt.image.data()), rebuilt.image.size()));
  EXPECT_EQ(co.target.id(), "gfx942");
  ::unsetenv("KGEN_AMD_COMPILER");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kgen
