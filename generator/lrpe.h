// lrpe_cosine and md_lrpe_cosine (docs/lrpe.md): spec (what is fixed per compiled kernel),
// config space (what the tuner may try), validity rules, the per-shape default, the launch
// plan, and rendering of one variant.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "generator/kernel_source.h"
#include "generator/target.h"

namespace kgen {

enum class LrpeOp { cosine, md_cosine };              // "lrpe_cosine", "md_lrpe_cosine"
enum class LrpeDirection { forward, backward };       // "fwd", "bwd"
// LrpeAct (kgen/types.hpp): its values match kLrpeAct* in templates/kgen_device/lrpe/params.h.
// sp: blocks own a few rows each; bp: blocks own (b, h) and walk a stretch of the sequence.
enum class LrpeStrategy { sp, bp };

// Compile-time parameters of one kernel. The head dim, sequence length, offset, theta's
// broadcast, strides and the md grid (m, sizes, l, e) are run-time parameters.
struct LrpeSpec {
  LrpeOp op = LrpeOp::cosine;
  LrpeDirection direction = LrpeDirection::forward;
  DType dtype = DType::bf16;  // x and o (forward), dO and dx (backward)
  LrpeAct act = LrpeAct::none;
  bool operator==(const LrpeSpec&) const = default;
};

// Run-time shape of one call: x is (batch, heads, n, d).
struct LrpeShape {
  int batch = 1, heads = 1, n = 1, d = 1;
  bool theta_shared = false;  // theta has one row: a block may fold slices of different heads
};

struct LrpeConfig {
  LrpeStrategy strategy = LrpeStrategy::sp;
  int threads = 256;  // threads per block
  int rows = 4;       // rows each thread loads before computing (bytes in flight)
  int vec = 8;        // features per thread (16-byte pieces); d <= 32·vec
  bool cache = false; // md only: the forward writes the angles, the backward reads them
  int fold = 1;       // slices (b, h) per block sharing each angle's sin/cos ("b<fold>" in the text)
  // Blocks per SM the compiler must keep resident (__launch_bounds__ minBlocks, "o<k>" in the
  // text): caps registers at 64K / (threads · k) so that k blocks fit, at the risk of spills.
  int occupancy = 1;
  bool operator==(const LrpeConfig&) const = default;
};

// Entry points of a rendered variant: the apply kernel, and for softmax over the sequence the
// statistics kernel launched before it (same grid, same parameters).
inline constexpr const char* kLrpeApplyEntry = "kgen_lrpe";
inline constexpr const char* kLrpeStatsEntry = "kgen_lrpe_stats";
// Slices per block a config may fold (any act; softmax over the sequence keeps 3·vec·fold
// running statistics per thread and allows kLrpeMaxFoldSoftmaxSeq).
inline constexpr int kLrpeMaxFold = 16;
inline constexpr int kLrpeMaxFoldSoftmaxSeq = 4;
// Largest head dim (features of x) kgen serves.
inline constexpr int kLrpeMaxHeadDim = 256;

std::string_view lrpe_op_name(LrpeOp op);          // "lrpe_cosine"
std::string_view lrpe_act_name(LrpeAct act);       // "none", ..., "softmax", "softmax_seq"
std::optional<LrpeAct> parse_lrpe_act(std::string_view name);

// "lrpe_cosine.fwd.bf16.none" / "md_lrpe_cosine.bwd.fp32.softmax_seq".
std::string to_string(const LrpeSpec& s);
std::optional<LrpeSpec> parse_lrpe_spec(const std::string& text);

// The tuning database's variant key: to_string(spec), plus ".cache" when the md angle cache is
// used (its kernels differ): "md_lrpe_cosine.bwd.bf16.none.cache".
std::string lrpe_variant_key(const LrpeSpec& s, bool cache);
// Inverse of lrpe_variant_key: (spec, cache).
std::optional<std::pair<LrpeSpec, bool>> parse_lrpe_variant_key(const std::string& text);

// "sp:t256:r4:v8", "bp:t256:r1:v8:b4", "bp:t256:r2:v8:cache" (":b1" is implied: not written).
std::string to_string(const LrpeConfig& c);
std::optional<LrpeConfig> parse_lrpe_config(const std::string& text);
// Each field of to_string(c), in order, with its meaning.
std::vector<ConfigField> explain(const LrpeConfig& c);

// Why `config` cannot compile for `spec` (nullopt when it can): names the offending field.
std::optional<std::string> check_lrpe_config(const LrpeSpec& spec, const LrpeConfig& config);

// Why `config` cannot serve `shape` (nullopt when it can), beyond check_lrpe_config.
std::optional<std::string> check_lrpe_config_for_shape(const LrpeSpec& spec, const LrpeConfig& config,
                                                       const LrpeShape& shape);

// Every valid config the tuner may try for `spec` with (md) or without the angle cache.
std::vector<LrpeConfig> lrpe_config_space(const LrpeSpec& spec, bool cache = false);

// The built-in heuristic: a valid config for `spec` and `shape`.
LrpeConfig lrpe_default_config(const LrpeSpec& spec, const LrpeShape& shape, bool cache = false);

// How a config runs on a shape: grid, threads per row, rows per block, how slices fold.
struct LrpeLaunchPlan {
  LaunchGrid grid;
  LaunchGrid stats_grid;  // softmax over the sequence: the statistics kernel's (lrpe_stats_fold)
  int row_group = 1, row_group_log2 = 0, rows_per_block = 1;
  int splits = 1;           // gridDim.x
  bool fold_heads = false;  // the block's slices run over b·heads + h (gridDim.y = 1)
};
// bp launches: at most this many blocks per SM in all (over every wave; it bounds the scratch of
// softmax over the sequence).
inline constexpr int kLrpeBpMaxBlocksPerSm = 16;
// The slices one block of the statistics kernel of softmax over the sequence reads: the forward's
// reads x alone and computes no angles, so folding slices only costs it registers (it takes one);
// the backward's computes the angles of g, whose cost the config's fold divides.
int lrpe_stats_fold(const LrpeSpec& spec, const LrpeConfig& config);
// `resident_blocks_per_sm`: how many blocks of the config's kernels fit on one SM (occupancy);
// bp launches size their splits by lrpe_bp_splits. `stats_fold`: lrpe_stats_fold of the call (0:
// the config's fold), which sizes stats_grid.
LrpeLaunchPlan lrpe_launch_plan(const LrpeConfig& config, const LrpeShape& shape, int sm_count,
                                int resident_blocks_per_sm = 4, int stats_fold = 0);
// Blocks along the sequence for `slices` (b, h) groups of a bp launch with `passes` block passes
// of rows: the fewest whose blocks fill at least 90 % of the resident slots of their waves (else
// the best fill), at most kLrpeBpMaxBlocksPerSm blocks per SM, `passes` and `max_splits`.
int lrpe_bp_splits(long long slices, long long passes, int max_splits, int sm_count, int resident_blocks_per_sm);

// The most blocks along the sequence a softmax-over-the-sequence launch of `shape` uses, for any
// valid config and occupancy (it bounds that act's scratch).
int lrpe_max_splits(const LrpeShape& shape, int sm_count);

// fp32 elements of softmax-over-the-sequence scratch a launch needs (0 for other acts).
std::size_t lrpe_stats_floats(const LrpeSpec& spec, const LrpeShape& shape, const LrpeLaunchPlan& plan);

// The translation unit of one variant; `config` must be valid for `spec`. The variant name
// holds what the code depends on (sp and bp of the same sizes share one kernel when the act
// needs no statistics).
KernelSource render_lrpe(const LrpeSpec& spec, const LrpeConfig& config);

// Every kernel `kgen warm` compiles for the operator: all directions, dtypes and acts, each
// with its config space (md: with and without the angle cache).
std::vector<KernelSource> lrpe_all_variants(LrpeOp op);

// The kernels the built-in defaults run for a deployment's common calls (`kgen warm --defaults`):
// both directions, fp16 and bf16, every act, md with and without the angle cache, at a batch
// that fills the default's fold and at a batch of one.
std::vector<KernelSource> lrpe_default_variants(LrpeOp op);

}  // namespace kgen
