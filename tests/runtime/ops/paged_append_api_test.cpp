// The paged append's and the paged plan's argument checks (docs/attention.md §10), without a GPU:
// every bad argument is named before any device work, and a valid append is planned as the
// kernel expects (rows, pieces, positions bound).
#include <gtest/gtest.h>

#include <dlpack/dlpack.h>

#include <functional>
#include <string>

#include "kgen/c_api.h"
#include "kgen/kgen.hpp"
#include "ops/paged_append.h"
#include "fake_pointer.h"

namespace kgen {
namespace {

using test_pointers::fake;

// b = 2 batches of n_new = 4 new rows, h_kv = 2, d = 128, 8 pages of 16 rows, 3 pages per batch;
// q has 8 heads; the rotary tables cover 48 positions with rotary_dim 64.
struct Append {
  TensorView k_new, v_new, k_cache, v_cache, table, lens, cos, sin, q, q_out;
  PagedKV kv{&table, &lens};
  PagedAppendOptions options;
  Append(DType t = DType::bf16) {
    const std::int64_t new_shape[4] = {2, 2, 4, 128}, cache_shape[4] = {8, 16, 2, 128}, table_shape[2] = {2, 3},
                       lens_shape[1] = {2}, rot_shape[2] = {48, 32}, q_shape[4] = {2, 8, 4, 128};
    k_new = make_contiguous_view(fake(0x10000000), t, 4, new_shape, 0);
    v_new = make_contiguous_view(fake(0x20000000), t, 4, new_shape, 0);
    k_cache = make_contiguous_view(fake(0x30000000), t, 4, cache_shape, 0);
    v_cache = make_contiguous_view(fake(0x40000000), t, 4, cache_shape, 0);
    table = make_contiguous_view(fake(0x50000000), DType::i32, 2, table_shape, 0);
    lens = make_contiguous_view(fake(0x60000000), DType::i32, 1, lens_shape, 0);
    cos = make_contiguous_view(fake(0x70000000), t, 2, rot_shape, 0);
    sin = make_contiguous_view(fake(0x80000000), t, 2, rot_shape, 0);
    q = make_contiguous_view(fake(0x90000000), t, 4, q_shape, 0);
    q_out = make_contiguous_view(fake(0xa0000000), t, 4, q_shape, 0);
    options.rotary = {&cos, &sin, false, true};
    options.q = &q, options.q_out = &q_out;
  }
  PagedAppendCall prepare() const { return prepare_paged_append(k_new, v_new, k_cache, v_cache, kv, options); }
};

void expect_invalid(const std::function<void(Append&)>& mutate, const std::string& start) {
  Append a;
  mutate(a);
  try {
    a.prepare();
    ADD_FAILURE() << "expected invalid_argument starting '" << start << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::invalid_argument) << e.what();
    EXPECT_EQ(std::string(e.what()).rfind(start, 0), 0u) << "message should start with '" << start << "': " << e.what();
  }
}

TEST(PagedAppendApi, ValidAppendIsPlannedForTheKernel) {
  const PagedAppendCall c = Append().prepare();
  EXPECT_EQ(c.spec, (PagedAppendSpec{DType::bf16, AppendRotary::halves, false}));
  EXPECT_EQ(to_string(c.config), "ap:t128:v8");
  EXPECT_EQ(c.params.k_rows, 2 * 4 * 2);
  EXPECT_EQ(c.params.rows, 2 * 4 * 2 + 2 * 4 * 8);
  EXPECT_EQ(c.params.max_keys, 48);
  EXPECT_EQ(c.params.rotary_dim, 64);
  EXPECT_EQ(c.params.row_group, 16);
  EXPECT_EQ(c.params.vectorized, 1);
  EXPECT_EQ(c.plan.grid.x, (16u + 64u + 7u) / 8u);
  // Contiguous caches: one page of n_cache rows per batch.
  Append contiguous;
  contiguous.kv.block_table = nullptr;
  contiguous.options = {};
  EXPECT_EQ(contiguous.prepare().params.max_keys, 16);
  // fp32 tables for a bf16 cache; a rotary width whose halves split a piece runs element-wise.
  Append f32;
  const std::int64_t rot[2] = {48, 20};
  f32.cos = make_contiguous_view(fake(0x70000000), DType::f32, 2, rot, 0);
  f32.sin = make_contiguous_view(fake(0x80000000), DType::f32, 2, rot, 0);
  const PagedAppendCall c32 = f32.prepare();
  EXPECT_TRUE(c32.spec.rotary_f32);
  EXPECT_EQ(c32.params.vectorized, 0);
}

TEST(PagedAppendApi, BadArgumentsAreNamed) {
  expect_invalid([](Append& a) { a.k_new.shape[1] = 3; }, "v_new: shape");
  expect_invalid([](Append& a) { a.k_new.shape[1] = 3, a.v_new.shape[1] = 3; }, "k_new: shape (2, 3, 4, 128)");
  expect_invalid([](Append& a) { a.v_cache.dtype = DType::f16; }, "v_cache: dtype fp16");
  expect_invalid([](Append& a) { a.k_new.strides[3] = 2; }, "k_new: the last dimension");
  expect_invalid([](Append& a) { a.kv.cache_seqlens = nullptr; }, "cache_seqlens: missing");
  expect_invalid([](Append& a) { a.lens.dtype = DType::f32; }, "cache_seqlens: dtype fp32 must be int32");
  expect_invalid([](Append& a) { a.lens.shape[0] = 3; }, "cache_seqlens: shape (3)");
  expect_invalid([](Append& a) { a.table.shape[0] = 1; }, "block_table: shape (1, 3)");
  expect_invalid([](Append& a) { a.table.strides[1] = 2; }, "block_table: the pages of a row");
  expect_invalid([](Append& a) { a.kv.block_table = nullptr, a.k_cache.shape[0] = a.v_cache.shape[0] = 1; },
                 "k_cache: 1 cache rows");
  expect_invalid([](Append& a) { a.options.rotary.sin = nullptr; }, "rotary.sin: missing");
  expect_invalid([](Append& a) { a.cos.shape[0] = a.sin.shape[0] = 40; }, "rotary.cos: 40 positions, fewer than the 48");
  expect_invalid([](Append& a) { a.cos.shape[1] = a.sin.shape[1] = 80; }, "rotary.cos: shape (48, 80) gives rotary_dim 160");
  expect_invalid([](Append& a) { a.cos.dtype = DType::f16; }, "rotary.cos: dtype fp16 must be k_cache's bf16 or fp32");
  expect_invalid([](Append& a) { a.sin.dtype = DType::f32; }, "rotary.sin: dtype fp32 differs from rotary.cos's");
  expect_invalid([](Append& a) { a.options.rotary.cos = a.options.rotary.sin = nullptr; }, "q: is rotated only with");
  expect_invalid([](Append& a) { a.q.shape[3] = 64; }, "q_out: shape");
  expect_invalid([](Append& a) { a.q.shape[0] = a.q_out.shape[0] = 3; }, "q: shape (3, 8, 4, 128)");
  expect_invalid([](Append& a) { a.q_out.data = a.q.data, a.q_out.strides[1] = 4 * 128 * 8; }, "q_out: shares q's data");
  expect_invalid([](Append& a) { a.options.config = "ap:t128"; }, "config: cannot parse");
  expect_invalid([](Append& a) { a.options.config = "ap:t32:v8"; }, "config: ap t must be 64, 128 or 256 (threads per block), got t32");
}

// The C entry points convert and name their descriptors; NULL kv and plan are named.
TEST(PagedAppendApi, CEntryPointsNameTheirArguments) {
  EXPECT_EQ(kgen_attention_paged_append(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr),
            KGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(std::string(kgen_last_error()).rfind("k_new:", 0), 0u) << kgen_last_error();
  EXPECT_EQ(kgen_attention_paged_run(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, nullptr),
            KGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(std::string(kgen_last_error()).rfind("plan: NULL", 0), 0u) << kgen_last_error();
  EXPECT_EQ(kgen_paged_plan_info(nullptr, nullptr, nullptr, nullptr), KGEN_ERROR_INVALID_ARGUMENT);
  kgen_paged_plan_destroy(nullptr);
}

// The plan validates as the plain call does, before any device work.
TEST(PagedAppendApi, PlanNamesBadArgumentsBeforeTouchingADevice) {
  Append a;
  const std::int64_t q_shape[4] = {2, 8, 1, 128}, lse_shape[3] = {2, 8, 1};
  const TensorView q = make_contiguous_view(fake(0x90000000), DType::bf16, 4, q_shape, 0);
  TensorView o = make_contiguous_view(fake(0xa0000000), DType::bf16, 4, q_shape, 0);
  const TensorView lse = make_contiguous_view(fake(0xb0000000), DType::f32, 3, lse_shape, 0);
  o.dtype = DType::f16;
  try {
    attention_paged_plan(q, a.k_cache, a.v_cache, o, &lse, a.kv, {});
    ADD_FAILURE() << "expected invalid_argument";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("o: dtype fp16", 0), 0u) << e.what();
  }
}

}  // namespace
}  // namespace kgen
