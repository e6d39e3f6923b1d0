// fp64 CPU references: the ground truth every kernel is checked against on small shapes.
#pragma once

#include <vector>

#include "generator/variant.h"

namespace kgen {

// Dense attention problem in fp64, contiguous (b, h, n, d) tensors.
struct AttentionProblem {
  int batch = 1, heads_q = 1, heads_kv = 1, n_q = 1, n_k = 1, head_dim = 64;
  bool causal = false;
  double scale = 0;  // <= 0: 1/sqrt(head_dim)
  std::vector<double> q, k, v;
};

struct AttentionForwardReference {
  std::vector<double> o;    // (b, h_q, n_q, d); 0 for fully masked rows
  std::vector<double> lse;  // (b, h_q, n_q), natural log; -inf for fully masked rows
};

// An attention variant for the references (docs/attention.md §8): its checked expressions and
// their host inputs (evaluated in fp64 by Variant's evaluator), and the sinks' logits (one per
// query head; empty = none).
struct ReferenceVariant {
  const Variant* variant = nullptr;
  VariantValues values;
  std::vector<double> sinks;
};

// Two-pass softmax (max, then sum) per row in fp64; causal is bottom-right aligned:
// key j is masked for j > i + (n_k - n_q). With a variant, key j is also masked where its mask is
// false, visible scores are f(scale·q·k), and each sink joins its rows' denominator (a row that
// sees no key then has o = 0 and lse = the sink).
AttentionForwardReference attention_forward_cpu(const AttentionProblem& p, const ReferenceVariant* variant = nullptr);

}  // namespace kgen

namespace kgen {

struct AttentionBackwardReference {
  std::vector<double> dq;      // like q
  std::vector<double> dk, dv;  // like k, v: summed over the query heads of each kv group
  std::vector<double> d;       // D = rowsum(dO∘O), (b, h_q, n_q); 0 for fully masked rows
  // With a variant: ∂L/∂t of each declared tensor (elements at its host strides; empty for the
  // tensors that are not learnable) and ∂L/∂sinks (h_q).
  std::vector<std::vector<double>> tensor_grads;
  std::vector<double> sinks_grad;
};

struct AttentionDoubleBackwardReference {
  std::vector<double> q_bar, do_bar;  // like q
  std::vector<double> k_bar, v_bar;   // like k, v (summed over each kv group)
  std::vector<double> r, c;           // docs/attention.md §4 row terms, (b, h_q, n_q)
};

// Deliberately wrong variants, only for tests that prove the checks can fail.
enum class ReferenceFault {
  none,
  drop_d_term,  // dS = P∘dP instead of P∘(dP − D·1ᵀ)
  drop_r_term,  // double backward: H = P∘G instead of P∘(G − r·1ᵀ)
  p_constant,   // double backward: P treated as a constant (S̄ = 0), a failure mode of docs/attention.md §5
};

// Gradients of attention_forward_cpu's o under the loss ⟨d_o, o⟩ (docs/attention.md §3), fp64, from
// q, k, v of `p` and d_o (shaped like q): P rebuilt exactly, dS = P∘(dO·vᵀ − D·1ᵀ),
// dq = s·dS·k, dk = s·dSᵀ·q, dv = Pᵀ·dO. Fully masked rows contribute nothing.
// With a variant (docs/attention.md §8): P from the modified, masked scores and the sinks,
// dS = P∘(dP − D·1ᵀ)∘f'(s), ∂L/∂t = Σ P∘(dP − D·1ᵀ)·∂f/∂t and ∂L/∂σ_h = −Σ_i P_sink,i·D_i.
AttentionBackwardReference attention_backward_cpu(const AttentionProblem& p, const std::vector<double>& d_o,
                                                  ReferenceFault fault = ReferenceFault::none,
                                                  const ReferenceVariant* variant = nullptr);

// Second-order gradients (docs/attention.md §4) of ℒ = ⟨gq, dq⟩ + ⟨gk, dk⟩ + ⟨gv, dv⟩ with (dq, dk, dv)
// = attention_backward_cpu(p, d_o), w.r.t. q, k, v and d_o. gq is shaped like q, gk and gv like
// k; an empty vector means that cotangent is zero. Dense n×n fp64 per head: small shapes only.
AttentionDoubleBackwardReference attention_double_backward_cpu(const AttentionProblem& p,
                                                               const std::vector<double>& d_o,
                                                               const std::vector<double>& gq,
                                                               const std::vector<double>& gk,
                                                               const std::vector<double>& gv,
                                                               ReferenceFault fault = ReferenceFault::none);

}  // namespace kgen
