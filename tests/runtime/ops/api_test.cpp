// Argument validation of the C++ and C APIs (no GPU needed: arguments are checked first),
// and the no-device error.
#include <gtest/gtest.h>

#include <dlpack/dlpack.h>

#include <functional>

#include "kgen/c_api.h"
#include "kgen/kgen.hpp"
#include "driver/gpu_driver.h"
#include "ops/attention_forward.h"
#include "fake_pointer.h"

namespace kgen {
namespace {

using test_pointers::fake;

struct Tensors {
  TensorView q, k, v, o, lse;
  Tensors(DType t = DType::bf16, std::int64_t b = 2, std::int64_t hq = 8, std::int64_t hkv = 2, std::int64_t nq = 100,
          std::int64_t nk = 77, std::int64_t d = 64) {
    std::int64_t qs[4] = {b, hq, nq, d}, ks[4] = {b, hkv, nk, d}, ls[3] = {b, hq, nq};
    q = make_contiguous_view(fake(0x10000000), t, 4, qs, 0);
    k = make_contiguous_view(fake(0x20000000), t, 4, ks, 0);
    v = make_contiguous_view(fake(0x30000000), t, 4, ks, 0);
    o = make_contiguous_view(fake(0x40000000), t, 4, qs, 0);
    lse = make_contiguous_view(fake(0x50000000), DType::f32, 3, ls, 0);
  }
  void run() { attention_forward(q, k, v, o, &lse, {}, nullptr); }
};

void expect_invalid(const std::function<void(Tensors&)>& mutate, const std::string& names) {
  Tensors t;
  mutate(t);
  try {
    t.run();
    FAIL() << "expected invalid_argument naming " << names;
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::invalid_argument) << e.what();
    EXPECT_EQ(std::string(e.what()).rfind(names, 0), 0u) << "message should start with '" << names << "': " << e.what();
  }
}

// Decode-like GQA calls run as one problem per (batch, K/V head): the restrided views address
// exactly the elements of the original ones (row m = j·n_q + r of K/V head kv is row r of query
// head kv·group + j), and every case it must not touch is left alone.
std::int64_t offset(const TensorView& t, std::int64_t b, std::int64_t h, std::int64_t n) {
  return b * t.strides[0] + h * t.strides[1] + n * t.strides[2];
}

void expect_same_elements(const TensorView& orig, const TensorView& packed, std::int64_t group, std::int64_t nq) {
  for (std::int64_t b = 0; b < orig.shape[0]; ++b)
    for (std::int64_t h = 0; h < orig.shape[1]; ++h)
      for (std::int64_t r = 0; r < nq; ++r)
        ASSERT_EQ(offset(orig, b, h, r), offset(packed, b, h / group, (h % group) * nq + r)) << b << " " << h << " " << r;
}

TEST(AttentionForwardPacking, GroupedQueryHeadsBecomeRowsOfOneProblemPerKvHead) {
  for (bool bnhd : {false, true})
    for (std::int64_t nq : {1, 3, 16}) {
      Tensors t(DType::bf16, 2, 8, 2, nq, 77, 64);
      if (bnhd)  // (b, n, h, d) memory viewed as (b, h, n, d)
        for (TensorView* v : {&t.q, &t.o}) v->strides[1] = 64, v->strides[2] = 8 * 64, v->strides[0] = nq * 8 * 64;
      TensorView q = t.q, o = t.o, lse = t.lse;
      AttentionOptions opt;
      const bool packed = pack_query_heads(q, o, &lse, t.k, opt);
      EXPECT_EQ(packed, !bnhd || nq == 1) << bnhd << " " << nq;  // BNHD heads are not n_q rows apart
      if (!packed) {
        EXPECT_EQ(q.shape[1], 8);
        continue;
      }
      for (const TensorView* v : {&q, &o}) {
        EXPECT_EQ(v->shape[1], 2);
        EXPECT_EQ(v->shape[2], 4 * nq);
      }
      EXPECT_EQ(lse.shape[1], 2);
      EXPECT_EQ(lse.shape[2], 4 * nq);
      expect_same_elements(t.q, q, 4, nq);
      expect_same_elements(t.o, o, 4, nq);
      expect_same_elements(t.lse, lse, 4, nq);
    }
}

TEST(AttentionForwardPacking, LeavesCausalRowsMhaWideGroupsAndExplicitConfigsAlone) {
  auto packs = [](std::int64_t hq, std::int64_t hkv, std::int64_t nq, bool causal, std::string config = "") {
    Tensors t(DType::bf16, 2, hq, hkv, nq, 77, 64);
    AttentionOptions opt;
    opt.causal = causal, opt.config = config;
    TensorView q = t.q, o = t.o, lse = t.lse;
    const bool p = pack_query_heads(q, o, &lse, t.k, opt);
    if (!p) {
      EXPECT_TRUE(q.shape[1] == hq && q.strides[1] == t.q.strides[1] && opt.causal == causal);
    }
    return std::pair{p, opt.causal};
  };
  EXPECT_EQ(packs(8, 2, 1, true), (std::pair{true, false}));  // one bottom-right row sees every key
  EXPECT_FALSE(packs(8, 2, 3, true).first);                      // positions would move
  EXPECT_FALSE(packs(8, 8, 1, false).first);                     // no GQA
  EXPECT_TRUE(packs(64, 1, 2, false).first);                     // 128 rows: one tile
  EXPECT_FALSE(packs(64, 1, 3, false).first);                    // 192 rows
  EXPECT_FALSE(packs(8, 2, 1, false, "wg:bm64:bn64:s2").first);  // explicit configs run as given
}

TEST(AttentionForwardApi, RejectsBadArgumentsNamingThem) {
  expect_invalid([](Tensors& t) { t.q.data = nullptr; }, "q:");
  expect_invalid([](Tensors& t) { t.k.dtype = DType::f16; }, "k:");
  expect_invalid([](Tensors& t) { t.v.shape[2] = 5; }, "v:");
  expect_invalid([](Tensors& t) { t.o.shape[3] = 32; }, "o:");
  expect_invalid([](Tensors& t) { t.q.strides[3] = 2; }, "q:");
  expect_invalid([](Tensors& t) { t.k.shape[1] = 3, t.v.shape[1] = 3; }, "k:");
  expect_invalid([](Tensors& t) { t.q.shape[2] = 0, t.o.shape[2] = 0; }, "q:");
  expect_invalid([](Tensors& t) { t.q.data = fake(0x10000001); }, "q:");
  expect_invalid([](Tensors& t) { t.q.device = -1; }, "q:");
  expect_invalid([](Tensors& t) { t.lse.dtype = DType::bf16; }, "lse:");
  expect_invalid([](Tensors& t) { t.lse.shape[2] = 3; }, "lse:");
  expect_invalid([](Tensors& t) { t.q.ndim = 3; }, "q:");
  expect_invalid([](Tensors& t) {
    for (auto* x : {&t.q, &t.k, &t.v, &t.o}) x->shape[3] = 300;
  }, "q:");
}

TEST(AttentionForwardApi, ValidArgumentsWithoutAGpuFailWithOneSentence) {
  std::string why;
  if (gpu_driver().available(&why)) GTEST_SKIP() << "a GPU is present";
  Tensors t;
  try {
    t.run();
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::no_device);
    EXPECT_NE(std::string(e.what()).find("driver"), std::string::npos) << e.what();
  }
}

DLTensor dl(void* data, DLDataTypeCode code, int bits, int ndim, std::int64_t* shape, DLDeviceType dev = kDLCUDA) {
  DLTensor t{};
  t.data = data;
  t.device = {dev, 0};
  t.ndim = ndim;
  t.dtype = {static_cast<std::uint8_t>(code), static_cast<std::uint8_t>(bits), 1};
  t.shape = shape;
  t.strides = nullptr;
  return t;
}

TEST(CApi, ReportsStatusAndMessage) {
  std::int64_t qs[4] = {1, 2, 16, 64};
  DLTensor q = dl(fake(0x1000), kDLBfloat, 16, 4, qs), k = q, v = q, o = q;
  DLTensor host_q = dl(fake(0x1000), kDLBfloat, 16, 4, qs, kDLCPU);
  kgen_attention_options opt{0.0, 1};
  EXPECT_EQ(kgen_attention_forward(&host_q, &k, &v, &o, nullptr, &opt, nullptr), KGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(std::string(kgen_last_error()).rfind("q:", 0), 0u) << kgen_last_error();
  DLTensor int_k = dl(fake(0x1000), kDLInt, 32, 4, qs);
  EXPECT_EQ(kgen_attention_forward(&q, &int_k, &v, &o, nullptr, &opt, nullptr), KGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(std::string(kgen_last_error()).rfind("k:", 0), 0u) << kgen_last_error();
  EXPECT_EQ(kgen_attention_forward(&q, &k, nullptr, &o, nullptr, &opt, nullptr), KGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(std::string(kgen_last_error()).rfind("v:", 0), 0u) << kgen_last_error();
  if (!gpu_driver().available()) {
    EXPECT_EQ(kgen_attention_forward(&q, &k, &v, &o, nullptr, &opt, nullptr), KGEN_ERROR_NO_DEVICE);
    EXPECT_GT(std::string(kgen_last_error()).size(), 10u);
  }
  EXPECT_STREQ(kgen_version(), kgen::version());
}

TEST(AttentionFp8Api, RefusalsNameTheArgumentBeforeAnyDeviceWork) {
  std::int64_t qs[4] = {1, 2, 16, 128}, ks[4] = {1, 2, 40, 128}, one[1] = {1}, three[1] = {3};
  const TensorView q = make_contiguous_view(fake(0x10000), DType::f8e4m3, 4, qs, 0);
  const TensorView k = make_contiguous_view(fake(0x20000), DType::f8e4m3, 4, ks, 0);
  const TensorView v = make_contiguous_view(fake(0x30000), DType::f8e4m3, 4, ks, 0);
  const TensorView o = make_contiguous_view(fake(0x40000), DType::bf16, 4, qs, 0);
  const TensorView o32 = make_contiguous_view(fake(0x40000), DType::f32, 4, qs, 0);
  const TensorView k16 = make_contiguous_view(fake(0x20000), DType::bf16, 4, ks, 0);
  const TensorView d3 = make_contiguous_view(fake(0x50000), DType::f32, 1, three, 0);
  const TensorView d16 = make_contiguous_view(fake(0x50000), DType::bf16, 1, one, 0);
  auto message = [&](const TensorView& kk, const TensorView& oo, const Fp8Descales& d, const AttentionOptions& opt) {
    try {
      attention_forward_fp8(q, kk, v, oo, nullptr, d, opt, nullptr);
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), Status::invalid_argument) << e.what();
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message(k16, o, {}, {}).rfind("k: dtype bf16", 0), 0u) << message(k16, o, {}, {});
  EXPECT_EQ(message(k, o32, {}, {}).rfind("o: dtype fp32", 0), 0u);
  EXPECT_EQ(message(k, o, {.k = &d3}, {}).rfind("descale_k: shape (3)", 0), 0u) << message(k, o, {.k = &d3}, {});
  EXPECT_EQ(message(k, o, {.v = &d16}, {}).rfind("descale_v: dtype bf16", 0), 0u);
  AttentionOptions windowed;
  windowed.variant.window_left = 16;
  EXPECT_EQ(message(k, o, {}, windowed).rfind("q: FP8 inputs run plain or causal", 0), 0u) << message(k, o, {}, windowed);
  // 16-bit entry points name the FP8 one.
  try {
    attention_forward(q, k, v, o, nullptr, {}, nullptr);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("attention_forward_fp8"), std::string::npos) << e.what();
  }
  DLTensor dq = dl(fake(0x1000), static_cast<DLDataTypeCode>(10), 8, 4, qs), dk = dl(fake(0x2000), static_cast<DLDataTypeCode>(10), 8, 4, ks);
  DLTensor dv = dk, dout = dl(fake(0x4000), kDLBfloat, 16, 4, qs);
  EXPECT_EQ(kgen_attention_forward(&dq, &dk, &dv, &dout, nullptr, nullptr, nullptr), KGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kgen_last_error()).find("kgen_attention_forward_fp8"), std::string::npos) << kgen_last_error();
  DLTensor dk16 = dl(fake(0x2000), kDLBfloat, 16, 4, ks);
  EXPECT_EQ(kgen_attention_forward_fp8(&dq, &dk16, &dv, &dout, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                       nullptr),
            KGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(std::string(kgen_last_error()).rfind("k: dtype bf16", 0), 0u) << kgen_last_error();
}

// The message of the last call starts with `name` (an argument: "q:", "bytes:").
void expect_names(const char* name) {
  EXPECT_EQ(std::string(kgen_last_error()).rfind(name, 0), 0u) << "message should start with '" << name << "': "
                                                              << kgen_last_error();
}

TEST(CApi, NullShapeAndDataPointersAreInvalidArgumentsNotCrashes) {
  std::int64_t qs[4] = {1, 2, 16, 64};
  DLTensor q = dl(fake(0x1000), kDLBfloat, 16, 4, qs), k = q, v = q, o = q;
  DLTensor no_shape = q;
  no_shape.shape = nullptr;
  EXPECT_EQ(kgen_attention_forward(&no_shape, &k, &v, &o, nullptr, nullptr, nullptr), KGEN_ERROR_INVALID_ARGUMENT);
  expect_names("q:");
  EXPECT_EQ(kgen_attention_forward(&q, &k, &v, &no_shape, nullptr, nullptr, nullptr), KGEN_ERROR_INVALID_ARGUMENT);
  expect_names("o:");
  std::size_t bytes = 0;
  EXPECT_EQ(kgen_attention_backward_workspace_bytes(&no_shape, nullptr, 0, &bytes), KGEN_ERROR_INVALID_ARGUMENT);
  expect_names("q:");
  EXPECT_EQ(kgen_lrpe_workspace_bytes(&no_shape, KGEN_LRPE_ACT_NONE, 0, &bytes), KGEN_ERROR_INVALID_ARGUMENT);
  expect_names("x:");
  // A null data pointer stays null with a byte offset.
  DLTensor no_data = q;
  no_data.data = nullptr;
  no_data.byte_offset = 4096;
  EXPECT_EQ(kgen_attention_forward(&q, &no_data, &v, &o, nullptr, nullptr, nullptr), KGEN_ERROR_INVALID_ARGUMENT);
  expect_names("k:");
  no_data.byte_offset = 0;
  EXPECT_EQ(kgen_attention_forward(&q, &k, &no_data, &o, nullptr, nullptr, nullptr), KGEN_ERROR_INVALID_ARGUMENT);
  expect_names("v:");
}

TEST(CApi, NegativeAndOverflowingDimensionsAreNamedAsSuch) {
  std::int64_t qs[4] = {1, 2, 16, 64}, negative[4] = {1, 2, -16, 64}, huge[4] = {1LL << 40, 1LL << 40, 1LL << 40, 64};
  DLTensor q = dl(fake(0x1000), kDLBfloat, 16, 4, qs), k = q, v = q, o = q;
  DLTensor bad = dl(fake(0x1000), kDLBfloat, 16, 4, negative);
  EXPECT_EQ(kgen_attention_forward(&bad, &k, &v, &o, nullptr, nullptr, nullptr), KGEN_ERROR_INVALID_ARGUMENT);
  expect_names("q: dimension 2 is -16");
  bad.shape = huge;  // compact strides would overflow int64
  EXPECT_EQ(kgen_attention_forward(&q, &bad, &v, &o, nullptr, nullptr, nullptr), KGEN_ERROR_INVALID_ARGUMENT);
  expect_names("k: shape");
  EXPECT_NE(std::string(kgen_last_error()).find("2^56 elements"), std::string::npos) << kgen_last_error();
  // Explicit strides whose last element lies past 2^63 bytes.
  std::int64_t strides[4] = {1, 1LL << 62, 64, 1};  // the second head 2^62 elements (2^63 bytes) in
  DLTensor strided = dl(fake(0x1000), kDLBfloat, 16, 4, qs);
  strided.strides = strides;
  EXPECT_EQ(kgen_attention_forward(&q, &k, &v, &strided, nullptr, nullptr, nullptr), KGEN_ERROR_INVALID_ARGUMENT);
  expect_names("o: strides reach past");
  DLTensor zero_d = dl(fake(0x1000), kDLBfloat, 16, 0, qs);
  EXPECT_EQ(kgen_attention_forward(&zero_d, &k, &v, &o, nullptr, nullptr, nullptr), KGEN_ERROR_INVALID_ARGUMENT);
  expect_names("q:");
}

// A size that no call can use is an error, not a number: 1.8e19 bytes for a negative dim, or a
// size for a shape past the launch limits or the head dims kgen serves.
TEST(CApi, WorkspaceSizesFailOnShapesNoCallServes) {
  std::size_t bytes = 0;
  std::int64_t good[4] = {2, 8, 1024, 64};
  DLTensor q = dl(fake(0x1000), kDLBfloat, 16, 4, good);
  for (int dbl : {0, 1}) {
    bytes = 0;
    EXPECT_EQ(kgen_attention_backward_workspace_bytes(&q, nullptr, dbl, &bytes), KGEN_OK) << kgen_last_error();
    EXPECT_GT(bytes, 0u);
    EXPECT_LT(bytes, 1u << 30);
  }
  std::int64_t bad_shapes[][4] = {{2, 8, -1024, 64}, {-1, 8, 1024, 64}, {2, 8, 1024, 0},
                                  {65536, 8, 1024, 64},           // batch past the grid's 65535
                                  {2, 8, 1LL << 31, 64},          // n past 2^31 - 1
                                  {2, 8, 1024, 1LL << 40},        // head_dim
                                  {65535, 65535, (1LL << 31) - 1, 256}};  // 2^71 elements
  for (auto& shape : bad_shapes) {
    q.shape = shape;
    for (int dbl : {0, 1}) {
      bytes = 7;
      EXPECT_EQ(kgen_attention_backward_workspace_bytes(&q, nullptr, dbl, &bytes), KGEN_ERROR_INVALID_ARGUMENT)
          << shape[0] << " " << shape[1] << " " << shape[2] << " " << shape[3] << ": " << bytes;
      expect_names("q:");
      EXPECT_EQ(bytes, 7u) << "nothing written on failure";
    }
  }
  // lrpe: checked whatever the act (the size is 0 without softmax over the sequence).
  std::int64_t lrpe_bad[][4] = {{2, 8, -1024, 64}, {2, 8, 1024, 512}, {70000, 1, 16, 64}, {1, 1, 1LL << 31, 64}};
  for (auto& shape : lrpe_bad) {
    DLTensor x = dl(fake(0x1000), kDLBfloat, 16, 4, shape);
    for (int act : {KGEN_LRPE_ACT_NONE, KGEN_LRPE_ACT_SOFTMAX_SEQ}) {
      bytes = 7;
      EXPECT_EQ(kgen_lrpe_workspace_bytes(&x, act, 1, &bytes), KGEN_ERROR_INVALID_ARGUMENT) << shape[2] << " " << act;
      expect_names("x:");
    }
  }
}

TEST(AttentionBackwardApi, WorkspaceSizesCheckTheShapeWithoutReadingData) {
  std::int64_t shape[4] = {2, 8, 1024, 64};
  TensorView q = make_contiguous_view(nullptr, DType::bf16, 4, shape, -1);  // shape alone: no data, no device
  EXPECT_GT(attention_backward_workspace_bytes(q, {}), 0u);
  q.shape[2] = -5;
  EXPECT_THROW(attention_backward_workspace_bytes(q, {}), Error);
  q.shape[2] = 1024, q.ndim = 7;  // shape_string must not read past shape[3]
  try {
    attention_double_backward_workspace_bytes(q, {});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::invalid_argument);
    EXPECT_EQ(std::string(e.what()).rfind("q: expected 4 dimensions, got 7", 0), 0u) << e.what();
  }
}

}  // namespace
}  // namespace kgen
