/* kgen C API: attention-family kernels compiled at run time, for any language with a C FFI.
 *
 * Tensors are DLPack DLTensor descriptors (pointer, dtype, shape, strides in elements, device).
 * Attention tensors use the logical layout (batch, heads, n, d) with any strides whose last
 * dimension is contiguous: pass a (b, n, h, d) tensor as the permuted view (strides of BNHD).
 * Every function returns KGEN_OK or an error code; kgen_last_error() then gives one sentence
 * naming the first offending argument in parameter order, or the cause (thread-local, valid
 * until the next call on that thread). Calls from several threads at once are safe. */
#ifndef KGEN_C_API_H
#define KGEN_C_API_H

#include <dlpack/dlpack.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kgen_status {
  KGEN_OK = 0,
  KGEN_ERROR_INVALID_ARGUMENT = 1, /* a tensor or option is unsupported; the message names it */
  KGEN_ERROR_NO_DEVICE = 2,        /* no driver or GPU: device work is impossible here */
  KGEN_ERROR_COMPILE = 3,          /* NVRTC failed; the message carries the compiler log */
  KGEN_ERROR_CUDA = 4,             /* a driver call failed; the message names it */
  KGEN_ERROR_CACHE = 5,            /* the binary cache could not serve nor store an entry */
  KGEN_ERROR_INTERNAL = 6
} kgen_status;

typedef struct kgen_attention_options {
  double scale; /* softmax scale; <= 0 means 1/sqrt(d) */
  int causal;   /* nonzero: key j is masked for j > i + (n_k - n_q) (bottom-right aligned) */
} kgen_attention_options;

/* Forward attention: o = softmax(scale·q·kᵀ (+ causal mask))·v and lse = logsumexp of the
 * scaled scores per row (natural log, fp32, shape (b, h_q, n_q), -inf for fully masked rows,
 * whose o row is 0). q (b, h_q, n_q, d); k, v (b, h_kv, n_k, d) with h_q % h_kv == 0; o like q.
 * v may have a head dim d_v < d of its own (MLA's 192/128; plain and causal attention, forward
 * and backward): o is then (b, h_q, n_q, d_v) and the scale still defaults to 1/sqrt(d).
 * dtypes: float16, bfloat16 (tensor cores, fp32 accumulation) or float32 (plain fp32 math,
 * no tf32); q, k, v and o share one dtype. lse may be NULL (not written); otherwise fp32 with
 * unit stride along n_q. strides == NULL means compact row-major. options == NULL means the
 * defaults (scale 1/sqrt(d), not causal). Tensor-core kernels need 16-byte aligned pointers and
 * strides that are multiples of 16 bytes; other views run on the general path. Only kDLCUDA
 * device memory is accepted. Runs asynchronously on `stream` (a CUstream of the tensors'
 * device; NULL = legacy default stream) in that device's primary context. */
kgen_status kgen_attention_forward(const DLTensor* q, const DLTensor* k, const DLTensor* v,
                                   DLTensor* o, DLTensor* lse,
                                   const kgen_attention_options* options, void* stream);

/* kgen_attention_forward on FP8 inputs (docs/attention.md §11): q, k and v float8_e4m3fn
 * (DLPack code 10, 8 bits), o float16 or bfloat16 (the output's dtype), lse as there. descale_q,
 * descale_k and descale_v (each may be NULL: 1) are float32 with one element or of shape
 * (b, h_kv): the real inputs are the stored values times them. Scores are scale · descale_q ·
 * descale_k · q·kᵀ; the probabilities are rounded to E4M3 for the product with v; fp32
 * accumulation. Plain or causal, GQA, head dims 128 and 256, sm_90a only; 16-byte aligned
 * pointers and strides. config: NULL for the default, or a ws config of block_m and block_n 128
 * ("ws:bm128:bn128:s3:pp1"). Scratch (V transposed) comes from kgen's stream-ordered pool. */
kgen_status kgen_attention_forward_fp8(const DLTensor* q, const DLTensor* k, const DLTensor* v, DLTensor* o,
                                       DLTensor* lse, const DLTensor* descale_q, const DLTensor* descale_k,
                                       const DLTensor* descale_v, const kgen_attention_options* options,
                                       const char* config, void* stream);

/* --- Attention variants (docs/attention.md §8 and its "Variants from C and Python") ---------------------
 * Presets and a user's score/mask modification, composed, for kgen_attention_forward_variant and
 * kgen_attention_backward_variant.
 * Fill the struct with kgen_attention_variant_init first: a zeroed struct is not plain attention
 * (a window side or a prefix of 0 keys is a valid size). Every preset keys off kgen's bottom-right
 * alignment: query q sits at key position q' = q + n_k - n_q. Variant tensors live on q's device,
 * any non-negative strides; integer ones are DLPack int32 (kDLInt, 32 bits). */

typedef struct kgen_variant_scalar {
  const char* name; /* as the expressions spell it */
  double value;
  int integer;      /* nonzero: an integer scalar (an integral value within int32); else real */
} kgen_variant_scalar;

typedef struct kgen_variant_tensor {
  const char* name;       /* as the expressions spell it: bias[h][q - k] */
  const DLTensor* tensor; /* float32 or int32, rank 1..4 */
  int learnable;          /* nonzero: float32 with a gradient (read by the backward only) */
  DLTensor* grad;         /* the backward's ∂L/∂tensor (float32, same shape); NULL in the forward */
} kgen_variant_tensor;

typedef struct kgen_attention_variant {
  int causal_top_left;          /* nonzero: key k visible to query q only if k <= q (top-left aligned) */
  int window_left;              /* sliding window: q' - window_left <= k <= q' + window_right; */
  int window_right;             /*   -1 leaves a side open; -1/-1 = no window */
  double softcap;               /* > 0: score' = softcap·tanh(score / softcap); 0 = none */
  const DLTensor* alibi_slopes; /* float32 (h_q): score' -= slope[h]·|q' - k|; NULL = none */
  int prefix;                   /* >= 0: prefix-LM, k < prefix or k <= q'; -1 = none */
  int chunk;                    /* > 0: chunked attention, q' / chunk == k / chunk; 0 = none */
  const DLTensor* document_ids; /* int32 (b, n_k): doc[b][q'] == doc[b][k]; NULL = none */
  const DLTensor* sinks;        /* float32 (h_q), contiguous: exp(sinks[h]) joins each row's softmax
                                   denominator; NULL = none */
  DLTensor* sinks_grad;         /* the backward's ∂L/∂sinks (float32 (h_q)); NULL in the forward */
  const char* score_mod;        /* expression of score, b, h, q, k, n_q, n_k, scalars, tensors; NULL or
                                   "" = none */
  const char* mask_mod;         /* boolean expression of b, h, q, k, n_q, n_k, scalars, tensors */
  const kgen_variant_scalar* scalars; /* num_scalars entries (NULL when 0) */
  int num_scalars;
  const kgen_variant_tensor* tensors; /* num_tensors entries (NULL when 0) */
  int num_tensors;
} kgen_attention_variant;

/* Sets *v to plain attention: window -1/-1, prefix -1, every other field 0 or NULL. */
void kgen_attention_variant_init(kgen_attention_variant* v);

/* kgen_attention_forward with a variant: masked keys get probability 0, the score modification
 * applies to the scaled logits of visible keys, and lse is the logsumexp of the modified scores
 * (with sinks: including the sink's logit; a row that sees no key then has o = 0 and lse = its
 * sink's logit). variant == NULL is plain attention (exactly kgen_attention_forward). options->
 * causal (bottom-right) composes with the variant's masks. Arguments are checked in parameter
 * order, the variant's fields in struct order: an error names the field ("variant.alibi_slopes:
 * ...", "variant.scalars: NULL with num_scalars=2") or the expression with its column. A kernel
 * is compiled once per distinct variant (presets and expressions), then cached; the scalars'
 * values and the tensors' contents do not change the kernel. */
kgen_status kgen_attention_forward_variant(const DLTensor* q, const DLTensor* k, const DLTensor* v, DLTensor* o,
                                           DLTensor* lse, const kgen_attention_options* options,
                                           const kgen_attention_variant* variant, void* stream);

/* Packed (variable-length) batches, FlashAttention's varlen layout: sequence i owns query rows
 * [cu_seqlens_q[i], cu_seqlens_q[i + 1]) and key rows [cu_seqlens_k[i], cu_seqlens_k[i + 1]).
 * cu_seqlens_* are int32 (b + 1) on q's device, non-decreasing from 0; max_seqlen_* bound the
 * lengths. Trusted by the kernels; KGEN_CHECK_INDICES=1 checks them on the host first. */
typedef struct kgen_packed_sequences {
  const DLTensor* cu_seqlens_q;
  const DLTensor* cu_seqlens_k;
  int max_seqlen_q;
  int max_seqlen_k;
} kgen_packed_sequences;

/* kgen_attention_forward_variant over a packed batch: q (total_q, h_q, d), k and v (total_k, h_kv,
 * d), o like q, lse (h_q, total_q) float32 or NULL. Indices, lengths and masks (causal:
 * bottom-right per sequence) are each sequence's own; rows no sequence owns are not written.
 * variant may be NULL (its document_ids must be NULL). */
kgen_status kgen_attention_varlen_forward(const DLTensor* q, const DLTensor* k, const DLTensor* v, DLTensor* o,
                                          DLTensor* lse, const kgen_attention_options* options,
                                          const kgen_packed_sequences* sequences,
                                          const kgen_attention_variant* variant, void* stream);

/* Paged K/V caches (vLLM's and FlashInfer's NHD layout): k_cache and v_cache (num_pages,
 * page_size, h_kv, d), page_size a power of two from 16 to 256; batch b's key j is row
 * j % page_size of page block_table[b][j / page_size]. block_table int32 (b, max_pages);
 * cache_seqlens int32 (b) or NULL (every batch max_pages · page_size keys). Trusted by the kernels;
 * KGEN_CHECK_INDICES=1 checks them on the host first. */
typedef struct kgen_paged_kv {
  const DLTensor* block_table;
  const DLTensor* cache_seqlens;
} kgen_paged_kv;

/* kgen_attention_forward_variant with paged K/V: q (b, h_q, n_q, d) (a (b, n_q, h_q, d) tensor as
 * its permuted view), o like q, lse (b, h_q, n_q) or NULL. Causal is bottom-right per batch
 * (query i at key cache_seqlens[b] - n_q + i). variant may be NULL (document_ids must be NULL). */
kgen_status kgen_attention_paged_forward(const DLTensor* q, const DLTensor* k_cache, const DLTensor* v_cache,
                                         DLTensor* o, DLTensor* lse, const kgen_attention_options* options,
                                         const kgen_paged_kv* kv, const kgen_attention_variant* variant,
                                         void* stream);

/* A rotary embedding fused into kgen_attention_paged_append (FlashAttention's convention): cos
 * and sin (max_pos, rotary_dim / 2), the caches' dtype or float32, max_pos covering every
 * position the cache holds per batch; interleaved nonzero rotates GPT-J pairs (2i, 2i + 1), zero
 * GPT-NeoX halves (i, i + rotary_dim / 2); q_sequential nonzero puts query i of batch b at
 * cache_seqlens[b] + i (FlashAttention's causal or windowed calls), zero every query at
 * cache_seqlens[b]. */
typedef struct kgen_rotary {
  const DLTensor* cos; /* NULL: no rotary embedding */
  const DLTensor* sin;
  int interleaved;
  int q_sequential;
} kgen_rotary;

/* Writes new K/V rows into their pages: row i of batch b of k_new and v_new (b, h_kv, n_new, d)
 * (a (b, n_new, h_kv, d) tensor as its permuted view) goes to position cache_seqlens[b] + i of
 * k_cache and v_cache (num_pages, page_size, h_kv, d) through kv->block_table; kv->block_table
 * NULL means contiguous caches (b_cache >= b, n_cache, h_kv, d). kv->cache_seqlens is required
 * and not changed. rotary (may be NULL) rotates the new keys, and q (b, h_q, n_q, d), if given,
 * into q_out (NULL: in place). Rows at or past the table's positions are not written. */
kgen_status kgen_attention_paged_append(const DLTensor* k_new, const DLTensor* v_new, DLTensor* k_cache,
                                        DLTensor* v_cache, const kgen_paged_kv* kv, const kgen_rotary* rotary,
                                        const DLTensor* q, DLTensor* q_out, void* stream);

/* A paged attention call planned once per batch shape (kgen::AttentionPagedPlan): plan validates
 * the call as kgen_attention_paged_forward does, chooses its config and split count, loads its
 * kernels and sizes its workspace; run launches it without host allocation, synchronisation or
 * compilation (CUDA-graph capturable). Run's tensors must match the plan's in dtype, shape,
 * strides and device (data pointers may change); the variant's tensors and scalars are the
 * plan's. A plan is freed with kgen_paged_plan_destroy. */
typedef struct kgen_paged_plan kgen_paged_plan;

kgen_status kgen_attention_paged_plan(const DLTensor* q, const DLTensor* k_cache, const DLTensor* v_cache,
                                      const DLTensor* o, const DLTensor* lse, const kgen_attention_options* options,
                                      const kgen_paged_kv* kv, const kgen_attention_variant* variant,
                                      kgen_paged_plan** plan);

/* The plan's scratch bytes per run, split count and config text (valid while the plan lives);
 * any output may be NULL. */
kgen_status kgen_paged_plan_info(const kgen_paged_plan* plan, size_t* workspace_bytes, int* splits,
                                 const char** config);

/* workspace: at least the plan's workspace bytes on q's device (NULL when that is 0). */
kgen_status kgen_attention_paged_run(const kgen_paged_plan* plan, const DLTensor* q, const DLTensor* k_cache,
                                     const DLTensor* v_cache, DLTensor* o, DLTensor* lse, const kgen_paged_kv* kv,
                                     void* workspace, size_t workspace_bytes, void* stream);

void kgen_paged_plan_destroy(kgen_paged_plan* plan);

typedef struct kgen_attention_backward_options {
  double scale;          /* as the forward's; must match it */
  int causal;            /* as the forward's; must match it */
  int deterministic;     /* nonzero: same bits on every run (no floating-point atomics) */
  void* workspace;       /* scratch on q's device, or NULL: kgen allocates it stream-ordered */
  size_t workspace_bytes;
  const char* config;    /* force a config ("fa2:bm64:bn128:w8"); NULL or "" = tuned/heuristic */
} kgen_attention_backward_options;

/* Gradients of kgen_attention_forward: dq (like q), dk and dv (like k; summed over each kv group)
 * from d_o (like q; like o when v's head dim is below q's, and dv then like v), the forward's o
 * and lse (required). Same dtypes, layouts and limits as the
 * forward. options == NULL means the defaults (scale 1/sqrt(d), not causal, nondeterministic,
 * kgen-allocated workspace). */
kgen_status kgen_attention_backward(const DLTensor* q, const DLTensor* k, const DLTensor* v, const DLTensor* o,
                                    const DLTensor* lse, const DLTensor* d_o, DLTensor* dq, DLTensor* dk, DLTensor* dv,
                                    const kgen_attention_backward_options* options, void* stream);

/* kgen_attention_backward of a kgen_attention_forward_variant call: dq, dk, dv as there, plus the
 * variant's gradients, fp32 and zeroed by kgen before it accumulates into them: ∂L/∂sinks into
 * variant->sinks_grad (required with sinks: float32 (h_q), contiguous) and ∂L/∂t into the `grad`
 * of each tensor marked learnable (float32, t's shape, contiguous; a learnable tensor must be
 * float32). alibi_slopes, document_ids and tensors not marked learnable get no gradient. The
 * variant and options->scale/causal must be the forward's. variant == NULL is plain attention
 * (exactly kgen_attention_backward). Errors as kgen_attention_forward_variant's, the gradient
 * fields named as "variant.sinks_grad: ..." and "variant.tensors[bias].grad: ...". The double
 * backward: kgen_attention_double_backward_variant. */
kgen_status kgen_attention_backward_variant(const DLTensor* q, const DLTensor* k, const DLTensor* v, const DLTensor* o,
                                            const DLTensor* lse, const DLTensor* d_o, DLTensor* dq, DLTensor* dk,
                                            DLTensor* dv, const kgen_attention_backward_options* options,
                                            const kgen_attention_variant* variant, void* stream);

/* kgen_attention_backward_variant over a packed batch (kgen_attention_varlen_forward's layouts and
 * sequences): lse (h_q, total_q) as the forward wrote it, d_o and dq like q, dk and dv like k. Rows
 * no sequence owns: dk and dv are not written, dq may be written with zeros. variant may be NULL.
 * options->workspace, when set, holds at least kgen_attention_varlen_backward_workspace_bytes. */
kgen_status kgen_attention_varlen_backward(const DLTensor* q, const DLTensor* k, const DLTensor* v, const DLTensor* o,
                                           const DLTensor* lse, const DLTensor* d_o, DLTensor* dq, DLTensor* dk,
                                           DLTensor* dv, const kgen_attention_backward_options* options,
                                           const kgen_packed_sequences* sequences,
                                           const kgen_attention_variant* variant, void* stream);

/* Scratch bytes of kgen_attention_varlen_backward for q (total_q, h_q, d) into *bytes. */
kgen_status kgen_attention_varlen_backward_workspace_bytes(const DLTensor* q,
                                                           const kgen_attention_backward_options* options,
                                                           size_t* bytes);

/* Second-order gradients (docs/attention.md §4): given cotangents gq (like q), gk, gv (like k) of the
 * backward's dq, dk, dv (any may be NULL = zero), writes q_bar, k_bar, v_bar, do_bar, the
 * gradients of the outer loss with respect to q, k, v and d_o. Nothing n x n is stored. */
kgen_status kgen_attention_double_backward(const DLTensor* q, const DLTensor* k, const DLTensor* v, const DLTensor* o,
                                           const DLTensor* lse, const DLTensor* d_o, const DLTensor* gq,
                                           const DLTensor* gk, const DLTensor* gv, DLTensor* q_bar, DLTensor* k_bar,
                                           DLTensor* v_bar, DLTensor* do_bar,
                                           const kgen_attention_backward_options* options, void* stream);

/* kgen_attention_double_backward of a variant (the forward's; NULL is plain attention): the
 * modification's first and second derivatives and the mask enter every term (docs/attention.md
 * §8). The variant's sinks and tensors are constants here: no gradient reaches them, and
 * variant->sinks_grad and the tensors' grad fields are not read. Packed batches:
 * kgen_attention_varlen_double_backward. */
kgen_status kgen_attention_double_backward_variant(const DLTensor* q, const DLTensor* k, const DLTensor* v,
                                                   const DLTensor* o, const DLTensor* lse, const DLTensor* d_o,
                                                   const DLTensor* gq, const DLTensor* gk, const DLTensor* gv,
                                                   DLTensor* q_bar, DLTensor* k_bar, DLTensor* v_bar, DLTensor* do_bar,
                                                   const kgen_attention_backward_options* options,
                                                   const kgen_attention_variant* variant, void* stream);

/* kgen_attention_double_backward_variant over a packed batch (kgen_attention_varlen_forward's
 * layouts and sequences): lse (h_q, total_q) as the forward wrote it, d_o, gq, q_bar and do_bar
 * like q, gk, gv, k_bar and v_bar like k (gq, gk, gv may be NULL). Rows no sequence owns are not
 * written. variant may be NULL. options->workspace, when set, holds at least
 * kgen_attention_varlen_double_backward_workspace_bytes. */
kgen_status kgen_attention_varlen_double_backward(const DLTensor* q, const DLTensor* k, const DLTensor* v,
                                                  const DLTensor* o, const DLTensor* lse, const DLTensor* d_o,
                                                  const DLTensor* gq, const DLTensor* gk, const DLTensor* gv,
                                                  DLTensor* q_bar, DLTensor* k_bar, DLTensor* v_bar, DLTensor* do_bar,
                                                  const kgen_attention_backward_options* options,
                                                  const kgen_packed_sequences* sequences,
                                                  const kgen_attention_variant* variant, void* stream);

/* Scratch bytes of kgen_attention_varlen_double_backward for q (total_q, h_q, d) into *bytes. */
kgen_status kgen_attention_varlen_double_backward_workspace_bytes(const DLTensor* q,
                                                                  const kgen_attention_backward_options* options,
                                                                  size_t* bytes);

/* Scratch bytes of a backward (double_backward == 0) or double backward call for q's shape. */
kgen_status kgen_attention_backward_workspace_bytes(const DLTensor* q, const kgen_attention_backward_options* options,
                                                    int double_backward, size_t* bytes);
/* --- LRPE-cosine (docs/lrpe.md) -----------------------------------------------------------------
 * x is (b, h, n, d) (a (b, n, h, d) tensor as its permuted view) or (b, n, d) for one head,
 * any strides with a contiguous last dim; o and d_o are shaped like x with 2d features (cos
 * half first), dx like x; float16, bfloat16 or float32 (one dtype for all of them), d <= 256.
 * theta is float32 (h or 1, d or 1) for lrpe_cosine and (h or 1, e) for md_lrpe_cosine. */

typedef enum kgen_lrpe_act {
  KGEN_LRPE_ACT_NONE = 0,
  KGEN_LRPE_ACT_RELU = 1,
  KGEN_LRPE_ACT_SIGMOID = 2,
  KGEN_LRPE_ACT_SILU = 3,
  KGEN_LRPE_ACT_SOFTMAX = 4,     /* over the features of each row (dim -1) */
  KGEN_LRPE_ACT_SOFTMAX_SEQ = 5  /* over the sequence of each (b, h, feature) column (dim -2) */
} kgen_lrpe_act;

typedef struct kgen_lrpe_options {
  int act;                /* kgen_lrpe_act */
  int64_t offset;         /* lrpe_cosine: token s at position offset + s */
  int dims;               /* md_lrpe_cosine: spatial dims m, 1..3 */
  int64_t grid[3];        /* md_lrpe_cosine: n_1..n_m, row-major (last fastest); n = extra + Π grid */
  int extra;              /* md_lrpe_cosine: l extra tokens first (angle 0) */
  const char* config;     /* NULL or "" = heuristic; e.g. "sp:t256:r4:v8", "bp:t256:r1:v8:b4" */
  void* workspace;        /* act softmax_seq scratch, NULL = stream-ordered allocation */
  size_t workspace_bytes;
} kgen_lrpe_options;

/* o = [act(x)·cos Θ, act(x)·sin Θ] with Θ[s, h, k] = (offset + s)·θ[h, k]. options may be
 * NULL (act none, offset 0). Asynchronous on `stream`. */
kgen_status kgen_lrpe_cosine_forward(const DLTensor* x, const DLTensor* theta, DLTensor* o,
                                     const kgen_lrpe_options* options, void* stream);
/* dx = ∂L/∂x given d_o = ∂L/∂o (x is read unless act is none). */
kgen_status kgen_lrpe_cosine_backward(const DLTensor* x, const DLTensor* theta, const DLTensor* d_o,
                                      DLTensor* dx, const kgen_lrpe_options* options, void* stream);
/* md_lrpe_cosine: Θ from the grid coordinates (see kgen.hpp). options must give dims and grid.
 * angles: NULL, or a contiguous float32 (h, n, d) buffer the forward fills (reduced angles) and
 * the backward reads (the cache variant). */
kgen_status kgen_md_lrpe_cosine_forward(const DLTensor* x, const DLTensor* theta, DLTensor* o,
                                        DLTensor* angles, const kgen_lrpe_options* options, void* stream);
kgen_status kgen_md_lrpe_cosine_backward(const DLTensor* x, const DLTensor* theta, const DLTensor* d_o,
                                         DLTensor* dx, const DLTensor* angles,
                                         const kgen_lrpe_options* options, void* stream);

/* Scratch bytes an lrpe_cosine / md_lrpe_cosine call on x needs in options->workspace: 0 unless
 * act is softmax over the sequence (kgen_lrpe_act 5); an upper bound for every config. Passing
 * scratch from the caller's allocator saves the call a stream-ordered allocation and free. */
kgen_status kgen_lrpe_workspace_bytes(const DLTensor* x, int act, int backward, size_t* bytes);

/* Validate-only calls, for callers that trace a program without running it (PyTorch's fake
 * kernels). While on (on != 0), this thread's operator calls (the functions above that take a
 * stream, and kgen_attention_paged_plan) convert and check their arguments exactly as a launch
 * does, in the same order and with the same sentences, then return KGEN_OK without touching a
 * device: no driver, context, config decision, compile, allocation or launch, so they work on a
 * machine without a GPU or libcuda. The stream is not used; data pointers are checked (not null,
 * aligned to the element) but never read, so any such address serves; kgen_attention_paged_plan
 * makes no plan (*plan is NULL). What needs the device is not checked: an explicit config against
 * the device's target, a caller's workspace size, tensor maps, the index reads of
 * KGEN_CHECK_INDICES. Other functions behave as always. Returns the previous setting. */
int kgen_validate_only(int on);

/* The message of the last failed call on this thread ("" if none). */
const char* kgen_last_error(void);

/* kgen's version string, e.g. "0.1.0". */
const char* kgen_version(void);

#ifdef __cplusplus
}
#endif

#endif /* KGEN_C_API_H */
