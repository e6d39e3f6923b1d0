// The shape buckets of each operator: what only changes the shape of a call, so that tuning
// records made for one shape serve its neighbours. Variant keys carry what changes the source.
#pragma once

#include <string>

#include "generator/attention_forward.h"
#include "generator/lrpe.h"

namespace kgen {

// Rule for attention_fwd: "nq<Q>.nk<K>.g<G>.bh<B>" where Q and K are n_q and n_k rounded UP to
// the next power of two (a power of two maps to itself: 4096 -> 4096, 4097 -> 8192, 1 -> 1),
// G = heads_q / heads_kv exactly (GQA group size, not rounded), and B = batch * heads_q
// rounded up to a power of two. Values below 1 count as 1.
std::string attention_bucket(const AttentionShape& shape);
//
// Rule for attention_bwd and attention_double_bwd: the forward's, attention_bucket(shape) (their
// variant keys carry dtype, head dim, causal, and for the backward deterministic mode).
//
// Rule for lrpe_cosine and md_lrpe_cosine: "n<N>.bh<B>.d<D>", for md "n<N>.bh<B>.d<D>.m<M>",
// where N = n rounded up to a power of two (as above), B = batch * heads rounded up to a power
// of two, D = the head dim d exactly and M = the md grid's number of dims (1, 2 or 3). Offset,
// grid sizes, extra tokens and theta's broadcast do not enter (run-time parameters of the same
// cost); op, direction, dtype, act and the md angle cache are in the variant key.
std::string lrpe_bucket(const LrpeShape& shape, int md_dims = 0);


}  // namespace kgen
