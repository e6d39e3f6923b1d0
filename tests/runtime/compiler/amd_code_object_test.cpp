// The AMD code-object reader on real compiler output (tests/fixtures/amd, built by clang-22 for
// gfx942, gfx90a:xnack+ and gfx950) and on damaged input, which must give an error, never a
// crash or a read past the end.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "compiler/amd_code_object.h"
#include "kgen/types.hpp"

namespace kgen {
namespace {

std::vector<std::uint8_t> fixture(const char* name) {
  std::ifstream in(std::filesystem::path(KGEN_FIXTURE_DIR) / "amd" / name, std::ios::binary);
  EXPECT_TRUE(in) << name;
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string error_of(const std::vector<std::uint8_t>& bytes) {
  try {
    read_amd_code_object(bytes);
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::compile_error);
    return e.what();
  }
  return "";
}

TEST(AmdCodeObject, ReadsTheTargetAndTheKernelResources) {
  const AmdCodeObject co = read_amd_code_object(fixture("gfx942.co"));
  EXPECT_EQ(co.target.processor, "gfx942");
  EXPECT_EQ(co.target.xnack, AmdTarget::Feature::any);
  EXPECT_EQ(co.target.sramecc, AmdTarget::Feature::any);
  EXPECT_EQ(co.target.id(), "gfx942");
  ASSERT_EQ(co.kernels.size(), 1u);
  const AmdKernelResources& k = co.kernels[0];
  EXPECT_EQ(k.name, "kgen_fixture_scale");
  EXPECT_EQ(k.vgpr_count, 6);
  EXPECT_EQ(k.agpr_count, 0);
  EXPECT_EQ(k.sgpr_count, 16);
  EXPECT_EQ(k.lds_bytes, 512);  // 128 floats of LDS
  EXPECT_EQ(k.scratch_bytes, 0);
  EXPECT_EQ(k.vgpr_spill_count, 0);
  EXPECT_EQ(k.sgpr_spill_count, 0);
  EXPECT_EQ(k.wavefront_size, 64);
  EXPECT_EQ(k.max_flat_workgroup_size, 128);
}

TEST(AmdCodeObject, FeatureSuffixesAreCarriedExactly) {
  const AmdCodeObject mi200 = read_amd_code_object(fixture("gfx90a_xnack_on.co"));
  EXPECT_EQ(mi200.target.processor, "gfx90a");
  EXPECT_EQ(mi200.target.xnack, AmdTarget::Feature::on);
  EXPECT_EQ(mi200.target.id(), "gfx90a:xnack+");
  const AmdCodeObject mi355 = read_amd_code_object(fixture("gfx950.co"));
  EXPECT_EQ(mi355.target.id(), "gfx950");
  ASSERT_EQ(mi355.kernels.size(), 1u);
  EXPECT_EQ(mi355.kernels[0].wavefront_size, 64);
  AmdTarget t{"gfx942", AmdTarget::Feature::off, AmdTarget::Feature::on};
  EXPECT_EQ(t.id(), "gfx942:sramecc+:xnack-");
}

TEST(AmdCodeObject, ProcessorTableHasTheCdnaTargets) {
  EXPECT_EQ(amdgpu_processor_name(0x3f), "gfx90a");
  EXPECT_EQ(amdgpu_processor_name(0x4c), "gfx942");
  EXPECT_EQ(amdgpu_processor_name(0x4f), "gfx950");
  EXPECT_EQ(amdgpu_processor_name(0x41), "gfx1100");
  EXPECT_FALSE(amdgpu_processor_name(0x01));
}

TEST(AmdCodeObject, RefusesWhatIsNotAnAmdCodeObjectWithOneSentence) {
  std::vector<std::uint8_t> bytes = fixture("gfx942.co");
  EXPECT_NE(error_of({bytes.begin(), bytes.begin() + 40}).find("not an ELF"), std::string::npos);
  auto cubin = bytes;
  cubin[18] = 190, cubin[19] = 0;  // EM_CUDA
  EXPECT_NE(error_of(cubin).find("190, not AMDGPU (224)"), std::string::npos) << error_of(cubin);
  auto unknown = bytes;
  unknown[48] = 0x01;
  EXPECT_NE(error_of(unknown).find("does not know its processor (e_flags mach 0x01)"), std::string::npos)
      << error_of(unknown);
  auto bad_magic = bytes;
  bad_magic[1] = 'X';
  EXPECT_NE(error_of(bad_magic).find("not an ELF"), std::string::npos);
}

TEST(AmdCodeObject, DamagedBytesGiveAnErrorNeverACrash) {
  // Every truncation and every single-byte change: the reader either parses or throws Error
  // (ASan in CI catches any read past the end).
  const std::vector<std::uint8_t> good = fixture("gfx942.co");
  int errors = 0;
  for (std::size_t n = 0; n < good.size(); n += 7) {
    if (!error_of({good.begin(), good.begin() + static_cast<long>(n)}).empty()) ++errors;
  }
  EXPECT_GT(errors, 0);
  for (std::size_t i = 0; i < good.size(); ++i) {
    auto bad = good;
    bad[i] ^= 0xff;
    try {
      read_amd_code_object(bad);
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), Status::compile_error) << i;
    }
  }
}

}  // namespace
}  // namespace kgen
