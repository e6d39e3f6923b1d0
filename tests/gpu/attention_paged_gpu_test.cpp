// Paged K/V caches on the GPU (docs/attention.md §10): decode and chunked-prefill queries (n_q 1, 4,
// 16) against caches in shuffled pages of 16 to 256 rows with partial last pages, GQA 8 and 1,
// causal and window + softcap + sinks, on every kernel family that serves paged K/V (the default,
// ws with and without split keys, fa2, simt), each batch against the fp64 reference of its keys
// gathered densely. Outputs are NaN-poisoned first; the row rule applies to o, the element rule to
// lse. Block-table entries past a batch's keys hold -1 and must never be read.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "check/harness_support.h"
#include "check/host_tensor.h"
#include "check/metrics.h"
#include "check/reference_cpu.h"
#include "driver/device.h"
#include "generator/variant.h"
#include "kgen/kgen.hpp"
#include "gpt_oss_variant.h"
#include "require_gpu.h"

namespace kgen {
namespace {

struct PagedCase {
  std::string name;
  DType dtype;
  int hq, hkv, n_q, d, page_size;
  bool causal;
  std::vector<int> lens;  // keys of each batch
  bool gpt_oss = false;   // window 64 + softcap 30 + sinks
};

std::vector<PagedCase> paged_cases() {
  return {
      {"decode_gqa8_bf16_d128_page16", DType::bf16, 32, 4, 1, 128, 16, true, {1, 17, 300, 4096, 33}},
      {"decode_mha_f16_d64_page64", DType::f16, 8, 8, 1, 64, 64, true, {64, 65, 1000, 2}},
      {"speculative_4_bf16_d128_page256", DType::bf16, 16, 2, 4, 128, 256, true, {4, 257, 700, 3000}},
      {"chunked_prefill_16_bf16_d64_page32", DType::bf16, 8, 2, 16, 64, 32, true, {16, 100, 555}},
      {"full_mask_f16_d128_page128", DType::f16, 8, 1, 4, 128, 128, false, {5, 129, 2000}},
      {"gpt_oss_bf16_d64_page16", DType::bf16, 16, 2, 1, 64, 16, true, {50, 200, 1000}, true},
      {"fp32_d80_page16", DType::f32, 4, 2, 2, 80, 16, true, {3, 40, 100}},
      // The 256-column tile's default 80-key tiles on pages of 64 (run as 64-key tiles), the
      // 192-column tile on pages of 128 and on pages of 16.
      {"decode_mha_bf16_d256_page64", DType::bf16, 16, 16, 1, 256, 64, true, {1, 65, 300, 1000, 129}},
      {"decode_gqa4_f16_d192_page128", DType::f16, 16, 4, 2, 192, 128, false, {3, 200, 900}},
      {"decode_bf16_d160_page16", DType::bf16, 8, 8, 1, 160, 16, true, {17, 500, 2000}},
  };
}

const char* kPagedConfigs[] = {"",
                          "ws:bm128:bn128:s2:pp1",
                          "ws:bm128:bn80:s2:pp1",  // pages of 16 only (five pages a tile); refused on larger ones
                          "ws:bm128:bn64:s2:pp1:split",
                          "ws:bm128:bn128:s2:pp1:split",
                          "wg:bm64:bn64:s2",
                          "wg:bm64:bn128:s2",
                          "wg:bm64:bn128:s3",
                          "wg:bm64:bn128:s2:split",
                          "wg:bm64:bn64:s2:split",
                          "wg:bm128:bn64:s2",
                          "fa2:bm64:bn64:w4:s2",
                          "fa2:bm128:bn32:w4:s2",
                          "simt:bm4:bn32:dmax64",
                          "simt:bm4:bn32:dmax128"};

TEST(AttentionPagedGpu, EveryBatchMatchesItsGatheredFp64ReferenceOnEveryFamily) {
  KGEN_REQUIRE_GPU();
  use_primary_context(0);
  int checked = 0;
  for (const PagedCase& c : paged_cases()) {
    const int b = static_cast<int>(c.lens.size());
    std::mt19937_64 rng(0x9a9e + c.d + c.page_size);
    int max_pages = 0, used = 0;
    for (int n : c.lens) max_pages = std::max(max_pages, (n + c.page_size - 1) / c.page_size), used += (n + c.page_size - 1) / c.page_size;
    max_pages += 1;  // a spare column of -1 entries after every row's last page
    const int num_pages = used + 3;
    // Pages handed out in a shuffled order; entries past a batch's keys stay -1.
    std::vector<int> order(num_pages);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<int> table(std::size_t(b) * max_pages, -1);
    for (int ib = 0, next = 0; ib < b; ++ib)
      for (int j = 0; j * c.page_size < c.lens[ib]; ++j) table[std::size_t(ib) * max_pages + j] = order[next++];
    // The caches (num_pages, page_size, h_kv, d) as one (1, h_kv · ..., ) host block: a bnhd host
    // tensor of batch num_pages, n = page_size, h = h_kv is exactly that layout.
    HostTensor kc = make_host(num_pages, c.hkv, c.page_size, c.d, Layout::bnhd, c.dtype), vc = kc;
    HostTensor q = make_host(b, c.hq, c.n_q, c.d, Layout::bnhd, c.dtype), o = q;
    const std::vector<double> qv = fill_random(q, rng);
    fill_random(kc, rng), fill_random(vc, rng);

    AttentionOptions options;
    options.causal = c.causal;
    GptOssVariant gpt_oss;
    if (c.gpt_oss) gpt_oss.set(options, 64, c.hq, rng);

    // Each batch's fp64 reference over its keys gathered from the pages.
    std::vector<AttentionForwardReference> refs(b);
    for (int ib = 0; ib < b; ++ib) {
      AttentionProblem prob;
      prob.heads_q = c.hq, prob.heads_kv = c.hkv, prob.n_q = c.n_q, prob.n_k = c.lens[ib], prob.head_dim = c.d;
      prob.causal = c.causal;
      for (int ih = 0; ih < c.hq; ++ih)
        for (int i = 0; i < c.n_q; ++i)
          for (int e = 0; e < c.d; ++e) prob.q.push_back(q.get(q.offset(ib, ih, i, e)));
      for (HostTensor* cache : {&kc, &vc}) {
        std::vector<double>& dst = cache == &kc ? prob.k : prob.v;
        for (int ih = 0; ih < c.hkv; ++ih)
          for (int j = 0; j < c.lens[ib]; ++j) {
            const int page = table[std::size_t(ib) * max_pages + j / c.page_size];
            for (int e = 0; e < c.d; ++e) dst.push_back(cache->get(cache->offset(page, ih, j % c.page_size, e)));
          }
      }
      refs[ib] = attention_forward_cpu(prob, gpt_oss.get());
    }

    DeviceBuffer dq(q.bytes.size()), dk(kc.bytes.size()), dv(vc.bytes.size()), dout(o.bytes.size()),
        dlse(std::size_t(b) * c.hq * c.n_q * 4), dtable(table.size() * 4), dlens(c.lens.size() * 4);
    dq.upload(q.bytes.data()), dk.upload(kc.bytes.data()), dv.upload(vc.bytes.data());
    dtable.upload(table.data()), dlens.upload(c.lens.data());
    const std::int64_t cache_shape[4] = {num_pages, c.page_size, c.hkv, c.d}, lse_shape[3] = {b, c.hq, c.n_q},
                       table_shape[2] = {b, max_pages}, lens_shape[1] = {b};
    const TensorView qview = q.view(dq.get(), 0), oview = o.view(dout.get(), 0),
                     kview = make_contiguous_view(dk.get(), c.dtype, 4, cache_shape, 0),
                     vview = make_contiguous_view(dv.get(), c.dtype, 4, cache_shape, 0),
                     lview = make_contiguous_view(dlse.get(), DType::f32, 3, lse_shape, 0),
                     tview = make_contiguous_view(dtable.get(), DType::i32, 2, table_shape, 0),
                     nview = make_contiguous_view(dlens.get(), DType::i32, 1, lens_shape, 0);
    const PagedKV kv{&tview, &nview};
    for (const char* config : kPagedConfigs) {
      const std::string label = c.name + " [" + (*config ? config : "default") + "]";
      options.config = config;
      dout.poison(c.dtype);
      dlse.poison(DType::f32);
      try {
        attention_paged_forward(qview, kview, vview, oview, &lview, kv, options, nullptr);
      } catch (const Error& e) {
        if (*config != '\0' && std::string(e.what()).rfind("config:", 0) == 0) continue;  // not served here
        ADD_FAILURE() << label << ": " << e.what();
        continue;
      }
      gpu_driver().synchronize_device("paged test");
      dout.download(o.bytes.data());
      std::vector<float> lse(std::size_t(b) * c.hq * c.n_q);
      dlse.download(lse.data());
      const Tolerance tol = tolerance_for(c.dtype);
      for (int ib = 0; ib < b; ++ib) {
        std::vector<double> got, got_lse;
        for (int ih = 0; ih < c.hq; ++ih)
          for (int i = 0; i < c.n_q; ++i) {
            for (int e = 0; e < c.d; ++e) got.push_back(o.get(o.offset(ib, ih, i, e)));
            got_lse.push_back(lse[(std::size_t(ib) * c.hq + ih) * c.n_q + i]);
          }
        const Comparison co = compare(got, refs[ib].o, tol, c.d), cl = compare(got_lse, refs[ib].lse, tol, 1);
        EXPECT_TRUE(co.pass) << label << " batch " << ib << " o: " << co.why << " " << to_string(co);
        EXPECT_TRUE(cl.pass) << label << " batch " << ib << " lse: " << cl.why << " " << to_string(cl);
      }
      ++checked;
    }
  }
  EXPECT_GT(checked, 30);
}

TEST(AttentionPagedGpu, BadArgumentsAreNamed) {
  KGEN_REQUIRE_GPU();
  use_primary_context(0);
  const int b = 2, h = 2, d = 64, page = 16, pages = 4;
  DeviceBuffer dq(b * h * d * 2), dcache(pages * page * h * d * 2), dtable(b * 2 * 4), dlens(b * 4);
  std::vector<int> table = {0, 1, 2, 9}, lens = {20, 32};  // page 9 is past the cache's 4
  dtable.upload(table.data()), dlens.upload(lens.data());
  const std::int64_t q_shape[4] = {b, h, 1, d}, cache_shape[4] = {pages, page, h, d}, table_shape[2] = {b, 2},
                     lens_shape[1] = {b}, odd_shape[4] = {pages * 2, page / 2, h, d};
  const TensorView q = make_contiguous_view(dq.get(), DType::bf16, 4, q_shape, 0),
                   cache = make_contiguous_view(dcache.get(), DType::bf16, 4, cache_shape, 0),
                   odd = make_contiguous_view(dcache.get(), DType::bf16, 4, odd_shape, 0),
                   tv = make_contiguous_view(dtable.get(), DType::i32, 2, table_shape, 0),
                   lv = make_contiguous_view(dlens.get(), DType::i32, 1, lens_shape, 0);
  auto message = [&](const TensorView& k, const PagedKV& kv, const char* config = "") -> std::string {
    AttentionOptions options;
    options.config = config;
    try {
      attention_paged_forward(q, k, k, q, nullptr, kv, options, nullptr);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_EQ(message(cache, {nullptr, &lv}).rfind("block_table:", 0), 0u);
  EXPECT_EQ(message(odd, {&tv, &lv}).rfind("k_cache: page_size 8", 0), 0u);
  EXPECT_EQ(message(cache, {&tv, &tv}).rfind("cache_seqlens:", 0), 0u);
  // Key tiles that neither lie within a page nor cover whole pages.
  const std::int64_t wide_shape[4] = {pages / 2, page * 2, h, d};
  const TensorView wide = make_contiguous_view(dcache.get(), DType::bf16, 4, wide_shape, 0);
  if (device_info(0).target.arch == "sm_90a")
    EXPECT_EQ(message(wide, {&tv, &lv}, "ws:bm128:bn80:s2:pp1")
                  .rfind("config: ws:bm128:bn80:s2:pp1 has 80-key tiles, which neither divide nor fill k_cache's pages of 32", 0),
              0u);
  ::setenv("KGEN_CHECK_INDICES", "1", 1);
  EXPECT_EQ(message(cache, {&tv, &lv}).rfind("block_table[1][1]: page 9 is past", 0), 0u);
  ::unsetenv("KGEN_CHECK_INDICES");
}

}  // namespace
}  // namespace kgen
