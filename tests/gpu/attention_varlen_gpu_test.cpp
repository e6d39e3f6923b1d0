// Packed (variable-length) batches on the GPU (docs/attention.md §9): long-tailed sequence
// lengths with empty and one-row sequences, GQA, causal, head dims the families serve, and a
// window + softcap + sinks variant, on every kernel family that serves packed batches (the
// default, ws, fa2 and simt), each sequence against the fp64 reference of its own rows. Outputs
// are NaN-poisoned first; the row rule applies to o, the element rule to lse, and the rows no
// sequence owns must keep their poison.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
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
#include "require_gpu.h"

namespace kgen {
namespace {

struct VarlenCase {
  std::string name;
  DType dtype;
  int hq, hkv, d;
  bool causal;
  std::vector<int> len_q, len_k;  // per sequence
  int window_left = -1;           // with softcap and sinks when >= 0
};

// Lengths from a long-tailed (lognormal) draw, with an empty and a one-row sequence among them.
std::vector<int> long_tailed(int count, double mean_log, std::mt19937_64& rng) {
  std::lognormal_distribution<double> draw(mean_log, 1.0);
  std::vector<int> out;
  for (int i = 0; i < count; ++i) out.push_back(std::min(3000, static_cast<int>(draw(rng))));
  if (count > 3) out[1] = 0, out[2] = 1;
  return out;
}

std::vector<VarlenCase> cases() {
  std::mt19937_64 rng(0x7a11e4);
  std::vector<VarlenCase> out;
  const std::vector<int> tail = long_tailed(12, 5.0, rng);
  out.push_back({"self_attention_causal_bf16_d128", DType::bf16, 4, 4, 128, true, tail, tail});
  out.push_back({"self_attention_full_f16_d64_gqa", DType::f16, 8, 2, 64, false, tail, tail});
  const std::vector<int> many = long_tailed(40, 4.0, rng);
  out.push_back({"forty_sequences_causal_bf16_d64", DType::bf16, 2, 1, 64, true, many, many});
  // Cross lengths: fewer queries than keys per sequence (bottom-right causal per sequence), a
  // sequence with keys but no queries and one with queries but no keys (o = 0, lse = −inf).
  out.push_back({"cross_lengths_causal_bf16_d128", DType::bf16, 4, 2, 128, true, {100, 0, 300, 1, 64, 5},
                 {700, 50, 300, 129, 64, 0}});
  out.push_back({"d80_bf16", DType::bf16, 2, 2, 80, false, {33, 257, 1000}, {33, 257, 1000}});
  out.push_back({"d256_f16_causal", DType::f16, 2, 2, 256, true, {200, 77, 513}, {200, 77, 513}});
  out.push_back({"fp32_d72", DType::f32, 2, 1, 72, true, {50, 0, 130}, {50, 0, 130}});
  VarlenCase gpt_oss{"window_softcap_sinks_bf16_d64", DType::bf16, 4, 2, 64, true, tail, tail};
  gpt_oss.window_left = 96;
  out.push_back(gpt_oss);
  return out;
}

const char* kConfigs[] = {"",
                          "ws:bm128:bn128:s2:pp1",
                          "ws:bm128:bn80:s2:pp1",
                          "ws:bm192:bn128:s2:pp1",
                          "fa2:bm128:bn64:w4:s2",
                          "fa2:bm64:bn32:w4:s2",
                          "simt:bm4:bn32:dmax64",
                          "simt:bm4:bn32:dmax128",
                          "simt:bm4:bn32:dmax256"};

// A packed (total, h, d) host tensor: one batch of `total` rows in the (b, n, h, d) layout.
HostTensor packed_host(int total, int h, int d, DType dtype) { return make_host(1, h, total, d, Layout::bnhd, dtype); }

TensorView packed_view3(const HostTensor& t, void* data) {
  const std::int64_t shape[3] = {t.n, t.h, t.d};
  return make_contiguous_view(data, t.dtype, 3, shape, 0);
}

// Rows [row0, row0 + n) of a packed tensor as one (1, h, n, d) fp64 problem tensor.
std::vector<double> rows_of(const HostTensor& t, int row0, int n) {
  std::vector<double> out;
  out.reserve(std::size_t(t.h) * n * t.d);
  for (int ih = 0; ih < t.h; ++ih)
    for (int in = 0; in < n; ++in)
      for (int id = 0; id < t.d; ++id) out.push_back(t.get(t.offset(0, ih, row0 + in, id)));
  return out;
}

TEST(AttentionVarlenGpu, EverySequenceMatchesItsFp64ReferenceOnEveryFamily) {
  KGEN_REQUIRE_GPU();
  use_primary_context(0);
  int checked = 0;
  for (const VarlenCase& c : cases()) {
    const int batch = static_cast<int>(c.len_q.size());
    std::vector<int> cu_q{0}, cu_k{0};
    for (int i = 0; i < batch; ++i) cu_q.push_back(cu_q.back() + c.len_q[i]), cu_k.push_back(cu_k.back() + c.len_k[i]);
    const int total_q = cu_q.back(), total_k = cu_k.back(), pad = 7;  // rows no sequence owns follow
    const int max_q = *std::max_element(c.len_q.begin(), c.len_q.end()),
              max_k = *std::max_element(c.len_k.begin(), c.len_k.end());
    std::mt19937_64 rng(0x5eed + total_q + c.d);
    HostTensor q = packed_host(total_q + pad, c.hq, c.d, c.dtype), k = packed_host(total_k, c.hkv, c.d, c.dtype),
               v = packed_host(total_k, c.hkv, c.d, c.dtype), o = packed_host(total_q + pad, c.hq, c.d, c.dtype);
    fill_random(q, rng), fill_random(k, rng), fill_random(v, rng);

    // The variant and its reference.
    AttentionOptions options;
    options.causal = c.causal;
    std::vector<float> sinks;
    std::unique_ptr<Variant> keep;
    ReferenceVariant rv;
    std::unique_ptr<DeviceBuffer> dsinks;
    TensorView sinks_view;
    if (c.window_left >= 0) {
      options.variant.window_left = c.window_left, options.variant.window_right = 0, options.variant.softcap = 30;
      VariantPresets presets;
      presets.window = presets.softcap = true;
      const VariantDecl decl = compose_variant(presets, {});
      keep = std::make_unique<Variant>(Variant::parse(decl));
      rv.variant = keep.get();
      for (const auto& s : decl.scalars)
        rv.values.scalars.push_back(s.name == "window_left" ? c.window_left : s.name == "window_right" ? 0 : 30);
      std::normal_distribution<float> n(0.f, 1.5f);
      for (int h = 0; h < c.hq; ++h) sinks.push_back(n(rng)), rv.sinks.push_back(sinks.back());
      dsinks = std::make_unique<DeviceBuffer>(sinks.size() * 4);
      dsinks->upload(sinks.data());
      const std::int64_t shape[1] = {c.hq};
      sinks_view = make_contiguous_view(dsinks->get(), DType::f32, 1, shape, 0);
      options.variant.sinks = &sinks_view;
    }

    // Each sequence's fp64 reference.
    std::vector<AttentionForwardReference> refs(batch);
    for (int i = 0; i < batch; ++i) {
      if (c.len_q[i] == 0 || c.len_k[i] == 0) continue;
      AttentionProblem prob;
      prob.heads_q = c.hq, prob.heads_kv = c.hkv, prob.n_q = c.len_q[i], prob.n_k = c.len_k[i], prob.head_dim = c.d;
      prob.causal = c.causal;
      prob.q = rows_of(q, cu_q[i], c.len_q[i]);
      prob.k = rows_of(k, cu_k[i], c.len_k[i]);
      prob.v = rows_of(v, cu_k[i], c.len_k[i]);
      refs[i] = attention_forward_cpu(prob, rv.variant || !rv.sinks.empty() ? &rv : nullptr);
    }

    DeviceBuffer dq(q.bytes.size()), dk(k.bytes.size()), dv(v.bytes.size()), dout(o.bytes.size()),
        dlse(std::size_t(c.hq) * (total_q + pad) * 4), dcu_q(cu_q.size() * 4), dcu_k(cu_k.size() * 4);
    dq.upload(q.bytes.data()), dk.upload(k.bytes.data()), dv.upload(v.bytes.data());
    dcu_q.upload(cu_q.data()), dcu_k.upload(cu_k.data());
    const TensorView qv = packed_view3(q, dq.get()), kv = packed_view3(k, dk.get()), vv = packed_view3(v, dv.get()),
                     ov = packed_view3(o, dout.get());
    const std::int64_t lse_shape[2] = {c.hq, total_q + pad}, cu_shape[1] = {batch + 1};
    const TensorView lv = make_contiguous_view(dlse.get(), DType::f32, 2, lse_shape, 0),
                     cqv = make_contiguous_view(dcu_q.get(), DType::i32, 1, cu_shape, 0),
                     ckv = make_contiguous_view(dcu_k.get(), DType::i32, 1, cu_shape, 0);
    const PackedSequences seqs{&cqv, &ckv, max_q, max_k};
    for (const char* config : kConfigs) {
      const std::string label = c.name + " [" + (*config ? config : "default") + "]";
      options.config = config;
      dout.poison(c.dtype);
      dlse.poison(DType::f32);
      try {
        attention_varlen_forward(qv, kv, vv, ov, &lv, seqs, options, nullptr);
      } catch (const Error& e) {
        // A family that does not serve this head dim, dtype or target.
        if (*config != '\0' && std::string(e.what()).rfind("config:", 0) == 0) continue;
        ADD_FAILURE() << label << ": " << e.what();
        continue;
      }
      gpu_driver().synchronize_device("varlen test");
      dout.download(o.bytes.data());
      std::vector<float> lse(std::size_t(c.hq) * (total_q + pad));
      dlse.download(lse.data());
      const Tolerance tol = tolerance_for(c.dtype);
      for (int i = 0; i < batch; ++i) {
        if (c.len_q[i] == 0) continue;
        const std::vector<double> got = rows_of(o, cu_q[i], c.len_q[i]);
        std::vector<double> got_lse;
        for (int ih = 0; ih < c.hq; ++ih)
          for (int in = 0; in < c.len_q[i]; ++in) got_lse.push_back(lse[std::size_t(ih) * (total_q + pad) + cu_q[i] + in]);
        if (c.len_k[i] == 0) {  // no keys: o = 0 and lse = −inf (or the sink's logit)
          for (double x : got) ASSERT_EQ(x, 0.0) << label << " sequence " << i;
          for (std::size_t j = 0; j < got_lse.size(); ++j)
            ASSERT_EQ(got_lse[j], sinks.empty() ? -INFINITY : sinks[j / c.len_q[i]]) << label << " sequence " << i;
          continue;
        }
        const Comparison co = compare(got, refs[i].o, tol, c.d), cl = compare(got_lse, refs[i].lse, tol, 1);
        EXPECT_TRUE(co.pass) << label << " sequence " << i << " o: " << co.why << " " << to_string(co);
        EXPECT_TRUE(cl.pass) << label << " sequence " << i << " lse: " << cl.why << " " << to_string(cl);
      }
      // The rows past the last sequence keep their poison.
      for (int ih = 0; ih < c.hq; ++ih)
        for (int r = total_q; r < total_q + pad; ++r) {
          EXPECT_TRUE(std::isnan(o.get(o.offset(0, ih, r, 0)))) << label << ": o row " << r << " was written";
          EXPECT_TRUE(std::isnan(lse[std::size_t(ih) * (total_q + pad) + r])) << label << ": lse row " << r << " was written";
        }
      ++checked;
    }
  }
  EXPECT_GT(checked, 30);
}

TEST(AttentionVarlenGpu, BadArgumentsAreNamed) {
  KGEN_REQUIRE_GPU();
  use_primary_context(0);
  const int total = 64, h = 2, d = 64;
  DeviceBuffer dq(total * h * d * 2), dout(total * h * d * 2), dcu(4 * 4);
  std::vector<int> cu = {0, 40, 30, 64};  // not monotone
  dcu.upload(cu.data());
  const std::int64_t shape[3] = {total, h, d}, cu_shape[1] = {4};
  const TensorView q = make_contiguous_view(dq.get(), DType::bf16, 3, shape, 0),
                   o = make_contiguous_view(dout.get(), DType::bf16, 3, shape, 0),
                   cuv = make_contiguous_view(dcu.get(), DType::i32, 1, cu_shape, 0);
  auto message = [&](const PackedSequences& s, const AttentionOptions& opt = {}) -> std::string {
    try {
      attention_varlen_forward(q, q, q, o, nullptr, s, opt, nullptr);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_EQ(message({&cuv, nullptr, 40, 40}).rfind("cu_seqlens_k:", 0), 0u);
  EXPECT_EQ(message({&cuv, &cuv, 65, 40}).rfind("max_seqlen_q:", 0), 0u);
  const TensorView as_float = make_contiguous_view(dcu.get(), DType::f32, 1, cu_shape, 0);
  EXPECT_EQ(message({&as_float, &cuv, 40, 40}).rfind("cu_seqlens_q: dtype", 0), 0u);
  AttentionOptions persist;
  persist.config = "ws:bm128:bn128:s2:pp1:persist";
  EXPECT_NE(message({&cuv, &cuv, 40, 40}, persist).find("plain grid"), std::string::npos);
  ::setenv("KGEN_CHECK_INDICES", "1", 1);
  EXPECT_EQ(message({&cuv, &cuv, 64, 64}).rfind("cu_seqlens_q[2]: 30 is below", 0), 0u);
  ::unsetenv("KGEN_CHECK_INDICES");
}

}  // namespace
}  // namespace kgen
