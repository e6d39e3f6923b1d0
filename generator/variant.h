// Attention variants as expressions (docs/attention.md §8): a score modification
// s' = f(score, b, h, q, k, n_q, n_k, scalars, tensors) and a mask m(b, h, q, k, …) → bool,
// parsed and type-checked here, differentiated symbolically (∂f/∂score, ∂²f/∂score², and ∂f/∂t
// for every learnable tensor read), emitted as a device struct that the kernels' score step
// calls, evaluated in fp64 on the CPU for references, and classified over index intervals so the
// kernels skip key tiles that no query of a tile can see.
//
// The language (one expression per modification):
//   inputs    score (real, the scaled logit; score_mod only), b, h, q, k, n_q, n_k (integers:
//             batch, query head, query row, key row, row counts), the declared scalars, and the
//             declared tensors indexed by integer expressions, one [i] per dimension:
//             bias[h][q - k + 4095], doc[b][q]
//   literals  integers (4095) and reals (0.5, 1e-3, 2.)
//   operators unary - and !, * / %, + -, < <= > >= == !=, &&, || (C precedence; / and % of two
//             integers are C's truncating integer division and remainder)
//   functions where(c, a, b), min(a, b), max(a, b), abs(x), exp(x), log(x), tanh(x),
//             sigmoid(x), sqrt(x), float(i) (an integer as a real)
// Types: bool, int, real. int op real gives real; comparisons give bool; && || ! take bool;
// where(c, a, b) takes a bool c. A score_mod is real (an int result is converted); a mask_mod is
// bool. The mask may not read `score`; `score` may not reach an integer context (an index, % or
// an integer comparison that feeds an index).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kgen {

enum class VariantType { boolean, integer, real };

// A named run-time scalar (its value travels in VariantArgs, not in the kernel).
struct VariantScalar {
  std::string name;
  VariantType type = VariantType::real;  // integer or real
};

// A named tensor read by the expressions: `rank` integer indices, int32 (integer) or fp32 (real)
// elements, any strides. A learnable tensor (real only) gets ∂L/∂t from the backward.
struct VariantTensor {
  std::string name;
  int rank = 1;
  VariantType type = VariantType::real;  // integer or real
  bool learnable = false;
};

inline constexpr int kMaxVariantScalars = 8;
inline constexpr int kMaxVariantTensors = 4;
inline constexpr int kMaxVariantTensorRank = 4;

// What a user writes.
struct VariantDecl {
  std::string score_mod;  // real expression; empty = the identity (score)
  std::string mask_mod;   // bool expression; empty = every key visible
  std::vector<VariantScalar> scalars;
  std::vector<VariantTensor> tensors;
};

// Host values of the declared inputs, for the fp64 CPU evaluation (references, tests).
struct VariantTensorValue {
  const void* data = nullptr;  // host memory: int32 or fp32 as declared
  std::int64_t shape[kMaxVariantTensorRank] = {};
  std::int64_t strides[kMaxVariantTensorRank] = {};  // elements
};
struct VariantValues {
  std::vector<double> scalars;              // one per declared scalar, in order
  std::vector<VariantTensorValue> tensors;  // one per declared tensor, in order
};

// The indices of one score element.
struct VariantIndex {
  std::int64_t b = 0, h = 0, q = 0, k = 0, n_q = 0, n_k = 0;
};

// How a (query range × key range) tile relates to the mask: no key visible to any query, some,
// or every key visible to every query.
enum class TileClass { empty = 0, partial = 1, full = 2 };

class VariantExpr;  // the checked syntax tree (variant.cpp)

// A checked variant: immutable, cheap to copy.
class Variant {
 public:
  // Parses and checks `decl`. Throws kgen::Error(invalid_argument, one sentence) naming which
  // expression, the 1-based column and the problem, e.g.
  //   "score_mod, column 8: unknown name 'bais' (the inputs are score, b, h, q, k, n_q, n_k and
  //    the declared scalars and tensors)".
  // Also rejects bad declarations (duplicate or reserved names, more than kMaxVariant* of a kind,
  // rank outside 1..4, a learnable integer tensor, a declared input no expression reads).
  static Variant parse(const VariantDecl& decl);

  // The identity variant (no score_mod, no mask).
  Variant();

  const VariantDecl& decl() const;
  bool identity() const;       // neither a score_mod nor a mask
  bool has_score_mod() const;  // f is not the identity
  bool has_mask() const;
  // f(score) = score + g(indices): ∂f/∂score is 1 and ∂²f/∂score² is 0 everywhere.
  bool unit_slope() const;
  bool has_learnable_tensors() const;

  // Canonical text: the parsed expressions reprinted without whitespace plus the declarations,
  // e.g. "score=(score+bias[h][((q-k)+4095)]);mask=;scalars=;tensors=bias:2:real:learn".
  // It contains no whitespace, tab or newline; equal canonical text means equal kernels, and
  // from_canonical(canonical()) gives back an equal variant.
  std::string canonical() const;
  static Variant from_canonical(std::string_view text);  // throws like parse
  // 16 hex digits of FNV-1a-64(canonical()), for kernel and variant names (the cache key
  // holds the whole rendered source, so this only needs to tell variants apart in names).
  std::string digest() const;

  // C++ source of a device struct named `name` (to be placed after the kernel template's
  // #include, at namespace scope), using only the kgen_device core and VariantArgs
  // (kgen_device/attention/variant_args.h):
  //   struct Name {
  //     static constexpr bool kScoreMod, kMask, kUnitSlope, kTensorGrads;
  //     static constexpr bool kMaskReads;  // the mask reads a tensor (its indices then stay inside)
  //     __device__ static float score(const kgen::VariantArgs& a, float s, int b, int h, int q,
  //                                   int k, int n_q, int n_k);   // f
  //     __device__ static float dscore(... same ...);              // ∂f/∂score
  //     __device__ static float d2score(... same ...);             // ∂²f/∂score²
  //     __device__ static bool mask(const kgen::VariantArgs& a, int b, int h, int q, int k,
  //                                 int n_q, int n_k);
  //     // inclusive ranges q0..q1, k0..k1: 0 empty, 1 partial, 2 full (conservative: only
  //     // what interval arithmetic proves; an integer tensor read in the mask is bounded by
  //     // its range table, a.range[j], where the host built one: mask_range_tensors())
  //     __device__ static int tile(const kgen::VariantArgs& a, int b, int h, int q0, int q1,
  //                                int k0, int k1, int n_q, int n_k);
  //     // adds g·∂f/∂t[i] to grad[t][i] (atomically) for each learnable tensor element f reads
  //     __device__ static void tensor_grads(const kgen::VariantArgs& a, float g, float s, int b,
  //                                         int h, int q, int k, int n_q, int n_k);
  //   };
  // Scalar i is a.real[i] or a.integer[i] (by its declared type); tensor j is a.tensor[j] with
  // a.stride[j][…] (elements), gradient a.grad[j] with a.grad_stride[j][…].
  std::string device_struct(std::string_view name) const;

  // The slots of the integer tensors the mask reads: tile() bounds their elements by range
  // tables (VariantArgs::range, built per call on the GPU), so that it proves tiles empty or
  // full from their values (a document mask skips other documents' tiles).
  std::vector<int> mask_range_tensors() const;

  // fp64 evaluation on the CPU. `values` must match the declaration (checked: throws
  // kgen::Error naming the input). An index outside a tensor's shape throws, naming the tensor,
  // the dimension and the index.
  double score(const VariantValues& values, double score, const VariantIndex& at) const;
  double dscore(const VariantValues& values, double score, const VariantIndex& at) const;
  double d2score(const VariantValues& values, double score, const VariantIndex& at) const;
  bool mask(const VariantValues& values, const VariantIndex& at) const;
  // For each learnable tensor element f reads at this point: (tensor slot, element offset in
  // elements from the strides, ∂f/∂t[element]).
  void tensor_partials(const VariantValues& values, double score, const VariantIndex& at,
                       const std::function<void(int, std::int64_t, double)>& sink) const;
  // The interval classification the device's tile() computes, on the CPU.
  TileClass classify(const VariantValues& values, std::int64_t b, std::int64_t h, std::int64_t q0,
                     std::int64_t q1, std::int64_t k0, std::int64_t k1, std::int64_t n_q,
                     std::int64_t n_k) const;
  // Whether the mask is one interval of keys per row (windows, causal masks of either alignment,
  // prefix-LM and their conjunctions; not chunks or tensor-indexed masks), and that interval
  // [lo, hi] for row q (for every key k of [0, n_k): mask(q, k) exactly when lo <= k <= hi).
  bool has_key_bounds() const;
  std::pair<std::int64_t, std::int64_t> key_bounds(const VariantValues& values, std::int64_t b, std::int64_t h,
                                                   std::int64_t q, std::int64_t n_q, std::int64_t n_k) const;

 private:
  std::shared_ptr<const VariantExpr> expr_;
};

// ---- Presets: named expressions with their own inputs, composable ------------------------------
// Each mask keys off bottom-right alignment like kgen's causal mask (diag = n_k − n_q: query q
// sits at key position q + diag) unless it says otherwise.
struct VariantPresets {
  bool causal_top_left = false;  // k <= q (SDPA's is_causal=True for n_q != n_k)
  // window(left, right): q + diag − left <= k <= q + diag + right; −1 leaves a side unbounded
  // (FlashAttention's window_size). Scalars window_left, window_right (integer).
  bool window = false;
  bool softcap = false;       // f = softcap · tanh(score / softcap); scalar softcap (real)
  bool alibi = false;         // f += −slope[h] · |q + diag − k|; tensor alibi_slopes (h) real
  bool prefix_lm = false;     // k < prefix || k <= q + diag; scalar prefix (integer)
  bool chunked = false;       // (q + diag) / chunk == k / chunk; scalar chunk (integer)
  bool document = false;      // doc[b][q + diag] == doc[b][k]; tensor document_ids (b, n_k) int32
};

// The variant of `presets` composed with a user's declaration (may be empty): the masks are
// and-ed; the score modifications apply in the order user f, then alibi, then softcap
// (softcap(alibi(f(score)))). The presets' inputs come after the user's, in the order above.
// Throws kgen::Error when a user's name collides with a preset's input.
VariantDecl compose_variant(const VariantPresets& presets, const VariantDecl& user = {});

}  // namespace kgen
