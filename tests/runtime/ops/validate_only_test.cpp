// kgen_validate_only: every operator call of the C API checks its arguments as a launch does and
// returns KGEN_OK without a device (this test runs on machines without a GPU or libcuda too; the
// data pointers are fake, so a call that reached the device would fail or fault).
#include <gtest/gtest.h>

#include <dlpack/dlpack.h>

#include <cstdint>
#include <functional>
#include <string>
#include <thread>

#include "kgen/c_api.h"
#include "fake_pointer.h"

namespace {

using kgen::test_pointers::fake;

// A contiguous descriptor on CUDA device 0; `shape` must outlive it.
DLTensor dl(std::uintptr_t data, int ndim, std::int64_t* shape, DLDataTypeCode code = kDLBfloat, int bits = 16) {
  DLTensor t{};
  t.data = fake(data);
  t.device = {kDLCUDA, 0};
  t.ndim = ndim;
  t.dtype = {static_cast<std::uint8_t>(code), static_cast<std::uint8_t>(bits), 1};
  t.shape = shape;
  return t;
}

// Turns validate-only on for one scope, restoring the previous setting.
struct ValidateOnly {
  int previous;
  ValidateOnly() : previous(kgen_validate_only(1)) {}
  ~ValidateOnly() { kgen_validate_only(previous); }
};

void expect_ok(const char* what, kgen_status status) {
  EXPECT_EQ(status, KGEN_OK) << what << ": " << kgen_last_error();
}

// The status and sentence of `call`, validate-only and not: the same refusal either way.
void expect_same_refusal(const std::function<kgen_status()>& call) {
  const kgen_status launched = call();
  const std::string sentence = kgen_last_error();
  ASSERT_EQ(launched, KGEN_ERROR_INVALID_ARGUMENT) << sentence;
  ValidateOnly on;
  EXPECT_EQ(call(), launched);
  EXPECT_EQ(kgen_last_error(), sentence);
}

// Attention: b 2, h_q 8, h_kv 2, n_q 100, n_k 120, d 64.
struct Attention {
  std::int64_t qs[4] = {2, 8, 100, 64}, ks[4] = {2, 2, 120, 64}, ls[3] = {2, 8, 100};
  DLTensor q = dl(0x10000000, 4, qs), k = dl(0x20000000, 4, ks), v = dl(0x30000000, 4, ks), o = dl(0x40000000, 4, qs),
           lse = dl(0x50000000, 3, ls, kDLFloat, 32), d_o = dl(0x60000000, 4, qs), dq = dl(0x70000000, 4, qs),
           dk = dl(0x80000000, 4, ks), dv = dl(0x90000000, 4, ks), do_bar = dl(0xa0000000, 4, qs);
};

TEST(ValidateOnly, AttentionCallsPassWithoutADevice) {
  Attention a;
  kgen_attention_options fwd{0.0, 1};
  kgen_attention_backward_options bwd{};
  bwd.config = "fa2:bm64:bn64:w4:s1";  // an explicit config is checked against the device's target: not here
  ValidateOnly on;
  expect_ok("forward", kgen_attention_forward(&a.q, &a.k, &a.v, &a.o, &a.lse, &fwd, nullptr));
  expect_ok("backward", kgen_attention_backward(&a.q, &a.k, &a.v, &a.o, &a.lse, &a.d_o, &a.dq, &a.dk, &a.dv, &bwd, nullptr));
  expect_ok("double backward", kgen_attention_double_backward(&a.q, &a.k, &a.v, &a.o, &a.lse, &a.d_o, nullptr, &a.dk,
                                                              nullptr, &a.dq, &a.dk, &a.dv, &a.do_bar, &bwd, nullptr));
  std::int64_t bias_shape[2] = {8, 120};
  DLTensor bias = dl(0xb0000000, 2, bias_shape, kDLFloat, 32);
  kgen_variant_tensor tensor{"bias", &bias, 0, nullptr};
  kgen_attention_variant variant;
  kgen_attention_variant_init(&variant);
  variant.score_mod = "score + bias[h][k]";
  variant.tensors = &tensor, variant.num_tensors = 1;
  expect_ok("forward variant", kgen_attention_forward_variant(&a.q, &a.k, &a.v, &a.o, &a.lse, &fwd, &variant, nullptr));
  // The expression is parsed: a name it does not know is refused.
  variant.score_mod = "score + nobody[h]";
  EXPECT_EQ(kgen_attention_forward_variant(&a.q, &a.k, &a.v, &a.o, &a.lse, &fwd, &variant, nullptr),
            KGEN_ERROR_INVALID_ARGUMENT);
}

TEST(ValidateOnly, PackedPagedAndLrpeCallsPassWithoutADevice) {
  // A packed batch: total_q 100, total_k 120 rows of 8 (q) and 2 (k, v) heads, 3 sequences.
  std::int64_t qs[3] = {100, 8, 64}, ks[3] = {120, 2, 64}, ls[2] = {8, 100}, cu[1] = {4};
  DLTensor q = dl(0x10000000, 3, qs), k = dl(0x20000000, 3, ks), v = dl(0x30000000, 3, ks), o = dl(0x40000000, 3, qs),
           lse = dl(0x50000000, 2, ls, kDLFloat, 32), cu_q = dl(0x60000000, 1, cu, kDLInt, 32),
           cu_k = dl(0x70000000, 1, cu, kDLInt, 32);
  const kgen_packed_sequences sequences{&cu_q, &cu_k, 50, 60};
  ValidateOnly on;
  expect_ok("varlen forward", kgen_attention_varlen_forward(&q, &k, &v, &o, &lse, nullptr, &sequences, nullptr, nullptr));
  // Paged K/V: 8 pages of 16 rows, (b 2, n 1, h 8, d 64) queries in bnhd, 3 pages per batch.
  std::int64_t pq[4] = {2, 8, 1, 64}, cache[4] = {8, 16, 2, 64}, table[2] = {2, 3}, lens[1] = {2}, pl[3] = {2, 8, 1};
  DLTensor paged_q = dl(0x10000000, 4, pq), k_cache = dl(0x20000000, 4, cache), v_cache = dl(0x30000000, 4, cache),
           paged_o = dl(0x40000000, 4, pq), paged_lse = dl(0x50000000, 3, pl, kDLFloat, 32),
           block_table = dl(0x60000000, 2, table, kDLInt, 32), seqlens = dl(0x70000000, 1, lens, kDLInt, 32);
  const kgen_paged_kv kv{&block_table, &seqlens};
  expect_ok("paged forward", kgen_attention_paged_forward(&paged_q, &k_cache, &v_cache, &paged_o, &paged_lse, nullptr, &kv,
                                                          nullptr, nullptr));
  kgen_paged_plan* plan = reinterpret_cast<kgen_paged_plan*>(fake(0x1000));
  expect_ok("paged plan", kgen_attention_paged_plan(&paged_q, &k_cache, &v_cache, &paged_o, &paged_lse, nullptr, &kv,
                                                    nullptr, &plan));
  EXPECT_EQ(plan, nullptr);
  std::int64_t new_rows[4] = {2, 2, 4, 64};
  DLTensor k_new = dl(0x80000000, 4, new_rows), v_new = dl(0x90000000, 4, new_rows);
  expect_ok("paged append", kgen_attention_paged_append(&k_new, &v_new, &k_cache, &v_cache, &kv, nullptr, nullptr,
                                                        nullptr, nullptr));
  // LRPE: x (2, 4, 33, 48), theta (4, 48); md: grid 3 × 11, theta (4, 24).
  std::int64_t xs[4] = {2, 4, 33, 48}, os[4] = {2, 4, 33, 96}, ts[2] = {4, 48}, mts[2] = {4, 24};
  DLTensor x = dl(0x10000000, 4, xs), theta = dl(0x20000000, 2, ts, kDLFloat, 32), lo = dl(0x30000000, 4, os),
           md_theta = dl(0x20000000, 2, mts, kDLFloat, 32);
  expect_ok("lrpe", kgen_lrpe_cosine_forward(&x, &theta, &lo, nullptr, nullptr));
  kgen_lrpe_options md{};
  md.dims = 2, md.grid[0] = 3, md.grid[1] = 11;
  expect_ok("md lrpe", kgen_md_lrpe_cosine_forward(&x, &md_theta, &lo, nullptr, &md, nullptr));
  // FP8 inputs (E4M3, DLPack code 10) with a bf16 output.
  std::int64_t fq[4] = {1, 2, 16, 128}, fk[4] = {1, 2, 40, 128};
  const auto e4m3 = static_cast<DLDataTypeCode>(10);
  DLTensor f_q = dl(0x10000000, 4, fq, e4m3, 8), f_k = dl(0x20000000, 4, fk, e4m3, 8), f_v = dl(0x30000000, 4, fk, e4m3, 8),
           f_o = dl(0x40000000, 4, fq);
  expect_ok("fp8 forward", kgen_attention_forward_fp8(&f_q, &f_k, &f_v, &f_o, nullptr, nullptr, nullptr, nullptr, nullptr,
                                                      nullptr, nullptr));
}

TEST(ValidateOnly, RefusesWithTheLaunchsSentence) {
  Attention a;
  std::int64_t wrong[4] = {2, 3, 120, 64};
  DLTensor k3 = dl(0x20000000, 4, wrong), host_q = a.q;
  host_q.device.device_type = kDLCPU;
  expect_same_refusal([&] { return kgen_attention_forward(&a.q, &k3, &k3, &a.o, &a.lse, nullptr, nullptr); });
  expect_same_refusal([&] { return kgen_attention_forward(&host_q, &a.k, &a.v, &a.o, &a.lse, nullptr, nullptr); });
  expect_same_refusal([&] {
    return kgen_attention_backward(&a.q, &a.k, &a.v, &a.o, &a.lse, &a.d_o, &a.dq, &a.dq, &a.dv, nullptr, nullptr);
  });
}

TEST(ValidateOnly, IsPerThreadAndReturnsThePreviousSetting) {
  EXPECT_EQ(kgen_validate_only(1), 0);
  int other = -1;
  std::thread([&] { other = kgen_validate_only(0); }).join();
  EXPECT_EQ(other, 0);
  EXPECT_EQ(kgen_validate_only(0), 1);
  EXPECT_EQ(kgen_validate_only(0), 0);
}

}  // namespace
