// The device core's sm_90a primitives on the GPU, each against a host model that states every
// element's value: the 16-bit wgmma m64nNk16 (N = 64 and 128, half and bfloat16; ss with K-major
// A and B, with MN-major B over two column blocks and with M-major A, rs with A packed from an
// earlier accumulator by pack_a; `accumulate` = 0 overwriting) through the Sw128 tiles and
// descriptors of wgmma.cuh, against a host GEMM; the 8-bit wgmma m64n128k32 of wgmma_fp8.cuh (ss,
// and rs from pack_a8 with its stated k order, pack4_e4m3's rounding) against a host GEMM; TMA
// tensor-map loads through a two-stage ring of mbarriers (transaction bytes, arrivals, parities,
// zero fill outside the tensor) against the host's 128-byte swizzle; a TMA store (nothing written
// outside the tensor) and concurrent TMA reduce-adds; cp.async arrivals on an mbarrier; stmatrix;
// named barriers; a cluster of two exchanging shared memory through remote arrivals and loads.
// The test kernels are one translation unit for sm_90a, built through the kernel builder; the
// GPU cases run on an sm_90a device and skip elsewhere, and CorePrimitivesCompile builds the
// kernels for sm_90a without one.
//
// Each primitive of templates/kgen_device/core and its test (here, in core_primitives_gpu_test.cpp,
// or elsewhere):
//   warp.cuh: every shuffle, vote and reduction; approximations and expr_math.cuh: each function's
//     error bound and edges; types.cuh: conversions, pack2/unpack2; atomic.cuh: red_add, red_add2;
//     memory.cuh: st_global_if (1, 2, 4 words), st_global_16, every shared move; cp_async.cuh:
//     cp_async_16, cp_async_4, commit, wait; mma_sm80.cuh: both types; ldmatrix.cuh: all four;
//     swizzle.cuh: offset, advance; flag.cuh: every function; block.cuh: dynamic_smem,
//     dynamic_smem_1024, named_barrier, reread (thread_x, block_x) -- core_primitives_gpu_test.cpp.
//   wgmma.cuh, wgmma_fp8.cuh, fp8.cuh, tma.cuh, cluster.cuh -- here; mfma_layout.h: its CPU model
//     test (tests/generator/mfma_layout_test.cpp); expr_interval.h: tests/generator/variant_test.cpp
//     (host and device share the body); mfma.cuh and the AMD bodies of every header: the AMD
//     numerics on the emulator (tests/amdemu) through the kernels built on them.
// Untested on their own, each with the reason: compiler_barrier (no instruction, no observable
// effect); tma::release_registers / claim_registers (they change only the register budget, which
// ptxas checks at every sm_90a compile of the warp-specialised kernels); Mma widths
// other than 64 and 128 and Mma8<256> (the same generated operand lists, compiled by every kernel
// that uses them, which the replay table checks); reread of block_y and block_z (the same
// instruction as block_x on another register); infinity_f32/f64, pick, imin, imax (constants and
// selects); vendor.cuh, host_device.h and hip_prelude.h (macros and declarations only).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "tests/templates/core/core_test_support.h"

namespace kgen {
namespace {

using core_test::Buffer;

constexpr const char* kHopperSource = R"(
#include "kgen_device/core/block.cuh"
#include "kgen_device/core/cluster.cuh"
#include "kgen_device/core/cp_async.cuh"
#include "kgen_device/core/fp8.cuh"
#include "kgen_device/core/memory.cuh"
#include "kgen_device/core/tma.cuh"
#include "kgen_device/core/types.cuh"
#include "kgen_device/core/wgmma.cuh"
#include "kgen_device/core/wgmma_fp8.cuh"

// A tensor map as the host's driver encodes it (CUtensorMap), passed in a __grid_constant__.
struct alignas(64) TestMap {
  unsigned long long opaque[16];
};

// The warpgroup's 128 threads copy a Rows x Cols tile of 16-bit elements, row-major in global
// memory, into the Sw128<Rows, Cols> tile at shared address `tile`, 16 bytes per store.
template <int Rows, int Cols>
__device__ void fill_sw128(unsigned tile, const unsigned short* src, int tid) {
  using Tile = kgen::wgmma::Sw128<Rows, Cols>;
  for (int i = tid; i < Rows * Cols / 8; i += 128) {
    const uint4 v = reinterpret_cast<const uint4*>(src)[i];
    kgen::st_shared_16(tile + Tile::offset(i / (Cols / 8), i % (Cols / 8)), kgen::u32x4{v.x, v.y, v.z, v.w});
  }
}

// Writes this thread's accumulators of a 64 x N wgmma result row-major into d, in the register
// layout wgmma.cuh states: d[4j + 2h + e] is row 16w + g + 8h, column 8j + 2t + e.
template <int N>
__device__ void store_acc(float* d, const float (&acc)[N / 2], const kgen::wgmma::Lane& l) {
#pragma unroll
  for (int j = 0; j < N / 8; ++j)
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int e = 0; e < 2; ++e) d[(16 * l.warp + l.g + 8 * h) * N + 8 * j + 2 * l.t + e] = acc[4 * j + 2 * h + e];
}

// Accumulators the first wgmma (accumulate = 0) must overwrite.
template <int N>
__device__ void poison(float (&acc)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) acc[i] = 12345.f;
}

// One wgmma product as the kernels run it, into `acc` poisoned first (the first k-step, with
// accumulate = 0, must overwrite it): operand and wgmma fences, the k-steps `issue` makes,
// commit, wait; then acc row-major into d.
template <int N, class Issue>
__device__ void product(float (&acc)[N / 2], float* d, const kgen::wgmma::Lane& l, Issue issue) {
  poison(acc);
  kgen::wgmma::fence_operand(acc);
  kgen::wgmma::fence();
  issue();
  kgen::wgmma::commit();
  kgen::wgmma::wait<0>();
  kgen::wgmma::fence_operand(acc);
  store_acc<N>(d, acc, l);
}

// One warpgroup; x (64 rows m x 64 k), y (64 rows n x 64 k), w (64 rows k x 64 m) and z (64 rows
// k x 128 n) row-major 16-bit in global memory, in Sw128 tiles of dynamic shared memory (40 KiB).
// Writes row-major fp32:
//   d1 (64 x 64)  = x·yᵀ     ss<T, 0, 0>: A and B K-major
//   d2 (64 x 128) = x·z      ss<T, 0, 1>: B MN-major over two 64-column blocks
//   d3 (64 x 128) = wᵀ·z     ss<T, 1, 1>: A M-major
//   d4 (64 x 128) = T(d1)·z  rs<T, 1>: A packed from d1's accumulators by pack_a
// and the dynamic shared memory's offset from a 1024-byte boundary to misaligned[0].
template <class T>
__device__ void wgmma_products(const unsigned short* x, const unsigned short* y, const unsigned short* w,
                               const unsigned short* z, float* d1, float* d2, float* d3, float* d4,
                               unsigned* misaligned) {
  namespace wg = kgen::wgmma;
  using Tile = wg::Sw128<64, 64>;
  using Wide = wg::Sw128<64, 128>;
  const unsigned sx = kgen::smem_u32(kgen::dynamic_smem_1024()), sy = sx + Tile::kBytes, sw = sy + Tile::kBytes,
                 sz = sw + Tile::kBytes;
  const int tid = threadIdx.x;
  if (tid == 0) misaligned[0] = sx % 1024;
  fill_sw128<64, 64>(sx, x, tid);
  fill_sw128<64, 64>(sy, y, tid);
  fill_sw128<64, 64>(sw, w, tid);
  fill_sw128<64, 128>(sz, z, tid);
  wg::fence_proxy_async();
  __syncthreads();
  const wg::Lane l = wg::Lane::of(tid);
  // K-major operands: k-step kk is 32 bytes along the rows of one 64-column block; MN- and
  // M-major ones: 16 rows of 128 bytes.
  const unsigned long long x_k = wg::desc_sw128(sx, 16, 1024), y_k = wg::desc_sw128(sy, 16, 1024);
  const unsigned long long w_m = wg::desc_sw128(sw, Tile::kBlockBytes, 1024);
  const unsigned long long z_mn = wg::desc_sw128(sz, Wide::kBlockBytes, 1024);

  float a1[32];
  product<64>(a1, d1, l, [&] {
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
      wg::Mma<64>::template ss<T, 0, 0>(a1, x_k + ((kk * 32) >> 4), y_k + ((kk * 32) >> 4), kk > 0);
  });
  float acc[64];
  product<128>(acc, d2, l, [&] {
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
      wg::Mma<128>::template ss<T, 0, 1>(acc, x_k + ((kk * 32) >> 4), z_mn + ((kk * 16 * 128) >> 4), kk > 0);
  });
  product<128>(acc, d3, l, [&] {
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
      wg::Mma<128>::template ss<T, 1, 1>(acc, w_m + ((kk * 16 * 128) >> 4), z_mn + ((kk * 16 * 128) >> 4), kk > 0);
  });
  unsigned pa[4][4];
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) wg::pack_a<T>(pa[kk], a1, kk);
  product<128>(acc, d4, l, [&] {
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) wg::Mma<128>::template rs<T, 1>(acc, pa[kk], z_mn + ((kk * 16 * 128) >> 4), kk > 0);
  });
}
extern "C" __global__ void core_wgmma_f16(const unsigned short* x, const unsigned short* y, const unsigned short* w,
                                          const unsigned short* z, float* d1, float* d2, float* d3, float* d4,
                                          unsigned* misaligned) {
  wgmma_products<kgen::half_t>(x, y, w, z, d1, d2, d3, d4, misaligned);
}
extern "C" __global__ void core_wgmma_bf16(const unsigned short* x, const unsigned short* y, const unsigned short* w,
                                           const unsigned short* z, float* d1, float* d2, float* d3, float* d4,
                                           unsigned* misaligned) {
  wgmma_products<kgen::bfloat16_t>(x, y, w, z, d1, d2, d3, d4, misaligned);
}

// One warpgroup; E4M3 bytes a (64 rows m x 128 k), b and vt (128 rows n x 128 k), row-major in
// global memory, in Sw128 tiles (two E4M3 per 16-bit column) of dynamic shared memory (40 KiB).
// Writes row-major fp32 d1 (64 x 128) = a·bᵀ (Mma8<128>::ss) and d2 (64 x 128) = P·vtᵀ
// (Mma8<128>::rs), P packed from d1's accumulators by pack_a8.
extern "C" __global__ void core_wgmma_e4m3(const unsigned short* a, const unsigned short* b, const unsigned short* vt,
                                           float* d1, float* d2) {
  namespace wg = kgen::wgmma;
  const unsigned sa = kgen::smem_u32(kgen::dynamic_smem_1024()), sb = sa + wg::Sw128<64, 64>::kBytes,
                 svt = sb + wg::Sw128<128, 64>::kBytes;
  const int tid = threadIdx.x;
  fill_sw128<64, 64>(sa, a, tid);
  fill_sw128<128, 64>(sb, b, tid);
  fill_sw128<128, 64>(svt, vt, tid);
  wg::fence_proxy_async();
  __syncthreads();
  const wg::Lane l = wg::Lane::of(tid);
  const unsigned long long a_k = wg::desc_sw128(sa, 16, 1024), b_k = wg::desc_sw128(sb, 16, 1024),
                           vt_k = wg::desc_sw128(svt, 16, 1024);
  float s[64];
  product<128>(s, d1, l, [&] {
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) wg::Mma8<128>::ss(s, a_k + ((kk * 32) >> 4), b_k + ((kk * 32) >> 4), kk > 0);
  });
  unsigned pa[4][4];
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) wg::pack_a8(pa[kk], s, kk);
  float o[64];
  product<128>(o, d2, l, [&] {
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) wg::Mma8<128>::rs(o, pa[kk], vt_k + ((kk * 32) >> 4), kk > 0);
  });
}

// stmatrix_x4 from one warp: register k of lane l holds the 16-bit values v(k, l / 4, 2(l % 4))
// and v(k, l / 4, 2(l % 4) + 1), v(m, r, c) = m·64 + r·8 + c; lane i names row i % 8 of matrix
// i / 8 (matrix m at byte 128m, row r at 16r). out: the 256 values as shared memory then holds them.
extern "C" __global__ void core_stmatrix(unsigned short* out) {
  __shared__ __align__(16) unsigned short tiles[4 * 64];
  const unsigned lane = threadIdx.x, r = lane / 4, c = 2 * (lane % 4);
  unsigned v[4];
  for (unsigned m = 0; m < 4; ++m) v[m] = (m * 64 + r * 8 + c) | (m * 64 + r * 8 + c + 1) << 16;
  kgen::wgmma::stmatrix_x4(kgen::smem_u32(&tiles[(lane / 8) * 64 + (lane % 8) * 8]), v[0], v[1], v[2], v[3]);
  __syncwarp();
  for (int i = lane; i < 4 * 64; i += 32) out[i] = tiles[i];
}

// A two-stage ring as the warp-specialised kernels run it, in dynamic shared memory: thread 128 (the producer) loads box j
// (64 columns x 64 rows at column 0, row 64·(j % 4), plane j / 4 of the 4-d map) into stage j % 2
// with load_4d, announcing its 8192 bytes on full[stage] (one arrival), after waiting for
// empty[stage] to free the stage (128 arrivals); threads 0..127 (the consumers) wait for
// full[stage] at parity (j / 2) % 2, copy the stage's raw bytes to out + 8192·j, and arrive on
// empty[stage].
struct TmaLoadParams {
  TestMap map;
  unsigned char* out;
  int boxes;
};
extern "C" __global__ void core_tma_load(const __grid_constant__ TmaLoadParams p) {
  namespace tma = kgen::tma;
  constexpr unsigned kBoxBytes = 64 * 64 * 2;
  // Dynamic shared memory: the two stages, then full[2] and empty[2].
  const unsigned ring0 = kgen::smem_u32(kgen::dynamic_smem_1024());
  const unsigned full0 = ring0 + 2 * kBoxBytes, empty0 = full0 + 16;
  const int tid = threadIdx.x;
  if (tid == 0) {
    tma::prefetch_map(&p.map);
    for (int s = 0; s < 2; ++s) {
      tma::barrier_init(full0 + 8 * s, 1);
      tma::barrier_init(empty0 + 8 * s, 128);
    }
    tma::fence_barrier_init();
  }
  __syncthreads();
  if (tid == 128) {
    for (int j = 0; j < p.boxes; ++j) {
      const int s = j % 2;
      if (j >= 2) tma::wait(empty0 + 8 * s, (j / 2 - 1) & 1);
      tma::arrive_expect_tx(full0 + 8 * s, kBoxBytes);
      tma::load_4d(ring0 + s * kBoxBytes, &p.map, 0, (j % 4) * 64, j / 4, 0, full0 + 8 * s);
    }
  } else if (tid < 128) {
    for (int j = 0; j < p.boxes; ++j) {
      const int s = j % 2;
      tma::wait(full0 + 8 * s, (j / 2) & 1);
      for (int i = tid; i < static_cast<int>(kBoxBytes / 16); i += 128) {
        const kgen::u32x4 v = kgen::ld_shared_16(ring0 + s * kBoxBytes + 16 * i);
        reinterpret_cast<uint4*>(p.out + kBoxBytes * j)[i] = make_uint4(v.x, v.y, v.z, v.w);
      }
      tma::arrive(empty0 + 8 * s);
    }
  }
}

// One warpgroup writes the 64 x 64 16-bit tile (row-major in global memory) into its Sw128 place
// in shared memory and fences it for the async proxy; thread 0 stores it with store_4d to the box
// at (0, row0, plane) and waits until the store has read shared memory.
struct TmaStoreParams {
  TestMap map;
  const unsigned short* tile;
  int row0, plane;
};
extern "C" __global__ void core_tma_store(const __grid_constant__ TmaStoreParams p) {
  const unsigned box = kgen::smem_u32(kgen::dynamic_smem_1024());  // 8192 bytes
  const int tid = threadIdx.x;
  fill_sw128<64, 64>(box, p.tile, tid);
  kgen::tma::fence_proxy_async();
  __syncthreads();
  if (tid == 0) {
    kgen::tma::store_4d(&p.map, box, 0, p.row0, p.plane, 0);
    kgen::tma::store_commit();
    kgen::tma::store_wait_read<0>();
  }
}

// Block b's warpgroup writes the 64 x 32 fp32 tile tile + 2048b (row-major) into a 128-byte-
// swizzled box (row r's 16-byte chunk c at Sw128<64, 64>::offset(r, c)); thread 0 reduce-adds it
// into the box at (0, row0, plane) of the 3-d fp32 map. Every block adds into the same box.
struct TmaReduceParams {
  TestMap map;
  const float* tile;
  int row0, plane;
};
extern "C" __global__ void core_tma_reduce(const __grid_constant__ TmaReduceParams p) {
  const unsigned base = kgen::smem_u32(kgen::dynamic_smem_1024());  // 8192 bytes
  const int tid = threadIdx.x;
  const uint4* src = reinterpret_cast<const uint4*>(p.tile + 2048 * blockIdx.x);
  for (int i = tid; i < 512; i += 128) {
    const uint4 v = src[i];
    kgen::st_shared_16(base + kgen::wgmma::Sw128<64, 64>::offset(i / 8, i % 8), kgen::u32x4{v.x, v.y, v.z, v.w});
  }
  kgen::tma::fence_proxy_async();
  __syncthreads();
  if (tid == 0) {
    kgen::tma::reduce_add_3d(&p.map, base, 0, p.row0, p.plane);
    kgen::tma::store_commit();
    kgen::tma::store_wait_read<0>();
  }
}

// One warp and one mbarrier expecting 32 arrivals. Phase 0: each lane cp.asyncs 16 bytes of src
// (words 4l .. 4l + 3) into shared memory and arrives once they land (cp_async_arrive); after
// waiting for parity 0, lane l reads lane (l + 1) % 32's chunk. Phase 1: each lane overwrites its
// chunk with words 4l + 1000 .., arrives (arrive) and, after parity 1, reads lane (l + 3) % 32's.
extern "C" __global__ void core_mbarrier(const unsigned* src, unsigned* out) {
  __shared__ __align__(16) unsigned words[32 * 4];
  __shared__ __align__(8) unsigned long long bar;
  const int l = threadIdx.x;
  const unsigned b = kgen::smem_u32(&bar);
  if (l == 0) {
    kgen::tma::barrier_init(b, 32);
    kgen::tma::fence_barrier_init();
  }
  __syncthreads();
  kgen::cp_async_16(kgen::smem_u32(&words[4 * l]), src + 4 * l, true);
  kgen::tma::cp_async_arrive(b);
  kgen::tma::wait(b, 0);
  const kgen::u32x4 first = kgen::ld_shared_16(kgen::smem_u32(&words[4 * ((l + 1) % 32)]));
  __syncwarp();
  kgen::st_shared_16(kgen::smem_u32(&words[4 * l]), kgen::u32x4{4u * l + 1000, 4u * l + 1001, 4u * l + 1002, 4u * l + 1003});
  kgen::tma::arrive(b);
  kgen::tma::wait(b, 1);
  const kgen::u32x4 second = kgen::ld_shared_16(kgen::smem_u32(&words[4 * ((l + 3) % 32)]));
  unsigned* o = out + 8 * l;
  o[0] = first.x, o[1] = first.y, o[2] = first.z, o[3] = first.w;
  o[4] = second.x, o[5] = second.y, o[6] = second.z, o[7] = second.w;
}

// Two warps. Warp 1 writes 7l + 1 to words[l] and arrives at named barrier 1 (64 threads,
// barrier_arrive) without waiting; warp 0 waits there (named_barrier<1, 64>), reads words[31 − l]
// and writes 5l + 2 to words[32 + l], arriving at barrier 2; warp 1 waits there (barrier_sync) and
// reads words[32 + (l + 4) % 32]. out[l] is warp 0's read, out[32 + l] warp 1's.
extern "C" __global__ void core_named_barriers(unsigned* out) {
  __shared__ unsigned words[64];
  const int warp = threadIdx.x / 32, l = threadIdx.x % 32;
  if (warp == 1) {
    words[l] = 7u * l + 1;
    kgen::tma::barrier_arrive(1, 64);
    kgen::tma::barrier_sync(2, 64);
    out[32 + l] = words[32 + (l + 4) % 32];
  } else {
    kgen::named_barrier<1, 64>();
    out[l] = words[31 - l];
    words[32 + l] = 5u * l + 2;
    kgen::tma::barrier_arrive(2, 64);
  }
}

// Clusters of two blocks of one warp. Block rank r: lane l writes (100r + l, +0.25, +0.5, +0.75)
// to its shared memory and arrives (release, cluster scope) on the peer's mbarrier, which expects
// 32 arrivals; after waiting on its own (acquire, cluster scope) it reads lane l's floats of the
// peer with ld_remote_16f. out[4(32 block + l) ..]: those floats; ranks[block]: cluster::rank().
extern "C" __global__ void __cluster_dims__(2, 1, 1) core_cluster(float* out, unsigned* ranks) {
  __shared__ __align__(16) float data[32 * 4];
  __shared__ __align__(8) unsigned long long bar;
  namespace cluster = kgen::cluster;
  const int l = threadIdx.x;
  const unsigned rank = cluster::rank(), peer = rank ^ 1u;
  if (l == 0) {
    kgen::tma::barrier_init(kgen::smem_u32(&bar), 32);
    kgen::tma::fence_barrier_init();
  }
  cluster::sync();
  for (int j = 0; j < 4; ++j) data[4 * l + j] = 100.f * rank + l + 0.25f * j;
  cluster::arrive_remote(cluster::remote(kgen::smem_u32(&bar), peer));
  kgen::tma::wait<true>(kgen::smem_u32(&bar), 0);
  const float4 v = cluster::ld_remote_16f(cluster::remote(kgen::smem_u32(&data[4 * l]), peer));
  float* o = out + 4 * (32 * blockIdx.x + l);
  o[0] = v.x, o[1] = v.y, o[2] = v.z, o[3] = v.w;
  if (l == 0) ranks[blockIdx.x] = rank;
  cluster::sync();  // the peer's remote loads are done before this block's shared memory goes
}
)";

const Target& hopper() {
  static const Target t = *parse_target("sm_90a");
  return t;
}

class CoreHopper : public core_test::CoreKernelTest {
 protected:
  void SetUp() override {
    KGEN_REQUIRE_GPU();
    if (device_info(0).target.arch != "sm_90a")
      GTEST_SKIP() << "the sm_90a primitives need an sm_90a device, not " << device_info(0).target.arch;
    use_primary_context(0);
    static const std::vector<std::byte> image = core_test::build_test_kernels(kHopperSource, "core_wgmma_bf16", hopper()).image;
    image_ = &image;
  }
};

// Without a GPU too: the sm_90a test kernels compile, none spills (the resources are the
// module's) and no wgmma is serialised (a spilled or serialised accumulator would not test the
// kernels' form).
TEST(CorePrimitivesCompile, TheHopperTestKernelsCompileForSm90a) {
  const BuildOutcome b = core_test::build_test_kernels(kHopperSource, "core_wgmma_bf16", hopper());
  EXPECT_FALSE(b.image.empty());
  EXPECT_EQ(b.resources.spill_stores, 0);
  EXPECT_FALSE(b.resources.serialized_wgmma) << b.log;
}

// Small integers (exact in both 16-bit types) as 16-bit bits.
std::vector<std::uint16_t> small_ints(std::vector<float>& values, std::size_t n, bool bf16, std::mt19937& rng) {
  std::uniform_int_distribution<int> d(-2, 2);
  values.resize(n);
  std::vector<std::uint16_t> bits(n);
  for (std::size_t i = 0; i < n; ++i) values[i] = static_cast<float>(d(rng)), bits[i] = core_test::bits16(values[i], bf16);
  return bits;
}

// The host GEMM c[m][n] = Σ_k a(m, k)·b(k, n) over M x N, exact for the tests' values.
template <class A, class B>
std::vector<float> gemm(int M, int N, int K, A a, B b) {
  std::vector<float> c(static_cast<std::size_t>(M) * N);
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      double s = 0;
      for (int k = 0; k < K; ++k) s += static_cast<double>(a(m, k)) * b(k, n);
      c[static_cast<std::size_t>(m) * N + n] = static_cast<float>(s);
    }
  return c;
}

void expect_equal(const std::vector<float>& got, const std::vector<float>& want, int cols, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  int wrong = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    if (got[i] != want[i] && ++wrong <= 8)
      ADD_FAILURE() << what << ": row " << i / cols << " column " << i % cols << " is " << got[i] << ", the host says "
                    << want[i];
  EXPECT_EQ(wrong, 0) << what << ": elements that differ";
}

TEST_F(CoreHopper, WgmmaGivesTheHostGemmForEveryOperandLayoutAndBothTypes) {
  std::mt19937 rng(17);
  for (const bool bf16 : {false, true}) {
    SCOPED_TRACE(bf16 ? "bf16" : "f16");
    std::vector<float> x, y, w, z;
    const auto xb = small_ints(x, 64 * 64, bf16, rng), yb = small_ints(y, 64 * 64, bf16, rng),
               wb = small_ints(w, 64 * 64, bf16, rng), zb = small_ints(z, 64 * 128, bf16, rng);
    Buffer dx(xb.size() * 2), dy(yb.size() * 2), dw(wb.size() * 2), dz(zb.size() * 2);
    dx.put(xb), dy.put(yb), dw.put(wb), dz.put(zb);
    Buffer d1(64 * 64 * 4), d2(64 * 128 * 4), d3(64 * 128 * 4), d4(64 * 128 * 4), misaligned(4);
    launch(bf16 ? "core_wgmma_bf16" : "core_wgmma_f16", 1, 128,
           {&dx.ptr, &dy.ptr, &dw.ptr, &dz.ptr, &d1.ptr, &d2.ptr, &d3.ptr, &d4.ptr, &misaligned.ptr}, 5 * 8192);
    EXPECT_EQ(misaligned.get<std::uint32_t>(1)[0], 0u) << "dynamic_smem_1024 is 1024-byte aligned";
    const auto s = gemm(64, 64, 64, [&](int m, int k) { return x[m * 64 + k]; }, [&](int k, int n) { return y[n * 64 + k]; });
    expect_equal(d1.get<float>(64 * 64), s, 64, "x·yT (ss, K-major A and B, N = 64)");
    const auto zk = [&](int k, int n) { return z[k * 128 + n]; };
    expect_equal(d2.get<float>(64 * 128), gemm(64, 128, 64, [&](int m, int k) { return x[m * 64 + k]; }, zk), 128,
                 "x·z (ss, MN-major B, N = 128)");
    expect_equal(d3.get<float>(64 * 128), gemm(64, 128, 64, [&](int m, int k) { return w[k * 64 + m]; }, zk), 128,
                 "wT·z (ss, M-major A)");
    const auto p = [&](int m, int k) { return core_test::from16(core_test::bits16(s[m * 64 + k], bf16), bf16); };
    expect_equal(d4.get<float>(64 * 128), gemm(64, 128, 64, p, zk), 128, "pack_a(x·yT)·z (rs, MN-major B)");
  }
}

// E4M3 (bias 7, 3 mantissa bits, no infinity, 0x7f and 0xff NaN) to float.
double e4m3_value(int code) {
  const int e = code >> 3 & 15, m = code & 7;
  const double v = e == 0 ? std::ldexp(m, -9) : std::ldexp(8 + m, e - 10);
  return code & 0x80 ? -v : v;
}
// fp32 to E4M3 as pack4_e4m3 states it: round to nearest even, saturating to ±448.
int e4m3_code(double v) {
  int best = 0;
  for (int code = 0; code < 256; ++code) {
    if ((code & 0x7f) == 0x7f) continue;
    const double d = std::fabs(e4m3_value(code) - v), b = std::fabs(e4m3_value(best) - v);
    if (d < b || (d == b && (code & 1) == 0 && (best & 1) == 1)) best = code;
  }
  return best;
}

TEST_F(CoreHopper, Fp8WgmmaGivesTheHostGemmAndPackA8KeepsItsStatedKOrder) {
  std::mt19937 rng(23);
  const int kCodes[] = {0x00, 0x38, 0xb8, 0x40, 0xc0, 0x00, 0x38, 0xb8};  // 0, ±1, ±2
  std::uniform_int_distribution<int> pick(0, 7);
  auto operand = [&](int rows, std::vector<double>& values) {
    std::vector<std::uint8_t> bytes(rows * 128);
    values.resize(bytes.size());
    for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<std::uint8_t>(kCodes[pick(rng)]), values[i] = e4m3_value(bytes[i]);
    return bytes;
  };
  std::vector<double> a, b, vt;
  const auto ab = operand(64, a), bb = operand(128, b), vtb = operand(128, vt);
  Buffer da(ab.size()), db(bb.size()), dvt(vtb.size()), d1(64 * 128 * 4), d2(64 * 128 * 4);
  da.put(ab), db.put(bb), dvt.put(vtb);
  launch("core_wgmma_e4m3", 1, 128, {&da.ptr, &db.ptr, &dvt.ptr, &d1.ptr, &d2.ptr}, 5 * 8192);
  // The first product's terms are integers up to 4 and its sums stay below 2^9: exact.
  const auto s = gemm(64, 128, 128, [&](int m, int k) { return a[m * 128 + k]; }, [&](int k, int n) { return b[n * 128 + k]; });
  expect_equal(d1.get<float>(64 * 128), s, 128, "a·bT (Mma8 ss)");
  // k position p of k-step kk (32 positions) holds column 32kk + 16(p/16) + 8((p%4)/2) + 2((p%16)/4) + p%2.
  const auto column = [](int k) {
    const int kk = k / 32, p = k % 32;
    return 32 * kk + 16 * (p / 16) + 8 * ((p % 4) / 2) + 2 * ((p % 16) / 4) + p % 2;
  };
  int rounded = 0;
  for (float v : s) rounded += e4m3_value(e4m3_code(v)) != v;
  EXPECT_GT(rounded, 0) << "some scores must round in E4M3 for the test to see the rounding";
  // The 8-bit wgmma adds its products with fewer bits than fp32 (about 14 kept on sm_90), so the
  // second product (integer terms up to 896) is held to 2^-10 of the sum of their sizes; a k
  // position taken from the wrong column moves an element by about the size of one term.
  const auto d = d2.get<float>(64 * 128);
  int wrong = 0;
  for (int m = 0; m < 64; ++m)
    for (int n = 0; n < 128; ++n) {
      double want = 0, size = 0;
      for (int k = 0; k < 128; ++k) {
        const double term = e4m3_value(e4m3_code(s[m * 128 + column(k)])) * vt[n * 128 + k];
        want += term, size += std::fabs(term);
      }
      if (std::fabs(d[m * 128 + n] - want) > std::ldexp(size, -10) && ++wrong <= 8)
        ADD_FAILURE() << "pack_a8(a·bT)·vtT (Mma8 rs): row " << m << " column " << n << " is " << d[m * 128 + n]
                      << ", the host says " << want << " (terms of total size " << size << ")";
    }
  EXPECT_EQ(wrong, 0);
}

TEST_F(CoreHopper, StmatrixStoresEachLanesPairsWhereItsRowAddressPoints) {
  Buffer out(4 * 64 * 2);
  launch("core_stmatrix", 1, 32, {&out.ptr});
  const auto o = out.get<std::uint16_t>(4 * 64);
  for (int i = 0; i < 4 * 64; ++i) EXPECT_EQ(o[i], i) << "matrix " << i / 64 << " row " << i % 64 / 8 << " column " << i % 8;
}

// The tensor of the TMA tests: 16-bit, 56 columns (of 64 in memory) x 200 rows x 2 planes; boxes
// of 64 x 64 under the 128-byte swizzle.
constexpr int kCols = 56, kPitch = 64, kRows = 200, kPlanes = 2;
TiledTensorMap tensor16(DevicePtr base) {
  TiledTensorMap m;
  m.base = reinterpret_cast<const void*>(base);
  m.rank = 4;
  m.dims[0] = kCols, m.dims[1] = kRows, m.dims[2] = kPlanes, m.dims[3] = 1;
  m.strides_bytes[0] = kPitch * 2, m.strides_bytes[1] = kPitch * 2 * kRows, m.strides_bytes[2] = kPitch * 2 * kRows * kPlanes;
  m.box[0] = 64, m.box[1] = 64, m.box[2] = 1, m.box[3] = 1;
  m.element = TiledTensorMap::Element::bf16;
  return m;
}
// The host's view of the 128-byte swizzle: byte offset of element (r, c) of a box of 128-byte rows
// with `bytes`-byte elements: chunk c·bytes / 16 of row r sits at chunk (c·bytes / 16) ^ (r % 8).
int swizzled(int r, int c, int bytes) { return r * 128 + (((c * bytes / 16) ^ (r & 7)) << 4) + c * bytes % 16; }

TEST_F(CoreHopper, TmaLoadsThroughAnMbarrierRingLandSwizzledAndZeroFilled) {
  std::vector<std::uint16_t> in(kPlanes * kRows * kPitch);
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<std::uint16_t>(i + 1);
  Buffer tensor(in.size() * 2);
  tensor.put(in);
  constexpr int kBoxes = 8;
  Buffer out(kBoxes * 8192);
  out.fill(0xa5a5a5a5u);
  struct alignas(64) {
    unsigned char map[128];
    DevicePtr out;
    int boxes;
  } params{};
  gpu_driver().encode_tensor_map(params.map, tensor16(tensor.ptr), "core test map");
  params.out = out.ptr, params.boxes = kBoxes;
  launch("core_tma_load", 1, 160, {&params}, 2 * 8192 + 32);
  const auto o = out.get<std::uint16_t>(kBoxes * 4096);
  int wrong = 0;
  for (int j = 0; j < kBoxes; ++j)
    for (int r = 0; r < 64; ++r)
      for (int c = 0; c < 64; ++c) {
        const int row = (j % 4) * 64 + r, plane = j / 4;
        const std::uint16_t want = row < kRows && c < kCols ? in[(plane * kRows + row) * kPitch + c] : 0;
        const std::uint16_t got = o[j * 4096 + swizzled(r, c, 2) / 2];
        if (got != want && ++wrong <= 8)
          ADD_FAILURE() << "box " << j << " row " << r << " column " << c << ": " << got << ", the host says " << want;
      }
  EXPECT_EQ(wrong, 0);
}

TEST_F(CoreHopper, ATmaStoreWritesItsBoxInsideTheTensorAndNothingElse) {
  constexpr std::uint16_t kUntouched = 0xffff;
  constexpr int kSpareRows = 64;  // after the tensor: a store must not reach them
  const std::size_t elements = (kPlanes * kRows + kSpareRows) * kPitch;
  Buffer tensor(elements * 2);
  tensor.fill(0xffffffffu);
  std::vector<std::uint16_t> tiles(2 * 64 * 64);
  for (std::size_t i = 0; i < tiles.size(); ++i) tiles[i] = static_cast<std::uint16_t>(3 * i + 7);
  Buffer tile(tiles.size() * 2);
  tile.put(tiles);
  struct alignas(64) {
    unsigned char map[128];
    DevicePtr tile;
    int row0, plane;
  } params{};
  gpu_driver().encode_tensor_map(params.map, tensor16(tensor.ptr), "core test map");
  const int boxes[2][2] = {{64, 0}, {192, 1}};  // (row0, plane): inside, and across the last row
  for (int b = 0; b < 2; ++b) {
    params.tile = tile.ptr + b * 64 * 64 * 2, params.row0 = boxes[b][0], params.plane = boxes[b][1];
    launch("core_tma_store", 1, 128, {&params}, 8192);
  }
  const auto o = tensor.get<std::uint16_t>(elements);
  int wrong = 0;
  for (std::size_t i = 0; i < elements; ++i) {
    const int c = static_cast<int>(i % kPitch), row = static_cast<int>(i / kPitch % kRows), plane = static_cast<int>(i / kPitch / kRows);
    std::uint16_t want = kUntouched;
    for (int b = 0; b < 2; ++b)
      if (plane == boxes[b][1] && row >= boxes[b][0] && row < boxes[b][0] + 64 && c < kCols)
        want = tiles[b * 4096 + (row - boxes[b][0]) * 64 + c];
    if (o[i] != want && ++wrong <= 8)
      ADD_FAILURE() << "plane " << plane << " row " << row << " column " << c << ": " << o[i] << ", the host says " << want;
  }
  EXPECT_EQ(wrong, 0);
}

TEST_F(CoreHopper, TmaReduceAddsOfSeveralBlocksSumInsideTheTensor) {
  // fp32, 32 columns x 100 rows x 2 planes; boxes of 32 x 64. The box at row 64 of plane 0 crosses
  // the last row: its rows 100 .. 127 are plane 1's first rows in memory and must stay as they were.
  constexpr int kCols32 = 32, kRows32 = 100, kBlocks = 3, kRow0 = 64;
  std::vector<float> init(2 * kRows32 * kCols32), tiles(kBlocks * 64 * kCols32);
  for (std::size_t i = 0; i < init.size(); ++i) init[i] = static_cast<float>(i % 97);
  for (std::size_t i = 0; i < tiles.size(); ++i) tiles[i] = static_cast<float>(static_cast<int>(i % 13) - 6);
  Buffer tensor(init.size() * 4), tile(tiles.size() * 4);
  tensor.put(init), tile.put(tiles);
  TiledTensorMap m;
  m.base = reinterpret_cast<const void*>(tensor.ptr);
  m.rank = 3;
  m.dims[0] = kCols32, m.dims[1] = kRows32, m.dims[2] = 2;
  m.strides_bytes[0] = kCols32 * 4, m.strides_bytes[1] = kCols32 * 4 * kRows32;
  m.box[0] = kCols32, m.box[1] = 64, m.box[2] = 1;
  m.element = TiledTensorMap::Element::f32;
  struct alignas(64) {
    unsigned char map[128];
    DevicePtr tile;
    int row0, plane;
  } params{};
  gpu_driver().encode_tensor_map(params.map, m, "core test map");
  params.tile = tile.ptr, params.row0 = kRow0, params.plane = 0;
  launch("core_tma_reduce", kBlocks, 128, {&params}, 8192);
  const auto o = tensor.get<float>(init.size());
  for (std::size_t i = 0; i < init.size(); ++i) {
    const int c = static_cast<int>(i % kCols32), row = static_cast<int>(i / kCols32 % kRows32), plane = static_cast<int>(i / kCols32 / kRows32);
    float want = init[i];
    if (plane == 0 && row >= kRow0)
      for (int b = 0; b < kBlocks; ++b) want += tiles[b * 64 * kCols32 + (row - kRow0) * kCols32 + c];
    EXPECT_EQ(o[i], want) << "plane " << plane << " row " << row << " column " << c;
  }
}

TEST_F(CoreHopper, MbarrierPhasesCompleteOnCpAsyncAndPlainArrivals) {
  std::vector<std::uint32_t> src(32 * 4);
  for (std::uint32_t i = 0; i < src.size(); ++i) src[i] = 0x5000u + i;
  Buffer in(src.size() * 4), out(32 * 8 * 4);
  in.put(src);
  launch("core_mbarrier", 1, 32, {&in.ptr, &out.ptr});
  const auto o = out.get<std::uint32_t>(32 * 8);
  for (std::uint32_t l = 0; l < 32; ++l) {
    SCOPED_TRACE("lane " + std::to_string(l));
    for (std::uint32_t j = 0; j < 4; ++j) {
      EXPECT_EQ(o[8 * l + j], src[4 * ((l + 1) % 32) + j]) << "phase 0 (cp.async arrivals), word " << j;
      EXPECT_EQ(o[8 * l + 4 + j], 4 * ((l + 3) % 32) + 1000 + j) << "phase 1 (arrivals), word " << j;
    }
  }
}

TEST_F(CoreHopper, NamedBarriersOrderTwoWarps) {
  Buffer out(64 * 4);
  launch("core_named_barriers", 1, 64, {&out.ptr});
  const auto o = out.get<std::uint32_t>(64);
  for (std::uint32_t l = 0; l < 32; ++l) {
    EXPECT_EQ(o[l], 7 * (31 - l) + 1) << "warp 0, lane " << l;
    EXPECT_EQ(o[32 + l], 5 * ((l + 4) % 32) + 2) << "warp 1, lane " << l;
  }
}

TEST_F(CoreHopper, AClusterOfTwoExchangesSharedMemoryThroughRemoteArrivalsAndLoads) {
  constexpr int kBlocks = 4;
  Buffer out(kBlocks * 32 * 4 * 4), ranks(kBlocks * 4);
  out.fill(0);
  launch("core_cluster", kBlocks, 32, {&out.ptr, &ranks.ptr});
  const auto o = out.get<float>(kBlocks * 32 * 4);
  const auto r = ranks.get<std::uint32_t>(kBlocks);
  for (int b = 0; b < kBlocks; ++b) {
    EXPECT_EQ(r[b], static_cast<std::uint32_t>(b % 2)) << "block " << b;
    const float peer = static_cast<float>((b % 2) ^ 1);
    for (int l = 0; l < 32; ++l)
      for (int j = 0; j < 4; ++j)
        EXPECT_EQ(o[4 * (32 * b + l) + j], 100.f * peer + l + 0.25f * j) << "block " << b << " lane " << l << " float " << j;
  }
}

}  // namespace
}  // namespace kgen
