// The shape buckets of each operator: what only changes the shape of a call, so that tuning
// records made for one shape serve its neighbours. Variant keys carry what changes the source.
//
// One rule per operator gives both forms of its bucket: the numbers a launch path's decision
// table keys on (no string is built on a hot launch) and the text the tuning database records.
#pragma once

#include <array>
#include <string>

#include "generator/attention_forward.h"
#include "generator/lrpe.h"

namespace kgen {

// Up to four named numbers; names[i] == nullptr ends the list.
struct ShapeBucket {
  std::array<const char*, 4> names{};
  std::array<long long, 4> values{};
  // "nq4096.nk4096.g1.bh64": each name followed by its value, joined by '.'.
  std::string text() const;
};

// Rule for attention_fwd: nq, nk, g, bh, where nq and nk are n_q and n_k rounded UP to the next
// power of two (a power of two maps to itself: 4096 -> 4096, 4097 -> 8192, 1 -> 1), g =
// heads_q / heads_kv exactly (GQA group size, not rounded), and bh = batch * heads_q rounded up
// to a power of two. Values below 1 count as 1.
//
// Rule for attention_bwd and attention_double_bwd: the forward's (their variant keys carry
// dtype, head dim, causal, and for the backward deterministic mode).
ShapeBucket attention_bucket(const AttentionShape& shape);

// Rule for lrpe_cosine and md_lrpe_cosine: n, bh, d, and for md also m, where n is rounded up
// to a power of two (as above), bh = batch * heads rounded up to a power of two, d = the head
// dim exactly and m = the md grid's number of dims (1, 2 or 3; 0 leaves m out). Offset, grid
// sizes, extra tokens and theta's broadcast do not enter (run-time parameters of the same cost);
// op, direction, dtype, act and the md angle cache are in the variant key.
ShapeBucket lrpe_bucket(const LrpeShape& shape, int md_dims = 0);

}  // namespace kgen
