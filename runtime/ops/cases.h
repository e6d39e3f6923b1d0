// The description of one call of an operator (shape, dtype, layout, config, input seed): what
// the tuner tunes and the checking layer checks. Plain data; no device is needed to make one.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "generator/lrpe.h"
#include "kgen/types.hpp"

namespace kgen {

enum class Layout { bhnd, bnhd };

// One attention call (attention_fwd, attention_bwd, attention_double_bwd).
struct AttentionCase {
  DType dtype = DType::bf16;
  int batch = 1, heads_q = 1, heads_kv = 1, n_q = 1, n_k = 1, head_dim = 64;
  bool causal = false;
  Layout layout = Layout::bhnd;
  double scale = 0;
  std::string config;      // empty = what attention_forward would choose
  std::uint64_t seed = 1;  // inputs are fresh random normal values from this seed
};

// One lrpe_cosine or md_lrpe_cosine call.
struct LrpeCase {
  LrpeOp op = LrpeOp::cosine;
  LrpeDirection direction = LrpeDirection::forward;
  DType dtype = DType::bf16;
  LrpeAct act = LrpeAct::none;
  int batch = 1, heads = 1, n = 1, d = 64;
  Layout layout = Layout::bhnd;
  bool three_dim = false;        // heads == 1 passed as (batch, n, d) tensors
  int theta_kind = 0;            // 0: (heads, width), 1: (heads, 1), 2: (1, width)
  std::int64_t offset = 0;       // lrpe_cosine
  std::vector<int> grid;         // md: n_1..n_m (n = extra + Π grid)
  int extra = 0;                 // md: l
  int e = 0;                     // md: frequencies per dim; 0 = ceil(d / m)
  bool cache = false;            // md: pass an angle buffer (the forward writes it, the backward reads it)
  double x_scale = 1;            // x ~ N(0, x_scale²): large values take softmax's shifted paths
  std::string config;            // "" = what the API would choose
  std::uint64_t seed = 1;
};

}  // namespace kgen
