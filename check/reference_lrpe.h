// fp64 CPU references of lrpe_cosine and md_lrpe_cosine (docs/lrpe.md §1–3): the ground truth
// the kernels are checked against.
#pragma once

#include <vector>

#include "generator/lrpe.h"

namespace kgen {

// One problem in fp64, x contiguous (batch, heads, n, d).
struct LrpeProblem {
  int batch = 1, heads = 1, n = 1, d = 1;
  LrpeAct act = LrpeAct::none;
  // theta (theta_heads, theta_width): theta_heads is 1 (shared) or heads; theta_width is 1 (one
  // frequency per head) or d (lrpe_cosine) / e (md).
  int theta_heads = 1, theta_width = 1;
  std::vector<double> theta;
  long long offset = 0;   // lrpe_cosine: token s at position offset + s
  bool md = false;        // md_lrpe_cosine: positions from the grid instead
  std::vector<int> grid;  // md: n_1..n_m, the last fastest; n = extra + Π grid
  int extra = 0;          // md: l tokens first, angle 0
  int e = 1;              // md: frequencies per spatial dim, e·m >= d
  std::vector<double> x;
};

// Θ[h, s, k] as (heads, n, d).
std::vector<double> lrpe_angles_cpu(const LrpeProblem& p);

// o (batch, heads, n, 2d): [act(x)·cos Θ, act(x)·sin Θ].
std::vector<double> lrpe_forward_cpu(const LrpeProblem& p);

// dx (batch, heads, n, d) for dO (batch, heads, n, 2d).
std::vector<double> lrpe_backward_cpu(const LrpeProblem& p, const std::vector<double>& d_o);

}  // namespace kgen
