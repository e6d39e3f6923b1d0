// The device core's primitives that serve every NVIDIA target (sm_80 and up) on the GPU, each
// against a host model that states every lane's or element's value: the warp shuffles, votes and
// reductions; the hardware approximations within the error bounds their headers state, and the
// variant expressions' exp, log, tanh, sigmoid, sqrt and division built on them;
// round-to-nearest-even 16-bit conversions and pair packing; atomic adds; predicated and 16-byte
// global stores; the shared-memory moves; cp.async with its zero fill; mma.sync m16n8k16 against a
// host GEMM; ldmatrix fragments, plain and transposed; the 16-byte swizzle's row permutation, bank
// spread and address step; grid-index rereads and the dynamic shared-memory base; the flag
// hand-off between blocks. The sm_90a primitives (wgmma, TMA, mbarriers, clusters, stmatrix,
// named barriers) are in core_hopper_gpu_test.cpp, which lists what stays untested.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <set>
#include <vector>

#include "tests/templates/core/core_test_support.h"

namespace kgen {
namespace {

using core_test::Buffer;
using core_test::bf16_bits;
using core_test::f16_bits;
using core_test::from_bf16;

constexpr const char* kSource = R"(
#include "kgen_device/core/atomic.cuh"
#include "kgen_device/core/block.cuh"
#include "kgen_device/core/cp_async.cuh"
#include "kgen_device/core/expr_math.cuh"
#include "kgen_device/core/flag.cuh"
#include "kgen_device/core/ldmatrix.cuh"
#include "kgen_device/core/math.cuh"
#include "kgen_device/core/memory.cuh"
#include "kgen_device/core/mma_sm80.cuh"
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
// Swizzle16B::advance of logical (row, c) by compile-time steps, 16 results per row: step 2 from
// c < 2 and step 4 from c < 4 on 8-chunk rows, step 8 from c < 8 on 16-chunk rows, step 2 from
// c < 2 on 4-chunk rows (each c inside the group's bits the step leaves alone).
extern "C" __global__ void core_swizzle_step(int* out) {
  using S4 = kgen::Swizzle16B<4>;
  using S8 = kgen::Swizzle16B<8>;
  using S16 = kgen::Swizzle16B<16>;
  const int row = threadIdx.x;
  int* o = out + 16 * row;
  for (int c = 0; c < 2; ++c) o[c] = static_cast<int>(S8::advance(S8::offset(row, c), 2));
  for (int c = 0; c < 4; ++c) o[2 + c] = static_cast<int>(S8::advance(S8::offset(row, c), 4));
  for (int c = 0; c < 8; ++c) o[6 + c] = static_cast<int>(S16::advance(S16::offset(row, c), 8));
  for (int c = 0; c < 2; ++c) o[14 + c] = static_cast<int>(S4::advance(S4::offset(row, c), 2));
}

// Thread i = reread(block_x) · blockDim.x + reread(thread_x) stores words 4i + 1 .. 4i + 4: the
// first one, two and four of them with st_global_if where i % 3 != 0, all four with st_global_16.
extern "C" __global__ void core_store(unsigned* out1, unsigned* out2, unsigned* out4, unsigned* out16) {
  const int i = kgen::reread<kgen::GridIndex::block_x>() * blockDim.x + kgen::reread<kgen::GridIndex::thread_x>();
  const bool pred = i % 3 != 0;
  const unsigned w1[1] = {4u * i + 1};
  const unsigned w2[2] = {4u * i + 1, 4u * i + 2};
  const unsigned w4[4] = {4u * i + 1, 4u * i + 2, 4u * i + 3, 4u * i + 4};
  kgen::st_global_if<1>(out1 + i, w1, pred);
  kgen::st_global_if<2>(out2 + 2 * i, w2, pred);
  kgen::st_global_if<4>(out4 + 4 * i, w4, pred);
  kgen::st_global_16(out16 + 4 * i, kgen::u32x4{w4[0], w4[1], w4[2], w4[3]});
}

// One warp in dynamic shared memory (2048 bytes). Lane l stores 16 bytes (words 4l + 1 ..) at
// 16l, one word 1000 + l at 512 + 4l, the floats (l + 0.5, −l) at 640 + 8l and the floats
// (l, 2l, 3l, 4l) at 1024 + 16l; then adds (1, 2, 3, 4) to the float chunk of lane (l + 1) % 32.
// Per lane, 11 words: the 16 bytes of lane l ^ 1, the word of lane (l + 5) % 32, the float pair
// of lane (l + 7) % 32 and its own float chunk after the adds.
extern "C" __global__ void core_shared(unsigned* out) {
  unsigned char* smem = kgen::dynamic_smem();
  const unsigned base = kgen::smem_u32(smem);
  const int l = threadIdx.x;
  const float fl = static_cast<float>(l);
  kgen::st_shared_16(base + 16 * l, kgen::u32x4{4u * l + 1, 4u * l + 2, 4u * l + 3, 4u * l + 4});
  kgen::st_shared_4(base + 512 + 4 * l, 1000u + l);
  kgen::st_shared_8f(base + 640 + 8 * l, fl + 0.5f, -fl);
  kgen::st_shared_16(base + 1024 + 16 * l, kgen::u32x4{__float_as_uint(fl), __float_as_uint(2 * fl),
                                                       __float_as_uint(3 * fl), __float_as_uint(4 * fl)});
  __syncwarp();
  kgen::add_shared_16f(base + 1024 + 16 * ((l + 1) % 32), make_float4(1.f, 2.f, 3.f, 4.f));
  __syncwarp();
  const kgen::u32x4 v = kgen::ld_shared_16(base + 16 * (l ^ 1));
  const kgen::u32x4 f = kgen::ld_shared_16(base + 1024 + 16 * l);
  const unsigned* words = reinterpret_cast<const unsigned*>(smem);
  unsigned* o = out + 11 * l;
  o[0] = v.x, o[1] = v.y, o[2] = v.z, o[3] = v.w;
  o[4] = words[128 + (l + 5) % 32];
  o[5] = words[160 + 2 * ((l + 7) % 32)], o[6] = words[161 + 2 * ((l + 7) % 32)];
  o[7] = f.x, o[8] = f.y, o[9] = f.z, o[10] = f.w;
}

// 64 threads: thread t copies 16 bytes of src16 (valid where t % 5 != 0) and 4 bytes of src4
// (valid where t % 3 != 0) into shared memory first filled with 0xdeadbeef; after the wait and a
// block barrier it writes thread (63 − t)'s five words.
extern "C" __global__ void core_cp_async(const unsigned* src16, const unsigned* src4, unsigned* out) {
  __shared__ __align__(16) unsigned s16[64 * 4];
  __shared__ __align__(16) unsigned s4[64];
  const int t = threadIdx.x;
  for (int j = 0; j < 4; ++j) s16[4 * t + j] = 0xdeadbeefu;
  s4[t] = 0xdeadbeefu;
  __syncthreads();
  kgen::cp_async_16(kgen::smem_u32(&s16[4 * t]), src16 + 4 * t, t % 5 != 0);
  kgen::cp_async_4(kgen::smem_u32(&s4[t]), src4 + t, t % 3 != 0);
  kgen::cp_async_commit();
  kgen::cp_async_wait<0>();
  __syncthreads();
  const int u = 63 - t;
  for (int j = 0; j < 4; ++j) out[5 * t + j] = s16[4 * u + j];
  out[5 * t + 4] = s4[u];
}

// One warp: d = c + a·b with mma_16x8x16<T>, a (16 x 16) row-major, b stored as 8 rows n of 16 k,
// c and d (16 x 8) row-major fp32; the fragments are read and written in mma_sm80.cuh's layouts.
template <class T>
__device__ void mma_tile(const unsigned short* a, const unsigned short* b, const float* c, float* d) {
  const int lane = threadIdx.x, g = lane / 4, t = lane % 4;
  auto pair = [](const unsigned short* p) { return p[0] | static_cast<unsigned>(p[1]) << 16; };
  const unsigned af[4] = {pair(a + g * 16 + 2 * t), pair(a + (g + 8) * 16 + 2 * t), pair(a + g * 16 + 2 * t + 8),
                          pair(a + (g + 8) * 16 + 2 * t + 8)};
  float acc[4] = {c[g * 8 + 2 * t], c[g * 8 + 2 * t + 1], c[(g + 8) * 8 + 2 * t], c[(g + 8) * 8 + 2 * t + 1]};
  kgen::mma_16x8x16<T>(acc, af, pair(b + g * 16 + 2 * t), pair(b + g * 16 + 2 * t + 8));
  d[g * 8 + 2 * t] = acc[0], d[g * 8 + 2 * t + 1] = acc[1];
  d[(g + 8) * 8 + 2 * t] = acc[2], d[(g + 8) * 8 + 2 * t + 1] = acc[3];
}
extern "C" __global__ void core_mma_f16(const unsigned short* a, const unsigned short* b, const float* c, float* d) {
  mma_tile<kgen::half_t>(a, b, c, d);
}
extern "C" __global__ void core_mma_bf16(const unsigned short* a, const unsigned short* b, const float* c, float* d) {
  mma_tile<kgen::bfloat16_t>(a, b, c, d);
}

// Per thread: ballot32(x > 0), lowest_bit32 of it (99 for an empty ballot) and shfl_xor32 of the
// double 3x by lane mask 9.
extern "C" __global__ void core_vote(const float* x, unsigned* out, double* shuffled) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  const unsigned b = kgen::ballot32(x[i] > 0.f);
  out[2 * i] = b;
  out[2 * i + 1] = b ? static_cast<unsigned>(kgen::lowest_bit32(b)) : 99u;
  shuffled[i] = kgen::shfl_xor32(3.0 * x[i], 9);
}

// Six results per input: the variant expressions' exp, log, tanh, sigmoid, sqrt and x / 3.7.
extern "C" __global__ void core_expr(const float* x, float* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float v = x[i];
  float* o = out + 6 * i;
  o[0] = kgen::expr_exp(v);
  o[1] = kgen::expr_log(v);
  o[2] = kgen::expr_tanh(v);
  o[3] = kgen::expr_sigmoid(v);
  o[4] = kgen::expr_sqrt(v);
  o[5] = kgen::expr_div(v, 3.7f);
}

// Two blocks of 32 threads. Block 1 waits a while, writes data[2t] = t + 1, data[2t + 1] = −(t + 1)
// and data[64 + t] = 100 + t, fences, and its thread 0 publishes flag = 1. Block 0 reads data into
// its L1 first, then waits for the flag and reads the data again past L1: seen[3t .. 3t + 2].
extern "C" __global__ void core_flag(float* data, unsigned long long* flag, float* seen, float* early) {
  const int t = threadIdx.x;
  if (blockIdx.x == 1) {
    const long long start = clock64();
    while (clock64() - start < 2000000) {
    }
    data[2 * t] = t + 1.f;
    data[2 * t + 1] = -(t + 1.f);
    data[64 + t] = 100.f + t;
    kgen::fence_gpu();
    __syncthreads();
    if (t == 0) kgen::flag_publish(flag, 1);
    return;
  }
  early[t] = data[2 * t] + data[64 + t];
  if (t == 0) kgen::flag_wait(flag, 1);
  __syncthreads();
  float x, y;
  kgen::ld_global_gpu_f2(data + 2 * t, x, y);
  seen[3 * t] = x, seen[3 * t + 1] = y, seen[3 * t + 2] = kgen::ld_global_gpu_f1(data + 64 + t);
}
)";

class CorePrimitives : public core_test::CoreKernelTest {
 protected:
  void SetUp() override {
    KGEN_REQUIRE_GPU();
    use_primary_context(0);
    static const std::vector<std::byte> image = core_test::build_test_kernels(kSource, "core_warp", device_info(0).target).image;
    image_ = &image;
  }
};

// Without a GPU too: the test kernels compile for every NVIDIA target kgen serves, none with spills
// (the resources are the module's).
TEST(CorePrimitivesCompile, TheTestKernelsCompileForSm80AndSm90a) {
  for (const char* arch : {"sm_80", "sm_90a"}) {
    const BuildOutcome b = core_test::build_test_kernels(kSource, "core_warp", *parse_target(arch));
    EXPECT_FALSE(b.image.empty()) << arch;
    EXPECT_EQ(b.resources.spill_stores, 0) << arch;
  }
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

// The byte offset of logical chunk c of `row` in rows of `chunks` 16-byte chunks (swizzle.cuh).
int swizzle16_model(int chunks, int row, int c) {
  return row * chunks * 16 + (c ^ (chunks % 8 == 0 ? row & 7 : (row >> 1) & 3)) * 16;
}

TEST_F(CorePrimitives, SwizzleAdvanceStepsToTheOffsetOfTheLaterChunk) {
  constexpr int kRows = 64;
  Buffer out(kRows * 16 * 4);
  launch("core_swizzle_step", 1, kRows, {&out.ptr});
  const auto o = out.get<int>(kRows * 16);
  for (int row = 0; row < kRows; ++row) {
    SCOPED_TRACE("row " + std::to_string(row));
    const int* r = &o[16 * row];
    for (int c = 0; c < 2; ++c) EXPECT_EQ(r[c], swizzle16_model(8, row, c + 2)) << "8 chunks, step 2, c " << c;
    for (int c = 0; c < 4; ++c) EXPECT_EQ(r[2 + c], swizzle16_model(8, row, c + 4)) << "8 chunks, step 4, c " << c;
    for (int c = 0; c < 8; ++c) EXPECT_EQ(r[6 + c], swizzle16_model(16, row, c + 8)) << "16 chunks, step 8, c " << c;
    for (int c = 0; c < 2; ++c) EXPECT_EQ(r[14 + c], swizzle16_model(4, row, c + 2)) << "4 chunks, step 2, c " << c;
  }
}

TEST_F(CorePrimitives, PredicatedStoresWriteExactlyWhereThePredicateHolds) {
  constexpr unsigned kBlocks = 3, kThreads = 96, kN = kBlocks * kThreads, kUntouched = 0xdeadbeefu;
  Buffer o1(kN * 4), o2(kN * 8), o4(kN * 16), o16(kN * 16);
  for (const Buffer* b : {&o1, &o2, &o4, &o16}) b->fill(kUntouched);
  launch("core_store", kBlocks, kThreads, {&o1.ptr, &o2.ptr, &o4.ptr, &o16.ptr});
  const auto w1 = o1.get<std::uint32_t>(kN), w2 = o2.get<std::uint32_t>(2 * kN), w4 = o4.get<std::uint32_t>(4 * kN),
             w16 = o16.get<std::uint32_t>(4 * kN);
  for (unsigned i = 0; i < kN; ++i) {
    SCOPED_TRACE("thread " + std::to_string(i));
    const bool pred = i % 3 != 0;
    EXPECT_EQ(w1[i], pred ? 4 * i + 1 : kUntouched);
    for (unsigned j = 0; j < 2; ++j) EXPECT_EQ(w2[2 * i + j], pred ? 4 * i + 1 + j : kUntouched) << "2 words, word " << j;
    for (unsigned j = 0; j < 4; ++j) {
      EXPECT_EQ(w4[4 * i + j], pred ? 4 * i + 1 + j : kUntouched) << "4 words, word " << j;
      EXPECT_EQ(w16[4 * i + j], 4 * i + 1 + j) << "st_global_16, word " << j;
    }
  }
}

std::uint32_t float_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

TEST_F(CorePrimitives, SharedMovesStoreLoadAndAddWhereTheyAreTold) {
  Buffer out(32 * 11 * 4);
  launch("core_shared", 1, 32, {&out.ptr}, 2048);
  const auto o = out.get<std::uint32_t>(32 * 11);
  for (unsigned l = 0; l < 32; ++l) {
    SCOPED_TRACE("lane " + std::to_string(l));
    const std::uint32_t* r = &o[11 * l];
    for (unsigned j = 0; j < 4; ++j) EXPECT_EQ(r[j], 4 * (l ^ 1) + 1 + j) << "ld_shared_16 of st_shared_16, word " << j;
    EXPECT_EQ(r[4], 1000 + (l + 5) % 32) << "st_shared_4";
    const float m = static_cast<float>((l + 7) % 32);
    EXPECT_EQ(r[5], float_bits(m + 0.5f)) << "st_shared_8f, first";
    EXPECT_EQ(r[6], float_bits(-m)) << "st_shared_8f, second";
    for (unsigned k = 1; k <= 4; ++k) EXPECT_EQ(r[6 + k], float_bits(k * static_cast<float>(l) + k)) << "add_shared_16f, float " << k;
  }
}

TEST_F(CorePrimitives, CpAsyncCopiesValidChunksAndZeroFillsTheOthers) {
  std::vector<std::uint32_t> src16(64 * 4), src4(64);
  for (std::uint32_t i = 0; i < src16.size(); ++i) src16[i] = 0x10000u + i;
  for (std::uint32_t i = 0; i < src4.size(); ++i) src4[i] = 0x20000u + i;
  Buffer s16(src16.size() * 4), s4(src4.size() * 4), out(64 * 5 * 4);
  s16.put(src16);
  s4.put(src4);
  launch("core_cp_async", 1, 64, {&s16.ptr, &s4.ptr, &out.ptr});
  const auto o = out.get<std::uint32_t>(64 * 5);
  for (int t = 0; t < 64; ++t) {
    const int u = 63 - t;
    SCOPED_TRACE("copy of thread " + std::to_string(u));
    for (int j = 0; j < 4; ++j) EXPECT_EQ(o[5 * t + j], u % 5 != 0 ? src16[4 * u + j] : 0u) << "cp_async_16, word " << j;
    EXPECT_EQ(o[5 * t + 4], u % 3 != 0 ? src4[u] : 0u) << "cp_async_4";
  }
}

// mma_16x8x16 against the host GEMM d = c + a·b on small integers (exact in fp32), for both types.
TEST_F(CorePrimitives, MmaSyncGivesTheHostGemmInItsFragmentLayouts) {
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> small(-3, 3), acc(-8, 8);
  for (const bool bf16 : {false, true}) {
    SCOPED_TRACE(bf16 ? "bf16" : "f16");
    std::vector<float> a(16 * 16), b(8 * 16), c(16 * 8);
    for (float& v : a) v = static_cast<float>(small(rng));
    for (float& v : b) v = static_cast<float>(small(rng));
    for (float& v : c) v = static_cast<float>(acc(rng));
    std::vector<std::uint16_t> a16, b16;
    for (float v : a) a16.push_back(core_test::bits16(v, bf16));
    for (float v : b) b16.push_back(core_test::bits16(v, bf16));
    Buffer da(a16.size() * 2), db(b16.size() * 2), dc(c.size() * 4), dd(c.size() * 4);
    da.put(a16), db.put(b16), dc.put(c);
    launch(bf16 ? "core_mma_bf16" : "core_mma_f16", 1, 32, {&da.ptr, &db.ptr, &dc.ptr, &dd.ptr});
    const auto d = dd.get<float>(16 * 8);
    for (int m = 0; m < 16; ++m)
      for (int n = 0; n < 8; ++n) {
        float want = c[m * 8 + n];
        for (int k = 0; k < 16; ++k) want += a[m * 16 + k] * b[n * 16 + k];
        EXPECT_EQ(d[m * 8 + n], want) << "row " << m << " column " << n;
      }
  }
}

TEST_F(CorePrimitives, BallotsNameTheVotingLanesAndTheLowestOne) {
  constexpr int kWarps = 4, kN = 32 * kWarps;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  std::vector<float> x(kN);
  for (float& v : x) v = dist(rng);
  for (int l = 0; l < 32; ++l) x[32 * 2 + l] = -std::fabs(x[32 * 2 + l]) - 0.5f;  // warp 2: nobody votes
  for (int l = 0; l < 32; ++l) x[32 * 3 + l] = l == 17 ? 0.25f : -0.25f;         // warp 3: lane 17 alone
  Buffer in(kN * 4), out(kN * 8), shuffled(kN * 8);
  in.put(x);
  launch("core_vote", 1, kN, {&in.ptr, &out.ptr, &shuffled.ptr});
  const auto o = out.get<std::uint32_t>(2 * kN);
  const auto d = shuffled.get<double>(kN);
  for (int w = 0; w < kWarps; ++w) {
    std::uint32_t ballot = 0;
    for (int l = 0; l < 32; ++l) ballot |= static_cast<std::uint32_t>(x[32 * w + l] > 0.f) << l;
    std::uint32_t lowest = 99;
    for (int l = 31; l >= 0; --l)
      if (ballot >> l & 1) lowest = static_cast<std::uint32_t>(l);
    for (int l = 0; l < 32; ++l) {
      const int i = 32 * w + l;
      SCOPED_TRACE("warp " + std::to_string(w) + " lane " + std::to_string(l));
      EXPECT_EQ(o[2 * i], ballot);
      EXPECT_EQ(o[2 * i + 1], lowest);
      EXPECT_EQ(d[i], 3.0 * static_cast<double>(x[32 * w + (l ^ 9)]));
    }
  }
  EXPECT_EQ(o[2 * 32 * 3 + 1], 17u);
}

TEST_F(CorePrimitives, VariantExpressionsStayWithinTheirErrorBounds) {
  std::vector<float> x;
  for (int i = -8000; i <= 8000; ++i) x.push_back(i / 100.f + 0.003f);            // [−80, 80]
  for (int e = -60; e <= 60; ++e) x.push_back(std::ldexp(1.37f, e));              // many octaves
  for (int i = 1; i < 1000; ++i) x.push_back(0.75f + i * 0.0006f);                // around 1, log's series
  const std::vector<float> edges = {-INFINITY, INFINITY, 0.f, -1.f, NAN};
  x.insert(x.end(), edges.begin(), edges.end());
  const int n = static_cast<int>(x.size());
  Buffer in(n * 4), out(n * 6 * 4);
  in.put(x);
  launch("core_expr", (n + 255) / 256, 256, {&in.ptr, &out.ptr, const_cast<int*>(&n)});
  const auto o = out.get<float>(n * 6);
  double worst_exp = 0, worst_log = 0, worst_tanh = 0, worst_sigmoid = 0, worst_sqrt = 0, worst_div = 0;
  const int finite = n - static_cast<int>(edges.size());
  for (int i = 0; i < finite; ++i) {
    const double v = x[i];
    const float* r = &o[6 * i];
    const auto rel = [](double got, double want) { return std::fabs(got - want) / std::fabs(want); };
    if (std::fabs(v) <= 80) worst_exp = std::max(worst_exp, rel(r[0], std::exp(v)));
    if (v > 0) worst_log = std::max(worst_log, std::fabs(r[1] - std::log(v)) / std::max(1.0, std::fabs(std::log(v))));
    worst_tanh = std::max(worst_tanh, std::fabs(r[2] - std::tanh(v)));
    if (std::fabs(v) <= 80) worst_sigmoid = std::max(worst_sigmoid, rel(r[3], 1 / (1 + std::exp(-v))));
    if (v > 0) worst_sqrt = std::max(worst_sqrt, rel(r[4], std::sqrt(v)));
    if (v != 0) worst_div = std::max(worst_div, rel(r[5], v / static_cast<double>(3.7f)));
  }
  EXPECT_LE(worst_exp, std::ldexp(1.0, -20)) << "expr_exp: relative, |x| <= 80";
  EXPECT_LE(worst_log, std::ldexp(1.0, -20)) << "expr_log: relative above |log x| = 1, absolute below";
  EXPECT_LE(worst_tanh, 4e-7) << "expr_tanh: absolute, about 3e-7";
  EXPECT_LE(worst_sigmoid, std::ldexp(1.0, -20)) << "expr_sigmoid: relative";
  EXPECT_LE(worst_sqrt, std::ldexp(1.0, -21)) << "expr_sqrt: relative";
  EXPECT_LE(worst_div, std::ldexp(1.0, -21)) << "expr_div: relative";
  // The edges the header states: e^−inf = 0, e^inf = inf, tanh(±inf) = ±1, sigmoid 0 at −inf and 1
  // at +inf, √0 = 0, √inf = inf, √−1 and e^NaN are NaN.
  const float* e = &o[6 * finite];
  EXPECT_EQ(e[0], 0.f);
  EXPECT_EQ(e[6 + 0], INFINITY);
  EXPECT_EQ(e[2], -1.f);
  EXPECT_EQ(e[6 + 2], 1.f);
  EXPECT_EQ(e[3], 0.f);
  EXPECT_EQ(e[6 + 3], 1.f);
  EXPECT_EQ(e[12 + 4], 0.f);
  EXPECT_EQ(e[6 + 4], INFINITY);
  EXPECT_TRUE(std::isnan(e[18 + 4])) << "sqrt(-1)";
  EXPECT_TRUE(std::isnan(e[24 + 0])) << "exp(NaN)";
}

TEST_F(CorePrimitives, AFlagHandsDataFromOneBlockToAnotherPastL1) {
  Buffer data(96 * 4), flag(8), seen(32 * 3 * 4), early(32 * 4);
  data.fill(0);
  flag.fill(0);
  launch("core_flag", 2, 32, {&data.ptr, &flag.ptr, &seen.ptr, &early.ptr});
  const auto s = seen.get<float>(32 * 3);
  for (int t = 0; t < 32; ++t) {
    SCOPED_TRACE("thread " + std::to_string(t));
    EXPECT_EQ(s[3 * t], t + 1.f);
    EXPECT_EQ(s[3 * t + 1], -(t + 1.f));
    EXPECT_EQ(s[3 * t + 2], 100.f + t);
  }
}

}  // namespace
}  // namespace kgen
