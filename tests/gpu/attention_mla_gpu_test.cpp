// v head dims below q's (MLA, docs/kernels/mla.md) on the GPU: the forward, backward and double
// backward against a
// float64 reference of the same rounded inputs, on NaN-poisoned outputs, with the row rule
// (docs/attention.md §5.2: one wrong row fails). Odd sizes, n_q != n_k both ways, GQA, causal
// with fully masked rows; the default configs and explicit fa2 and simt ones. o is written
// through a view whose rows are q's width, so a store past d_v columns would be caught. Labelled
// `gpu`; every test skips cleanly without one.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "check/harness_support.h"
#include "check/host_tensor.h"
#include "check/metrics.h"
#include "driver/device.h"
#include "generator/attention_forward.h"
#include "kgen/kgen.hpp"
#include "require_gpu.h"

namespace kgen {
namespace {

struct MlaShape {
  int b, hq, hkv, nq, nk;
};

// Odd sizes, n_q != n_k both ways (n_q > n_k: causal rows that see no key), GQA 1/2/4.
const MlaShape kMlaShapes[] = {{1, 1, 1, 1, 1}, {1, 2, 1, 7, 7}, {2, 4, 1, 63, 63}, {1, 4, 2, 130, 257},
                         {1, 2, 2, 300, 129}, {1, 8, 2, 17, 300}, {2, 4, 4, 128, 128},
                         {1, 3, 1, 520, 700}};

// The fp64 truth of one call (bhnd, (b, h, n, cols) row-major).
struct Reference {
  std::vector<double> o, lse, dq, dk, dv;
};

// Forward and backward in fp64 over the rounded inputs: S = s·Q·Kᵀ (bottom-right causal mask),
// P = softmax(S), O = P·V, D = rowsum(dO∘O), dS = P∘(dO·Vᵀ − D), dQ = s·dS·K, dK = s·dSᵀ·Q,
// dV = Pᵀ·dO (dK, dV summed over each group). Rows that see no key: O = 0, lse = −inf, no gradient.
Reference reference(const MlaShape& s, int d, int dv, bool causal, double scale, const std::vector<double>& q,
                    const std::vector<double>& k, const std::vector<double>& v, const std::vector<double>& d_o) {
  Reference r;
  r.o.assign(std::size_t(s.b) * s.hq * s.nq * dv, 0.0);
  r.lse.assign(std::size_t(s.b) * s.hq * s.nq, -INFINITY);
  r.dq.assign(std::size_t(s.b) * s.hq * s.nq * d, 0.0);
  r.dk.assign(std::size_t(s.b) * s.hkv * s.nk * d, 0.0);
  r.dv.assign(std::size_t(s.b) * s.hkv * s.nk * dv, 0.0);
  std::vector<double> p(s.nk), dp(s.nk);
  for (int b = 0; b < s.b; ++b)
    for (int h = 0; h < s.hq; ++h) {
      const int kvh = h / (s.hq / s.hkv);
      const double* Q = &q[(std::size_t(b) * s.hq + h) * s.nq * d];
      const double* dO = &d_o[(std::size_t(b) * s.hq + h) * s.nq * dv];
      const double* K = &k[(std::size_t(b) * s.hkv + kvh) * s.nk * d];
      const double* V = &v[(std::size_t(b) * s.hkv + kvh) * s.nk * dv];
      double* O = &r.o[(std::size_t(b) * s.hq + h) * s.nq * dv];
      double* dQ = &r.dq[(std::size_t(b) * s.hq + h) * s.nq * d];
      double* dK = &r.dk[(std::size_t(b) * s.hkv + kvh) * s.nk * d];
      double* dV = &r.dv[(std::size_t(b) * s.hkv + kvh) * s.nk * dv];
      for (int i = 0; i < s.nq; ++i) {
        const int end = causal ? std::min(s.nk, std::max(0, i + s.nk - s.nq + 1)) : s.nk;
        if (end == 0) continue;
        double mx = -INFINITY;
        for (int j = 0; j < end; ++j) {
          double dot = 0;
          for (int c = 0; c < d; ++c) dot += Q[std::size_t(i) * d + c] * K[std::size_t(j) * d + c];
          p[j] = scale * dot;
          mx = std::max(mx, p[j]);
        }
        double sum = 0;
        for (int j = 0; j < end; ++j) sum += (p[j] = std::exp(p[j] - mx));
        for (int j = 0; j < end; ++j) p[j] /= sum;
        r.lse[(std::size_t(b) * s.hq + h) * s.nq + i] = mx + std::log(sum);
        for (int j = 0; j < end; ++j)
          for (int c = 0; c < dv; ++c) O[std::size_t(i) * dv + c] += p[j] * V[std::size_t(j) * dv + c];
        double delta = 0;
        for (int c = 0; c < dv; ++c) delta += dO[std::size_t(i) * dv + c] * O[std::size_t(i) * dv + c];
        for (int j = 0; j < end; ++j) {
          double dot = 0;
          for (int c = 0; c < dv; ++c) dot += dO[std::size_t(i) * dv + c] * V[std::size_t(j) * dv + c];
          const double ds = p[j] * (dot - delta);
          for (int c = 0; c < d; ++c) {
            dQ[std::size_t(i) * d + c] += scale * ds * K[std::size_t(j) * d + c];
            dK[std::size_t(j) * d + c] += scale * ds * Q[std::size_t(i) * d + c];
          }
          for (int c = 0; c < dv; ++c) dV[std::size_t(j) * dv + c] += p[j] * dO[std::size_t(i) * dv + c];
        }
      }
    }
  return r;
}

// The double backward's truth in fp64 (docs/attention.md §4; its derivation is in
// double_backward_fa2.cuh), given the cotangents gq, gk (d columns) and gv (d_v columns) of dq, dk,
// dv: with G = s·(gQ·Kᵀ + Q·gKᵀ), Z = dO·gVᵀ, dP = dO·Vᵀ, D = rowsum(P∘dP), dS = P∘(dP − D),
// r = rowsum(P∘G), c = rowsum(P∘Z + dS∘G) − r·D, H = P∘(G − r), P̄ = Z + G∘(dP − D) − r·dP,
// S̄ = P∘(P̄ − c): Q̄ = s·(dS·gK + S̄·K), dŌ = P·gV + H·V, K̄ = s·(dSᵀ·gQ + S̄ᵀ·Q), V̄ = Hᵀ·dO.
struct SecondOrder {
  std::vector<double> q_bar, k_bar, v_bar, do_bar;
};

SecondOrder second_order(const MlaShape& s, int d, int dv, bool causal, double scale, const std::vector<double>& q,
                         const std::vector<double>& k, const std::vector<double>& v, const std::vector<double>& d_o,
                         const std::vector<double>& gq, const std::vector<double>& gk, const std::vector<double>& gv) {
  SecondOrder r;
  r.q_bar.assign(std::size_t(s.b) * s.hq * s.nq * d, 0.0);
  r.do_bar.assign(std::size_t(s.b) * s.hq * s.nq * dv, 0.0);
  r.k_bar.assign(std::size_t(s.b) * s.hkv * s.nk * d, 0.0);
  r.v_bar.assign(std::size_t(s.b) * s.hkv * s.nk * dv, 0.0);
  std::vector<double> p(s.nk), dp(s.nk), g(s.nk), z(s.nk);
  auto dot = [](const double* a, const double* b, int n) {
    double sum = 0;
    for (int c = 0; c < n; ++c) sum += a[c] * b[c];
    return sum;
  };
  for (int b = 0; b < s.b; ++b)
    for (int h = 0; h < s.hq; ++h) {
      const int kvh = h / (s.hq / s.hkv);
      const std::size_t qo = (std::size_t(b) * s.hq + h) * s.nq, ko = (std::size_t(b) * s.hkv + kvh) * s.nk;
      for (int i = 0; i < s.nq; ++i) {
        const int end = causal ? std::min(s.nk, std::max(0, i + s.nk - s.nq + 1)) : s.nk;
        if (end == 0) continue;
        const double* Q = &q[(qo + i) * d];
        const double* gQ = &gq[(qo + i) * d];
        const double* dO = &d_o[(qo + i) * dv];
        double mx = -INFINITY;
        for (int j = 0; j < end; ++j) mx = std::max(mx, p[j] = scale * dot(Q, &k[(ko + j) * d], d));
        double sum = 0;
        for (int j = 0; j < end; ++j) sum += (p[j] = std::exp(p[j] - mx));
        double delta = 0, rr = 0, cc = 0;
        for (int j = 0; j < end; ++j) {
          p[j] /= sum;
          dp[j] = dot(dO, &v[(ko + j) * dv], dv);
          g[j] = scale * (dot(gQ, &k[(ko + j) * d], d) + dot(Q, &gk[(ko + j) * d], d));
          z[j] = dot(dO, &gv[(ko + j) * dv], dv);
          delta += p[j] * dp[j];
        }
        for (int j = 0; j < end; ++j) {
          rr += p[j] * g[j];
          cc += p[j] * z[j] + p[j] * (dp[j] - delta) * g[j];
        }
        cc -= rr * delta;
        for (int j = 0; j < end; ++j) {
          const double ds = p[j] * (dp[j] - delta);
          const double hh = p[j] * (g[j] - rr);
          const double sbar = p[j] * (z[j] + g[j] * (dp[j] - delta) - rr * dp[j] - cc);
          for (int c = 0; c < d; ++c) {
            r.q_bar[(qo + i) * d + c] += scale * (ds * gk[(ko + j) * d + c] + sbar * k[(ko + j) * d + c]);
            r.k_bar[(ko + j) * d + c] += scale * (ds * gQ[c] + sbar * Q[c]);
          }
          for (int c = 0; c < dv; ++c) {
            r.do_bar[(qo + i) * dv + c] += p[j] * gv[(ko + j) * dv + c] + hh * v[(ko + j) * dv + c];
            r.v_bar[(ko + j) * dv + c] += hh * dO[c];
          }
        }
      }
    }
  return r;
}

// A device tensor (b, h, n, cols) in bhnd whose rows are `row` elements apart (row >= cols: the
// columns past `cols` are padding no call may write).
struct Device {
  HostTensor host;  // (b, h, n, row)
  int cols;
  std::unique_ptr<DeviceBuffer> buf;
  Device(int b, int h, int n, int cols_, int row, DType t) : host(make_host(b, h, n, row, Layout::bhnd, t)), cols(cols_) {
    buf = std::make_unique<DeviceBuffer>(host.bytes.size());
  }
  TensorView view() const {
    TensorView v = host.view(buf->get(), 0);
    v.shape[3] = cols;
    return v;
  }
  // Random values in the first `cols` columns (the padding stays 0), uploaded; their fp64 values.
  std::vector<double> fill(std::mt19937_64& rng) {
    std::normal_distribution<float> normal(0.f, 1.f);
    std::vector<double> out;
    for (int b = 0; b < host.b; ++b)
      for (int h = 0; h < host.h; ++h)
        for (int n = 0; n < host.n; ++n)
          for (int c = 0; c < cols; ++c) {
            const std::size_t off = host.offset(b, h, n, c);
            host.set(off, normal(rng));
            out.push_back(host.get(off));
          }
    buf->upload(host.bytes.data());
    return out;
  }
  // The first `cols` columns; `padding_poisoned`: whether every padding element is still NaN.
  std::vector<double> read(bool* padding_poisoned = nullptr) {
    buf->download(host.bytes.data());
    std::vector<double> out;
    bool poisoned = true;
    for (int b = 0; b < host.b; ++b)
      for (int h = 0; h < host.h; ++h)
        for (int n = 0; n < host.n; ++n)
          for (int c = 0; c < host.d; ++c) {
            const double x = host.get(host.offset(b, h, n, c));
            if (c < cols) out.push_back(x);
            else poisoned = poisoned && std::isnan(x);
          }
    if (padding_poisoned) *padding_poisoned = poisoned;
    return out;
  }
};

// (dtype, d_qk, d_v, causal)
using MlaParam = std::tuple<DType, int, int, bool>;

std::string param_name(const ::testing::TestParamInfo<MlaParam>& info) {
  auto [t, d, dv, causal] = info.param;
  return std::string(dtype_name(t)) + "_d" + std::to_string(d) + "_v" + std::to_string(dv) + (causal ? "_causal" : "_full");
}

class AttentionMlaGpu : public ::testing::TestWithParam<MlaParam> {};

// Runs `call` and waits for it: false when it threw, a failure unless an explicit `config` was
// refused (one this head dim or target does not serve, e.g. past its register budget).
bool ran(const std::function<void()>& call, const std::string& config, const std::string& label) {
  try {
    call();
  } catch (const Error& e) {
    if (config.empty() || std::string(e.what()).rfind("config:", 0) != 0) ADD_FAILURE() << label << ": " << e.what();
    return false;
  }
  gpu_driver().synchronize_device("mla test");
  return true;
}

// The configs a case runs: the default, and for 16-bit pairs of multiples of 8 an explicit fa2
// config of each warp shape and ws configs (sm_90a; refused elsewhere), and the general path.
std::vector<std::string> forward_configs(DType t, int d, int dv) {
  std::vector<std::string> out = {""};
  const std::string simt = "simt:bm4:bn32:dmax" + std::to_string(attention_simt_bucket(d));
  if (t != DType::f32 && dv % 8 == 0)
    out.insert(out.end(), {"fa2:bm64:bn32:w4:s2", "fa2:bm128:bn64:w4:s1", "ws:bm128:bn128:s2:pp1", "ws:bm128:bn64:s3:pp0"});
  out.push_back(simt);
  return out;
}

// The double backward's: the default, an explicit fa2 config (16-bit pairs of multiples of 8) and
// the general path.
std::vector<std::string> double_backward_configs(DType t, int d, int dv) {
  std::vector<std::string> out = {""};
  if (t != DType::f32 && dv % 8 == 0) out.push_back("fa2:bm64:bn16:w4");
  out.push_back("simt:w4:dmax" + std::to_string(attention_simt_bucket(d)));
  return out;
}

std::vector<std::pair<std::string, bool>> backward_configs(DType t, int d, int dv) {
  std::vector<std::pair<std::string, bool>> out = {{"", false}, {"", true}};
  if (t != DType::f32 && dv % 8 == 0)
    out.insert(out.end(), {{"fa2:bm32:bn64:w4", false},
                           {"wg:bm64:bn64:c2", false},
                           {"wg:bm64:bn64:c2", true},
                           {"wg:bm64:bn96:c3", false},
                           {"wg:bm64:bn96:c3", true},
                           {"wg:bm64:bn96:a1:t:l:w", false},
                           {"wg:bm64:bn48:a1:t:l:w", false},
                           {"wg:bm64:bn48:a1:t:l:w", true}});
  out.push_back({"simt:w4:dmax" + std::to_string(attention_simt_bucket(d)), false});
  return out;
}

TEST_P(AttentionMlaGpu, ForwardBackwardAndDoubleBackwardMatchFp64OnPoisonedOutputs) {
  KGEN_REQUIRE_GPU();
  use_primary_context(0);
  auto [dtype, d, dv, causal] = GetParam();
  const Tolerance tol = tolerance_for(dtype);
  std::mt19937_64 rng(1000 * d + dv + causal);
  int checked = 0;
  for (const MlaShape& s : kMlaShapes) {
    const std::string shape = std::to_string(s.b) + "x" + std::to_string(s.hq) + "/" + std::to_string(s.hkv) + " " +
                              std::to_string(s.nq) + "x" + std::to_string(s.nk);
    Device q(s.b, s.hq, s.nq, d, d, dtype), k(s.b, s.hkv, s.nk, d, d, dtype), v(s.b, s.hkv, s.nk, dv, dv, dtype);
    Device d_o(s.b, s.hq, s.nq, dv, dv, dtype);
    // o's and dv's rows are q's width: d_v columns written, the rest must keep their poison.
    Device o(s.b, s.hq, s.nq, dv, d, dtype), gq(s.b, s.hq, s.nq, d, d, dtype), gk(s.b, s.hkv, s.nk, d, d, dtype),
        gv(s.b, s.hkv, s.nk, dv, d, dtype);
    const std::vector<double> hq = q.fill(rng), hk = k.fill(rng), hv = v.fill(rng), hdo = d_o.fill(rng);
    const double scale = 1.0 / std::sqrt(double(d));  // the default: 1/√d_qk
    const Reference ref = reference(s, d, dv, causal, scale, hq, hk, hv, hdo);
    DeviceBuffer lse_buf(std::size_t(s.b) * s.hq * s.nq * 4);
    const std::int64_t lse_shape[3] = {s.b, s.hq, s.nq};
    const TensorView lse = make_contiguous_view(lse_buf.get(), DType::f32, 3, lse_shape, 0);

    for (const std::string& config : forward_configs(dtype, d, dv)) {
      const std::string label = shape + " forward [" + (config.empty() ? "default" : config) + "]";
      o.buf->poison(dtype);
      lse_buf.poison(DType::f32);
      AttentionOptions options;
      options.causal = causal;
      options.config = config;
      if (!ran([&] { attention_forward(q.view(), k.view(), v.view(), o.view(), &lse, options, nullptr); }, config, label))
        continue;
      bool padding = false;
      const std::vector<double> got = o.read(&padding);
      std::vector<float> lse_host(std::size_t(s.b) * s.hq * s.nq);
      lse_buf.download(lse_host.data());
      const Comparison co = compare(got, ref.o, tol, dv);
      const Comparison cl = compare(std::vector<double>(lse_host.begin(), lse_host.end()), ref.lse, tol, 1);
      EXPECT_TRUE(co.pass) << label << " o: " << co.why << " " << to_string(co);
      EXPECT_TRUE(cl.pass) << label << " lse: " << cl.why << " " << to_string(cl);
      EXPECT_TRUE(padding) << label << ": o was written past its " << dv << " columns";
      ++checked;
    }

    // The backward's inputs: kgen's default forward.
    AttentionOptions fwd;
    fwd.causal = causal;
    attention_forward(q.view(), k.view(), v.view(), o.view(), &lse, fwd, nullptr);
    for (const auto& [config, deterministic] : backward_configs(dtype, d, dv)) {
      const std::string label = shape + " backward [" +
                                (config.empty() ? (deterministic ? "deterministic" : "default") : config) + "]";
      for (Device* g : {&gq, &gk, &gv}) g->buf->poison(dtype);
      AttentionBackwardOptions options;
      options.causal = causal;
      options.config = config;
      options.deterministic = deterministic;
      if (!ran([&] {
            attention_backward(q.view(), k.view(), v.view(), o.view(), lse, d_o.view(), gq.view(), gk.view(), gv.view(),
                               options, nullptr);
          }, config, label))
        continue;
      bool padding = false;
      const std::vector<double> dq = gq.read(), dk = gk.read(), dvv = gv.read(&padding);
      struct Output {
        const char* name;
        const std::vector<double>& got;
        const std::vector<double>& want;
        int cols;
      };
      for (const Output& out : {Output{"dq", dq, ref.dq, d}, Output{"dk", dk, ref.dk, d}, Output{"dv", dvv, ref.dv, dv}}) {
        const Comparison c = compare(out.got, out.want, tol, out.cols);
        EXPECT_TRUE(c.pass) << label << " " << out.name << ": " << c.why << " " << to_string(c);
      }
      EXPECT_TRUE(padding) << label << ": dv was written past its " << dv << " columns";
      ++checked;
    }

    // The double backward: cotangents gq, gk (d columns) and gv (d_v) of dq, dk, dv; v_bar and
    // do_bar are written through views whose rows are q's width.
    Device cq(s.b, s.hq, s.nq, d, d, dtype), ck(s.b, s.hkv, s.nk, d, d, dtype), cv(s.b, s.hkv, s.nk, dv, dv, dtype);
    const std::vector<double> hcq = cq.fill(rng), hck = ck.fill(rng), hcv = cv.fill(rng);
    Device do_bar(s.b, s.hq, s.nq, dv, d, dtype);
    const SecondOrder want = second_order(s, d, dv, causal, scale, hq, hk, hv, hdo, hcq, hck, hcv);
    for (const std::string& config : double_backward_configs(dtype, d, dv)) {
      const std::string label = shape + " double backward [" + (config.empty() ? "default" : config) + "]";
      for (Device* g : {&gq, &gk, &gv, &do_bar}) g->buf->poison(dtype);
      AttentionBackwardOptions options;
      options.causal = causal;
      options.config = config;
      const TensorView cqv = cq.view(), ckv = ck.view(), cvv = cv.view();
      if (!ran([&] {
            attention_double_backward(q.view(), k.view(), v.view(), o.view(), lse, d_o.view(), &cqv, &ckv, &cvv,
                                      gq.view(), gk.view(), gv.view(), do_bar.view(), options, nullptr);
          }, config, label))
        continue;
      bool v_padding = false, do_padding = false;
      const std::vector<double> qb = gq.read(), kb = gk.read(), vb = gv.read(&v_padding), dob = do_bar.read(&do_padding);
      struct Output {
        const char* name;
        const std::vector<double>& got;
        const std::vector<double>& want;
        int cols;
      };
      for (const Output& out : {Output{"q_bar", qb, want.q_bar, d}, Output{"k_bar", kb, want.k_bar, d},
                                Output{"v_bar", vb, want.v_bar, dv}, Output{"do_bar", dob, want.do_bar, dv}}) {
        const Comparison c = compare(out.got, out.want, tol, out.cols);
        EXPECT_TRUE(c.pass) << label << " " << out.name << ": " << c.why << " " << to_string(c);
      }
      EXPECT_TRUE(v_padding) << label << ": v_bar was written past its " << dv << " columns";
      EXPECT_TRUE(do_padding) << label << ": do_bar was written past its " << dv << " columns";
      ++checked;
    }
  }
  EXPECT_GT(checked, 30);
}

// 16-bit pairs: MLA's 192/128 and others each tile width pads differently (64/32: half the tile;
// 96/64; 256/128: two column splits in the backward, the second owning no dV column; 72/40 and
// 136/72: d_v not a multiple of 16). fp32 and a d_v that is no multiple of 8 run on the general
// path (simt).
INSTANTIATE_TEST_SUITE_P(
    SixteenBit, AttentionMlaGpu,
    ::testing::Combine(::testing::Values(DType::bf16, DType::f16),
                       ::testing::Values(192), ::testing::Values(128), ::testing::Bool()),
    param_name);
INSTANTIATE_TEST_SUITE_P(
    OtherPairs, AttentionMlaGpu,
    ::testing::Values(MlaParam{DType::bf16, 64, 32, true}, MlaParam{DType::f16, 64, 32, false}, MlaParam{DType::bf16, 128, 64, true},
                      MlaParam{DType::bf16, 96, 64, false}, MlaParam{DType::f16, 256, 128, true}, MlaParam{DType::bf16, 72, 40, true},
                      MlaParam{DType::f16, 136, 72, false}, MlaParam{DType::bf16, 64, 36, true},
                      MlaParam{DType::bf16, 192, 160, false}, MlaParam{DType::bf16, 192, 48, true},
                      MlaParam{DType::bf16, 240, 192, false}),
    param_name);
INSTANTIATE_TEST_SUITE_P(
    GeneralPath, AttentionMlaGpu,
    ::testing::Values(MlaParam{DType::f32, 192, 128, true}, MlaParam{DType::f32, 100, 36, false}, MlaParam{DType::f32, 64, 8, true}),
    param_name);

// What is not served is refused with a sentence naming the argument, never run: the wg configs
// and ws's split and persistent grids of the forward, and the double backward's wg configs.
TEST(AttentionMlaGpuRefusals, HopperConfigsNameV) {
  KGEN_REQUIRE_GPU();
  use_primary_context(0);
  const MlaShape s{1, 2, 2, 64, 64};
  Device q(s.b, s.hq, s.nq, 192, 192, DType::bf16), k(s.b, s.hkv, s.nk, 192, 192, DType::bf16),
      v(s.b, s.hkv, s.nk, 128, 128, DType::bf16), o(s.b, s.hq, s.nq, 128, 128, DType::bf16);
  std::mt19937_64 rng(5);
  q.fill(rng), k.fill(rng), v.fill(rng);
  DeviceBuffer lse_buf(std::size_t(s.hq) * s.nq * 4);
  const std::int64_t lse_shape[3] = {s.b, s.hq, s.nq};
  const TensorView lse = make_contiguous_view(lse_buf.get(), DType::f32, 3, lse_shape, 0);
  if (device_info(0).target.arch == "sm_90a")
    for (const char* config : {"ws:bm128:bn128:s2:pp1:split", "ws:bm128:bn128:s2:pp1:persist", "wg:bm128:bn128:s2"}) {
      AttentionOptions options;
      options.config = config;
      try {
        attention_forward(q.view(), k.view(), v.view(), o.view(), &lse, options, nullptr);
        ADD_FAILURE() << config << " ran";
      } catch (const Error& e) {
        EXPECT_EQ(e.status(), Status::invalid_argument);
        EXPECT_NE(std::string(e.what()).find("v: head dim 128 differs from q's 192"), std::string::npos) << e.what();
      }
    }
  attention_forward(q.view(), k.view(), v.view(), o.view(), &lse, {}, nullptr);
  Device gq(s.b, s.hq, s.nq, 192, 192, DType::bf16), gk(s.b, s.hkv, s.nk, 192, 192, DType::bf16),
      gv(s.b, s.hkv, s.nk, 128, 128, DType::bf16), d_o(s.b, s.hq, s.nq, 128, 128, DType::bf16);
  d_o.fill(rng);
  Device do_bar(s.b, s.hq, s.nq, 128, 128, DType::bf16);
  if (device_info(0).target.arch == "sm_90a") {
    AttentionBackwardOptions options;
    options.config = "wg:bm64:bn64";
    try {
      attention_double_backward(q.view(), k.view(), v.view(), o.view(), lse, d_o.view(), nullptr, nullptr, nullptr,
                                gq.view(), gk.view(), gv.view(), do_bar.view(), options, nullptr);
      ADD_FAILURE() << "the double backward ran wg:bm64:bn64";
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), Status::invalid_argument);
      EXPECT_NE(std::string(e.what()).find("v: head dim 128 differs from q's 192"), std::string::npos) << e.what();
    }
  }
  // do_bar shaped like q instead of d_o: refused naming do_bar.
  try {
    attention_double_backward(q.view(), k.view(), v.view(), o.view(), lse, d_o.view(), nullptr, nullptr, nullptr,
                              gq.view(), gk.view(), gv.view(), gq.view(), {}, nullptr);
    ADD_FAILURE() << "the double backward ran with do_bar shaped like q";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::invalid_argument);
    EXPECT_EQ(std::string(e.what()).rfind("do_bar", 0), 0u) << e.what();
  }
}

}  // namespace
}  // namespace kgen
