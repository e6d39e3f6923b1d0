// v head dims below q's (MLA, docs/attention.md §1) through the C++ and C APIs without a GPU: the
// shapes they accept (the call reaches the device and fails there with no_device) and the ones
// they refuse, each with a sentence naming the argument.
#include <gtest/gtest.h>

#include <dlpack/dlpack.h>

#include <functional>
#include <string>

#include "kgen/c_api.h"
#include "kgen/kgen.hpp"
#include "driver/gpu_driver.h"
#include "fake_pointer.h"

namespace kgen {
namespace {

using test_pointers::fake;

// A 192/128 call: q, k (b, h, n, 192), v (b, h_kv, n_k, 128), o and d_o (b, h_q, n_q, 128).
struct Mla {
  TensorView q, k, v, o, lse, d_o, dq, dk, dv;
  explicit Mla(std::int64_t d = 192, std::int64_t dv_cols = 128) {
    const std::int64_t b = 2, hq = 8, hkv = 2, nq = 100, nk = 77;
    std::int64_t qs[4] = {b, hq, nq, d}, ks[4] = {b, hkv, nk, d}, vs[4] = {b, hkv, nk, dv_cols},
                 os[4] = {b, hq, nq, dv_cols}, ls[3] = {b, hq, nq};
    q = make_contiguous_view(fake(0x10000000), DType::bf16, 4, qs, 0);
    k = make_contiguous_view(fake(0x20000000), DType::bf16, 4, ks, 0);
    v = make_contiguous_view(fake(0x30000000), DType::bf16, 4, vs, 0);
    o = make_contiguous_view(fake(0x40000000), DType::bf16, 4, os, 0);
    lse = make_contiguous_view(fake(0x50000000), DType::f32, 3, ls, 0);
    d_o = make_contiguous_view(fake(0x60000000), DType::bf16, 4, os, 0);
    dq = make_contiguous_view(fake(0x70000000), DType::bf16, 4, qs, 0);
    dk = make_contiguous_view(fake(0x80000000), DType::bf16, 4, ks, 0);
    dv = make_contiguous_view(fake(0x90000000), DType::bf16, 4, vs, 0);
  }
  void forward(const AttentionOptions& options = {}) { attention_forward(q, k, v, o, &lse, options, nullptr); }
  void backward(const AttentionBackwardOptions& options = {}) {
    attention_backward(q, k, v, o, lse, d_o, dq, dk, dv, options, nullptr);
  }
  // gq = dq's buffer; q_bar, k_bar, v_bar, do_bar shaped like q, k, v and d_o.
  void double_backward(const AttentionBackwardOptions& options = {}) {
    attention_double_backward(q, k, v, o, lse, d_o, &dq, nullptr, &dv, dq, dk, dv, d_o, options, nullptr);
  }
};

// Runs `call` and expects Error(invalid_argument) whose sentence starts with `start` and contains `part`.
void expect_invalid(const std::function<void()>& call, const std::string& start, const std::string& part = "") {
  try {
    call();
    FAIL() << "expected invalid_argument starting with " << start;
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::invalid_argument) << e.what();
    EXPECT_EQ(std::string(e.what()).rfind(start, 0), 0u) << "should start with '" << start << "': " << e.what();
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << "should contain '" << part << "': " << e.what();
  }
}

// Runs `call`, which must pass validation: without a GPU it fails with no_device; with one, the
// fake pointers fail later (anything but invalid_argument).
void expect_valid(const std::function<void()>& call) {
  std::string why;
  if (gpu_driver().available(&why)) GTEST_SKIP() << "a GPU is present";
  try {
    call();
    FAIL() << "expected no_device";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::no_device) << e.what();
  }
}

TEST(AttentionMlaApi, TheForwardAndBackwardAcceptAVHeadDimBelowQs) {
  expect_valid([] { Mla().forward(); });
  expect_valid([] { Mla().backward(); });
  expect_valid([] { Mla().double_backward(); });
  expect_valid([] { Mla(100, 36).double_backward(); });
  expect_valid([] { Mla(64, 32).forward(); });
  expect_valid([] { Mla(100, 36).backward(); });
  AttentionOptions causal;
  causal.causal = true;
  expect_valid([&] { Mla().forward(causal); });
}

TEST(AttentionMlaApi, ShapesThatDoNotFitAreRefusedNamingTheArgument) {
  // v's head dim above q's.
  expect_invalid([] { Mla(128, 192).forward(); }, "v: head dim 192 must be at most q's 128");
  // o with q's head dim instead of v's.
  expect_invalid([] {
    Mla m;
    m.o.shape[3] = 192;
    m.forward();
  }, "o: shape", "v's head dim 128");
  // v differs from k in more than the head dim.
  expect_invalid([] {
    Mla m;
    m.v.shape[2] = 5;
    m.forward();
  }, "v: shape");
  // d_o like o, dv like v.
  expect_invalid([] {
    Mla m;
    m.d_o = m.dq;
    m.backward();
  }, "d_o: shape", "differs from o");
  expect_invalid([] {
    Mla m;
    m.dv = m.dk;
    m.backward();
  }, "dv: shape", "differs from v");
  // The double backward: gv and v_bar like v, do_bar like d_o.
  expect_invalid([] {
    Mla m;
    attention_double_backward(m.q, m.k, m.v, m.o, m.lse, m.d_o, nullptr, nullptr, &m.dk, m.dq, m.dk, m.dv, m.d_o, {},
                              nullptr);
  }, "gv: shape", "differs from v");
  expect_invalid([] {
    Mla m;
    attention_double_backward(m.q, m.k, m.v, m.o, m.lse, m.d_o, nullptr, nullptr, nullptr, m.dq, m.dk, m.dk, m.d_o, {},
                              nullptr);
  }, "v_bar: shape", "differs from v");
  expect_invalid([] {
    Mla m;
    attention_double_backward(m.q, m.k, m.v, m.o, m.lse, m.d_o, nullptr, nullptr, nullptr, m.dq, m.dk, m.dv, m.dq, {},
                              nullptr);
  }, "do_bar: shape", "differs from d_o");
}

TEST(AttentionMlaApi, WhatIsNotServedIsRefusedNamingV) {
  AttentionBackwardOptions dbl_softcap;
  dbl_softcap.variant.softcap = 30;
  expect_invalid([&] { Mla().double_backward(dbl_softcap); }, "v: head dim 128 differs from q's 192",
                 "serves that for plain and causal");
  AttentionOptions window;
  window.variant.window_left = 16;
  expect_invalid([&] { Mla().forward(window); }, "v: head dim 128 differs from q's 192", "plain and causal");
  AttentionBackwardOptions softcap;
  softcap.variant.softcap = 30;
  expect_invalid([&] { Mla().backward(softcap); }, "v: head dim 128 differs from q's 192", "plain and causal");
  // A packed batch: v's (total, h, d) view is checked against k's.
  Mla m;
  std::int64_t q3[3] = {100, 8, 192}, k3[3] = {77, 2, 192}, v3[3] = {77, 2, 128}, cu[1] = {3};
  const TensorView q = make_contiguous_view(m.q.data, DType::bf16, 3, q3, 0),
                   k = make_contiguous_view(m.k.data, DType::bf16, 3, k3, 0),
                   v = make_contiguous_view(m.v.data, DType::bf16, 3, v3, 0),
                   o = make_contiguous_view(m.o.data, DType::bf16, 3, v3, 0),
                   cu_q = make_contiguous_view(fake(0xa0000000), DType::i32, 1, cu, 0);
  const PackedSequences seq{&cu_q, &cu_q, 50, 50};
  expect_invalid([&] { attention_varlen_forward(q, k, v, o, nullptr, seq, {}, nullptr); }, "v:");
  // Paged K/V: the caches (num_pages, page_size, h_kv, d), v_cache's head dim below q's.
  std::int64_t q4[4] = {2, 8, 1, 192}, o4[4] = {2, 8, 1, 128}, kc[4] = {10, 16, 2, 192}, vc[4] = {10, 16, 2, 128}, bt[2] = {2, 5};
  const TensorView pq = make_contiguous_view(m.q.data, DType::bf16, 4, q4, 0),
                   po = make_contiguous_view(m.o.data, DType::bf16, 4, o4, 0),
                   k_cache = make_contiguous_view(m.k.data, DType::bf16, 4, kc, 0),
                   v_cache = make_contiguous_view(m.v.data, DType::bf16, 4, vc, 0),
                   table = make_contiguous_view(fake(0xb0000000), DType::i32, 2, bt, 0);
  const PagedKV paged{&table, nullptr};
  expect_invalid([&] { attention_paged_forward(pq, k_cache, v_cache, po, nullptr, paged, {}, nullptr); },
                 "v_cache: head dim 128 differs from q's 192", "paged K/V");
}

DLTensor dl(void* data, int ndim, std::int64_t* shape) {
  DLTensor t{};
  t.data = data;
  t.device = {kDLCUDA, 0};
  t.ndim = ndim;
  t.dtype = {kDLBfloat, 16, 1};
  t.shape = shape;
  return t;
}

TEST(AttentionMlaApi, TheCApiTakesVsHeadDimFromV) {
  std::int64_t qs[4] = {1, 4, 33, 192}, vs[4] = {1, 4, 33, 128}, bad[4] = {1, 4, 33, 256};
  DLTensor q = dl(fake(0x10000000), 4, qs), k = dl(fake(0x20000000), 4, qs), v = dl(fake(0x30000000), 4, vs),
           o = dl(fake(0x40000000), 4, vs);
  std::string why;
  if (!gpu_driver().available(&why)) EXPECT_EQ(kgen_attention_forward(&q, &k, &v, &o, nullptr, nullptr, nullptr), KGEN_ERROR_NO_DEVICE)
      << kgen_last_error();
  DLTensor too_wide = dl(fake(0x30000000), 4, bad);
  EXPECT_EQ(kgen_attention_forward(&q, &k, &too_wide, &o, nullptr, nullptr, nullptr), KGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(std::string(kgen_last_error()).rfind("v: head dim 256", 0), 0u) << kgen_last_error();
}

}  // namespace
}  // namespace kgen
