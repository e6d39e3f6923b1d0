// The paged K/V append and plan/run on the GPU (docs/attention.md §10).
//
// Append: new rows of n_new 1, 4 and 16 tokens into shuffled pages of 16 and 64 rows, starting
// at positions that leave partial last pages and cross page boundaries, GQA, fp16/bf16/fp32, head
// dims that take whole 16-byte pieces and a rotary width whose halves do not (80 with rotary_dim
// 40: the element-wise path); rotary off, GPT-NeoX halves and GPT-J pairs over the whole head or part of it, with
// tables of the caches' dtype or fp32, q rotated in place or into another tensor, at sequential or
// equal positions. The caches are NaN-poisoned first: the written rows match the fp64 rotation
// (within one rounding of the dtype; values and unrotated elements bit for bit) and every other
// row stays NaN. Positions past the table are not written; KGEN_CHECK_INDICES names them.
//
// Plan/run: a planned decode step gives the plain call's bits, also on other buffers of the same
// shapes (the plan re-pointed), for the default, split-key and fa2 configs; views that differ
// from the plan's are named.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "check/harness_support.h"
#include "check/host_tensor.h"
#include "driver/device.h"
#include "generator/paged_append.h"
#include "kgen/kgen.hpp"
#include "require_gpu.h"

namespace kgen {
namespace {

struct AppendCase {
  std::string name;
  DType dtype;
  int hq, hkv, d, page_size, n_new;
  std::vector<int> lens;  // each batch's rows before the append
  AppendRotary rotary;    // none, halves (NeoX), pairs (GPT-J)
  int rotary_dim;         // 0: none
  bool cos_f32 = false;
  bool rotate_q = false, q_in_place = false, q_sequential = true;
};

std::vector<AppendCase> append_cases() {
  using R = AppendRotary;
  return {
      {"copy_bf16_d128_page16_n1", DType::bf16, 8, 2, 128, 16, 1, {0, 15, 16, 33}, R::none, 0},
      {"copy_f16_d64_page64_n16", DType::f16, 4, 4, 64, 64, 16, {60, 0, 100}, R::none, 0},
      {"copy_f32_d80_page16_n4", DType::f32, 4, 1, 80, 16, 4, {14, 3}, R::none, 0},
      {"neox_bf16_d128_page16_n4_q_out", DType::bf16, 32, 4, 128, 16, 4, {14, 0, 31, 200}, R::halves, 128, false, true},
      {"neox_f16_d128_half_page64_n16_q_in_place", DType::f16, 8, 2, 128, 64, 16, {50, 63, 1}, R::halves, 64, false, true,
       true},
      {"gptj_bf16_d64_page16_n4_cos_f32", DType::bf16, 16, 2, 64, 16, 4, {13, 29}, R::pairs, 64, true, true, false, false},
      {"gptj_f16_d128_part_page64_n1_in_place", DType::f16, 8, 8, 128, 64, 1, {0, 63, 64, 500}, R::pairs, 32, false, true,
       true},
      {"neox_f32_d64_page16_n16", DType::f32, 4, 2, 64, 16, 16, {7, 40}, R::halves, 32, false, true},
      {"neox_bf16_d80_rot40_scalar_n4", DType::bf16, 4, 2, 80, 16, 4, {10, 22}, R::halves, 40, true, true},
  };
}

double ulp_of(DType t) { return t == DType::f32 ? std::ldexp(1.0, -22) : t == DType::f16 ? std::ldexp(1.0, -10) : std::ldexp(1.0, -7); }

bool is_nan_bits(const HostTensor& t, std::size_t off) { return std::isnan(t.get(off)); }

// The rotated element e of `row` (d values) at table row `pos`.
double rotated(const std::vector<double>& row, int e, int rd, AppendRotary style, const HostTensor& cos,
               const HostTensor& sin, int pos) {
  if (style == AppendRotary::none || e >= rd) return row[e];
  const int half = rd / 2;
  bool first;
  int m, partner;
  if (style == AppendRotary::halves) first = e < half, m = first ? e : e - half, partner = first ? e + half : e - half;
  else first = e % 2 == 0, m = e / 2, partner = first ? e + 1 : e - 1;
  const double c = cos.get(cos.offset(0, 0, pos, m)), s = sin.get(sin.offset(0, 0, pos, m));
  return first ? row[e] * c - row[partner] * s : row[e] * c + row[partner] * s;
}

TEST(PagedAppendGpu, RowsLandInTheirPagesRotatedAndNothingElseIsWritten) {
  KGEN_REQUIRE_GPU();
  use_primary_context(0);
  for (const AppendCase& c : append_cases()) {
    SCOPED_TRACE(c.name);
    std::mt19937_64 rng(0xa99e + c.d + c.n_new);
    const int b = static_cast<int>(c.lens.size());
    int max_pages = 0, used = 0;
    for (int n : c.lens) {
      const int pages = (n + c.n_new + c.page_size - 1) / c.page_size;
      max_pages = std::max(max_pages, pages), used += pages;
    }
    max_pages += 1;  // a spare column of -1 entries
    const int num_pages = used + 2, max_keys = max_pages * c.page_size;
    std::vector<int> order(num_pages);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<int> table(std::size_t(b) * max_pages, -1);
    for (int ib = 0, next = 0; ib < b; ++ib)
      for (int j = 0; j * c.page_size < c.lens[ib] + c.n_new; ++j) table[std::size_t(ib) * max_pages + j] = order[next++];

    HostTensor kc = make_host(num_pages, c.hkv, c.page_size, c.d, Layout::bnhd, c.dtype), vc = kc;
    HostTensor kn = make_host(b, c.hkv, c.n_new, c.d, Layout::bnhd, c.dtype), vn = kn;
    HostTensor q = make_host(b, c.hq, c.n_new, c.d, Layout::bnhd, c.dtype), q_out = q;
    fill_random(kn, rng), fill_random(vn, rng), fill_random(q, rng);
    const DType table_dtype = c.cos_f32 ? DType::f32 : c.dtype;
    const int table_cols = std::max(1, c.rotary_dim / 2);
    HostTensor cos = make_host(1, 1, max_keys, table_cols, Layout::bhnd, table_dtype), sin = cos;
    for (int pos = 0; pos < max_keys; ++pos)
      for (int m = 0; m < table_cols; ++m) {
        const double angle = pos * std::pow(10000.0, -2.0 * m / std::max(c.rotary_dim, 2));
        cos.set(cos.offset(0, 0, pos, m), static_cast<float>(std::cos(angle)));
        sin.set(sin.offset(0, 0, pos, m), static_cast<float>(std::sin(angle)));
      }

    DeviceBuffer dkc(kc.bytes.size()), dvc(vc.bytes.size()), dkn(kn.bytes.size()), dvn(vn.bytes.size()),
        dq(q.bytes.size()), dqo(q.bytes.size()), dcos(cos.bytes.size()), dsin(sin.bytes.size()),
        dtable(table.size() * 4), dlens(c.lens.size() * 4);
    dkc.poison(c.dtype), dvc.poison(c.dtype), dqo.poison(c.dtype);
    dkn.upload(kn.bytes.data()), dvn.upload(vn.bytes.data()), dq.upload(q.bytes.data());
    dcos.upload(cos.bytes.data()), dsin.upload(sin.bytes.data());
    dtable.upload(table.data()), dlens.upload(c.lens.data());
    const std::int64_t cache_shape[4] = {num_pages, c.page_size, c.hkv, c.d}, table_shape[2] = {b, max_pages},
                       lens_shape[1] = {b}, rot_shape[2] = {max_keys, table_cols};
    const TensorView kcv = make_contiguous_view(dkc.get(), c.dtype, 4, cache_shape, 0),
                     vcv = make_contiguous_view(dvc.get(), c.dtype, 4, cache_shape, 0),
                     tv = make_contiguous_view(dtable.get(), DType::i32, 2, table_shape, 0),
                     lv = make_contiguous_view(dlens.get(), DType::i32, 1, lens_shape, 0),
                     cosv = make_contiguous_view(dcos.get(), table_dtype, 2, rot_shape, 0),
                     sinv = make_contiguous_view(dsin.get(), table_dtype, 2, rot_shape, 0);
    const TensorView knv = kn.view(dkn.get(), 0), vnv = vn.view(dvn.get(), 0), qv = q.view(dq.get(), 0),
                     qov = q_out.view(dqo.get(), 0);
    PagedAppendOptions options;
    if (c.rotary != AppendRotary::none) {
      options.rotary = {&cosv, &sinv, c.rotary == AppendRotary::pairs, c.q_sequential};
      if (c.rotate_q) options.q = &qv, options.q_out = c.q_in_place ? nullptr : &qov;
    }
    attention_paged_append(knv, vnv, kcv, vcv, {&tv, &lv}, options, nullptr);
    gpu_driver().synchronize_device("paged append test");
    dkc.download(kc.bytes.data()), dvc.download(vc.bytes.data());
    (c.q_in_place ? dq : dqo).download(q_out.bytes.data());

    // Which cache rows were written: (page, row) -> (batch, token).
    std::vector<std::pair<int, int>> owner(std::size_t(num_pages) * c.page_size, {-1, -1});
    for (int ib = 0; ib < b; ++ib)
      for (int i = 0; i < c.n_new; ++i) {
        const int pos = c.lens[ib] + i, page = table[std::size_t(ib) * max_pages + pos / c.page_size];
        owner[std::size_t(page) * c.page_size + pos % c.page_size] = {ib, i};
      }
    const double tol = 2 * ulp_of(c.dtype);
    int bad = 0;
    for (int page = 0; page < num_pages; ++page)
      for (int r = 0; r < c.page_size; ++r)
        for (int h = 0; h < c.hkv; ++h) {
          const auto [ib, i] = owner[std::size_t(page) * c.page_size + r];
          std::vector<double> row(c.d);
          if (ib >= 0)
            for (int e = 0; e < c.d; ++e) row[e] = kn.get(kn.offset(ib, h, i, e));
          for (int e = 0; e < c.d && bad < 10; ++e) {
            const std::size_t off = kc.offset(page, h, r, e);
            if (ib < 0) {
              if (!is_nan_bits(kc, off) || !is_nan_bits(vc, off))
                ++bad, ADD_FAILURE() << "page " << page << " row " << r << " head " << h << " was written";
              continue;
            }
            const double want = rotated(row, e, c.rotary_dim, c.rotary, cos, sin, c.lens[ib] + i);
            const double got = kc.get(off);
            const bool exact = c.rotary == AppendRotary::none || e >= c.rotary_dim;
            if (exact ? got != want : !(std::fabs(got - want) <= tol * (std::fabs(want) + 1)))
              ++bad, ADD_FAILURE() << "k of batch " << ib << " token " << i << " head " << h << " [" << e << "]: " << got
                                   << " want " << want;
            if (vc.get(off) != vn.get(vn.offset(ib, h, i, e)))
              ++bad, ADD_FAILURE() << "v of batch " << ib << " token " << i << " head " << h << " [" << e << "]";
          }
        }
    if (!c.rotate_q) continue;
    for (int ib = 0; ib < b; ++ib)
      for (int h = 0; h < c.hq; ++h)
        for (int i = 0; i < c.n_new; ++i) {
          std::vector<double> row(c.d);
          for (int e = 0; e < c.d; ++e) row[e] = q.get(q.offset(ib, h, i, e));
          const int pos = c.lens[ib] + (c.q_sequential ? i : 0);
          for (int e = 0; e < c.d && bad < 20; ++e) {
            const double want = rotated(row, e, c.rotary_dim, c.rotary, cos, sin, pos), got = q_out.get(q_out.offset(ib, h, i, e));
            if (!(std::fabs(got - want) <= tol * (std::fabs(want) + 1)))
              ++bad, ADD_FAILURE() << "q of batch " << ib << " head " << h << " token " << i << " [" << e << "]: " << got
                                   << " want " << want;
          }
        }
  }
}

// A batch whose rows would pass the table: not written (the others are); KGEN_CHECK_INDICES names
// it, and a table entry past the cache's pages.
TEST(PagedAppendGpu, PositionsPastTheTableAreSkippedAndNamedInTheIndexCheck) {
  KGEN_REQUIRE_GPU();
  use_primary_context(0);
  const int b = 2, h = 2, d = 64, page = 16, pages = 4, n_new = 4;
  DeviceBuffer dcache(pages * page * h * d * 2), dv(pages * page * h * d * 2), dnew(b * n_new * h * d * 2),
      dtable(b * 2 * 4), dlens(b * 4);
  std::vector<int> table = {0, 1, 2, 3}, lens = {4, 30};  // batch 1 would write rows 30..33 of 32
  dtable.upload(table.data()), dlens.upload(lens.data());
  dcache.poison(DType::bf16), dv.poison(DType::bf16);
  std::vector<std::uint16_t> ones(b * n_new * h * d, 0x3f80);  // bf16 1.0
  dnew.upload(ones.data());
  const std::int64_t cache_shape[4] = {pages, page, h, d}, new_shape[4] = {b, h, n_new, d}, table_shape[2] = {b, 2},
                     lens_shape[1] = {b};
  const TensorView kc = make_contiguous_view(dcache.get(), DType::bf16, 4, cache_shape, 0),
                   vc = make_contiguous_view(dv.get(), DType::bf16, 4, cache_shape, 0),
                   kn = make_contiguous_view(dnew.get(), DType::bf16, 4, new_shape, 0),
                   tv = make_contiguous_view(dtable.get(), DType::i32, 2, table_shape, 0),
                   lv = make_contiguous_view(dlens.get(), DType::i32, 1, lens_shape, 0);
  attention_paged_append(kn, kn, kc, vc, {&tv, &lv}, {}, nullptr);
  gpu_driver().synchronize_device("paged append test");
  std::vector<std::uint16_t> got(pages * page * h * d);
  dcache.download(got.data());
  auto at = [&](int p, int r) { return got[(std::size_t(p) * page + r) * h * d]; };
  EXPECT_EQ(at(0, 4), 0x3f80);   // batch 0's first row
  EXPECT_EQ(at(3, 14), 0x3f80);  // batch 1's rows 30, 31: page table[1][1] = 3
  int written = 0;
  for (int p = 0; p < pages; ++p)
    for (int r = 0; r < page; ++r) written += at(p, r) == 0x3f80;
  EXPECT_EQ(written, 6);  // batch 1's rows 32 and 33 (past its table) went nowhere
  ::setenv("KGEN_CHECK_INDICES", "1", 1);
  try {
    attention_paged_append(kn, kn, kc, vc, {&tv, &lv}, {}, nullptr);
    ADD_FAILURE() << "expected the index check to fail";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("cache_seqlens[1]: 30 + 4 new rows pass the 32 rows", 0), 0u) << e.what();
  }
  lens = {4, 20}, table = {0, 1, 2, 7};  // page 7 is past the cache's 4
  dlens.upload(lens.data()), dtable.upload(table.data());
  try {
    attention_paged_append(kn, kn, kc, vc, {&tv, &lv}, {}, nullptr);
    ADD_FAILURE() << "expected the index check to fail";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("block_table[1][1]: page 7 is past the cache's 4 pages", 0), 0u) << e.what();
  }
  ::unsetenv("KGEN_CHECK_INDICES");
}

// One decode step's buffers.
struct Step {
  DeviceBuffer q, o, lse;
  TensorView qv, ov, lv;
  Step(const HostTensor& host, int b, int hq, int nq)
      : q(host.bytes.size()), o(host.bytes.size()), lse(std::size_t(b) * hq * nq * 4) {
    q.upload(host.bytes.data());
    qv = host.view(q.get(), 0), ov = host.view(o.get(), 0);
    const std::int64_t lse_shape[3] = {b, hq, nq};
    lv = make_contiguous_view(lse.get(), DType::f32, 3, lse_shape, 0);
  }
  std::vector<std::uint8_t> bits() const {
    std::vector<std::uint8_t> out(o.bytes() + lse.bytes());
    o.download(out.data());
    lse.download(out.data() + o.bytes());
    return out;
  }
};

TEST(PagedPlanGpu, RunGivesThePlainCallsBitsOnThePlannedAndOtherBuffers) {
  KGEN_REQUIRE_GPU();
  use_primary_context(0);
  // Few blocks (b·h_q = 24 of 132 SMs), so that the split config splits the keys.
  const int b = 3, hq = 8, hkv = 2, d = 128, page = 64;
  std::mt19937_64 rng(0x91a);
  for (int nq : {1, 4}) {
    const std::vector<int> lens = {4096, 1000, 8191};
    int max_pages = 0;
    for (int n : lens) max_pages = std::max(max_pages, (n + page - 1) / page);
    const int num_pages = b * max_pages;
    std::vector<int> table(std::size_t(b) * max_pages);
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), rng);
    HostTensor kc = make_host(num_pages, hkv, page, d, Layout::bnhd, DType::bf16), vc = kc;
    HostTensor q = make_host(b, hq, nq, d, Layout::bnhd, DType::bf16);
    fill_random(kc, rng), fill_random(vc, rng), fill_random(q, rng);
    DeviceBuffer dk(kc.bytes.size()), dv(vc.bytes.size()), dtable(table.size() * 4), dlens(lens.size() * 4);
    dk.upload(kc.bytes.data()), dv.upload(vc.bytes.data()), dtable.upload(table.data()), dlens.upload(lens.data());
    const std::int64_t cache_shape[4] = {num_pages, page, hkv, d}, table_shape[2] = {b, max_pages}, lens_shape[1] = {b};
    const TensorView kv_k = make_contiguous_view(dk.get(), DType::bf16, 4, cache_shape, 0),
                     kv_v = make_contiguous_view(dv.get(), DType::bf16, 4, cache_shape, 0),
                     tv = make_contiguous_view(dtable.get(), DType::i32, 2, table_shape, 0),
                     lv = make_contiguous_view(dlens.get(), DType::i32, 1, lens_shape, 0);
    const PagedKV kv{&tv, &lv};
    Step planned(q, b, hq, nq), other(q, b, hq, nq), plain(q, b, hq, nq);
    for (const char* config : {"", "ws:bm128:bn64:s2:pp1:split", "fa2:bm64:bn64:w4:s2"}) {
      SCOPED_TRACE(std::string("n_q ") + std::to_string(nq) + " [" + config + "]");
      AttentionOptions options;
      options.causal = true;
      options.config = config;
      AttentionPagedPlan plan;
      try {
        plan = attention_paged_plan(planned.qv, kv_k, kv_v, planned.ov, &planned.lv, kv, options);
      } catch (const Error& e) {
        if (*config && std::string(e.what()).rfind("config:", 0) == 0) continue;  // not served on this GPU
        throw;
      }
      if (std::string(config).find(":split") != std::string::npos) {
        EXPECT_GT(plan.splits(), 1);
        EXPECT_GT(plan.workspace_bytes(), 0u);
      }
      DeviceBuffer ws(std::max<std::size_t>(plan.workspace_bytes(), 16));
      for (Step* s : {&planned, &other, &plain}) s->o.poison(DType::bf16), s->lse.poison(DType::f32);
      attention_paged_forward(plain.qv, kv_k, kv_v, plain.ov, &plain.lv, kv, options, nullptr);
      attention_paged_run(plan, planned.qv, kv_k, kv_v, planned.ov, &planned.lv, kv, ws.get(), plan.workspace_bytes(),
                          nullptr);
      attention_paged_run(plan, other.qv, kv_k, kv_v, other.ov, &other.lv, kv, ws.get(), plan.workspace_bytes(),
                          nullptr);
      gpu_driver().synchronize_device("paged plan test");
      const auto want = plain.bits();
      EXPECT_TRUE(want == planned.bits()) << "the planned buffers differ from the plain call (" << plan.config() << ")";
      EXPECT_TRUE(want == other.bits()) << "other buffers differ from the plain call (" << plan.config() << ")";

      // Views that differ from the plan's are named.
      auto message = [&](auto&& call) -> std::string {
        try {
          call();
        } catch (const Error& e) {
          return e.what();
        }
        return "";
      };
      TensorView wider = other.qv;
      wider.shape[0] = 2;
      EXPECT_EQ(message([&] { attention_paged_run(plan, wider, kv_k, kv_v, other.ov, &other.lv, kv, ws.get(), ws.bytes(), nullptr); })
                    .rfind("q: bf16 (2, ", 0),
                0u);
      EXPECT_EQ(message([&] { attention_paged_run(plan, other.qv, kv_k, kv_v, other.ov, nullptr, kv, ws.get(), ws.bytes(), nullptr); })
                    .rfind("lse: missing", 0),
                0u);
      if (plan.workspace_bytes()) {
        EXPECT_EQ(message([&] { attention_paged_run(plan, other.qv, kv_k, kv_v, other.ov, &other.lv, kv, nullptr, 0, nullptr); })
                      .rfind("workspace: null", 0),
                  0u);
      }
    }
  }
  EXPECT_EQ(std::string([] {
              try {
                attention_paged_run({}, {}, {}, {}, {}, nullptr, {}, nullptr, 0, nullptr);
              } catch (const Error& e) {
                return std::string(e.what());
              }
              return std::string();
            }())
                .rfind("plan: empty", 0),
            0u);
}

}  // namespace
}  // namespace kgen
