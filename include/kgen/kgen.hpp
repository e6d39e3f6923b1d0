// kgen C++ API: attention-family kernels, compiled at run time for the GPU they run on,
// cached on disk, launched on the caller's stream in the device's primary context.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kgen/types.hpp"

namespace kgen {

// A strided view of device memory. Attention tensors use the logical layout
// (batch, heads, n, d) with any strides (elements) whose last dimension is contiguous:
// a (b, n, h, d) tensor is passed as its permuted view.
struct TensorView {
  void* data = nullptr;
  DType dtype = DType::bf16;
  int ndim = 0;
  std::int64_t shape[4] = {};
  std::int64_t strides[4] = {};
  int device = 0;  // CUDA device ordinal; -1 means host memory (rejected by kernels)
};

// Row-major contiguous strides for `shape`.
TensorView make_contiguous_view(void* data, DType dtype, int ndim, const std::int64_t* shape,
                                int device);

// A named run-time scalar of a variant expression.
struct VariantScalarArg {
  std::string name;
  double value = 0;
  bool integer = false;  // an integer scalar (window sizes, offsets); else real
};

// A named tensor of a variant expression: int32 or fp32 on q's device, any strides, rank 1..4.
// A learnable fp32 tensor gets ∂L/∂tensor from attention_backward, written to `grad` (fp32, same
// shape, zeroed by kgen before it accumulates).
struct VariantTensorArg {
  std::string name;
  TensorView tensor;
  bool learnable = false;
  TensorView grad;  // backward only, learnable tensors only
};

// An attention variant (docs/attention.md §8): presets and a user's score/mask modification,
// composed. With every field at its default it is plain attention. Each preset keys off kgen's
// bottom-right alignment (query q sits at key position q + n_k − n_q) unless it says otherwise.
// The presets and expressions change the kernel (it is compiled once per distinct variant, then
// cached); the scalars' values and the tensors' contents do not.
struct AttentionVariant {
  bool causal_top_left = false;          // k <= q (SDPA's is_causal=True when n_q != n_k)
  int window_left = -1, window_right = -1;  // sliding window (FlashAttention's window_size): keys
                                         // q' − left <= k <= q' + right; −1 leaves a side open
  double softcap = 0;                    // > 0: score' = softcap · tanh(score / softcap)
  const TensorView* alibi_slopes = nullptr;  // fp32 (h_q): score' −= slope[h] · |q' − k|
  int prefix = -1;                       // >= 0: prefix-LM, keys k < prefix visible to every query
  int chunk = 0;                         // > 0: chunked attention, q' / chunk == k / chunk
  const TensorView* document_ids = nullptr;  // int32 (b, n_k), n_q <= n_k: doc[b][q'] == doc[b][k]
  // fp32 (h_q), contiguous: one learnable logit per query head that joins every row's softmax
  // denominator (gpt-oss); its gradient goes to sinks_grad (fp32 (h_q), contiguous, zeroed by
  // kgen) in the backward.
  const TensorView* sinks = nullptr;
  const TensorView* sinks_grad = nullptr;
  std::string score_mod;  // expression of score, b, h, q, k, n_q, n_k, scalars, tensors
  std::string mask_mod;   // boolean expression of b, h, q, k, n_q, n_k, scalars, tensors
  std::vector<VariantScalarArg> scalars;
  std::vector<VariantTensorArg> tensors;
};

struct AttentionOptions {
  double scale = 0;      // softmax scale; <= 0 means 1/sqrt(d)
  bool causal = false;   // key j masked for j > i + (n_k - n_q): bottom-right aligned
  std::string config;    // force a config ("fa2:bm128:bn64:w4:s2"); empty = tuned/heuristic
  AttentionVariant variant;  // presets and expressions; default = plain attention
};

// o = softmax(scale·q·kᵀ (+ mask))·v; lse = natural-log logsumexp of each row's scaled scores
// (fp32, (b, h_q, n_q), -inf where a row is fully masked and its o row is 0). q (b, h_q, n_q, d),
// k and v (b, h_kv, n_k, d) with h_q % h_kv == 0, o like q; v may have a head dim d_v < d of its own
// (MLA's 192/128; plain and causal attention: o is then (b, h_q, n_q, d_v), the scale still 1/sqrt(d),
// docs/attention.md §1); fp16/bf16 (tensor cores, fp32
// accumulation) or fp32 (plain fp32 math, no tf32); any d <= 256 (32/64/96/128/256 on tensor
// cores). `lse` may be null. Asynchronous on `stream` (a CUstream, null = legacy default
// stream). Throws kgen::Error naming the offending argument.
void attention_forward(const TensorView& q, const TensorView& k, const TensorView& v,
                       const TensorView& o, const TensorView* lse, const AttentionOptions& options,
                       void* stream);

// The descale factors of an FP8 forward's inputs (FlashAttention-3's and cuDNN's convention):
// the real q is q's stored E4M3 values times descale_q, and so on. Each is a float32 tensor on
// q's device with one element (the whole tensor) or of shape (batch, heads_kv) (one per batch and
// K/V head; a query head takes its K/V head's), or null (1).
struct Fp8Descales {
  const TensorView* q = nullptr;
  const TensorView* k = nullptr;
  const TensorView* v = nullptr;
};

// attention_forward on FP8 inputs: q, k and v in E4M3 (DType::f8e4m3, PyTorch's
// float8_e4m3fn) with their descale factors, o fp16 or bf16 (its dtype is the output's), lse as
// attention_forward's. Scores are scale · descale_q · descale_k · q·kᵀ, o is the softmax's
// probabilities rounded to E4M3 times v, times descale_v (fp32 accumulation; docs/attention.md
// §11). Plain or causal attention (options.variant must be empty), GQA, head dims 128 and 256, on
// sm_90a (Hopper) only; every pointer and stride 16-byte aligned, the last dimension contiguous.
// options.config may name a ws config of block_m 128 and block_n 128 (e.g. ws:bm128:bn128:s3:pp1).
// Scratch: V transposed, batch · heads_kv · head_dim · n_k rounded up to 128 bytes, from kgen's
// stream-ordered pool. Throws kgen::Error naming the offending argument.
void attention_forward_fp8(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& o,
                           const TensorView* lse, const Fp8Descales& descales, const AttentionOptions& options,
                           void* stream);

// Packed (variable-length) batches, FlashAttention's varlen layout (docs/attention.md §9): b
// sequences one after another along the token dimension. Sequence i owns query rows
// [cu_seqlens_q[i], cu_seqlens_q[i + 1]) and key rows [cu_seqlens_k[i], cu_seqlens_k[i + 1]);
// every index, length and mask (causal included: bottom-right per sequence) is the sequence's
// own. cu_seqlens_* are int32 (b + 1) on q's device, non-decreasing, from 0 to at most the
// tensors' rows (lengths may be 0). max_seqlen_* bound the sequences' lengths (they size the
// grid). The kernels trust cu_seqlens and the maxima; with KGEN_CHECK_INDICES=1 in the
// environment each call first copies cu_seqlens to the host and checks them (synchronous).
struct PackedSequences {
  const TensorView* cu_seqlens_q = nullptr;
  const TensorView* cu_seqlens_k = nullptr;
  int max_seqlen_q = 0, max_seqlen_k = 0;
};

// attention_forward over a packed batch: q (total_q, h_q, d), k and v (total_k, h_kv, d), o like
// q, lse (h_q, total_q) fp32 (may be null), any strides with the last dimension contiguous. Rows
// of o and lse that no sequence owns are not written. Variants apply per sequence (b is the
// sequence's index; document_ids does not apply).
void attention_varlen_forward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& o,
                              const TensorView* lse, const PackedSequences& sequences,
                              const AttentionOptions& options, void* stream);

// Paged K/V caches (vLLM's and FlashInfer's NHD layout; docs/attention.md §10): k_cache and
// v_cache are (num_pages, page_size, h_kv, d), page_size a power of two from 16 to 256; batch b's
// key j is row j % page_size of page block_table[b][j / page_size]. block_table is int32
// (b, max_pages) on q's device (its rows may have any stride, elements contiguous); cache_seqlens
// (int32 (b), optional) gives each batch's key count, at most max_pages · page_size (null: every
// batch has max_pages · page_size keys). The kernels trust both; with KGEN_CHECK_INDICES=1 each
// call first checks them on the host (synchronous), naming the first bad entry.
struct PagedKV {
  const TensorView* block_table = nullptr;
  const TensorView* cache_seqlens = nullptr;
};

// attention_forward with paged K/V: q (b, h_q, n_q, d) (any strides, last contiguous: a (b, n_q,
// h_q, d) tensor as its permuted view), o like q, lse (b, h_q, n_q) or null; the caches as above.
// Causal is bottom-right per batch (query i sits at key cache_seqlens[b] − n_q + i). Variants
// apply (their n_k is the batch's key count); document_ids does not.
void attention_paged_forward(const TensorView& q, const TensorView& k_cache, const TensorView& v_cache,
                             const TensorView& o, const TensorView* lse, const PagedKV& kv,
                             const AttentionOptions& options, void* stream);

// --- Paged K/V: append and plan/run (docs/attention.md §10) -----------------------------------

// A rotary embedding fused into attention_paged_append (FlashAttention's convention): cos and sin
// are (max_pos, rotary_dim / 2), the caches' dtype or fp32, rows of any stride with the last
// dimension contiguous; rotary_dim is even, at most head_dim, and max_pos covers every position
// the table can hold (max_pages · page_size, a contiguous cache's n). interleaved = false rotates
// GPT-NeoX halves (element i with i + rotary_dim / 2), true GPT-J pairs (2i with 2i + 1).
struct RotaryEmbedding {
  const TensorView* cos = nullptr;  // null: no rotary embedding
  const TensorView* sin = nullptr;
  bool interleaved = false;
  // Where the queries sit: query i of batch b at cache_seqlens[b] + i (true: FlashAttention's
  // causal or windowed calls) or every query at cache_seqlens[b] (false: its other calls).
  bool q_sequential = true;
};

struct PagedAppendOptions {
  RotaryEmbedding rotary;
  // Queries rotated with the new keys (rotary only): q (b, h_q, n_q, d), any strides with the last
  // contiguous (a (b, n_q, h_q, d) tensor as its permuted view), written to q_out (like q; null or
  // q itself: in place).
  const TensorView* q = nullptr;
  const TensorView* q_out = nullptr;
  std::string config;  // force a config ("ap:t128:v8"); empty = the default
};

// Writes new key and value rows into their pages: row i of batch b of k_new and v_new (b, h_kv,
// n_new, d) (any strides, last contiguous: a (b, n_new, h_kv, d) tensor as its permuted view) goes
// to position pos = cache_seqlens[b] + i, i.e. row pos % page_size of page block_table[b][pos /
// page_size] of k_cache and v_cache (num_pages, page_size, h_kv, d), rotated first when
// options.rotary has tables (the keys; values are copied). kv.cache_seqlens is required (int32
// (b)) and is not changed: the caller adds n_new after the step, as with FlashAttention. A null
// kv.block_table means contiguous caches (b_cache >= b, n_cache, h_kv, d): batch b's position pos
// is row pos of cache row b. Rows whose position is at or past the table's max_pages · page_size
// (the cache's n) are not written. fp16, bf16 or fp32; asynchronous on `stream`.
void attention_paged_append(const TensorView& k_new, const TensorView& v_new, const TensorView& k_cache,
                            const TensorView& v_cache, const PagedKV& kv, const PagedAppendOptions& options,
                            void* stream);

struct AttentionPagedPlanState;

// A paged attention call planned once per batch shape (FlashInfer's plan/run split): the config,
// the split count, the grid, the loaded kernels and the workspace size, so that
// attention_paged_run does no host allocation, no synchronisation and no compilation, and can be
// captured in a CUDA graph. Copies share one plan; an empty plan (default) cannot run.
class AttentionPagedPlan {
 public:
  AttentionPagedPlan() = default;
  explicit operator bool() const { return state_ != nullptr; }
  // Bytes of scratch each run needs on q's device (0: none); the caller passes it to run.
  std::size_t workspace_bytes() const;
  std::string config() const;  // the chosen config's text
  int splits() const;          // key ranges per query row (1: no split)

 private:
  std::shared_ptr<const AttentionPagedPlanState> state_;
  friend AttentionPagedPlan attention_paged_plan(const TensorView&, const TensorView&, const TensorView&,
                                                 const TensorView&, const TensorView*, const PagedKV&,
                                                 const AttentionOptions&);
  friend void attention_paged_run(const AttentionPagedPlan&, const TensorView&, const TensorView&, const TensorView&,
                                  const TensorView&, const TensorView*, const PagedKV&, void*, std::size_t, void*);
};

// Validates a attention_paged_forward call (same arguments and checks, KGEN_CHECK_INDICES
// included) and plans it without launching; compiles or loads its kernels.
AttentionPagedPlan attention_paged_plan(const TensorView& q, const TensorView& k_cache, const TensorView& v_cache,
                                        const TensorView& o, const TensorView* lse, const PagedKV& kv,
                                        const AttentionOptions& options);

// Runs a plan on `stream`: the views must match the plan's in dtype, shape, strides and device
// (their data pointers may change, aligned as the plan's were), lse and cache_seqlens given or not
// as at plan; the variant's tensors and scalars are the plan's. `workspace` holds at least
// plan.workspace_bytes() bytes on q's device (null allowed when that is 0). The indices are not
// checked here (KGEN_CHECK_INDICES applies at plan). Throws kgen::Error naming the argument that
// differs from the plan.
void attention_paged_run(const AttentionPagedPlan& plan, const TensorView& q, const TensorView& k_cache,
                         const TensorView& v_cache, const TensorView& o, const TensorView* lse, const PagedKV& kv,
                         void* workspace, std::size_t workspace_bytes, void* stream);

struct AttentionBackwardOptions {
  double scale = 0;            // softmax scale; <= 0 means 1/sqrt(d); must match the forward's
  bool causal = false;         // must match the forward's
  bool deterministic = false;  // same bits on every run (no floating-point atomics)
  std::string config;          // force a config; empty = tuned/heuristic
  AttentionVariant variant;    // must match the forward's; learnable tensors' and sinks' grads here
  // Scratch memory on q's device: at least attention_backward_workspace_bytes(...). Null means
  // kgen allocates it stream-ordered (cuMemAllocAsync/cuMemFreeAsync) on `stream`.
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;
};

// Bytes of scratch attention_backward needs for these shapes (q: (b, h_q, n_q, d)).
std::size_t attention_backward_workspace_bytes(const TensorView& q, const AttentionBackwardOptions& options);

// Gradients of attention_forward: given dO = ∂L/∂o, writes dq = ∂L/∂q, dk, dv (dk/dv summed over
// the query heads of each kv group for GQA). o and lse are the forward's outputs (lse natural
// log, fp32 (b, h_q, n_q), unit stride along n_q). d_o and dq are shaped like q, dk and dv like
// k (with v's own head dim d_v < d: d_o like o, dv like v). Same dtypes, layouts and limits as
// attention_forward. dq, dk and dv are overwritten. The double backward takes one head dim.
void attention_backward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& o,
                        const TensorView& lse, const TensorView& d_o, const TensorView& dq,
                        const TensorView& dk, const TensorView& dv, const AttentionBackwardOptions& options,
                        void* stream);

// attention_backward over a packed batch (attention_varlen_forward's layouts and sequences): lse
// (h_q, total_q) as the forward wrote it, d_o and dq like q, dk and dv like k. Rows that no
// sequence owns: dk and dv are not written, dq may be written with zeros. The double backward:
// attention_varlen_double_backward.
void attention_varlen_backward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& o,
                               const TensorView& lse, const TensorView& d_o, const TensorView& dq, const TensorView& dk,
                               const TensorView& dv, const PackedSequences& sequences,
                               const AttentionBackwardOptions& options, void* stream);

// Bytes of scratch attention_varlen_backward needs (q: (total_q, h_q, d)).
std::size_t attention_varlen_backward_workspace_bytes(const TensorView& q, const AttentionBackwardOptions& options);

// Bytes of scratch attention_double_backward needs for these shapes.
std::size_t attention_double_backward_workspace_bytes(const TensorView& q, const AttentionBackwardOptions& options);

// Second-order gradients (docs/attention.md §4). With dq, dk, dv the outputs of attention_backward
// as functions of (q, k, v, d_o) and an outer loss ℒ(dq, dk, dv) whose cotangents are
// gq = ∂ℒ/∂dq (shaped like q), gk, gv (like k), any of them null (= zero, its work skipped),
// writes q_bar = ∂ℒ/∂q, k_bar, v_bar (like k, summed over each kv group) and do_bar = ∂ℒ/∂d_o
// (like q). o and lse are the forward's outputs. Nothing n×n is stored. options.variant, the
// forward's, enters every term through the modification's first and second derivatives and the
// mask (docs/attention.md §8); its sinks and tensors are constants here (no gradient reaches
// them; the grad fields are not read). Packed batches: attention_varlen_double_backward.
void attention_double_backward(const TensorView& q, const TensorView& k, const TensorView& v,
                               const TensorView& o, const TensorView& lse, const TensorView& d_o,
                               const TensorView* gq, const TensorView* gk, const TensorView* gv,
                               const TensorView& q_bar, const TensorView& k_bar, const TensorView& v_bar,
                               const TensorView& do_bar, const AttentionBackwardOptions& options, void* stream);

// attention_double_backward over a packed batch (attention_varlen_forward's layouts and
// sequences; docs/attention.md §9): lse (h_q, total_q) as the forward wrote it, d_o, gq, q_bar and
// do_bar like q, gk, gv, k_bar and v_bar like k. Each sequence's terms are its own (causal:
// bottom-right per sequence). Rows that no sequence owns are not written.
void attention_varlen_double_backward(const TensorView& q, const TensorView& k, const TensorView& v,
                                      const TensorView& o, const TensorView& lse, const TensorView& d_o,
                                      const TensorView* gq, const TensorView* gk, const TensorView* gv,
                                      const TensorView& q_bar, const TensorView& k_bar, const TensorView& v_bar,
                                      const TensorView& do_bar, const PackedSequences& sequences,
                                      const AttentionBackwardOptions& options, void* stream);

// Bytes of scratch attention_varlen_double_backward needs (q: (total_q, h_q, d)).
std::size_t attention_varlen_double_backward_workspace_bytes(const TensorView& q,
                                                             const AttentionBackwardOptions& options);

// --- LRPE-cosine (docs/lrpe.md) ----------------------------------------------------------------
// x is (batch, heads, n, d) (any strides, last dim contiguous; a (b, n, h, d) tensor as its
// permuted view) or (batch, n, d) for one head; o is shaped like x with 2d features (the cos
// half first), dO like o, dx like x. fp16, bf16 or fp32, math in fp32; x, o, dO and dx share one
// dtype; d <= 256. theta is fp32 (heads | 1, d | 1) for lrpe_cosine, (heads | 1, e) for
// md_lrpe_cosine, any strides (a size-1 dim broadcasts). Everything runs asynchronously on
// `stream`; errors throw kgen::Error naming the offending argument.

struct LrpeOptions {
  LrpeAct act = LrpeAct::none;
  std::int64_t offset = 0;  // token s sits at position offset + s; |offset| + n < 2^24
  std::string config;       // force a config ("sp:t256:r4:v8"); empty = heuristic
  // Scratch for act softmax_seq on x's device: at least lrpe_workspace_bytes(...). Null means
  // kgen allocates it stream-ordered (cuMemAllocAsync/cuMemFreeAsync) on `stream`.
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;
};

struct MdLrpeOptions {
  LrpeAct act = LrpeAct::none;
  int dims = 1;                  // m: spatial dims, 1..3
  std::int64_t grid[3] = {};     // n_1..n_m, flattened row-major (the last fastest)
  int extra = 0;                 // l extra tokens before the grid: n = l + Π grid, angle 0
  std::string config;            // force a config ("sp:t256:r4:v8:cache" with angles); empty = heuristic
  void* workspace = nullptr;     // as in LrpeOptions
  std::size_t workspace_bytes = 0;
};

// o = [act(x)·cos Θ, act(x)·sin Θ], Θ[s, h, k] = (offset + s)·θ[h, k].
void lrpe_cosine_forward(const TensorView& x, const TensorView& theta, const TensorView& o,
                         const LrpeOptions& options, void* stream);
// dx = ∂L/∂x for d_o = ∂L/∂o (theta gets no gradient). x is read for every act but none.
void lrpe_cosine_backward(const TensorView& x, const TensorView& theta, const TensorView& d_o,
                          const TensorView& dx, const LrpeOptions& options, void* stream);

// md_lrpe_cosine: Θ[s, h, k] = c_j(s − l)·θ[h, k − j·e] with j = k / e and c the grid
// coordinates of token s − l (Θ = 0 for s < l); e = theta's last dim, e·m >= d. `angles`
// (optional, fp32 contiguous (heads, n, d)) selects the cache variant: the forward writes the
// angles (reduced mod 2π) once, the backward reads them instead of decoding coordinates; it must
// then be the buffer a forward of the same grid and theta wrote.
void md_lrpe_cosine_forward(const TensorView& x, const TensorView& theta, const TensorView& o,
                            const TensorView* angles, const MdLrpeOptions& options, void* stream);
void md_lrpe_cosine_backward(const TensorView& x, const TensorView& theta, const TensorView& d_o,
                             const TensorView& dx, const TensorView* angles, const MdLrpeOptions& options,
                             void* stream);

// Bytes of scratch a call needs (nonzero only for act softmax_seq); `backward` selects the pass.
std::size_t lrpe_workspace_bytes(const TensorView& x, LrpeAct act, bool backward);

// kgen's version, e.g. "0.1.0".
const char* version();

}  // namespace kgen
