// attention_fwd: spec (what is fixed per compiled kernel), config space (what the tuner may
// try), validity rules, the per-shape default, and rendering of one variant.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "generator/entry_shim.h"
#include "generator/kernel_source.h"
#include "generator/target.h"

namespace kgen {

// Compile-time parameters of one attention forward kernel.
struct AttentionForwardSpec {
  DType dtype = DType::bf16;
  int head_dim = 128;
  bool causal = false;
  // A variant's canonical text (generator/variant.h; empty = none) and whether rows have sinks.
  std::string variant = {};
  bool sinks = false;
  // Packed (variable-length) batches: sequences one after another along n, bounded by
  // cu_seqlens (VariantArgs); they run through the variant kernels' second parameter.
  bool packed = false;
  // Paged K/V (a block table and each batch's key count in VariantArgs); forward only.
  bool paged = false;
  // v's head dim (d_v) when it differs from q's and k's (head_dim, d_qk): 0 when they are equal, so
  // that every spec text, key and kernel of one head dim stays as it was. 1 <= d_v < d_qk (MLA's
  // 192/128; docs/kernels/mla.md); o has d_v columns.
  int head_dim_v = 0;
  // FP8: q, k and v in E4M3 with descale factors, o (and `dtype`) fp16 or bf16; plain or causal
  // attention at head dims 128 and 256 on the warp-specialised Hopper kernel (docs/attention.md §11).
  bool fp8 = false;
  bool operator==(const AttentionForwardSpec&) const = default;
  bool has_variant() const { return !variant.empty() || sinks || packed || paged; }
  int v_dim() const { return head_dim_v > 0 ? head_dim_v : head_dim; }
};

// Run-time shape of one call (strides and pointers are not part of it).
struct AttentionShape {
  int batch = 1, heads_q = 1, heads_kv = 1, n_q = 1, n_k = 1;
};

// fa2: tensor cores (mma.sync m16n8k16), fp16/bf16, every head dim that is a multiple of 8 up
// to 256 (tiles padded to a multiple of 32).
// wgmma: Hopper warpgroup MMA (sm_90a targets only), fp16/bf16, multiples of 8 up to 128
// (tiles of 64 or 128).
// simt: general path, any dtype and any head_dim <= 256, plain fp32 math.
// mfma: AMD CDNA matrix cores (gfx90a, gfx942, gfx950), fp16/bf16, head dims 64 and 128
// (generator/attention_mfma.h).
enum class ForwardPath { fa2, simt, wgmma, ws, mfma };

struct AttentionForwardConfig {
  ForwardPath path = ForwardPath::fa2;
  int block_m = 64;       // query rows per block (fa2: 16 or 32 per warp; simt: one per warp;
                          // wgmma: 64 per warpgroup)
  int block_n = 64;       // key rows per K/V tile
  int stages = 2;         // fa2, wgmma: K/V shared-memory buffers
  int max_head_dim = 0;   // simt: head_dim rounded up to 32/64/128/256
  int warps = 0;          // fa2: warps per block, block_m / warps = 16 or 32 rows each; mfma:
                          // waves per block, 32 rows each
  int ping_pong = 0;      // ws: 1 = the consumer warpgroups (two, or three at block_m = 192) take
                          // turns to issue wgmma
  bool split_keys = false;  // ws: the key tiles of a query tile are cut over several blocks, whose
                            // partial results a second kernel merges ("...:split")
  bool persistent = false;  // ws: one block per SM walks the query tiles, the next tile's loads
                            // under the current one's work ("...:persist")
  bool stream_k = false;    // ws, persistent, no mask: whole rounds of query tiles, then the key
                            // tiles of the tiles left cut evenly over the blocks; a tile cut
                            // between two blocks is merged by the first ("...:persist:sk")
  bool operator==(const AttentionForwardConfig&) const = default;
};

// Head dims whose every config is built by `kgen warm` and the replay table; every other
// multiple of 8 up to 256 (attention_fwd::tensor_core_head_dim) is built with its defaults.
inline constexpr int kAttentionWarmHeadDims[] = {32, 64, 96, 128, 256};
// The other tensor-core head dims (multiples of 8 up to 256), built with their defaults only.
std::vector<int> attention_default_only_head_dims();
// The head dims whose defaults `kgen warm --defaults` (and `kgen demo` without a GPU) builds for
// every attention operator: 64 and 128, those of most deployed models. Each more head dim would
// add about 110 kernels for sm_80 and sm_90a, half again the attention operators' share of the
// main job's compile time; calls at other head dims compile their kernels on first use. Each is
// also in kAttentionWarmHeadDims, so every default is a variant that `kgen warm` builds too.
inline constexpr int kAttentionDefaultWarmHeadDims[] = {64, 128};
// Appends the template arguments a padded tile needs: HeadDim (the tensors' head dim) when it
// differs from the tile's or when the kernel splits its columns, then Splits when above 1. Tiles
// of the exact head dim get neither, so their sources stay as they were.
void add_head_dim_args(EntryShim& shim, int tile, int head_dim, int splits = 1);
// HeadDim (and Splits where `splits` > 0, i.e. where the kernel template takes it) written out
// whatever their values: for shims whose later template arguments (a variant, a group split)
// follow them.
void add_explicit_head_dim_args(EntryShim& shim, int head_dim, int splits = 0);
// Appends the template arguments of a kernel whose v head dim differs from q's: HeadDim (when
// `head_dim` > 0) and Splits (when `splits` > 0) explicitly, the plain Variant (kgen::NoVariant)
// and HeadDimV, the trailing parameter of the fa2 and simt templates that take one.
void add_head_dim_v_args(EntryShim& shim, int head_dim, int head_dim_v, int splits = 0);
// Largest head dim any path serves.
inline constexpr int kMaxHeadDim = 256;

// The general (simt) path's compile-time head-dim bound for `head_dim`: 32, 64, 128 or 256
// (0 above 256).
int attention_simt_bucket(int head_dim);

// "fa2:bm128:bn64:w4:s2", "wg:bm128:bn128:s2", "ws:bm128:bn128:s2:pp1[:split|:persist[:sk]]", "mfma:bm128:bn64:w4" or
// "simt:bm4:bn32:dmax128".
std::string to_string(const AttentionForwardConfig& c);
std::optional<AttentionForwardConfig> parse_attention_forward_config(const std::string& text);
// Each field of to_string(c), in order, with its meaning.
std::vector<ConfigField> explain(const AttentionForwardConfig& c);
// "attention_fwd.bf16.d128.causal" (spec part of a variant name); a v head dim of its own makes
// the head-dim field "d192v128"; packed batches append ".packed", paged K/V ".paged", a variant
// ".sinks" and ".var{CANONICAL}", FP8 inputs ".fp8" (the dtype field is then o's).
std::string to_string(const AttentionForwardSpec& s);

// The spec text both attention operators share: "<op>.<dtype>.d<D>[v<DV>].<causal|full>[.packed]
// [.paged][.sinks][.var{CANONICAL}]", and its parse (the forward's spec type carries the fields of either).
std::string attention_spec_text(std::string_view op, const AttentionForwardSpec& s);
std::optional<AttentionForwardSpec> parse_attention_spec_text(std::string_view op, const std::string& text);

// The code a variant kernel's translation unit carries after its template's #include: the
// headers of the generated expressions and `struct KgenVariant` (its expressions, kSinks, kPacked
// and kPaged).
std::string render_variant_prelude(const std::string& canonical, bool sinks, bool packed, bool paged = false);
// Why `path` cannot run the variant (nullopt when it can, or when there is none).
std::optional<std::string> check_variant_path(bool has_variant, std::string_view path);

// Parses to_string(spec) ("attention_fwd.bf16.d128.causal"), the variant key of tuning records.
std::optional<AttentionForwardSpec> parse_attention_forward_spec(const std::string& text);

// Why `spec` cannot be served at all (nullopt when it can): names the offending field.
std::optional<std::string> check_attention_forward_spec(const AttentionForwardSpec& spec);
// Why a spec whose v head dim is `head_dim_v` (0: q's) cannot be served with `head_dim`, a variant
// (`has_variant`: presets, sinks, packed batches or paged K/V) or on `path` ("ws", "wg", "mfma",
// "fa2", "simt"; empty: any); nullopt when it can. The sentence names v. Shared by the forward,
// the backward and the double backward (`op` names the operator in it).
std::optional<std::string> check_head_dim_v(int head_dim, int head_dim_v, bool has_variant, std::string_view path,
                                            std::string_view op = "attention");
// The (d_qk, d_v) pairs whose default kernels `kgen warm` and the replay table build: MLA's
// 192/128 and 128/64, fp16, bf16 (and fp32 on the general path), both masks.
inline constexpr std::pair<int, int> kAttentionWarmHeadDimPairs[] = {{192, 128}, {128, 64}};

// Why `config` is invalid for `spec` on `target` (nullopt when valid): shared memory,
// register budget, path/dtype/head-dim compatibility.
std::optional<std::string> check_attention_forward_config(const AttentionForwardSpec& spec,
                                                          const AttentionForwardConfig& config,
                                                          const Target& target);

// Every valid config the tuner may try for `spec` on `target`, in canonical order.
std::vector<AttentionForwardConfig> attention_forward_config_space(const AttentionForwardSpec& spec,
                                                                   const Target& target);

// The built-in heuristic for a tuning miss: a valid config for `spec` and `shape`.
AttentionForwardConfig attention_forward_default_config(const AttentionForwardSpec& spec,
                                                        const AttentionShape& shape,
                                                        const Target& target, int sm_count);
// The key tile a warp-specialised forward over a paged cache of `page_size` rows per page runs
// for `block_n`: its TMA boxes take at most one page's rows, so a tile lies within one page or
// covers whole pages (block_n and page_size divide one another). Otherwise the largest power of
// two below block_n, which does for every page size kgen takes (powers of two, 16 to 256).
int attention_forward_paged_key_tile(int block_n, int page_size);
// What the heuristic reads of the exact shape beyond its tuning bucket (two calls of one bucket
// with the same class get the same default): 1 when 128-row query tiles would not fill the SMs
// once, 2 when they would fill at most half of them and the rows have at least
// kSplitKeysMinKeys keys (decode-like calls: the default cuts the keys over several blocks).
int attention_forward_shape_class(const AttentionShape& shape, int sm_count);
inline constexpr int kSplitKeysMinKeys = 512;

// Key ranges per query tile of a split-keys launch (config.split_keys; 1 otherwise): as many as
// fill the SMs once with one block each, at most one per key tile and kMaxKeySplits.
int attention_forward_key_splits(const AttentionForwardConfig& config, const AttentionShape& shape, int sm_count);
inline constexpr int kMaxKeySplits = 128;

// The general (simt) path's default for `spec`: valid for every dtype, head_dim and alignment.
AttentionForwardConfig attention_forward_general_config(const AttentionForwardSpec& spec);

// Grid of a launch: x = query tiles (times `splits` key ranges), y = query heads, z = batch; a
// persistent config: x = the query tiles of every head and batch, at most `sm_count` blocks.
LaunchGrid attention_forward_grid(const AttentionForwardConfig& config, const AttentionShape& shape, int splits = 1,
                                  int sm_count = 0);
// Whether `spec`'s grids of one block per query tile run in sections of heads: plain causal
// attention (no variant, sinks, packed or paged batch).
inline bool attention_forward_sectioned(const AttentionForwardSpec& spec) { return spec.causal && !spec.has_variant(); }
// Plain causal attention (16-bit or E4M3) on the ws path's grid of one block per query tile: the
// log2 s of the heads of a section (kernel parameter sections_log2; forward_ws_config.h's
// ws_causal_sections_log2), the grid widened to x = query tiles · 2^s, y = heads / 2^s. Any
// other config or spec: 0, the grid unchanged.
int attention_forward_sections(const AttentionForwardConfig& config, const AttentionForwardSpec& spec,
                               const AttentionShape& shape, LaunchGrid& grid);
// Grid of a packed batch of `sequences` sequences over `rows` query rows (the tensors' n) on a ws
// config: the compact grid of packed_tile (packed_grid.cuh), x = ⌊rows / block_m⌋ + sequences (0
// without sequences), y = query heads; a persistent config: x = that grid's blocks, at most
// `sm_count`, whose indices the blocks walk. Other paths take attention_forward_grid over the
// longest sequence.
LaunchGrid attention_forward_packed_grid(const AttentionForwardConfig& config, long long rows, int sequences,
                                         int heads_q, int sm_count = 0);
// Grid of the combine kernel after a split-keys launch: x = 4-row groups, y = query heads, z = batch.
LaunchGrid attention_forward_combine_grid(const AttentionShape& shape);

// The translation unit of one variant. `config` must be valid for `spec`.
KernelSource render_attention_forward(const AttentionForwardSpec& spec,
                                      const AttentionForwardConfig& config);
// The kernel that merges a split-keys launch's key ranges into o and lse (forward_combine.cuh):
// one per 16-bit dtype, any head dim.
KernelSource render_attention_forward_combine(DType dtype);
// The FP8 forward's first kernel (forward_fp8.cuh): V transposed into the workspace, its keys in
// the order of the 8-bit wgmma's A fragment. One kernel for every head dim.
KernelSource render_attention_fp8_v_transpose();
// n_k rounded up to the FP8 forward's key tile: the transposed V's row length.
int attention_fp8_keys_padded(int n_k);
// The transposition's grid: x = groups of 32 keys of the padded length, y = 128-column groups of
// the head dim, z = batch · heads_kv.
LaunchGrid attention_fp8_v_transpose_grid(const AttentionShape& shape, int head_dim);
// Every kernel a launch of `config` runs: the forward, then the combine kernel when it splits keys
// (FP8: the V transposition first).
std::vector<KernelSource> render_attention_forward_kernels(const AttentionForwardSpec& spec,
                                                           const AttentionForwardConfig& config);

// The variants whose default kernels `kgen warm` and the replay table build (canonical text,
// sinks): a window, softcap, ALiBi, and gpt-oss's window + softcap + sinks, each causal, fp16 and
// bf16, kAttentionDefaultWarmHeadDims.
std::vector<std::pair<std::string, bool>> attention_warm_variants();

// Every (spec, config) that `kgen warm` compiles for `target`: all dtypes, head dims and
// causal flags, each with its whole config space; and the defaults of attention_warm_variants().
std::vector<KernelSource> attention_forward_all_variants(const Target& target);

// The kernels the built-in defaults run for a deployment's common calls on `target` (`kgen warm
// --defaults`): fp16 and bf16, kAttentionDefaultWarmHeadDims, both masks, at machine-filling
// grids of 1k to 16k keys, a grid too small to fill the machine once, and a decode-like call.
std::vector<KernelSource> attention_forward_default_variants(const Target& target);

}  // namespace kgen
