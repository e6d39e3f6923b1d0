// attention_bwd: spec, config space, validity rules, the per-shape default, and rendering of
// the kernels one backward call launches (docs/attention.md §3).
//
// A backward call runs, on one stream:
//   preprocess            delta = rowsum(dO∘O), lse2 = lse·log2 e, zeroed dQ accumulator
//   fa2 path, default:    kv_atomic (dK, dV; dQ by fp32 atomics) → dq_convert
//   fa2, deterministic:   kv (dK, dV) and dq (query-major, no atomics)
//   simt (general) path:  simt_dkdv and simt_dq (deterministic)
#pragma once

#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "generator/attention_forward.h"
#include "generator/kernel_source.h"
#include "generator/target.h"

namespace kgen {

// Compile-time parameters of the backward kernels (the same fields as the forward's).
struct AttentionBackwardSpec {
  DType dtype = DType::bf16;
  int head_dim = 128;
  bool causal = false;
  // A variant's canonical text (generator/variant.h; empty = none) and whether rows have sinks.
  std::string variant = {};
  bool sinks = false;
  bool packed = false;  // packed (variable-length) batches, as in the forward's spec
  int head_dim_v = 0;   // v's (and o's, dO's, dv's) head dim when below q's, as in the forward's spec
  bool operator==(const AttentionBackwardSpec&) const = default;
  bool has_variant() const { return !variant.empty() || sinks || packed; }
  int v_dim() const { return head_dim_v > 0 ? head_dim_v : head_dim; }
};

// fa2: tensor cores, fp16/bf16, head dims 32/64/96/128. simt: any dtype, head_dim <= 256.
// wgmma: the key-major kernel on Hopper warpgroup MMA (sm_90a only), fp16/bf16, head dims 64/128;
// its deterministic mode pairs it with the fa2 query-major dQ kernel.
// mfma: AMD CDNA matrix cores, fp16/bf16, head dims 64/128 (generator/attention_mfma.h); its
// deterministic mode has its own query-major dQ kernel.
enum class BackwardPath { fa2, simt, wgmma, mfma };

// fa2 ("fa2:bm64:bn128:w8"): the key-major kernel's tiles.
struct BackwardFa2Config {
  int query_rows = 64;  // bm: query rows per tile the key-major kernel walks
  int keys = 128;       // bn: keys per block of the key-major kernel
  int warps = 8;        // w: warps of the key-major kernel, keys / warps = 16 or 32 keys each
  bool operator==(const BackwardFa2Config&) const = default;
};

// wgmma ("wg:bm64:bn128", "wg:bm64:bn128:a2:t:l:w:p:g2", "wg:bm64:bn64:c2"): the Hopper
// key-major kernel.
struct BackwardWgmmaConfig {
  int query_rows = 64;     // bm: query rows per tile (64, or 128 in the decoupled kernel on the
                           // 64-column tile)
  int keys = 128;          // bn: keys per block, 64 per warpgroup
  int column_splits = 1;   // c: 2 above 128 columns, two warpgroups sharing 64 keys and splitting
                           // the dK, dV and dQ columns (keys 64)
  int async_wgs = 0;       // a: keys 128, atomic dQ: 1 = the warpgroups decoupled (no block
                           // barrier per query tile: rings on mbarriers, dQ a tile late), 2 = also
                           // staggered by one tile's exponentials at the start
  bool tma_dq = false;     // t: dQ added from shared memory by TMA reduce-adds instead of from
                           // registers (decoupled kernels)
  bool tma_loads = false;  // l: Q and dO tiles loaded by TMA (one thread issues them) instead of
                           // cp.async from every thread (decoupled kernels)
  bool warp_specialised = false;  // w: with TMA loads, a producer warpgroup issues the loads and
                                  // (64-row tiles, TMA dQ) the dQ reduce-adds, the two warpgroups
                                  // of keys only compute (backward_ws.cuh)
  bool persistent = false;  // p: warp-specialised, a grid of at most one block per SM walks the key
                            // blocks, the next one's K, V, Q and dO loading under this one's last
                            // dQ and its dK and dV stores
  int group_splits = 1;     // g: decoupled, atomic mode: blocks per K/V head and key block, each
                            // walking 1/group_splits of the group's query heads and adding its dK
                            // and dV into fp32 rows that a last kernel converts (groups of an odd
                            // size run unsplit)
  // Warpgroups of keys in the key-major kernel.
  int warpgroups() const { return keys / 64 * column_splits; }
  bool operator==(const BackwardWgmmaConfig&) const = default;
};

// simt ("simt:w4:dmax128"): the general path's kernels.
struct BackwardSimtConfig {
  int warps = 4;         // w: warps per block, one query (or key) row each
  int max_head_dim = 0;  // dmax: head_dim rounded up to 32/64/128/256; one kernel serves them all
  bool operator==(const BackwardSimtConfig&) const = default;
};

// mfma ("mfma:bm32:bn64:w2", "mfma:bm32:bn64:w2:c2"): the AMD key-major kernel.
struct BackwardMfmaConfig {
  int query_rows = 32;    // bm: query rows per tile the key-major kernel walks
  int keys = 64;          // bn: keys per block of the key-major kernel
  int waves = 2;          // w: waves of the key-major kernel, 32 keys each
  int column_splits = 1;  // c: blocks sharing a key block, each with 1/column_splits of the dK,
                          // dV and dQ columns (2 where one block's accumulators would not fit)
  bool operator==(const BackwardMfmaConfig&) const = default;
};

// The double backward's fa2 form ("fa2:bm64:bn32:w4"): the query-major kernels' blocks of `rows`
// query rows walk score tiles of `tile` keys; the key-major one's blocks of `rows` keys walk
// query tiles of `tile` rows (widened, see dbl_wide_tile in attention_backward.cpp).
struct DoubleBackwardFa2Config {
  int rows = 64;  // bm: rows per block of both passes
  int tile = 32;  // bn: the score tile's other side
  int warps = 4;  // w: warps per block, rows / 16 (16 rows each)
  bool operator==(const DoubleBackwardFa2Config&) const = default;
};

// The double backward's wgmma form ("wg:bm64:bn64", "wg:bm32:bn64:c2"): blocks of `rows` rows (64
// per warpgroup) in both passes against score tiles `tile` wide.
struct DoubleBackwardWgmmaConfig {
  int tile = 64;          // bm: the score tile's width
  int rows = 64;          // bn: rows per block, 64 per warpgroup
  int column_splits = 1;  // c: 2 above 128 columns, two warpgroups sharing 64 rows and splitting
                          // the accumulators' columns (rows 64)
  // Warpgroups of the fused kernel.
  int warpgroups() const { return rows / 64 * column_splits; }
  bool operator==(const DoubleBackwardWgmmaConfig&) const = default;
};

// The config of a backward or double-backward call: exactly one path's form. Its text is the
// form's ("fa2:bm64:bn128:w8"); parse_attention_backward_config reads the backward's forms,
// parse_attention_double_backward_config the double backward's.
struct AttentionBackwardConfig {
  using Form = std::variant<BackwardFa2Config, BackwardWgmmaConfig, BackwardSimtConfig, BackwardMfmaConfig,
                            DoubleBackwardFa2Config, DoubleBackwardWgmmaConfig>;
  Form form;

  AttentionBackwardConfig() = default;
  template <class C>
    requires std::is_constructible_v<Form, C> && (!std::is_same_v<std::remove_cvref_t<C>, AttentionBackwardConfig>)
  AttentionBackwardConfig(C c) : form(std::move(c)) {}  // NOLINT(google-explicit-constructor): a form is a config

  BackwardPath path() const;
  // The form of path C, or nullptr when the config holds another.
  template <class C>
  const C* as() const { return std::get_if<C>(&form); }
  template <class C>
  C* as() { return std::get_if<C>(&form); }
  bool operator==(const AttentionBackwardConfig&) const = default;
};

// The kernels of a backward call.
// `sinks`: the sinks' gradient (backward_sinks.cuh), after preprocess in a call with sinks.
enum class BackwardKernel { preprocess, kv_atomic, kv, dq_convert, dq, simt_dq, simt_dkdv, dkv_convert, sinks };

// "fa2:bm64:bn128:w8", "wg:bm64:bn128" ("wg:bm64:bn128:a1" decoupled, ":a2:t" with dQ by TMA,
// ":l" with Q and dO loaded by TMA, ":g2" with
// each group's query heads split over two blocks,
// "wg:bm128:bn128:a2" against 128-row query tiles up to 64 columns,
// "wg:bm64:bn64:c2" above 128 columns), "mfma:bm32:bn64:w2"
// (":c2" with two column splits) or
// "simt:w4:dmax128".
std::string to_string(const AttentionBackwardConfig& c);
std::optional<AttentionBackwardConfig> parse_attention_backward_config(const std::string& text);
// The double backward's reading of the same text: "fa2:" and plain "wg:" configs take its forms;
// the others parse as the backward's (and check_attention_double_backward_config refuses them).
std::optional<AttentionBackwardConfig> parse_attention_double_backward_config(const std::string& text);
// Each field of to_string(c), in order, with its meaning (from the form's table).
std::vector<ConfigField> explain(const AttentionBackwardConfig& c);
// "attention_bwd.bf16.d128.causal".
std::string to_string(const AttentionBackwardSpec& s);
std::optional<AttentionBackwardSpec> parse_attention_backward_spec(const std::string& text);

// The tuning database's variant key of the backward: to_string(spec), plus ".deterministic" in
// deterministic mode (it launches other kernels, so its winner may differ).
std::string attention_backward_variant_key(const AttentionBackwardSpec& s, bool deterministic);
// Inverse of attention_backward_variant_key: (spec, deterministic).
std::optional<std::pair<AttentionBackwardSpec, bool>> parse_attention_backward_variant_key(const std::string& text);

std::optional<std::string> check_attention_backward_config(const AttentionBackwardSpec& spec,
                                                           const AttentionBackwardConfig& config,
                                                           const Target& target);
std::vector<AttentionBackwardConfig> attention_backward_config_space(const AttentionBackwardSpec& spec,
                                                                     const Target& target);
// The space for a call whose query heads form groups of `group` (h_q / h_kv) in the atomic mode:
// the space above, and its forms with a producer warpgroup (":w") split over 2, 4 or 8 blocks per
// K/V head where the split divides the group (":g2", ":g4", ":g8").
std::vector<AttentionBackwardConfig> attention_backward_config_space(const AttentionBackwardSpec& spec,
                                                                     const Target& target, int group);
AttentionBackwardConfig attention_backward_default_config(const AttentionBackwardSpec& spec,
                                                          const AttentionShape& shape, const Target& target,
                                                          int sm_count);
AttentionBackwardConfig attention_backward_general_config(const AttentionBackwardSpec& spec);
// What the backward's and the double backward's heuristics read of the exact shape beyond the
// tuning bucket (see attention_forward_shape_class). Backward: 1 when 128-key tiles would not fill
// the SMs once. Double backward: 1 when 64-row query tiles would not fill half of them.
int attention_backward_shape_class(const AttentionShape& shape, int sm_count);
int attention_double_backward_shape_class(const AttentionShape& shape, int sm_count);

// The kernels a call with `config` launches, in launch order.
std::vector<BackwardKernel> attention_backward_kernels(const AttentionBackwardConfig& config, bool deterministic);

// Grid of `kernel` for `shape` and `head_dim` (fa2 key-major blocks split the dK/dV columns in
// two above 128) on a device of `sm_count` SMs (persistent grids: at most one block per SM).
LaunchGrid attention_backward_grid(const AttentionBackwardConfig& config, BackwardKernel kernel,
                                   const AttentionShape& shape, int head_dim, int sm_count);

// Grid of `kernel` for a packed batch of `sequences` sequences over `rows_k` key rows (the tensors'
// n) where the kernel walks it on the compact grid of packed_tile (packed_grid.cuh): the
// warp-specialised key-major kernel of 64 and 128 columns, x = ⌊rows_k / keys⌋ + sequences (0
// without sequences), y = K/V heads. nullopt for the kernels that take attention_backward_grid over the longest sequence.
std::optional<LaunchGrid> attention_backward_packed_grid(const AttentionBackwardConfig& config, BackwardKernel kernel,
                                                         long long rows_k, int sequences, int heads_kv);

// `kernel`: one of attention_backward_kernels(config, …) (another path's kernel throws
// std::invalid_argument, as in attention_backward_grid).
KernelSource render_attention_backward(const AttentionBackwardSpec& spec, const AttentionBackwardConfig& config,
                                       BackwardKernel kernel);

// Whether the atomic mode of `c` adds dQ by TMA reduce-adds, so that its key-major kernel takes
// AttentionBackwardTmaParams with dq_map: a wgmma config's `t`, and the column-share kernel (c2)
// at the 192-column tile.
bool attention_backward_dq_by_tma(const AttentionBackwardSpec& spec, const AttentionBackwardConfig& c);

// The config that serves a call whose q or d_o has no tensor map (a zero stride) in place of `c`,
// which loads them by TMA (`:l`): the same kernel with cp.async loads, except where that one
// spills (d = 112 with a mask, a1:t and a2:t: 12-24 bytes), where the block-synchronous kernel
// does. `c` itself when it has no TMA loads.
AttentionBackwardConfig attention_backward_config_without_tma_loads(const AttentionBackwardSpec& spec,
                                                                    AttentionBackwardConfig c);

// A variant's (or packed batch's) config for a call's mode and views, from `c`: the wgmma
// kernels take a variant only in their warp-specialised atomic form with TMA loads, so the
// deterministic mode and views without tensor maps (a zero stride) run sm_80's rule (fa2 or
// simt) instead. `c` itself for plain attention and for the other paths.
AttentionBackwardConfig attention_backward_variant_config(const AttentionBackwardSpec& spec,
                                                          const AttentionBackwardConfig& c,
                                                          const AttentionShape& shape, int sm_count,
                                                          bool deterministic, bool tensor_maps);

// One shape of each class the default chooser tells apart: key blocks that fill the machine,
// too few to fill it, and grouped query heads (at 4k and 16k keys, and a small grid of 1k keys
// that the group splits fill). `kgen warm` builds their defaults at the head dims outside the
// config space.
std::vector<AttentionShape> attention_backward_default_shapes();

// Every kernel of every valid config of every spec, for `kgen warm`.
std::vector<KernelSource> attention_backward_all_variants(const Target& target);
// The kernels of the defaults for attention_backward_default_shapes() of fp16 and bf16,
// kAttentionDefaultWarmHeadDims and both masks, in both modes and without TMA loads (`kgen warm
// --defaults`).
std::vector<KernelSource> attention_backward_default_variants(const Target& target);

// ---- attention_double_bwd (docs/attention.md §4) ----
// A call runs preprocess (the backward's), then q_stats (r, c; query-major), then fused: the
// query-major apply pass (Q̄, dŌ) and the key-major kernel (K̄, V̄) in one grid, independent
// blocks sharing the machine. The config "fa2:bm64:bn32:w4" gives the query-major kernel 64
// query rows (16 per warp) against 32-key tiles and the key-major one 64 keys (16 per warp)
// against 32-row query tiles; "simt:w4:dmax128" is the general path (simt_q, then simt_kv).
// Specs print as "attention_double_bwd.bf16.d128.full".
enum class DoubleBackwardKernel { preprocess, q_stats, fused, simt_q, simt_kv };

std::string double_backward_variant_key(const AttentionBackwardSpec& s);
// Inverse of double_backward_variant_key.
std::optional<AttentionBackwardSpec> parse_double_backward_variant_key(const std::string& text);
std::optional<std::string> check_attention_double_backward_config(const AttentionBackwardSpec& spec,
                                                                  const AttentionBackwardConfig& config,
                                                                  const Target& target);
std::vector<AttentionBackwardConfig> attention_double_backward_config_space(const AttentionBackwardSpec& spec,
                                                                            const Target& target);
AttentionBackwardConfig attention_double_backward_default_config(const AttentionBackwardSpec& spec,
                                                                 const Target& target);
// The same, for a call's shape: 32-row query tiles when 64-row ones would not fill half the SMs.
AttentionBackwardConfig attention_double_backward_default_config(const AttentionBackwardSpec& spec,
                                                                 const AttentionShape& shape, const Target& target,
                                                                 int sm_count);
std::vector<DoubleBackwardKernel> attention_double_backward_kernels(const AttentionBackwardConfig& config);
// Key-range splits of the q_stats pass for `shape` on a device of `sm_count` SMs (1, 2 or 4;
// AttentionBackwardParams::stats_splits). Deterministic calls never split: more than two partial
// sums added by atomics in a varying order round differently from run to run.
int attention_double_backward_stats_splits(const AttentionBackwardConfig& config, const AttentionShape& shape,
                                           int sm_count, bool deterministic = false);
// head_dim: above 128 the fused kernel's blocks split the columns in two (column_splits in attention_backward.cpp).
// packed: a packed batch, `shape` its sequences (batch) and longest lengths (n_q, n_k), except for
// the row-wise preprocess kernel, which takes the tensors' rows (one batch of every row); the
// fused grid then holds the query and key parts in two equal halves.
LaunchGrid attention_double_backward_grid(const AttentionBackwardConfig& config, DoubleBackwardKernel kernel,
                                          const AttentionShape& shape, int sm_count, bool deterministic, int head_dim,
                                          bool packed = false);
KernelSource render_attention_double_backward(const AttentionBackwardSpec& spec, const AttentionBackwardConfig& config,
                                              DoubleBackwardKernel kernel);

// One shape of each class the double backward's default chooser tells apart (query tiles that
// fill the machine and too few); `kgen warm` builds their defaults outside the config space.
std::vector<AttentionShape> attention_double_backward_default_shapes();

std::vector<KernelSource> attention_double_backward_all_variants(const Target& target);
// The kernels of the defaults for attention_double_backward_default_shapes() of fp16 and bf16,
// kAttentionDefaultWarmHeadDims and both masks (`kgen warm --defaults`).
std::vector<KernelSource> attention_double_backward_default_variants(const Target& target);

// Query-major dQ kernel tile of the deterministic fa2 backward (block_m, block_n, warps).
struct DqTile {
  int block_m, block_n, warps;
};
DqTile attention_backward_dq_tile(int head_dim);

}  // namespace kgen
