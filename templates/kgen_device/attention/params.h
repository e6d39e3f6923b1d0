// Kernel parameters of the attention forward. Included by device templates and host code alike,
// so it uses only built-in types: the layout is identical on both sides.
#pragma once

namespace kgen {

// Logical shapes: q (batch, heads_q, n_q, d); k, v (batch, heads_kv, n_k, d); o like q;
// lse (batch, heads_q, n_q) fp32 with unit stride along n_q. Strides are in elements; the
// last dimension of q, k, v, o is contiguous.
struct AttentionForwardParams {
  const void* q;
  const void* k;
  const void* v;
  void* o;
  float* lse;
  long long q_stride_b, q_stride_h, q_stride_n;
  long long k_stride_b, k_stride_h, k_stride_n;
  long long v_stride_b, v_stride_h, v_stride_n;
  long long o_stride_b, o_stride_h, o_stride_n;
  long long lse_stride_b, lse_stride_h;
  int batch, heads_q, heads_kv, n_q, n_k;
  int head_dim;      // runtime d; equals the template's D on the tensor-core path
  int head_group;    // heads_q / heads_kv: query head h reads kv head h / head_group
  float scale;       // softmax scale s applied to Q·Kᵀ
  float scale_log2;  // s · log2(e), for exp2-based softmax
  // Causal warp-specialised grids of one block per query tile: log2 of the (batch, head) pairs of
  // a section (attention_fwd::ws_causal_sections_log2; 0 elsewhere). Grid x is then the query
  // tiles times the section's heads (head fastest), y the sections of a batch.
  int sections_log2;
};

}  // namespace kgen

namespace kgen {

// An opaque TMA descriptor (CUtensorMap), filled by the driver on the host.
struct alignas(64) TensorMapBytes {
  unsigned long long opaque[16];
};

// Parameters of the warp-specialised Hopper forward (forward_ws.cuh), passed as a
// __grid_constant__ so the device can take the maps' addresses. Each map views its tensor as
// 4-d (d, n, heads, batch), innermost first, with 64-element by `rows` boxes under the 128-byte
// swizzle: q and o 64-row boxes (one per consumer warpgroup), k and v BN-row boxes.
struct AttentionForwardTmaParams {
  AttentionForwardParams a;
  TensorMapBytes q_map, k_map, v_map, o_map;
};

// Parameters of a split-keys launch: the warp-specialised forward with SplitKeys
// (forward_ws.cuh) and then attention_forward_combine (forward_combine.cuh) take the same struct.
// The key tiles of each query tile are cut into `splits` contiguous ranges; block x of the grid
// is query tile x / splits, range x % splits. Each range writes its rows' O / l (fp32) and lse2
// (log2 domain, −inf for a row that saw no key) to the workspace, laid out (splits, batch,
// heads_q, n_q, head_dim) and (splits, batch, heads_q, n_q), contiguous; the combine kernel
// merges the ranges into o and lse.
struct AttentionForwardSplitParams : AttentionForwardTmaParams {
  float* o_partial;
  float* lse_partial;
  int splits;
};

// Parameters of a stream-K launch (the persistent warp-specialised forward with StreamK): after
// whole rounds of query tiles, the key tiles of the tiles left are cut evenly over the grid's
// blocks, so a query tile may begin in one block and end in the next. The later block writes
// its part's O / l (fp32) and lse2 to its slot of the workspace, (grid, block_m, D) and
// (grid, block_m), and sets its consumers' flags (grid, consumers) to 1; the earlier block waits
// for them and merges. The host zeroes the flags on the stream before every launch (graph
// replays included).
struct AttentionForwardStreamParams : AttentionForwardSplitParams {
  unsigned long long* flags;
};

}  // namespace kgen
