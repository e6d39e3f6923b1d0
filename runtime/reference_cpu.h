// fp64 CPU references: the ground truth every kernel is checked against on small shapes.
#pragma once

#include <vector>

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

// Two-pass softmax (max, then sum) per row in fp64; causal is bottom-right aligned:
// key j is masked for j > i + (n_k - n_q).
AttentionForwardReference attention_forward_cpu(const AttentionProblem& p);

}  // namespace kgen
