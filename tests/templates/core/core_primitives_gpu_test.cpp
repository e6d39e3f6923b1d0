// The device core's primitives on the GPU, each against a host model: every lane's result of the
// warp shuffles, votes and reductions; the hardware approximations within the error bounds their
// headers state; round-to-nearest-even 16-bit conversions and pair packing; atomic adds; ldmatrix
// fragments, plain and transposed; and the 16-byte swizzle's row permutation and bank spread. One translation unit of small kernels is
// compiled for the device's target through the kernel builder (a scratch cache).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <random>
#include <set>
#include <vector>

#include "driver/device.h"
#include "driver/gpu_driver.h"
#include "jit/kernel_builder.h"
#include "tests/gpu/require_gpu.h"

namespace kgen {
namespace {

constexpr const char* kSource = R"(
#include "kgen_device/core/atomic.cuh"
#include "kgen_device/core/ldmatrix.cuh"
#include "kgen_device/core/memory.cuh"
#include "kgen_device/core/math.cuh"
#include "kgen_device/core/swizzle.cuh"
#include "kgen_device/core/types.cuh"
#include "kgen_device/core/warp.cuh"

// Eight results per thread: shfl_xor32, shfl32, quad_sum, quad_max, warp32_sum, warp32_max, all32
// and the int shfl32.
extern "C" __global__ void core_warp(const float* x, float* out) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x, lane = threadIdx.x & 31;
  const float v = x[i];
  float* o = out + 8 * i;
  o[0] = kgen::shfl_xor32(v, 5);
  o[1] = kgen::shfl32(v, (lane * 7) & 31);
  o[2] = kgen::quad_sum(v);
  o[3] = kgen::quad_max(v);
  o[4] = kgen::warp32_sum(v);
  o[5] = kgen::warp32_max(v);
  o[6] = kgen::all32(v > -0.5f) ? 1.f : 0.f;
  o[7] = static_cast<float>(kgen::shfl32(lane * 3, 31 - lane));
}

// Five results per input: exp2, log2, sin, cos and rcp approximations.
extern "C" __global__ void core_math(const float* x, float* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float v = x[i];
  out[5 * i + 0] = kgen::exp2_approx(v);
  out[5 * i + 1] = kgen::log2_approx(v);
  out[5 * i + 2] = kgen::sin_approx(v);
  out[5 * i + 3] = kgen::cos_approx(v);
  out[5 * i + 4] = kgen::rcp_approx(v);
}

// Per input: the fp16 and bf16 bits of from_float, to_float of each, and pack2 of (x[i], x[i+1])
// for both types with unpack2's round trip.
extern "C" __global__ void core_convert(const float* x, unsigned* bits, float* back, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float v = x[i], w = x[(i + 1) % n];
  const kgen::half_t h = kgen::from_float<kgen::half_t>(v);
  const kgen::bfloat16_t b = kgen::from_float<kgen::bfloat16_t>(v);
  bits[4 * i + 0] = h.bits;
  bits[4 * i + 1] = b.bits;
  bits[4 * i + 2] = kgen::pack2<kgen::half_t>(v, w);
  bits[4 * i + 3] = kgen::pack2<kgen::bfloat16_t>(v, w);
  back[4 * i + 0] = kgen::to_float(h);
  back[4 * i + 1] = kgen::to_float(b);
  kgen::unpack2<kgen::bfloat16_t>(bits[4 * i + 3], back[4 * i + 2], back[4 * i + 3]);
}

// Every thread adds 1 to acc[i % slots] with red_add and (1, 2) to pair (i % slots) with red_add2.
extern "C" __global__ void core_atomic(float* acc, float* pairs, int slots) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  kgen::red_add(acc + i % slots, 1.f);
  kgen::red_add2(pairs + 2 * (i % slots), 1.f, 2.f);
}

// One warp: four 8x8 matrices of 16-bit values m·64 + row·8 + column in shared memory; per lane,
// the registers of ldmatrix x4, x4.trans, x2 and x2.trans (12 words).
extern "C" __global__ void core_ldmatrix(unsigned* out) {
  __shared__ __align__(16) unsigned short tiles[4 * 64];
  const int lane = threadIdx.x;
  for (int i = lane; i < 4 * 64; i += 32) tiles[i] = static_cast<unsigned short>(i);
  __syncwarp();
  const unsigned addr = kgen::smem_u32(&tiles[(lane / 8) * 64 + (lane % 8) * 8]);
  unsigned r4[4], t4[4], r2[2], t2[2];
  kgen::ldmatrix_x4(r4, addr);
  kgen::ldmatrix_x4_trans(t4, addr);
  kgen::ldmatrix_x2(r2, addr);
  kgen::ldmatrix_x2_trans(t2, addr);
  unsigned* o = out + 12 * lane;
  for (int j = 0; j < 4; ++j) o[j] = r4[j], o[4 + j] = t4[j];
  for (int j = 0; j < 2; ++j) o[8 + j] = r2[j], o[10 + j] = t2[j];
}

// The swizzle's byte offset of (row, chunk) for rows 0..63 and every chunk of 8- and 4-chunk rows.
extern "C" __global__ void core_swizzle(int* off8, int* off4) {
  const int row = threadIdx.x;
  for (int c = 0; c < 8; ++c) off8[row * 8 + c] = kgen::Swizzle16B<8>::offset(row, c);
  for (int c = 0; c < 4; ++c) off4[row * 4 + c] = kgen::Swizzle16B<4>::offset(row, c);
}
)";

// Device buffers freed at scope exit.
struct Buffer {
  DevicePtr ptr = 0;
  std::size_t bytes = 0;
  explicit Buffer(std::size_t n) : ptr(gpu_driver().alloc(n, "core test buffer")), bytes(n) {}
  ~Buffer() { gpu_driver().free(ptr); }
  template <class T>
  void put(const std::vector<T>& v) { gpu_driver().copy_to_device(ptr, v.data(), v.size() * sizeof(T)); }
  template <class T>
  std::vector<T> get(std::size_t n) const {
    std::vector<T> v(n);
    gpu_driver().copy_to_host(v.data(), ptr, n * sizeof(T));
    return v;
  }
};

class CorePrimitives : public ::testing::Test {
 protected:
  void SetUp() override {
    KGEN_REQUIRE_GPU();
    use_primary_context(0);
    static const std::vector<std::byte> image = [] {
      const std::filesystem::path cache = std::filesystem::temp_directory_path() / ("kgen-core-test-" + std::to_string(::getpid()));
      KernelBuilder builder(cache, {});
      KernelSource source{"core_test", "core_primitives", kSource, "core_warp", 256, 0};
      auto image = builder.build(source, device_info(0).target).image;
      std::filesystem::remove_all(cache);
      return image;
    }();
    image_ = &image;
  }
  // Launches `entry` over `blocks` blocks of `threads` with `args` (pointers to each parameter).
  void launch(const char* entry, unsigned blocks, int threads, std::vector<void*> args) {
    const GpuFunction f = gpu_driver().load_function(*image_, entry, 0);
    gpu_driver().launch(f, blocks, 1, 1, threads, 0, nullptr, args.data(), entry);
    gpu_driver().synchronize_device(entry);
  }
  const std::vector<std::byte>* image_ = nullptr;
};

// Without a GPU too: the test kernels compile for every NVIDIA target kgen serves.
TEST(CorePrimitivesCompile, TheTestKernelsCompileForSm80AndSm90a) {
  const std::filesystem::path cache = std::filesystem::temp_directory_path() / ("kgen-core-compile-" + std::to_string(::getpid()));
  KernelBuilder builder(cache, {});
  for (const char* arch : {"sm_80", "sm_90a"}) {
    const BuildOutcome b = builder.build({"core_test", "core_primitives", kSource, "core_warp", 256, 0}, *parse_target(arch));
    EXPECT_FALSE(b.image.empty()) << arch;
    EXPECT_EQ(b.resources.spill_stores, 0) << arch;
  }
  std::filesystem::remove_all(cache);
}

TEST_F(CorePrimitives, WarpShufflesVotesAndReductionsGiveEveryLaneItsModelsValue) {
  constexpr int kWarps = 8, kThreads = 32 * kWarps;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-4.f, 4.f);
  std::vector<float> x(kThreads);
  for (float& v : x) v = std::round(dist(rng) * 64.f) / 64.f;  // sums stay exact in fp32
  for (int lane = 0; lane < 32; ++lane) x[32 * 3 + lane] = std::fabs(x[32 * 3 + lane]);  // warp 3: all32 true
  Buffer in(kThreads * 4), out(kThreads * 8 * 4);
  in.put(x);
  launch("core_warp", 1, kThreads, {&in.ptr, &out.ptr});
  const auto o = out.get<float>(kThreads * 8);
  for (int w = 0; w < kWarps; ++w) {
    const float* v = &x[32 * w];
    float sum = 0, max = -INFINITY;
    bool all = true;
    for (int l = 0; l < 32; ++l) sum += v[l], max = std::max(max, v[l]), all = all && v[l] > -0.5f;
    for (int l = 0; l < 32; ++l) {
      const float* r = &o[8 * (32 * w + l)];
      const int q = l & ~3;
      SCOPED_TRACE("warp " + std::to_string(w) + " lane " + std::to_string(l));
      EXPECT_EQ(r[0], v[l ^ 5]);
      EXPECT_EQ(r[1], v[(l * 7) & 31]);
      EXPECT_EQ(r[2], (v[q] + v[q + 1]) + (v[q + 2] + v[q + 3]));
      EXPECT_EQ(r[3], std::max(std::max(v[q], v[q + 1]), std::max(v[q + 2], v[q + 3])));
      EXPECT_EQ(r[4], sum);
      EXPECT_EQ(r[5], max);
      EXPECT_EQ(r[6], all ? 1.f : 0.f);
      EXPECT_EQ(r[7], static_cast<float>((31 - l) * 3));
    }
  }
  EXPECT_EQ(o[8 * 32 * 3 + 6], 1.f) << "warp 3 has only non-negative values";
}

TEST_F(CorePrimitives, ApproximationsStayWithinTheirStatedErrorBounds) {
  std::vector<float> x;
  for (int i = -126 * 16; i <= 127 * 16; ++i) x.push_back(i / 16.f + 0.01f);  // exp2's normal range
  for (int i = 1; i <= 4000; ++i) x.push_back(static_cast<float>(M_PI) * (i - 2000) / 2000.f);  // [−π, π]
  for (int e = -100; e <= 100; ++e) x.push_back(std::ldexp(1.37f, e));  // log2 and rcp over many octaves
  const int n = static_cast<int>(x.size());
  Buffer in(n * 4), out(n * 5 * 4);
  in.put(x);
  launch("core_math", (n + 255) / 256, 256, {&in.ptr, &out.ptr, const_cast<int*>(&n)});
  const auto o = out.get<float>(n * 5);
  double worst_exp = 0, worst_log = 0, worst_trig = 0, worst_rcp = 0;
  for (int i = 0; i < n; ++i) {
    const double v = x[i];
    const float* r = &o[5 * i];
    if (v > -126 && v < 127) worst_exp = std::max(worst_exp, std::fabs(r[0] - std::exp2(v)) / std::exp2(v));
    if (v > 0) worst_log = std::max(worst_log, std::fabs(r[1] - std::log2(v)) / std::max(1.0, std::fabs(std::log2(v))));
    if (std::fabs(v) <= M_PI) {
      worst_trig = std::max(worst_trig, std::fabs(r[2] - std::sin(v)));
      worst_trig = std::max(worst_trig, std::fabs(r[3] - std::cos(v)));
    }
    if (v != 0 && std::fabs(v) < 1e30) worst_rcp = std::max(worst_rcp, std::fabs(r[4] - 1 / v) * std::fabs(v));
  }
  EXPECT_LE(worst_exp, std::ldexp(1.0, -21)) << "exp2_approx: relative error ~2^-22";
  EXPECT_LE(worst_log, std::ldexp(1.0, -21)) << "log2_approx: error ~2^-22 (relative above |log2 x| = 1)";
  EXPECT_LE(worst_trig, std::ldexp(1.0, -20)) << "sin/cos_approx: absolute error 2^-20.5 on [-pi, pi]";
  EXPECT_LE(worst_rcp, std::ldexp(1.0, -22)) << "rcp_approx: 1 ulp";
  // The edges the headers promise: 2^-inf = +0, log2(0) = -inf.
  const std::vector<float> edges = {-INFINITY, 0.f};
  Buffer e_in(8), e_out(2 * 5 * 4);
  e_in.put(edges);
  const int two = 2;
  launch("core_math", 1, 32, {&e_in.ptr, &e_out.ptr, const_cast<int*>(&two)});
  const auto eo = e_out.get<float>(10);
  EXPECT_EQ(eo[0], 0.f);
  EXPECT_FALSE(std::signbit(eo[0]));
  EXPECT_EQ(eo[5 + 1], -INFINITY);
}

// Round to nearest even of fp32 to bf16's bits; NaN is 0x7fff.
std::uint32_t bf16_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  if (std::isnan(f)) return 0x7fff;
  return (u + 0x7fff + ((u >> 16) & 1)) >> 16;
}
std::uint32_t f16_bits(float f) {
  const _Float16 h = static_cast<_Float16>(f);  // round to nearest even
  std::uint16_t b;
  std::memcpy(&b, &h, 2);
  return b;
}
float from_bf16(std::uint32_t b) {
  const std::uint32_t u = b << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

TEST_F(CorePrimitives, SixteenBitConversionsRoundToNearestEvenAndPackLowFirst) {
  std::vector<float> x = {0.f, -0.f, 1.f, -2.5f, 65504.f, 1e-8f, 3.14159265f, 1.00390625f, 1.01171875f, 0.1f, -1e4f};
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> dist(-1000.f, 1000.f);
  for (int i = 0; i < 1000; ++i) x.push_back(dist(rng));
  const int n = static_cast<int>(x.size());
  Buffer in(n * 4), bits(n * 4 * 4), back(n * 4 * 4);
  in.put(x);
  launch("core_convert", (n + 127) / 128, 128, {&in.ptr, &bits.ptr, &back.ptr, const_cast<int*>(&n)});
  const auto b = bits.get<std::uint32_t>(n * 4);
  const auto f = back.get<float>(n * 4);
  for (int i = 0; i < n; ++i) {
    SCOPED_TRACE("x = " + std::to_string(x[i]));
    const float next = x[(i + 1) % n];
    EXPECT_EQ(b[4 * i + 0], f16_bits(x[i]));
    EXPECT_EQ(b[4 * i + 1], bf16_bits(x[i]));
    EXPECT_EQ(b[4 * i + 2], f16_bits(x[i]) | f16_bits(next) << 16);
    EXPECT_EQ(b[4 * i + 3], bf16_bits(x[i]) | bf16_bits(next) << 16);
    EXPECT_EQ(f[4 * i + 0], static_cast<float>(static_cast<_Float16>(x[i])));
    EXPECT_EQ(f[4 * i + 1], from_bf16(bf16_bits(x[i])));
    EXPECT_EQ(f[4 * i + 2], from_bf16(bf16_bits(x[i])));
    EXPECT_EQ(f[4 * i + 3], from_bf16(bf16_bits(next)));
  }
}

TEST_F(CorePrimitives, AtomicAddsLoseNoUpdate) {
  constexpr int kBlocks = 64, kThreads = 256, kSlots = 37;
  Buffer acc(kSlots * 4), pairs(kSlots * 8);
  gpu_driver().fill32(acc.ptr, 0, kSlots);
  gpu_driver().fill32(pairs.ptr, 0, 2 * kSlots);
  const int slots = kSlots;
  launch("core_atomic", kBlocks, kThreads, {&acc.ptr, &pairs.ptr, const_cast<int*>(&slots)});
  const auto a = acc.get<float>(kSlots);
  const auto p = pairs.get<float>(2 * kSlots);
  for (int s = 0; s < kSlots; ++s) {
    int hits = 0;
    for (int i = 0; i < kBlocks * kThreads; ++i) hits += i % kSlots == s;
    EXPECT_EQ(a[s], static_cast<float>(hits)) << "slot " << s;
    EXPECT_EQ(p[2 * s], static_cast<float>(hits)) << "pair " << s;
    EXPECT_EQ(p[2 * s + 1], static_cast<float>(2 * hits)) << "pair " << s;
  }
}

// ldmatrix: register j of lane l holds row l / 4, columns 2(l % 4) and +1 of matrix j (low half
// first); .trans holds column l / 4, rows 2(l % 4) and +1.
TEST_F(CorePrimitives, LdmatrixGivesEachLaneItsFragmentPlainAndTransposed) {
  Buffer out(32 * 12 * 4);
  launch("core_ldmatrix", 1, 32, {&out.ptr});
  const auto o = out.get<std::uint32_t>(32 * 12);
  const auto value = [](int m, int row, int col) { return static_cast<std::uint32_t>(m * 64 + row * 8 + col); };
  for (int l = 0; l < 32; ++l) {
    SCOPED_TRACE("lane " + std::to_string(l));
    const int r = l / 4, c = 2 * (l % 4);
    for (int j = 0; j < 4; ++j) {
      EXPECT_EQ(o[12 * l + j], value(j, r, c) | value(j, r, c + 1) << 16) << "x4, matrix " << j;
      EXPECT_EQ(o[12 * l + 4 + j], value(j, c, r) | value(j, c + 1, r) << 16) << "x4.trans, matrix " << j;
    }
    for (int j = 0; j < 2; ++j) {
      EXPECT_EQ(o[12 * l + 8 + j], value(j, r, c) | value(j, r, c + 1) << 16) << "x2, matrix " << j;
      EXPECT_EQ(o[12 * l + 10 + j], value(j, c, r) | value(j, c + 1, r) << 16) << "x2.trans, matrix " << j;
    }
  }
}

TEST_F(CorePrimitives, SwizzlePermutesChunksInsideEachRowAndSpreadsEightRowsOverAllBanks) {
  constexpr int kRows = 64;
  Buffer off8(kRows * 8 * 4), off4(kRows * 4 * 4);
  launch("core_swizzle", 1, kRows, {&off8.ptr, &off4.ptr});
  const auto o8 = off8.get<int>(kRows * 8), o4 = off4.get<int>(kRows * 4);
  for (int row = 0; row < kRows; ++row) {
    std::set<int> in_row8, in_row4;
    for (int c = 0; c < 8; ++c) {
      EXPECT_EQ(o8[row * 8 + c], row * 128 + (c ^ (row & 7)) * 16);
      in_row8.insert(o8[row * 8 + c]);
    }
    for (int c = 0; c < 4; ++c) {
      EXPECT_EQ(o4[row * 4 + c], row * 64 + (c ^ ((row >> 1) & 3)) * 16);
      in_row4.insert(o4[row * 4 + c]);
    }
    EXPECT_EQ(in_row8.size(), 8u) << "row " << row;  // a permutation inside the row
    EXPECT_EQ(in_row4.size(), 4u) << "row " << row;
  }
  // One ldmatrix phase: 8 consecutive rows, the same logical chunk, land in 8 distinct 16-byte
  // bank groups of a 128-byte line.
  for (int base = 0; base < kRows; base += 8)
    for (int c = 0; c < 8; ++c) {
      std::set<int> groups8, groups4;
      for (int r = base; r < base + 8; ++r) {
        groups8.insert((o8[r * 8 + c] % 128) / 16);
        if (c < 4) groups4.insert((o4[r * 4 + c] % 128) / 16);
      }
      EXPECT_EQ(groups8.size(), 8u) << "rows " << base << "+, chunk " << c;
      if (c < 4) {
        EXPECT_EQ(groups4.size(), 8u) << "rows " << base << "+, chunk " << c << " (64-byte rows)";
      }
    }
}

}  // namespace
}  // namespace kgen
