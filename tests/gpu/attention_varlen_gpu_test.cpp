// Packed (variable-length) batches on the GPU (docs/attention.md §9): long-tailed sequence
// lengths with empty and one-row sequences, GQA, causal, head dims the families serve, and a
// window + softcap + sinks variant, on every kernel family that serves packed batches (the
// default, ws, fa2 and simt), each sequence against the fp64 reference of its own rows; the
// backward and the double backward (every family: the default, fa2 and simt) likewise. Outputs
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
#include "generator/attention_backward.h"
#include "generator/variant.h"
#include "kgen/kgen.hpp"
#include "gpt_oss_variant.h"
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

std::vector<VarlenCase> varlen_cases() {
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

const char* kVarlenConfigs[] = {"",
                          "ws:bm128:bn128:s2:pp1",
                          "ws:bm128:bn80:s2:pp1",
                          "ws:bm192:bn128:s2:pp1",
                          // The persistent grid (packed batches alone): two Q buffers, one (176- and
                          // 80-key tiles), no turns, three consumers.
                          "ws:bm128:bn128:s2:pp1:persist",
                          "ws:bm128:bn64:s2:pp1:persist",
                          "ws:bm128:bn128:s2:pp0:persist",
                          "ws:bm128:bn176:s2:pp1:persist",
                          "ws:bm128:bn80:s2:pp1:persist",
                          "ws:bm192:bn128:s2:pp1:persist",
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

// A case set up on the device: the packed tensors (q and o with `pad` rows past the last
// sequence), cu_seqlens, the variant (window + softcap + sinks when the case has a window) and its
// reference.
struct PackedCase {
  static constexpr int pad = 7;  // rows no sequence owns, after the last one
  const VarlenCase& c;
  int batch, total_q, total_k, max_q, max_k;
  std::vector<int> cu_q{0}, cu_k{0};
  HostTensor q, k, v, o, d_o;
  GptOssVariant gpt_oss;
  const std::vector<float>& sinks = gpt_oss.sinks;
  std::unique_ptr<DeviceBuffer> dq_in, dk_in, dv_in, dout, ddo, dlse, dcu_q, dcu_k;
  TensorView qv, kv, vv, ov, dov, lv, cqv, ckv;
  AttentionOptions options;

  PackedCase(const VarlenCase& vc, std::uint64_t seed)
      : c(vc),
        batch(static_cast<int>(vc.len_q.size())),
        q(make_host(1, 1, 1, 1, Layout::bnhd, vc.dtype)),
        k(q), v(q), o(q), d_o(q) {
    for (int i = 0; i < batch; ++i) cu_q.push_back(cu_q.back() + c.len_q[i]), cu_k.push_back(cu_k.back() + c.len_k[i]);
    total_q = cu_q.back(), total_k = cu_k.back();
    max_q = *std::max_element(c.len_q.begin(), c.len_q.end()), max_k = *std::max_element(c.len_k.begin(), c.len_k.end());
    std::mt19937_64 rng(seed + total_q + c.d);
    q = packed_host(total_q + pad, c.hq, c.d, c.dtype), o = q, d_o = q;
    k = packed_host(total_k, c.hkv, c.d, c.dtype), v = k;
    fill_random(q, rng), fill_random(k, rng), fill_random(v, rng), fill_random(d_o, rng);
    options.causal = c.causal;
    if (c.window_left >= 0) gpt_oss.set(options, c.window_left, c.hq, rng);
    auto upload = [](const HostTensor& t, std::unique_ptr<DeviceBuffer>& b, TensorView& view) {
      b = std::make_unique<DeviceBuffer>(t.bytes.size());
      b->upload(t.bytes.data());
      view = packed_view3(t, b->get());
    };
    upload(q, dq_in, qv), upload(k, dk_in, kv), upload(v, dv_in, vv), upload(o, dout, ov), upload(d_o, ddo, dov);
    dlse = std::make_unique<DeviceBuffer>(std::size_t(c.hq) * (total_q + pad) * 4);
    const std::int64_t lse_shape[2] = {c.hq, total_q + pad}, cu_shape[1] = {batch + 1};
    lv = make_contiguous_view(dlse->get(), DType::f32, 2, lse_shape, 0);
    dcu_q = std::make_unique<DeviceBuffer>(cu_q.size() * 4), dcu_k = std::make_unique<DeviceBuffer>(cu_k.size() * 4);
    dcu_q->upload(cu_q.data()), dcu_k->upload(cu_k.data());
    cqv = make_contiguous_view(dcu_q->get(), DType::i32, 1, cu_shape, 0);
    ckv = make_contiguous_view(dcu_k->get(), DType::i32, 1, cu_shape, 0);
  }
  PackedSequences sequences() const { return {&cqv, &ckv, max_q, max_k}; }
  // Sequence i as one fp64 problem (batch 1).
  AttentionProblem problem(int i) const {
    AttentionProblem prob;
    prob.heads_q = c.hq, prob.heads_kv = c.hkv, prob.n_q = c.len_q[i], prob.n_k = c.len_k[i], prob.head_dim = c.d;
    prob.causal = c.causal;
    prob.q = rows_of(q, cu_q[i], c.len_q[i]);
    prob.k = rows_of(k, cu_k[i], c.len_k[i]);
    prob.v = rows_of(v, cu_k[i], c.len_k[i]);
    return prob;
  }
  const ReferenceVariant* variant() const { return gpt_oss.get(); }
};

TEST(AttentionVarlenGpu, EverySequenceMatchesItsFp64ReferenceOnEveryFamily) {
  KGEN_REQUIRE_GPU();
  use_primary_context(0);
  int checked = 0;
  for (const VarlenCase& c : varlen_cases()) {
    PackedCase pc(c, 0x5eed);
    const int batch = pc.batch, total_q = pc.total_q, pad = PackedCase::pad;
    std::vector<AttentionForwardReference> refs(batch);
    for (int i = 0; i < batch; ++i)
      if (c.len_q[i] > 0 && c.len_k[i] > 0) refs[i] = attention_forward_cpu(pc.problem(i), pc.variant());
    HostTensor& o = pc.o;
    for (const char* config : kVarlenConfigs) {
      const std::string label = c.name + " [" + (*config ? config : "default") + "]";
      pc.options.config = config;
      pc.dout->poison(c.dtype);
      pc.dlse->poison(DType::f32);
      try {
        attention_varlen_forward(pc.qv, pc.kv, pc.vv, pc.ov, &pc.lv, pc.sequences(), pc.options, nullptr);
      } catch (const Error& e) {
        // A family that does not serve this head dim, dtype or target.
        if (*config != '\0' && std::string(e.what()).rfind("config:", 0) == 0) continue;
        ADD_FAILURE() << label << ": " << e.what();
        continue;
      }
      gpu_driver().synchronize_device("varlen test");
      pc.dout->download(o.bytes.data());
      std::vector<float> lse(std::size_t(c.hq) * (total_q + pad));
      pc.dlse->download(lse.data());
      const Tolerance tol = tolerance_for(c.dtype);
      for (int i = 0; i < batch; ++i) {
        if (c.len_q[i] == 0) continue;
        const std::vector<double> got = rows_of(o, pc.cu_q[i], c.len_q[i]);
        std::vector<double> got_lse;
        for (int ih = 0; ih < c.hq; ++ih)
          for (int in = 0; in < c.len_q[i]; ++in)
            got_lse.push_back(lse[std::size_t(ih) * (total_q + pad) + pc.cu_q[i] + in]);
        if (c.len_k[i] == 0) {  // no keys: o = 0 and lse = −inf (or the sink's logit)
          for (double x : got) ASSERT_EQ(x, 0.0) << label << " sequence " << i;
          for (std::size_t j = 0; j < got_lse.size(); ++j) {
            if (pc.sinks.empty()) ASSERT_EQ(got_lse[j], -INFINITY) << label << " sequence " << i;
            else ASSERT_NEAR(got_lse[j], pc.sinks[j / c.len_q[i]], 1e-5) << label << " sequence " << i;
          }
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

// The logical values of rows [row0, row0 + n) of a packed device tensor laid out as `like`.
std::vector<double> download_rows(const HostTensor& like, const DeviceBuffer& buf, int row0, int n) {
  HostTensor t = like;
  buf.download(t.bytes.data());
  return rows_of(t, row0, n);
}

TEST(AttentionVarlenGpu, BackwardMatchesEachSequencesFp64GradientsWithSinkGradients) {
  KGEN_REQUIRE_GPU();
  use_primary_context(0);
  int checked = 0;
  for (const VarlenCase& c : varlen_cases()) {
    PackedCase pc(c, 0xbacc);
    const int batch = pc.batch;
    // Each sequence's fp64 gradients; the sinks' gradient sums over the sequences.
    std::vector<AttentionBackwardReference> refs(batch);
    std::vector<double> sinks_grad(pc.sinks.size(), 0.0);
    for (int i = 0; i < batch; ++i) {
      if (c.len_q[i] == 0 || c.len_k[i] == 0) continue;  // zero gradients, checked below
      refs[i] = attention_backward_cpu(pc.problem(i), rows_of(pc.d_o, pc.cu_q[i], c.len_q[i]), ReferenceFault::none,
                                       pc.variant());
      for (std::size_t h = 0; h < refs[i].sinks_grad.size(); ++h) sinks_grad[h] += refs[i].sinks_grad[h];
    }
    attention_varlen_forward(pc.qv, pc.kv, pc.vv, pc.ov, &pc.lv, pc.sequences(), pc.options, nullptr);
    DeviceBuffer gq(pc.q.bytes.size()), gk(pc.k.bytes.size()), gv(pc.v.bytes.size());
    const TensorView gqv = packed_view3(pc.q, gq.get()), gkv = packed_view3(pc.k, gk.get()),
                     gvv = packed_view3(pc.v, gv.get());
    AttentionBackwardOptions bo;
    bo.causal = c.causal;
    bo.variant = pc.options.variant;
    if (!pc.sinks.empty()) bo.variant.sinks_grad = &pc.gpt_oss.sinks_grad_view;
    const Tolerance tol = tolerance_for(c.dtype);
    const std::string simt = "simt:w4:dmax" + std::to_string(c.d <= 64 ? 64 : c.d <= 128 ? 128 : 256);
    // On sm_90a up to d = 128 (16-bit) the default is the warp-specialised kernel's a2 form; its
    // a1 form too.
    std::vector<std::string> configs = {std::string(), std::string("deterministic"), simt};
    if (device_info(0).target.arch == "sm_90a" && c.d <= 128 && c.dtype != DType::f32)
      configs.push_back("wg:bm64:bn128:a1:t:l:w");
    for (const std::string& config : configs) {
      const std::string label = c.name + " [" + (config.empty() ? "default" : config) + "]";
      bo.deterministic = config == "deterministic";
      bo.config = config == "deterministic" ? "" : config;
      for (DeviceBuffer* b : {&gq, &gk, &gv}) b->poison(c.dtype);
      if (pc.gpt_oss.device_sinks_grad) pc.gpt_oss.device_sinks_grad->poison(DType::f32);
      try {
        attention_varlen_backward(pc.qv, pc.kv, pc.vv, pc.ov, pc.lv, pc.dov, gqv, gkv, gvv, pc.sequences(), bo, nullptr);
      } catch (const Error& e) {
        ADD_FAILURE() << label << ": " << e.what();
        continue;
      }
      gpu_driver().synchronize_device("varlen backward test");
      // `few_rows`: a sequence of under 8 query rows. With sinks its dS = P·(dP − D) cancels as
      // P → 1 (one visible key: dP − D = dP·(1 − P)), and D comes from o as stored in 16 bits, as in
      // every flash backward: the norm rule is then noise over a few hundred elements, so such a
      // sequence is held to the element rule and the cosine alone.
      auto expect = [&](const std::string& what, const std::vector<double>& got, const std::vector<double>& want,
                        int row, bool few_rows = false) {
        const Comparison cmp = compare(got, want, tol, row);
        const bool elementwise = few_rows && cmp.failed == Comparison::Failure::rel_l2 && cmp.outside_tolerance == 0 &&
                                 cmp.cosine >= 0.999;
        EXPECT_TRUE(cmp.pass || elementwise) << label << " " << what << ": " << cmp.why << " " << to_string(cmp);
      };
      for (int i = 0; i < batch; ++i) {
        const std::string seq = " sequence " + std::to_string(i);
        if (c.len_q[i] > 0) {
          const std::vector<double> dq = download_rows(pc.q, gq, pc.cu_q[i], c.len_q[i]);
          if (c.len_k[i] == 0)
            for (double x : dq) ASSERT_EQ(x, 0.0) << label << seq << " dq (no keys)";
          else
            expect("dq" + seq, dq, refs[i].dq, c.d, c.len_q[i] < 8);
        }
        if (c.len_k[i] > 0) {
          const std::vector<double> dk = download_rows(pc.k, gk, pc.cu_k[i], c.len_k[i]),
                                    dv = download_rows(pc.v, gv, pc.cu_k[i], c.len_k[i]);
          if (c.len_q[i] == 0) {
            for (double x : dk) ASSERT_EQ(x, 0.0) << label << seq << " dk (no queries)";
            for (double x : dv) ASSERT_EQ(x, 0.0) << label << seq << " dv (no queries)";
          } else {
            expect("dk" + seq, dk, refs[i].dk, c.d, c.len_q[i] < 8);
            expect("dv" + seq, dv, refs[i].dv, c.d, c.len_q[i] < 8);
          }
        }
      }
      // dq rows past the last sequence: untouched or zero.
      const std::vector<double> pad_rows = download_rows(pc.q, gq, pc.total_q, PackedCase::pad);
      for (double x : pad_rows) EXPECT_TRUE(std::isnan(x) || x == 0.0) << label << ": a dq padding row holds " << x;
      if (!sinks_grad.empty()) {
        std::vector<float> got(sinks_grad.size());
        pc.gpt_oss.device_sinks_grad->download(got.data());
        expect("dsinks", std::vector<double>(got.begin(), got.end()), sinks_grad, c.hq);
      }
      ++checked;
    }
  }
  EXPECT_GT(checked, 20);
}

// Plain packed batches for the double backward (its fp64 reference takes no variant; Python's
// test_varlen_gpu.py checks variants against float64 autograd): lengths of at most 1000 rows,
// since the reference forms each sequence's n × n terms.
std::vector<VarlenCase> double_cases() {
  std::mt19937_64 rng(0xdb1);
  std::vector<int> tail = long_tailed(10, 4.5, rng);
  for (int& n : tail) n = std::min(n, 1000);
  std::vector<VarlenCase> out;
  out.push_back({"double_causal_bf16_d128", DType::bf16, 4, 4, 128, true, tail, tail});
  out.push_back({"double_full_f16_d64_gqa", DType::f16, 8, 2, 64, false, tail, tail});
  // Fewer queries than keys per sequence (bottom-right causal per sequence), a sequence with keys
  // but no queries and one with queries but no keys.
  out.push_back({"double_cross_lengths_causal_bf16_d64_gqa", DType::bf16, 4, 2, 64, true, {100, 0, 300, 1, 64, 5},
                 {400, 50, 300, 129, 64, 0}});
  out.push_back({"double_d256_f16_causal", DType::f16, 2, 2, 256, true, {200, 77, 1, 313}, {200, 77, 1, 313}});
  out.push_back({"double_fp32_d33_gqa", DType::f32, 2, 1, 33, true, {50, 0, 1, 130}, {50, 0, 1, 130}});
  return out;
}

TEST(AttentionVarlenGpu, DoubleBackwardMatchesEachSequencesFp64SecondOrderGradients) {
  KGEN_REQUIRE_GPU();
  use_primary_context(0);
  int checked = 0;
  for (const VarlenCase& c : double_cases()) {
    PackedCase pc(c, 0xdb1b);
    const int batch = pc.batch, pad = PackedCase::pad;
    std::mt19937_64 rng(0xc07a + c.d);
    HostTensor gq = pc.q, gk = pc.k, gv = pc.v;
    fill_random(gq, rng), fill_random(gk, rng), fill_random(gv, rng);
    // Each sequence's fp64 second-order gradients, with the cotangents of its rows.
    std::vector<AttentionDoubleBackwardReference> refs(batch);
    for (int i = 0; i < batch; ++i)
      if (c.len_q[i] > 0 && c.len_k[i] > 0)
        refs[i] = attention_double_backward_cpu(pc.problem(i), rows_of(pc.d_o, pc.cu_q[i], c.len_q[i]),
                                                rows_of(gq, pc.cu_q[i], c.len_q[i]),
                                                rows_of(gk, pc.cu_k[i], c.len_k[i]),
                                                rows_of(gv, pc.cu_k[i], c.len_k[i]));
    attention_varlen_forward(pc.qv, pc.kv, pc.vv, pc.ov, &pc.lv, pc.sequences(), pc.options, nullptr);
    DeviceBuffer dgq(gq.bytes.size()), dgk(gk.bytes.size()), dgv(gv.bytes.size());
    dgq.upload(gq.bytes.data()), dgk.upload(gk.bytes.data()), dgv.upload(gv.bytes.data());
    DeviceBuffer q_bar(pc.q.bytes.size()), do_bar(pc.q.bytes.size()), k_bar(pc.k.bytes.size()), v_bar(pc.k.bytes.size());
    const TensorView gqv = packed_view3(gq, dgq.get()), gkv = packed_view3(gk, dgk.get()), gvv = packed_view3(gv, dgv.get());
    const TensorView qbv = packed_view3(pc.q, q_bar.get()), dobv = packed_view3(pc.q, do_bar.get()),
                     kbv = packed_view3(pc.k, k_bar.get()), vbv = packed_view3(pc.k, v_bar.get());
    AttentionBackwardOptions bo;
    bo.causal = c.causal;
    const Tolerance tol = second_order_tolerance_for(c.dtype);
    const std::string simt = "simt:w4:dmax" + std::to_string(c.d <= 64 ? 64 : c.d <= 128 ? 128 : 256);
    // The default (wg: on sm_90a, fa2 on sm_80, simt for fp32), fa2 by name (also on sm_90a; the
    // first form the head dim admits) and simt.
    const Target target = device_info(0).target;
    std::string fa2;
    for (const char* form : {"fa2:bm64:bn32:w4", "fa2:bm64:bn16:w4", "fa2:bm32:bn16:w2"})
      if (!check_attention_double_backward_config({c.dtype, c.d, c.causal}, *parse_attention_double_backward_config(form), target)) {
        fa2 = form;
        break;
      }
    std::vector<std::string> configs = {std::string(), simt};
    if (!fa2.empty()) configs.push_back(fa2);
    else EXPECT_EQ(c.dtype, DType::f32) << c.name << ": no fa2 form serves d = " << c.d;
    for (const std::string& config : configs) {
      const std::string label = c.name + " [" + (config.empty() ? "default" : config) + "]";
      bo.config = config;
      for (DeviceBuffer* b : {&q_bar, &do_bar, &k_bar, &v_bar}) b->poison(c.dtype);
      try {
        attention_varlen_double_backward(pc.qv, pc.kv, pc.vv, pc.ov, pc.lv, pc.dov, &gqv, &gkv, &gvv, qbv, kbv, vbv, dobv,
                                         pc.sequences(), bo, nullptr);
      } catch (const Error& e) {
        ADD_FAILURE() << label << ": " << e.what();
        continue;
      }
      gpu_driver().synchronize_device("varlen double backward test");
      // A sequence of under 8 rows is held to the element rule and the cosine (its norm is a few
      // elements' noise, as in the backward's test above).
      auto expect = [&](const std::string& what, const std::vector<double>& got, const std::vector<double>& want,
                        bool few_rows) {
        const Comparison cmp = compare(got, want, tol, c.d);
        const bool elementwise = few_rows && cmp.failed == Comparison::Failure::rel_l2 && cmp.outside_tolerance == 0 &&
                                 cmp.cosine >= 0.999;
        EXPECT_TRUE(cmp.pass || elementwise) << label << " " << what << ": " << cmp.why << " " << to_string(cmp);
      };
      for (int i = 0; i < batch; ++i) {
        const std::string seq = " sequence " + std::to_string(i);
        const bool few = c.len_q[i] < 8 || c.len_k[i] < 8;
        if (c.len_q[i] > 0) {
          const std::vector<double> qb = download_rows(pc.q, q_bar, pc.cu_q[i], c.len_q[i]),
                                    dob = download_rows(pc.q, do_bar, pc.cu_q[i], c.len_q[i]);
          if (c.len_k[i] == 0) {  // no keys: P = 0, every term vanishes
            for (double x : qb) ASSERT_EQ(x, 0.0) << label << seq << " q_bar (no keys)";
            for (double x : dob) ASSERT_EQ(x, 0.0) << label << seq << " do_bar (no keys)";
          } else {
            expect("q_bar" + seq, qb, refs[i].q_bar, few);
            expect("do_bar" + seq, dob, refs[i].do_bar, few);
          }
        }
        if (c.len_k[i] > 0) {
          const std::vector<double> kb = download_rows(pc.k, k_bar, pc.cu_k[i], c.len_k[i]),
                                    vb = download_rows(pc.k, v_bar, pc.cu_k[i], c.len_k[i]);
          if (c.len_q[i] == 0) {
            for (double x : kb) ASSERT_EQ(x, 0.0) << label << seq << " k_bar (no queries)";
            for (double x : vb) ASSERT_EQ(x, 0.0) << label << seq << " v_bar (no queries)";
          } else {
            expect("k_bar" + seq, kb, refs[i].k_bar, few);
            expect("v_bar" + seq, vb, refs[i].v_bar, few);
          }
        }
      }
      // The rows past the last sequence keep their poison.
      for (DeviceBuffer* b : {&q_bar, &do_bar})
        for (double x : download_rows(pc.q, *b, pc.total_q, pad))
          EXPECT_TRUE(std::isnan(x)) << label << ": a q_bar or do_bar padding row was written (" << x << ")";
      ++checked;
    }
    // Absent cotangents (null = zero): gq alone on the default config.
    bo.config.clear();
    for (DeviceBuffer* b : {&q_bar, &do_bar, &k_bar, &v_bar}) b->poison(c.dtype);
    attention_varlen_double_backward(pc.qv, pc.kv, pc.vv, pc.ov, pc.lv, pc.dov, &gqv, nullptr, nullptr, qbv, kbv, vbv,
                                     dobv, pc.sequences(), bo, nullptr);
    gpu_driver().synchronize_device("varlen double backward test");
    for (int i = 0; i < batch; ++i) {
      if (c.len_q[i] == 0 || c.len_k[i] == 0 || c.len_q[i] < 8 || c.len_k[i] < 8) continue;
      const AttentionDoubleBackwardReference ref = attention_double_backward_cpu(
          pc.problem(i), rows_of(pc.d_o, pc.cu_q[i], c.len_q[i]), rows_of(gq, pc.cu_q[i], c.len_q[i]), {}, {});
      const Comparison cmp = compare(download_rows(pc.q, q_bar, pc.cu_q[i], c.len_q[i]), ref.q_bar, tol, c.d);
      EXPECT_TRUE(cmp.pass) << c.name << " gq only, sequence " << i << " q_bar: " << cmp.why << " " << to_string(cmp);
      const Comparison cmk = compare(download_rows(pc.k, k_bar, pc.cu_k[i], c.len_k[i]), ref.k_bar, tol, c.d);
      EXPECT_TRUE(cmk.pass) << c.name << " gq only, sequence " << i << " k_bar: " << cmk.why << " " << to_string(cmk);
    }
  }
  EXPECT_GT(checked, 10);
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
  AttentionOptions split;
  split.config = "ws:bm128:bn128:s2:pp1:split";
  EXPECT_NE(message({&cuv, &cuv, 40, 40}, split).find("without split"), std::string::npos);
  ::setenv("KGEN_CHECK_INDICES", "1", 1);
  EXPECT_EQ(message({&cuv, &cuv, 64, 64}).rfind("cu_seqlens_q[2]: 30 is below", 0), 0u);
  ::unsetenv("KGEN_CHECK_INDICES");
  // The double backward names its own arguments: a cotangent of another shape, an output missing.
  std::vector<int> good = {0, 40, 64, 64};
  dcu.upload(good.data());
  DeviceBuffer dlse(std::size_t(h) * total * 4), small(32 * h * d * 2);
  const std::int64_t lse_shape[2] = {h, total}, small_shape[3] = {32, h, d};
  const TensorView lse = make_contiguous_view(dlse.get(), DType::f32, 2, lse_shape, 0),
                   half = make_contiguous_view(small.get(), DType::bf16, 3, small_shape, 0);
  auto double_message = [&](const TensorView* gk, const TensorView& k_bar) -> std::string {
    try {
      attention_varlen_double_backward(q, q, q, o, lse, o, nullptr, gk, nullptr, o, k_bar, o, o, {&cuv, &cuv, 40, 40},
                                       {}, nullptr);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_EQ(double_message(&half, o).rfind("gk:", 0), 0u) << double_message(&half, o);
  EXPECT_EQ(double_message(nullptr, half).rfind("k_bar:", 0), 0u) << double_message(nullptr, half);
}

}  // namespace
}  // namespace kgen
