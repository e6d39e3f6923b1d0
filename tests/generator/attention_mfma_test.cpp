// The MFMA attention family (generator/attention_mfma.h): config text, validity rules per target
// (AMD only, LDS limits of 64 KiB on gfx90a/gfx942 and 160 KiB on gfx950, VGPR estimate),
// defaults, and what the rendered kernels launch with.
#include <gtest/gtest.h>

#include "generator/attention_backward.h"
#include "generator/attention_forward.h"
#include "generator/attention_mfma.h"
#include "kgen_device/attention/mfma_config.h"
#include "kgen_device/core/mfma_layout.h"

namespace kgen {
namespace {

Target target(const char* arch) { return *parse_target(arch); }

TEST(AttentionMfma, ConfigTextRoundTrips) {
  const auto fwd = parse_attention_forward_config("mfma:bm128:bn64:w4");
  ASSERT_TRUE(fwd);
  EXPECT_EQ(fwd->path, ForwardPath::mfma);
  EXPECT_EQ(fwd->block_m, 128);
  EXPECT_EQ(fwd->block_n, 64);
  EXPECT_EQ(fwd->warps, 4);
  EXPECT_EQ(to_string(*fwd), "mfma:bm128:bn64:w4");
  const auto bwd = parse_attention_backward_config("mfma:bm32:bn64:w2");
  ASSERT_TRUE(bwd);
  EXPECT_EQ(bwd->path(), BackwardPath::mfma);
  EXPECT_EQ(to_string(*bwd), "mfma:bm32:bn64:w2");
  EXPECT_FALSE(parse_attention_forward_config("mfma:bm128:bn64"));
  EXPECT_FALSE(parse_attention_backward_config("mfma:bm32:bn64:x2"));
}

// 134217730 waves of 32 rows are 4294967360 rows, which wrapped in int to a valid 64: the text
// is refused by the parser, the config built in code by the check.
TEST(AttentionMfma, WaveCountsWhoseRowsOverflowAreRefused) {
  EXPECT_FALSE(parse_attention_forward_config("mfma:bm64:bn64:w134217730"));
  EXPECT_FALSE(parse_attention_backward_config("mfma:bm32:bn64:w134217730"));
  const AttentionForwardConfig fwd{.path = ForwardPath::mfma, .stages = 1, .warps = 134217730};
  EXPECT_TRUE(check_attention_forward_config({DType::bf16, 128, false}, fwd, target("gfx942")));
  const AttentionBackwardConfig bwd = BackwardMfmaConfig{.query_rows = 32, .keys = 64, .waves = 134217730};
  EXPECT_TRUE(check_attention_backward_config({DType::f16, 64, false}, bwd, target("gfx942")));
  EXPECT_FALSE(check_attention_forward_config({DType::bf16, 128, false}, {.path = ForwardPath::mfma, .stages = 1, .warps = 2},
                                              target("gfx942")));
}

TEST(AttentionMfma, InvalidOnNvidiaAndForFp32OrOtherHeadDims) {
  const AttentionForwardConfig c{.path = ForwardPath::mfma, .block_m = 128, .stages = 1, .warps = 4};
  auto why = check_attention_forward_config({DType::bf16, 128, false}, c, target("sm_90a"));
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("AMD"), std::string::npos) << *why;
  EXPECT_TRUE(check_attention_forward_config({DType::f32, 128, false}, c, target("gfx942")));
  EXPECT_TRUE(check_attention_forward_config({DType::bf16, 96, false}, c, target("gfx942")));
  EXPECT_FALSE(check_attention_forward_config({DType::bf16, 128, false}, c, target("gfx942")));
  EXPECT_TRUE(check_attention_forward_config({DType::bf16, 128, false}, {.path = ForwardPath::mfma, .block_m = 128, .stages = 1, .warps = 2}, target("gfx942")))
      << "32 query rows per wave";
  const AttentionBackwardConfig b = BackwardMfmaConfig{.query_rows = 32, .keys = 64, .waves = 2};
  EXPECT_TRUE(check_attention_backward_config({DType::f16, 64, false}, b, target("sm_80")));
  EXPECT_FALSE(check_attention_backward_config({DType::f16, 64, false}, b, target("gfx90a")));
  EXPECT_TRUE(check_attention_double_backward_config({DType::f16, 64, false}, b, target("gfx942")));
  EXPECT_TRUE(check_attention_double_backward_config({DType::f16, 64, false}, b, target("sm_90a")));
  for (const char* arch : {"sm_80", "sm_90a"}) {
    for (const auto& c : attention_forward_config_space({DType::bf16, 128, false}, target(arch)))
      EXPECT_NE(c.path, ForwardPath::mfma) << arch;
    for (const auto& c : attention_backward_config_space({DType::bf16, 128, false}, target(arch)))
      EXPECT_NE(c.path(), BackwardPath::mfma) << arch;
  }
}

// gfx950's 160 KiB of LDS admit the tiles that gfx90a/gfx942's 64 KiB do not.
TEST(AttentionMfma, LdsLimitsArePerTarget) {
  // The forward's widest tiles: 64 KiB swizzled (gfx90a, gfx942), more padded (gfx950).
  const AttentionForwardSpec fwd{DType::bf16, 128, false};
  const AttentionForwardConfig wide{.path = ForwardPath::mfma, .block_m = 128, .block_n = 128, .stages = 1, .warps = 4};
  EXPECT_EQ(attention_mfma::forward_lds_bytes(128, 128, true), 64 * 1024);
  EXPECT_GT(attention_mfma::forward_lds_bytes(128, 128, false), 64 * 1024);
  for (const char* arch : {"gfx90a", "gfx942", "gfx950"})
    EXPECT_FALSE(check_attention_forward_config(fwd, wide, target(arch))) << arch;
  ASSERT_GT(attention_mfma::kv_tiles_lds_bytes(128, 128), 64 * 1024);
  const AttentionBackwardSpec bwd{DType::bf16, 128, true};
  const AttentionBackwardConfig big = BackwardMfmaConfig{.query_rows = 64, .keys = 128, .waves = 4};
  ASSERT_GT(attention_mfma::kv_lds_bytes(128, 64, 128, true), 64 * 1024);
  EXPECT_TRUE(check_attention_backward_config(bwd, big, target("gfx942")));
  EXPECT_FALSE(check_attention_backward_config(bwd, big, target("gfx950")));
  EXPECT_GT(attention_backward_config_space(bwd, target("gfx950")).size(),
            attention_backward_config_space(bwd, target("gfx942")).size());
}

TEST(AttentionMfma, EveryConfigInTheSpaceFitsItsTargetAndTheDefaultIsInIt) {
  const AttentionShape shape{2, 16, 4, 2048, 2048};
  for (const char* arch : {"gfx90a", "gfx942", "gfx950"})
    for (DType t : {DType::f16, DType::bf16})
      for (int d : {64, 128})
        for (bool causal : {false, true}) {
          const Target tg = target(arch);
          const AttentionForwardSpec fwd{t, d, causal};
          const auto space = mfma_forward_config_space(fwd, tg);
          ASSERT_FALSE(space.empty()) << arch;
          for (const auto& c : space) {
            const KernelSource k = render_attention_forward(fwd, c);
            EXPECT_LE(k.smem_bytes, tg.max_smem_per_block) << k.variant;
            EXPECT_EQ(k.threads, c.block_m * 2) << k.variant << ": 64 lanes per 32 query rows";
            EXPECT_NE(k.source.find("forward_mfma.cuh"), std::string::npos);
          }
          const auto def = attention_forward_default_config(fwd, shape, tg, 304);
          EXPECT_NE(std::find(space.begin(), space.end(), def), space.end()) << arch << " " << to_string(def);
          const AttentionBackwardSpec bwd{t, d, causal};
          const auto bspace = mfma_backward_config_space(bwd, tg);
          ASSERT_FALSE(bspace.empty()) << arch;
          // One block's accumulators fit every target's VGPR estimate: no column splits.
          for (const auto& c : bspace)
            EXPECT_EQ(c.as<BackwardMfmaConfig>()->column_splits, 1) << arch << " " << to_string(c);
          for (const auto& c : bspace)
            for (bool deterministic : {false, true})
              for (BackwardKernel kernel : attention_backward_kernels(c, deterministic)) {
                const KernelSource k = render_attention_backward(bwd, c, kernel);
                EXPECT_LE(k.smem_bytes, tg.max_smem_per_block) << k.variant;
              }
          const auto bdef = attention_backward_default_config(bwd, shape, tg, 304);
          EXPECT_NE(std::find(bspace.begin(), bspace.end(), bdef), bspace.end()) << arch << " " << to_string(bdef);
        }
}

// Two column splits: the config text, the validity rules, the template argument and twice the
// key-major blocks.
TEST(AttentionMfma, ColumnSplitsRoundTripAndDoubleTheKeyMajorGrid) {
  auto c = parse_attention_backward_config("mfma:bm32:bn64:w2:c2");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->as<BackwardMfmaConfig>()->column_splits, 2);
  EXPECT_EQ(to_string(*c), "mfma:bm32:bn64:w2:c2");
  EXPECT_EQ(parse_attention_backward_config("mfma:bm32:bn64:w2")->as<BackwardMfmaConfig>()->column_splits, 1);
  for (const char* bad : {"mfma:bm32:bn64:w2:c1", "mfma:bm32:bn64:w2:x2", "fa2:bm64:bn128:w8:c2"})
    EXPECT_FALSE(parse_attention_backward_config(bad)) << bad;
  const AttentionBackwardSpec d128{DType::f16, 128, false}, d64{DType::f16, 64, false};
  const AttentionBackwardConfig one = BackwardMfmaConfig{.query_rows = 32, .keys = 64, .waves = 2};
  for (const char* arch : {"gfx90a", "gfx942"}) {
    EXPECT_FALSE(check_attention_backward_config(d128, one, target(arch))) << arch;
    EXPECT_FALSE(check_attention_backward_config(d128, *c, target(arch))) << arch;
  }
  const auto why = check_attention_backward_config(d64, *c, target("gfx942"));
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("head_dim=128"), std::string::npos) << *why;
  EXPECT_EQ(attention_backward_default_config(d128, {2, 16, 4, 2048, 2048}, target("gfx90a"), 104), one);
  EXPECT_EQ(attention_backward_default_config(d128, {2, 16, 4, 2048, 2048}, target("gfx942"), 304), one);
  const KernelSource kv = render_attention_backward(d128, *c, BackwardKernel::kv_atomic);
  EXPECT_NE(kv.source.find("/*Splits=*/2"), std::string::npos) << kv.source;
  EXPECT_NE(kv.variant.find(":c2"), std::string::npos) << kv.variant;
  const AttentionShape shape{2, 8, 2, 1000, 777};
  EXPECT_EQ(attention_backward_grid(*c, BackwardKernel::kv_atomic, shape, 128, 132).x, 2 * ((777u + 63) / 64));
  EXPECT_EQ(attention_backward_grid(one, BackwardKernel::kv_atomic, shape, 128, 132).x, (777u + 63) / 64);
}

// The launch grids the runtime computes match the tiles the kernels were rendered for.
TEST(AttentionMfma, GridsMatchTheRenderedTiles) {
  const AttentionShape shape{2, 8, 2, 1000, 777};
  const AttentionBackwardSpec spec{DType::bf16, 128, true};
  const AttentionBackwardConfig c = BackwardMfmaConfig{.query_rows = 32, .keys = 64, .waves = 2};
  const KernelSource kv = render_attention_backward(spec, c, BackwardKernel::kv_atomic);
  EXPECT_EQ(kv.threads, 128);
  const LaunchGrid kv_grid = attention_backward_grid(c, BackwardKernel::kv_atomic, shape, 128, 132);
  EXPECT_EQ(kv_grid.x, (777u + 63) / 64);
  EXPECT_EQ(kv_grid.y, 2u);
  const KernelSource dq = render_attention_backward(spec, c, BackwardKernel::dq);
  EXPECT_NE(dq.source.find("attention_backward_mfma_dq"), std::string::npos);
  const int dq_rows = dq.threads / 64 * attention_mfma::kWaveRows;
  EXPECT_EQ(attention_backward_grid(c, BackwardKernel::dq, shape, 128, 132).x, static_cast<unsigned>((1000 + dq_rows - 1) / dq_rows));
  const AttentionForwardConfig f{.path = ForwardPath::mfma, .block_n = 32, .stages = 1, .warps = 2};
  EXPECT_EQ(attention_forward_grid(f, shape).x, (1000u + 63) / 64);
}

// The forward's SwizzledLds tiles (mfma_config.h): each layout a permutation of its tile, the
// transposed stage's one-address form, and no bank conflict in the forward's reads and writes
// under the model written there (32 banks; phases of 8 lanes for 16-byte accesses, 16 for
// 8-byte ones), at every tile shape of the forward's config space. Accesses as the kernel
// issues them: K written by TileStage<BN, D, T, false> (16 bytes: row i / (D/8), unit i mod D/8
// of chunk i), read 16 bytes a lane (row a_row(lane), columns 16·j + 8·(lane / 32)); Vᵀ
// written by TileStage<BN, D, T, true> (8 bytes: keys r .. r + 3 of rows c + k), read 8 bytes
// a lane (row a_row(lane), keys 8·s + 4·(lane / 32) of each 32).
namespace swizzle_model {
using attention_mfma::SwizzledLds;

// Most distinct 4-byte words one bank serves in any phase of `lanes` lanes (offsets in
// elements, -1: lane idle), each lane reading `bytes` from its offset.
int conflict_ways(const std::vector<int>& offsets, int bytes) {
  const int lanes = 128 / bytes;
  int worst = 1;
  for (std::size_t p = 0; p < offsets.size(); p += lanes) {
    std::vector<std::vector<int>> words(32);
    for (std::size_t l = p; l < p + lanes && l < offsets.size(); ++l) {
      if (offsets[l] < 0) continue;
      for (int w = 0; w < bytes / 4; ++w) {
        const int word = offsets[l] / 2 + w;
        auto& bank = words[word % 32];
        if (std::find(bank.begin(), bank.end(), word) == bank.end()) bank.push_back(word);
        worst = std::max(worst, static_cast<int>(bank.size()));
      }
    }
  }
  return worst;
}

template <int D, int BN, int T>
void check_tiles(int expected_v_write_ways) {
  SCOPED_TRACE("d = " + std::to_string(D) + ", bn = " + std::to_string(BN) + ", threads = " + std::to_string(T));
  std::vector<int> seen_k(BN * D, 0), seen_v(D * BN, 0);
  for (int r = 0; r < BN; ++r)
    for (int c = 0; c < D; ++c) {
      ++seen_k.at(SwizzledLds::row_major<D>(r, c));
      ++seen_v.at(SwizzledLds::transposed<BN>(c, r));
    }
  EXPECT_EQ(std::count(seen_k.begin(), seen_k.end(), 1), BN * D);
  EXPECT_EQ(std::count(seen_v.begin(), seen_v.end(), 1), BN * D);
  for (int c = 0; c < D; c += (BN * D == 16 * T ? 4 : 8))
    for (int k = 0; k < (BN * D == 16 * T ? 4 : 8); ++k)
      for (int r = 0; r < BN; r += 4)
        EXPECT_EQ(SwizzledLds::transposed<BN>(c + k, r),
                  k * BN + (SwizzledLds::transposed<BN>(c, r) ^ SwizzledLds::transposed_xor<BN>(k)));
  // K written: 16 bytes a lane, chunks in thread order.
  for (int first = 0; first < BN * D / 8; first += 64) {
    std::vector<int> at;
    for (int i = first; i < first + 64; ++i)
      at.push_back(i < BN * D / 8 ? SwizzledLds::row_major<D>(i / (D / 8), 8 * (i % (D / 8))) : -1);
    EXPECT_EQ(conflict_ways(at, 16), 1) << "K write";
  }
  // K read: 16 bytes a lane.
  for (int row0 = 0; row0 < BN; row0 += 32)
    for (int j = 0; j < D / 16; ++j) {
      std::vector<int> at;
      for (int lane = 0; lane < 64; ++lane) at.push_back(SwizzledLds::row_major<D>(row0 + lane % 32, 16 * j + 8 * (lane / 32)));
      EXPECT_EQ(conflict_ways(at, 16), 1) << "K read";
    }
  // Vᵀ written: TileStage<BN, D, T, true>'s chunks (kChunkCols columns of 4 rows), 8 bytes a lane.
  const int chunk_cols = BN * D == 16 * T ? 4 : 8, col_chunks = D / chunk_cols, chunks = BN / 4 * col_chunks;
  int v_write_ways = 1;
  for (int first = 0; first < chunks; first += 64)
    for (int k = 0; k < chunk_cols; ++k) {
      std::vector<int> at;
      for (int i = first; i < first + 64; ++i) {
        const int r = 4 * (i % 4 + 4 * (i / (4 * col_chunks))), c = chunk_cols * (i / 4 % col_chunks);
        at.push_back(i < chunks ? SwizzledLds::transposed<BN>(c + k, r) : -1);
      }
      v_write_ways = std::max(v_write_ways, conflict_ways(at, 8));
    }
  EXPECT_EQ(v_write_ways, expected_v_write_ways) << "Vᵀ write";
  // Vᵀ read: 8 bytes a lane.
  for (int col0 = 0; col0 < D; col0 += 32)
    for (int key0 = 0; key0 < BN; key0 += 8) {
      std::vector<int> at;
      for (int lane = 0; lane < 64; ++lane) at.push_back(SwizzledLds::transposed<BN>(col0 + lane % 32, key0 + 4 * (lane / 32)));
      EXPECT_EQ(conflict_ways(at, 8), 1) << "Vᵀ read";
    }
}

// Every key tile of head dim D, with 256 and 128 threads: 64- and 128-key tiles conflict-free in
// every access, 32-key tiles with Vᵀ writes two ways.
template <int D>
void check_head_dim() {
  check_tiles<D, 64, 256>(1);
  check_tiles<D, 64, 128>(1);
  check_tiles<D, 128, 256>(1);
  check_tiles<D, 128, 128>(1);
  check_tiles<D, 32, 256>(2);
  check_tiles<D, 32, 128>(2);
}
}  // namespace swizzle_model

TEST(AttentionMfma, ForwardSwizzledTilesArePermutationsWithoutBankConflicts) {
  swizzle_model::check_head_dim<128>();
  swizzle_model::check_head_dim<64>();
}

// The key-major backward's ChainPairLds tiles on gfx950 (32 queries, D rows): inside the padded
// tile's space and one-to-one, TileStage's one-address form of a chunk's rows, each lane's 8
// elements of a v_mfma_f32_32x32x16 chain step at consecutive positions 16·s + 8·(lane / 32),
// reads (16 bytes a lane) without bank conflicts, and writes (8 bytes a lane, TileStage<32, D, T,
// true>'s chunks) with the padded tile's conflicts.
template <int D, int T>
void check_chain_pairs() {
  SCOPED_TRACE("d = " + std::to_string(D) + ", threads = " + std::to_string(T));
  using attention_mfma::ChainPairLds;
  constexpr int BM = 32;
  std::vector<int> seen(D * attention_mfma::lds_row_transposed(BM), 0);
  for (int c = 0; c < D; ++c)
    for (int r = 0; r < BM; ++r) ++seen.at(ChainPairLds::transposed<BM>(c, r));
  EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), BM * D);
  for (int c = 0; c < D; c += 2)
    for (int k = 0; k < 8 && c + k < D; ++k)
      for (int r = 0; r < BM; r += 4)
        for (int j = 0; j < 4; ++j)
          EXPECT_EQ(ChainPairLds::transposed<BM>(c + k, r + j),
                    ChainPairLds::transposed<BM>(c, r) + ChainPairLds::row_start<BM>(k) + j);
  for (int s = 0; s < 2; ++s)
    for (int lane = 0; lane < 64; ++lane)
      for (int e = 0; e < 8; ++e)
        EXPECT_EQ(ChainPairLds::chain_position(mfma::chain_row(16, s, mfma::a_k(16, lane, e))), 16 * s + 8 * (lane / 32) + e);
  for (int col0 = 0; col0 < D; col0 += 32)
    for (int s = 0; s < 2; ++s) {
      std::vector<int> at;
      for (int lane = 0; lane < 64; ++lane) at.push_back(ChainPairLds::row_start<BM>(col0 + lane % 32) + 16 * s + 8 * (lane / 32));
      EXPECT_EQ(swizzle_model::conflict_ways(at, 16), 1) << "read";
    }
  const int chunk_cols = BM * D == 16 * T ? 4 : 8, col_chunks = D / chunk_cols, chunks = BM / 4 * col_chunks;
  int ways = 1, padded_ways = 1;
  for (int first = 0; first < chunks; first += 64)
    for (int k = 0; k < chunk_cols; ++k) {
      std::vector<int> at, padded;
      for (int i = first; i < first + 64; ++i) {
        const int r = 4 * (i % 4 + 4 * (i / (4 * col_chunks))), c = chunk_cols * (i / 4 % col_chunks);
        at.push_back(i < chunks ? ChainPairLds::transposed<BM>(c + k, r) : -1);
        padded.push_back(i < chunks ? (c + k) * attention_mfma::lds_row_transposed(BM) + r : -1);
      }
      ways = std::max(ways, swizzle_model::conflict_ways(at, 8));
      padded_ways = std::max(padded_ways, swizzle_model::conflict_ways(padded, 8));
    }
  EXPECT_EQ(ways, padded_ways) << "write";
}

TEST(AttentionMfma, BackwardChainPairTilesAreOneToOneWithSingleReads) {
  check_chain_pairs<128, 128>();
  check_chain_pairs<128, 256>();
  check_chain_pairs<64, 128>();
  check_chain_pairs<64, 256>();
}

}  // namespace
}  // namespace kgen
