// attention_fwd on the GPU against the fp64 reference, NaN-poisoned outputs (docs/attention.md §5).
// Labelled `gpu`; every test skips cleanly on a machine without one.
#include <cuda.h>
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <random>
#include <utility>
#include <vector>

#include "generator/attention_forward.h"
#include "check/attention_harness.h"
#include "check/host_tensor.h"
#include "tuning/autotune.h"
#include "ops/attention_tuning.h"
#include "ops/lrpe_tuning.h"
#include "tests/gpu/require_gpu.h"
#include "driver/device.h"
#include "driver/gpu_driver.h"
#include "kgen/kgen.hpp"

namespace kgen {
namespace {

// The case and its comparisons, for a failure message.
std::string describe(const AttentionCase& c, const HarnessCheck& r) { return to_string(c) + "\n" + to_string(r); }

struct Shape {
  int b, hq, hkv, nq, nk;
};

// Odd sizes, n_q != n_k both ways, GQA 1/4/8, fully masked causal rows (n_q > n_k).
const Shape kShapes[] = {{1, 1, 1, 1, 1},     {1, 2, 1, 7, 7},       {2, 4, 1, 63, 63},   {1, 8, 1, 1000, 1000},
                         {1, 2, 2, 1337, 1000}, {1, 4, 4, 1000, 1337}, {1, 8, 8, 65, 17},   {1, 8, 2, 17, 300},
                         {3, 4, 4, 128, 128}};
// More query tiles of 128 rows than an H100/H200 has SMs.
const Shape kManyTiles[] = {{4, 16, 4, 1337, 1000}, {2, 32, 8, 1100, 300}};

using Param = std::tuple<DType, int, bool>;

class AttentionForwardGpu : public ::testing::TestWithParam<Param> {};

TEST_P(AttentionForwardGpu, MatchesReferenceOnOddShapesBothLayoutsAndGqa) {
  KGEN_REQUIRE_GPU();
  auto [dtype, d, causal] = GetParam();
  std::uint64_t seed = 1000 * d + causal;
  for (const Shape& s : kShapes)
    for (Layout layout : {Layout::bhnd, Layout::bnhd}) {
      AttentionCase c;
      c.dtype = dtype, c.head_dim = d, c.causal = causal, c.layout = layout, c.seed = seed++;
      c.batch = s.b, c.heads_q = s.hq, c.heads_kv = s.hkv, c.n_q = s.nq, c.n_k = s.nk;
      auto r = check_attention_forward(c);
      EXPECT_TRUE(r.pass) << describe(c, r);
    }
}

INSTANTIATE_TEST_SUITE_P(
    AllDtypesHeadDimsCausal, AttentionForwardGpu,
    ::testing::Combine(::testing::Values(DType::f16, DType::bf16, DType::f32), ::testing::Values(32, 64, 96, 128, 256, 80, 33),
                       ::testing::Bool()),
    [](const auto& info) {
      return std::string(dtype_name(std::get<0>(info.param))) + "_d" + std::to_string(std::get<1>(info.param)) +
             (std::get<2>(info.param) ? "_causal" : "_full");
    });

// Every other multiple of 8 up to 256 runs on a tensor-core tile padded past the head dim
// (zero-filled, never stored): 16-bit inputs only, the general path's cases stay above.
INSTANTIATE_TEST_SUITE_P(
    TensorCoreHeadDims, AttentionForwardGpu,
    ::testing::Combine(::testing::Values(DType::f16, DType::bf16),
                       ::testing::Values(8, 40, 72, 80, 104, 112, 136, 160, 192, 200, 248), ::testing::Bool()),
    [](const auto& info) {
      return std::string(dtype_name(std::get<0>(info.param))) + "_d" + std::to_string(std::get<1>(info.param)) +
             (std::get<2>(info.param) ? "_causal" : "_full");
    });

// Every config the tuner may pick must be correct, not only the heuristic's.
TEST(AttentionForwardGpuConfigs, EveryConfigInTheSpaceIsCorrect) {
  KGEN_REQUIRE_GPU();
  const Target& target = device_info(0).target;
  std::uint64_t seed = 7;
  GpuTestSplit split;
  for (DType t : {DType::bf16, DType::f16})
    for (int d : {64, 128, 256, 80, 200})
      for (bool causal : {false, true})
        for (const auto& config : attention_forward_config_space({t, d, causal}, target)) {
          ++seed;
          if (!split.next()) continue;
          AttentionCase c;
          c.dtype = t, c.head_dim = d, c.causal = causal, c.config = to_string(config), c.seed = seed;
          c.batch = 2, c.heads_q = 4, c.heads_kv = 2, c.n_q = 333, c.n_k = 271;
          auto r = check_attention_forward(c);
          EXPECT_TRUE(r.pass) << describe(c, r);
        }
}

// One Hopper family (sm_90a devices only): every config of the space on the odd shapes (layouts
// alternating) in bf16, the default config in fp16 on both layouts, and a large many-wave GQA
// shape per head dim and mask with the default config. Returns the configs tested.
int check_hopper_family(ForwardPath path) {
  const Target& target = device_info(0).target;
  std::uint64_t seed = 4242;
  int tested = 0;
  GpuTestSplit split;
  auto run = [&](DType t, int d, bool causal, const std::string& config, const Shape& s, Layout layout) {
    AttentionCase c;
    c.dtype = t, c.head_dim = d, c.causal = causal, c.layout = layout, c.config = config, c.seed = seed++;
    c.batch = s.b, c.heads_q = s.hq, c.heads_kv = s.hkv, c.n_q = s.nq, c.n_k = s.nk;
    auto r = check_attention_forward(c);
    EXPECT_TRUE(r.pass) << describe(c, r);
  };
  for (int d : {64, 128, 80, 40, 104, 200, 256, 32})  // 80, 40, 104, 200, 32: tiles padded past the head dim
    for (bool causal : {false, true}) {
      for (const auto& config : attention_forward_config_space({DType::bf16, d, causal}, target)) {
        if (config.path != path) continue;
        ++tested;
        if (!split.next()) continue;
        int i = 0;
        for (const Shape& s : kShapes) run(DType::bf16, d, causal, to_string(config), s, i++ % 2 ? Layout::bnhd : Layout::bhnd);
        // A persistent grid's blocks walk several query tiles each only when there are more tiles
        // than SMs: 704 tiles of odd length; 576 tiles of which, causal (n_q > n_k), 6 of each
        // head's 9 see no key, so blocks pass tiles without a turn.
        if (config.persistent)
          for (const Shape& s : kManyTiles) run(DType::bf16, d, causal, to_string(config), s, i++ % 2 ? Layout::bnhd : Layout::bhnd);
      }
      const AttentionShape big{2, 16, 4, 4096, 4096};
      auto chosen = attention_forward_default_config({DType::f16, d, causal}, big, target, device_info(0).sm_count);
      if (chosen.path != path || !split.next()) continue;
      for (const Shape& s : kShapes)
        for (Layout layout : {Layout::bhnd, Layout::bnhd}) run(DType::f16, d, causal, to_string(chosen), s, layout);
      run(DType::bf16, d, causal, "", {big.batch, big.heads_q, big.heads_kv, big.n_q, big.n_k}, Layout::bnhd);
    }
  if (target.arch == "sm_90a") {
    EXPECT_GT(tested, 0) << "no config of the family in the space on an sm_90a device";
  }
  return tested;
}

TEST(AttentionForwardGpuWgmma, EveryWgmmaConfigOnOddShapesAndTheDefaultsLarge) {
  KGEN_REQUIRE_GPU();
  if (check_hopper_family(ForwardPath::wgmma) == 0) GTEST_SKIP() << "the device has no wgmma";
}

// The warp-specialised TMA kernels, the same way.
TEST(AttentionForwardGpuWs, EveryWsConfigOnOddShapesAndTheDefaultsLarge) {
  KGEN_REQUIRE_GPU();
  if (check_hopper_family(ForwardPath::ws) == 0) GTEST_SKIP() << "the device has no wgmma";
}

// One case of the config tests below: `config` on shape `s`, fp16 every third case (index i),
// layouts alternating.
void check_mixed_case(const std::string& config, int d, bool causal, const Shape& s, int i, std::uint64_t seed) {
  AttentionCase c;
  c.dtype = i % 3 == 2 ? DType::f16 : DType::bf16, c.head_dim = d, c.causal = causal;
  c.layout = i % 2 ? Layout::bnhd : Layout::bhnd, c.config = config, c.seed = seed;
  c.batch = s.b, c.heads_q = s.hq, c.heads_kv = s.hkv, c.n_q = s.nq, c.n_k = s.nk;
  auto r = check_attention_forward(c);
  EXPECT_TRUE(r.pass) << describe(c, r);
}

// Split keys on one warpgroup (decode with few sequences): few query rows against long rows on
// grids of few blocks, so each query tile's keys are cut over several blocks; one shape whose last
// key range is empty (5 key tiles over 4 blocks), GQA, both masks, padded head dims.
TEST(AttentionForwardGpuWgmma, SplitKeysOnDecodeShapes) {
  KGEN_REQUIRE_GPU();
  if (device_info(0).target.arch != "sm_90a") GTEST_SKIP() << "the device has no wgmma";
  const Shape shapes[] = {{1, 32, 8, 1, 4097}, {2, 8, 8, 3, 1000}, {1, 4, 1, 16, 9000}, {1, 33, 33, 1, 600},
                          {1, 8, 2, 64, 2000}};
  std::uint64_t seed = 9300;
  int tested = 0;
  for (const char* config : {"wg:bm64:bn128:s2:split", "wg:bm64:bn64:s2:split"})
    for (int d : {64, 128, 256, 80})
      for (bool causal : {false, true}) {
        // 128-key tiles exceed one warpgroup's registers at d = 256.
        if (check_attention_forward_config({DType::bf16, d, causal}, *parse_attention_forward_config(config),
                                           device_info(0).target))
          continue;
        ++tested;
        int i = 0;
        for (const Shape& s : shapes) check_mixed_case(config, d, causal, s, i++, seed++);
      }
  EXPECT_EQ(tested, 14);
}

// Persistent grids with one Q buffer (in the space, and defaults for long rows): the 176-key
// tile on the 128-column tile and the 80-key tile on the 256-column one, on the odd shapes and
// on more query tiles than SMs (blocks walk several tiles; causal with n_q > n_k, tiles with no
// key), both layouts, both masks.
TEST(AttentionForwardGpuWs, PersistentWithOneQBuffer) {
  KGEN_REQUIRE_GPU();
  if (device_info(0).target.arch != "sm_90a") GTEST_SKIP() << "the device has no wgmma";
  std::uint64_t seed = 7700;
  const std::pair<const char*, std::vector<int>> forms[] = {{"ws:bm128:bn176:s2:pp1:persist", {128, 80, 112}},
                                                            {"ws:bm128:bn80:s2:pp1:persist", {256, 200}}};
  for (const auto& [config, dims] : forms)
    for (int d : dims)
      for (bool causal : {false, true}) {
        int i = 0;
        for (const Shape& s : kShapes) check_mixed_case(config, d, causal, s, i++, seed++);
        for (const Shape& s : kManyTiles) check_mixed_case(config, d, causal, s, i++, seed++);
      }
}

// 96- and 112-key tiles on the 192-column tile (head dims 136–192, plain attention, one block
// per query tile; 112 is the default there): the odd shapes, both layouts and 16-bit types, both
// masks, the padded head dims, and each head dim's default on a large shape.
TEST(AttentionForwardGpuWs, NinetySixAndOneHundredTwelveKeyTilesAtWideHeadDims) {
  KGEN_REQUIRE_GPU();
  if (device_info(0).target.arch != "sm_90a") GTEST_SKIP() << "the device has no wgmma";
  std::uint64_t seed = 8800;
  GpuTestSplit split;  // KGEN_GPU_TEST_SPLIT: each (config, head dim, mask) in one process of several
  for (const char* config : {"ws:bm128:bn112:s2:pp1", "ws:bm128:bn96:s2:pp1"})
    for (int d : {192, 160, 136, 184})
      for (bool causal : {false, true}) {
        seed += 100;
        if (!split.next()) continue;
        for (int i = 0; i < static_cast<int>(std::size(kShapes)); ++i) check_mixed_case(config, d, causal, kShapes[i], i, seed + i);
      }
  const AttentionShape big{2, 16, 4, 4096, 4096};
  for (int d : {192, 160})
    for (bool causal : {false, true}) {
      ++seed;
      if (!split.next()) continue;
      const auto chosen = attention_forward_default_config({DType::bf16, d, causal}, big, device_info(0).target,
                                                           device_info(0).sm_count);
      EXPECT_EQ(to_string(chosen), "ws:bm128:bn112:s2:pp1") << d;
      check_mixed_case("", d, causal, {big.batch, big.heads_q, big.heads_kv, big.n_q, big.n_k}, 1, seed);
    }
}

// Stream-K forms (":persist:sk", no mask): query tiles cut between blocks wherever the key tiles
// of all query tiles do not divide evenly over the grid. Shapes with just more query tiles than
// SMs (nearly every tile cut), several rounds of whole tiles before the cut ones (888 tiles),
// many tiles with a partial last key tile, one and two key tiles,
// partial query tiles, GQA, both layouts and both 16-bit types, and the plain fallback without
// keys' cuts (one key tile).
TEST(AttentionForwardGpuWs, StreamKCutsQueryTilesBetweenBlocks) {
  KGEN_REQUIRE_GPU();
  const Target& target = device_info(0).target;
  if (target.arch != "sm_90a") GTEST_SKIP() << "the device has no wgmma";
  const Shape shapes[] = {{1, 133, 133, 128, 1000}, {2, 67, 67, 100, 300}, {3, 20, 5, 1000, 1337},
                          {1, 140, 35, 200, 129},   {1, 200, 200, 64, 64},  {2, 8, 2, 1337, 7},
                          {3, 37, 37, 1000, 700}};
  std::uint64_t seed = 8800;
  int tested = 0;
  for (int d : {64, 48, 128, 256, 96, 200})
    for (const auto& config : attention_forward_config_space({DType::bf16, d, false}, target)) {
      if (!config.stream_k) continue;
      ++tested;
      int i = 0;
      for (const Shape& s : shapes) check_mixed_case(to_string(config), d, false, s, i++, seed++);
    }
  EXPECT_GT(tested, 0);
}

// A stream-K launch captured in a CUDA graph and replayed with new inputs: the flags are zeroed
// inside the graph, so each replay waits for its own cut tiles' parts and gives the same bits as
// an eager call on the same inputs. 133 heads of one 128-row query tile and 8 key tiles over at
// most 132 blocks: nearly every tile is cut.
TEST(AttentionForwardGpuWs, StreamKReplaysInACudaGraph) {
  KGEN_REQUIRE_GPU();
  if (device_info(0).target.arch != "sm_90a") GTEST_SKIP() << "the device has no wgmma";
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(lib, nullptr);
  auto begin_capture = reinterpret_cast<decltype(&::cuStreamBeginCapture_v2)>(dlsym(lib, "cuStreamBeginCapture_v2"));
  auto end_capture = reinterpret_cast<decltype(&::cuStreamEndCapture)>(dlsym(lib, "cuStreamEndCapture"));
  auto instantiate = reinterpret_cast<decltype(&::cuGraphInstantiateWithFlags)>(dlsym(lib, "cuGraphInstantiateWithFlags"));
  auto graph_launch = reinterpret_cast<decltype(&::cuGraphLaunch)>(dlsym(lib, "cuGraphLaunch"));
  auto exec_destroy = reinterpret_cast<decltype(&::cuGraphExecDestroy)>(dlsym(lib, "cuGraphExecDestroy"));
  auto graph_destroy = reinterpret_cast<decltype(&::cuGraphDestroy)>(dlsym(lib, "cuGraphDestroy"));
  ASSERT_TRUE(begin_capture && end_capture && instantiate && graph_launch && exec_destroy && graph_destroy);

  const GpuDriver& gpu = gpu_driver();
  use_primary_context(0);
  HostTensor hq = make_host(1, 133, 128, 128, Layout::bhnd, DType::bf16);
  HostTensor hk = make_host(1, 133, 1000, 128, Layout::bhnd, DType::bf16), hv = hk;
  DevicePtr q = gpu.alloc(hq.bytes.size(), "q"), k = gpu.alloc(hk.bytes.size(), "k"), v = gpu.alloc(hv.bytes.size(), "v");
  DevicePtr o_graph = gpu.alloc(hq.bytes.size(), "o"), o_eager = gpu.alloc(hq.bytes.size(), "o");
  DevicePtr lse = gpu.alloc(133 * 128 * 4, "lse");
  std::mt19937_64 rng(77);
  auto upload = [&](HostTensor& t, DevicePtr dst) {  // new N(0, 1) values
    fill_random(t, rng);
    gpu.copy_to_device(dst, t.bytes.data(), t.bytes.size());
  };
  upload(hq, q), upload(hk, k), upload(hv, v);
  const std::int64_t lse_shape[3] = {1, 133, 128};
  const TensorView lse_view = make_contiguous_view(reinterpret_cast<void*>(lse), DType::f32, 3, lse_shape, 0);
  AttentionOptions options;
  options.config = "ws:bm128:bn128:s2:pp1:persist:sk";
  GpuStream stream = gpu.create_stream();
  auto call = [&](DevicePtr o) {
    auto at = [](const HostTensor& t, DevicePtr p) { return t.view(reinterpret_cast<void*>(p), 0); };
    attention_forward(at(hq, q), at(hk, k), at(hv, v), at(hq, o), &lse_view, options, stream);
  };
  call(o_eager);  // compiles and loads the kernel outside the capture
  gpu.synchronize(stream, "warm-up");

  CUgraph graph = nullptr;
  CUgraphExec exec = nullptr;
  ASSERT_EQ(begin_capture(static_cast<CUstream>(stream), CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
  call(o_graph);
  ASSERT_EQ(end_capture(static_cast<CUstream>(stream), &graph), CUDA_SUCCESS);
  ASSERT_EQ(instantiate(&exec, graph, 0), CUDA_SUCCESS);
  std::vector<std::uint8_t> from_graph(hq.bytes.size()), from_eager(hq.bytes.size());
  for (int replay = 0; replay < 3; ++replay) {
    upload(hq, q);
    ASSERT_EQ(graph_launch(exec, static_cast<CUstream>(stream)), CUDA_SUCCESS);
    call(o_eager);
    gpu.synchronize(stream, "replay");
    gpu.copy_to_host(from_graph.data(), o_graph, from_graph.size());
    gpu.copy_to_host(from_eager.data(), o_eager, from_eager.size());
    EXPECT_EQ(from_graph, from_eager) << "replay " << replay;
  }
  exec_destroy(exec);
  graph_destroy(graph);
  gpu.destroy_stream(stream);
  for (DevicePtr p : {q, k, v, o_graph, o_eager, lse}) gpu.free(p);
}

// Decode-like calls on the launch path's own choice: grids of a few blocks, whose keys a Hopper
// device splits over several blocks and merges in a second kernel (shape class 2). GQA calls
// with one query row pack their heads first; n_k from one key to 16k, causal and not, both
// layouts.
TEST(AttentionForwardGpuDecode, SmallGridsMatchTheReference) {
  KGEN_REQUIRE_GPU();
  const Shape shapes[] = {{1, 32, 8, 1, 1},    {1, 32, 8, 1, 7},     {1, 32, 8, 1, 513},  {1, 32, 8, 1, 4097},
                          {1, 32, 8, 1, 16384}, {2, 8, 8, 1, 5000},   {1, 4, 4, 3, 1337},  {1, 32, 8, 16, 3000},
                          {1, 8, 1, 1, 2048},   {1, 2, 2, 130, 2000}};
  std::uint64_t seed = 9100;
  int split = 0;
  for (DType t : {DType::bf16, DType::f16})
    for (int d : {128, 64, 80, 256})
      for (bool causal : {false, true})
        for (const Shape& s : shapes) {
          AttentionCase c;
          c.dtype = t, c.head_dim = d, c.causal = causal, c.seed = seed++;
          c.layout = seed % 2 ? Layout::bnhd : Layout::bhnd;
          c.batch = s.b, c.heads_q = s.hq, c.heads_kv = s.hkv, c.n_q = s.nq, c.n_k = s.nk;
          auto r = check_attention_forward(c);
          EXPECT_TRUE(r.pass) << describe(c, r);
          const AttentionShape shape{s.b, s.hq, s.hkv, s.nq, s.nk};
          split += attention_forward_default_config({t, d, causal}, shape, device_info(0).target, device_info(0).sm_count)
                       .split_keys;
        }
  if (device_info(0).target.arch == "sm_90a") {
    EXPECT_GT(split, 0) << "no decode shape took the split-keys path";
  }
}

// Large shapes: several waves of blocks on the device, sampled rows of every head checked.
TEST(AttentionForwardGpuLarge, ManyWavesAndLongSequences) {
  KGEN_REQUIRE_GPU();
  for (bool causal : {false, true})
    for (int d : {64, 128}) {
      AttentionCase c;
      c.dtype = DType::bf16, c.head_dim = d, c.causal = causal, c.layout = Layout::bnhd;
      c.batch = 4, c.heads_q = 32, c.heads_kv = 8, c.n_q = 2048, c.n_k = 2048, c.seed = 99 + d;
      auto r = check_attention_forward(c);
      EXPECT_TRUE(r.pass) << describe(c, r);
      AttentionCase longer = c;
      longer.batch = 1, longer.heads_q = 2, longer.heads_kv = 1, longer.n_q = 8192, longer.n_k = 8192;
      auto r2 = check_attention_forward(longer);
      EXPECT_TRUE(r2.pass) << describe(longer, r2);
    }
}

}  // namespace
}  // namespace kgen

namespace kgen {
namespace {

// The GPU reference that checks large shapes is itself checked against the fp64 CPU reference.
TEST(AttentionReferenceGpu, MatchesTheCpuReference) {
  KGEN_REQUIRE_GPU();
  for (DType t : {DType::bf16, DType::f16, DType::f32})
    for (bool causal : {false, true})
      for (Shape s : {Shape{1, 4, 2, 300, 200}, Shape{2, 2, 2, 129, 513}, Shape{1, 8, 1, 1, 77}}) {
        AttentionCase c;
        c.dtype = t, c.head_dim = t == DType::f32 ? 80 : 64, c.causal = causal, c.layout = Layout::bnhd;
        c.batch = s.b, c.heads_q = s.hq, c.heads_kv = s.hkv, c.n_q = s.nq, c.n_k = s.nk, c.seed = 5 + s.nq;
        auto r = check_reference_gpu_against_cpu(c);
        EXPECT_TRUE(r.pass) << describe(c, r);
      }
}

}  // namespace
}  // namespace kgen

namespace kgen {
namespace {

// A real tuning run: every candidate checked before it is timed, a passing winner.
void expect_tuned(const TuningProblem& problem, std::size_t min_candidates) {
  TuneOptions options;
  options.warmup = 3, options.reps = 10;
  TuneResult r = tune(problem, options);
  ASSERT_TRUE(r.winner) << problem.variant_key();
  EXPECT_GE(r.candidates.size(), min_candidates);
  for (const auto& cand : r.candidates) {
    if (!cand.error.empty()) continue;
    EXPECT_TRUE(cand.check.pass) << cand.config << ": " << cand.check.detail;
    EXPECT_GT(cand.timing.median_ms, 0) << cand.config;
    if (cand.check.pass) {  // the rate of the timing shown (the final's for finalists)
      EXPECT_DOUBLE_EQ(cand.rate, problem.rate(cand.timing.median_ms)) << cand.config;
    }
  }
  EXPECT_TRUE(r.candidates[*r.winner].check.pass);
  TuningRecord rec = winner_record(problem, r);
  EXPECT_EQ(rec.op, problem.op());
  EXPECT_EQ(rec.config, r.candidates[*r.winner].config);
}

AttentionCase small_attention() {
  AttentionCase c;
  c.dtype = DType::bf16, c.head_dim = 64, c.batch = 2, c.heads_q = c.heads_kv = 8, c.n_q = c.n_k = 1024;
  return c;
}

TEST(AutotuneGpu, TunesAShapeAndTheWinnerPasses) {
  KGEN_REQUIRE_GPU();
  expect_tuned(*attention_forward_tuning(small_attention()), 4);
}

TEST(AutotuneGpu, TunesEveryOtherOperator) {
  KGEN_REQUIRE_GPU();
  AttentionCase c = small_attention();
  c.causal = true;
  expect_tuned(*attention_backward_tuning(c, false), 2);
  expect_tuned(*attention_backward_tuning(c, true), 2);
  expect_tuned(*attention_double_backward_tuning(c), 2);
  LrpeCase l;
  l.act = LrpeAct::silu, l.direction = LrpeDirection::backward, l.batch = 2, l.heads = 4, l.n = 1000, l.d = 64;
  expect_tuned(*lrpe_tuning(l), 2);
  LrpeCase md = l;
  md.op = LrpeOp::md_cosine, md.act = LrpeAct::softmax_seq, md.grid = {16, 16}, md.extra = 10, md.n = 266;
  expect_tuned(*lrpe_tuning(md), 2);
}

}  // namespace
}  // namespace kgen
