#include "generator/lrpe.h"

#include "generator/entry_shim.h"

#include <algorithm>
#include <sstream>

#include "generator/config_text.h"
#include "kgen_device/lrpe/params.h"

namespace kgen {
namespace {

constexpr LrpeAct kActs[] = {LrpeAct::none, LrpeAct::relu, LrpeAct::sigmoid,
                             LrpeAct::silu, LrpeAct::softmax, LrpeAct::softmax_seq};
constexpr const char* kActNames[] = {"none", "relu", "sigmoid", "silu", "softmax", "softmax_seq"};
constexpr int kMaxSplits = 1024;
constexpr long long kMaxGridZ = 65535;
constexpr int kFolds[] = {1, 2, 3, 4, 6, 8, 12, 16};


int ceil_div(long long a, long long b) { return static_cast<int>((a + b - 1) / b); }

// The config's kernel, without the launch-only strategy: "t256:r4:v8[:cache]".
std::string kernel_name(const LrpeConfig& c) {
  std::string s = to_string(c);
  return s.substr(s.find(':') + 1);
}

static_assert(static_cast<int>(LrpeAct::softmax) == kLrpeActSoftmax &&
                  static_cast<int>(LrpeAct::softmax_seq) == kLrpeActSoftmaxSeq && static_cast<int>(LrpeAct::silu) == kLrpeActSilu,
              "LrpeAct values are the templates' act codes");

}  // namespace

std::string_view lrpe_op_name(LrpeOp op) { return op == LrpeOp::cosine ? "lrpe_cosine" : "md_lrpe_cosine"; }

std::string_view lrpe_act_name(LrpeAct act) { return kActNames[static_cast<int>(act)]; }

std::optional<LrpeAct> parse_lrpe_act(std::string_view name) {
  for (LrpeAct a : kActs)
    if (lrpe_act_name(a) == name) return a;
  return std::nullopt;
}

std::string to_string(const LrpeSpec& s) {
  std::ostringstream o;
  o << lrpe_op_name(s.op) << (s.direction == LrpeDirection::forward ? ".fwd." : ".bwd.") << dtype_name(s.dtype) << "."
    << lrpe_act_name(s.act);
  return o.str();
}

std::optional<LrpeSpec> parse_lrpe_spec(const std::string& text) {
  auto parts = split_fields(text, '.');
  if (parts.size() != 4) return std::nullopt;
  LrpeSpec s;
  if (parts[0] == "lrpe_cosine") s.op = LrpeOp::cosine;
  else if (parts[0] == "md_lrpe_cosine") s.op = LrpeOp::md_cosine;
  else return std::nullopt;
  if (parts[1] == "fwd") s.direction = LrpeDirection::forward;
  else if (parts[1] == "bwd") s.direction = LrpeDirection::backward;
  else return std::nullopt;
  auto dtype = parse_dtype(parts[2]);
  auto act = parse_lrpe_act(parts[3]);
  if (!dtype || !act || dtype_name(*dtype) != parts[2]) return std::nullopt;
  s.dtype = *dtype;
  s.act = *act;
  return s;
}

std::string lrpe_variant_key(const LrpeSpec& s, bool cache) { return to_string(s) + (cache ? ".cache" : ""); }

std::optional<std::pair<LrpeSpec, bool>> parse_lrpe_variant_key(const std::string& text) {
  constexpr std::string_view kSuffix = ".cache";
  const bool cache = text.ends_with(kSuffix);
  auto spec = parse_lrpe_spec(cache ? text.substr(0, text.size() - kSuffix.size()) : text);
  if (!spec || (cache && spec->op != LrpeOp::md_cosine)) return std::nullopt;
  return std::pair{*spec, cache};
}

std::string to_string(const LrpeConfig& c) {
  std::ostringstream s;
  s << (c.strategy == LrpeStrategy::sp ? "sp" : "bp") << ":t" << c.threads << ":r" << c.rows << ":v" << c.vec;
  if (c.fold != 1) s << ":b" << c.fold;
  if (c.occupancy != 1) s << ":o" << c.occupancy;
  if (c.cache) s << ":cache";
  return s.str();
}

std::vector<ConfigField> explain(const LrpeConfig& c) {
  const auto n = [](int v) { return std::to_string(v); };
  std::vector<ConfigField> f;
  f.push_back(c.strategy == LrpeStrategy::sp ? ConfigField{"sp", "blocks own a few rows each"}
                                             : ConfigField{"bp", "blocks own a (batch, head) slice and walk a stretch of the sequence"});
  f.push_back({"t" + n(c.threads), n(c.threads) + " threads per block"});
  f.push_back({"r" + n(c.rows), n(c.rows) + " rows loaded per thread before computing (bytes in flight)"});
  f.push_back({"v" + n(c.vec), n(c.vec) + " features per thread in 16-byte pieces (head dims up to " + n(32 * c.vec) + ")"});
  if (c.fold != 1) f.push_back({"b" + n(c.fold), n(c.fold) + " (batch, head) slices per block share each angle's sin and cos"});
  if (c.occupancy != 1)
    f.push_back({"o" + n(c.occupancy), n(c.occupancy) + " blocks per SM kept resident (registers capped to fit)"});
  if (c.cache) f.push_back({"cache", "md only: the forward writes the angles, the backward reads them"});
  return f;
}

std::optional<LrpeConfig> parse_lrpe_config(const std::string& text) {
  auto parts = split_fields(text, ':');
  LrpeConfig c;
  if (parts.size() > 4 && parts.back() == "cache") c.cache = true, parts.pop_back();
  if (parts.size() > 4 && parts.back().starts_with("o")) {  // ":o<k>", written only when k != 1
    if (!parse_prefixed_int(parts.back(), "o", c.occupancy) || c.occupancy == 1) return std::nullopt;
    parts.pop_back();
  }
  if (parts.size() == 5) {  // ":b<fold>", written only when fold != 1
    if (!parse_prefixed_int(parts[4], "b", c.fold) || c.fold == 1) return std::nullopt;
    parts.pop_back();
  }
  if (parts.size() != 4) return std::nullopt;
  if (parts[0] == "sp") c.strategy = LrpeStrategy::sp;
  else if (parts[0] == "bp") c.strategy = LrpeStrategy::bp;
  else return std::nullopt;
  if (!parse_prefixed_int(parts[1], "t", c.threads) || !parse_prefixed_int(parts[2], "r", c.rows) ||
      !parse_prefixed_int(parts[3], "v", c.vec))
    return std::nullopt;
  return c;
}

std::optional<std::string> check_lrpe_config(const LrpeSpec& spec, const LrpeConfig& c) {
  if (c.threads != 128 && c.threads != 256) return field_refusal("lrpe", "t", "128 or 256 (threads per block)", c.threads);
  if (c.rows != 1 && c.rows != 2 && c.rows != 4) return field_refusal("lrpe", "r", "1, 2 or 4 (rows loaded per thread)", c.rows);
  if (c.vec != 4 && c.vec != 8 && c.vec != 16) return field_refusal("lrpe", "v", "4, 8 or 16 (features per thread)", c.vec);
  // 16 features per lane: a row of d = 128 takes 8 lanes (3 shuffle levels for softmax over the
  // features instead of 4); the statistics kernel's shared merge buffers would pass 48 KB.
  if (c.vec == 16 && spec.act == LrpeAct::softmax_seq)
    return std::string("vec 16 is not available for softmax over the sequence (its statistics buffers exceed 48 KB)");
  if (std::ranges::find(kFolds, c.fold) == std::end(kFolds))
    return std::string("fold (b<k>) must be one of 1, 2, 3, 4, 6, 8, 12, 16 slices per block");
  if (c.rows * c.fold > kLrpeMaxFold) return std::string("rows × fold must stay <= 16 rows of x in flight per thread");
  if (c.occupancy < 1 || c.occupancy > 2048 / c.threads)
    return std::string("occupancy (o<k>) must be 1 to 2048 / threads resident blocks per SM");
  if (spec.act == LrpeAct::softmax_seq && c.fold > kLrpeMaxFoldSoftmaxSeq)
    return std::string("softmax over the sequence keeps 3·vec·fold running statistics per thread: fold must be <= 4");
  if (spec.act == LrpeAct::softmax_seq && c.strategy != LrpeStrategy::bp)
    return std::string("softmax over the sequence needs the bp strategy (programs walking whole columns)");
  if (c.cache && spec.op != LrpeOp::md_cosine) return std::string("the angle cache exists for md_lrpe_cosine only");
  return std::nullopt;
}

std::optional<std::string> check_lrpe_config_for_shape(const LrpeSpec& spec, const LrpeConfig& c, const LrpeShape& shape) {
  if (auto why = check_lrpe_config(spec, c)) return why;
  if (shape.d > 32 * c.vec)
    return "vec=" + std::to_string(c.vec) + " serves head dims up to " + std::to_string(32 * c.vec) + ", not " +
           std::to_string(shape.d);
  return std::nullopt;
}

namespace {

// The fastest config per (act, direction) of the H200 sweeps (docs/kernels/measurements.md, "LRPE
// defaults").
LrpeConfig swept_default(const LrpeSpec& spec) {
  const bool fwd = spec.direction == LrpeDirection::forward;
  using S = LrpeStrategy;
  if (spec.op == LrpeOp::md_cosine) {
    switch (spec.act) {
      case LrpeAct::softmax_seq: return fwd ? LrpeConfig{S::bp, 256, 2, 8, false, 1} : LrpeConfig{S::bp, 128, 1, 8, false, 2};
      case LrpeAct::softmax: return fwd ? LrpeConfig{S::bp, 256, 1, 8, false, 6} : LrpeConfig{S::bp, 128, 1, 8, false, 4};
      default: return {S::sp, 256, 1, 8, false, 4};
    }
  }
  switch (spec.act) {
    case LrpeAct::softmax_seq:
      return fwd ? LrpeConfig{S::bp, 128, 2, 8, false, 1, 7} : LrpeConfig{S::bp, 128, 2, 8, false, 1, 5};
    case LrpeAct::softmax:
      return fwd ? LrpeConfig{S::sp, 128, 2, 8, false, 2, 6} : LrpeConfig{S::sp, 128, 1, 8, false, 2, 8};
    default:
      return fwd ? LrpeConfig{S::sp, 128, 1, 8, false, 2, 8} : LrpeConfig{S::sp, 128, 1, 8, false, 4, 4};
  }
}

// fp32 rows are twice the registers: its kernels keep the compiler's register choice (o1), which
// the occupancy caps above would turn into spills (up to 160 B).
LrpeConfig measured_default(const LrpeSpec& spec) {
  LrpeConfig c = swept_default(spec);
  if (spec.dtype == DType::f32) c.occupancy = 1;
  return c;
}

// The config of the space that serves fewer slices than the default folds: fold 2 (two rows in
// flight each) or fold 1.
LrpeConfig smaller_fold(LrpeConfig c, int slices) {
  if (slices >= c.fold) return c;
  if (slices >= 2 && c.fold > 2) return LrpeConfig{c.strategy, c.threads, 2, c.vec, c.cache, 2, c.occupancy};
  return LrpeConfig{c.strategy, c.threads, c.fold > 2 ? 1 : 2, c.vec, c.cache, 1, c.occupancy};
}

}  // namespace

std::vector<LrpeConfig> lrpe_config_space(const LrpeSpec& spec, bool cache) {
  std::vector<LrpeConfig> out;
  if (cache && spec.op != LrpeOp::md_cosine) return out;
  LrpeConfig d = measured_default(spec);
  if (cache) {  // one cache kernel per spec keeps `kgen warm` short
    d.cache = true;
    return {d};
  }
  // The measured default first (so `kgen warm` compiles what a launch picks), then what it
  // becomes for batches smaller than its fold. Without softmax over the sequence, sp and bp of
  // the same sizes compile to one kernel: the other launch of the default costs no compile.
  out.push_back(d);
  for (int slices : {2, 1})
    if (LrpeConfig c = smaller_fold(d, slices); std::ranges::find(out, c) == out.end()) out.push_back(c);
  if (spec.act != LrpeAct::softmax_seq) {
    const LrpeStrategy other = d.strategy == LrpeStrategy::sp ? LrpeStrategy::bp : LrpeStrategy::sp;
    out.push_back({other, d.threads, d.rows, d.vec, false, d.fold});
  }
  return out;
}

LrpeConfig lrpe_default_config(const LrpeSpec& spec, const LrpeShape& shape, bool cache) {
  if (cache && spec.op == LrpeOp::md_cosine) return lrpe_config_space(spec, true).front();
  const long long slices = shape.theta_shared ? 1LL * shape.batch * shape.heads : shape.batch;
  return smaller_fold(measured_default(spec), static_cast<int>(std::min<long long>(slices, kLrpeMaxFold)));
}

int lrpe_stats_fold(const LrpeSpec& spec, const LrpeConfig& config) {
  return spec.direction == LrpeDirection::forward ? 1 : config.fold;
}

LrpeLaunchPlan lrpe_launch_plan(const LrpeConfig& c, const LrpeShape& shape, int sm_count, int resident_blocks_per_sm,
                                int stats_fold) {
  LrpeLaunchPlan plan;
  const int chunks = ceil_div(shape.d, c.vec);
  while (plan.row_group < chunks) plan.row_group *= 2, ++plan.row_group_log2;
  const int rows_per_pass = c.threads / plan.row_group;
  const int pass_rows = rows_per_pass * c.rows;
  if (stats_fold <= 0) stats_fold = c.fold;
  // Slices fold over b, or over b·heads + h when theta is shared by the heads (for both kernels
  // of softmax over the sequence: they share the block's slice index).
  const int least_fold = std::min(c.fold, stats_fold);
  plan.fold_heads = c.fold > 1 && shape.theta_shared && shape.heads > 1 &&
                    (1LL * shape.batch * shape.heads + least_fold - 1) / least_fold <= kMaxGridZ;
  const long long slices = plan.fold_heads ? 1LL * shape.batch * shape.heads : shape.batch;
  const unsigned grid_y = plan.fold_heads ? 1u : static_cast<unsigned>(shape.heads);
  const long long groups = (slices + c.fold - 1) / c.fold;
  if (c.strategy == LrpeStrategy::sp) {
    plan.rows_per_block = pass_rows;
  } else {
    plan.rows_per_block = ceil_div(shape.n, lrpe_bp_splits(groups * grid_y, ceil_div(shape.n, pass_rows),
                                                          lrpe_max_splits(shape, sm_count), sm_count,
                                                          resident_blocks_per_sm));
  }
  plan.splits = ceil_div(shape.n, plan.rows_per_block);  // every block has at least one row
  plan.grid = {static_cast<unsigned>(plan.splits), grid_y, static_cast<unsigned>(groups)};
  plan.stats_grid = plan.grid;
  plan.stats_grid.z = static_cast<unsigned>((slices + stats_fold - 1) / stats_fold);
  return plan;
}

int lrpe_bp_splits(long long slices, long long passes, int max_splits, int sm_count, int resident_blocks_per_sm) {
  // The blocks of a bp launch are equal, so it takes as long as its waves of resident blocks: a
  // count just over whole waves idles most slots in the last one (144 slices × 4 splits on
  // 4 × 132 slots: two waves for 1.09 waves of work). Take the fewest splits whose blocks keep
  // at least 90 % of their waves' slots busy, else the best fill; every split at least one pass
  // long, kLrpeBpMaxBlocksPerSm blocks per SM in all.
  const long long sms = std::max(sm_count, 1);
  const long long slots = std::clamp(resident_blocks_per_sm, 1, kLrpeBpMaxBlocksPerSm) * sms;
  const long long cap = std::clamp<long long>(
      std::min<long long>({passes, max_splits, kLrpeBpMaxBlocksPerSm * sms / std::max(slices, 1LL)}), 1, kMaxSplits);
  long long best = 1;
  double best_fill = 0;
  for (long long s = 1; s <= cap; ++s) {
    const long long blocks = slices * s, waves = (blocks + slots - 1) / slots;
    const double fill = static_cast<double>(blocks) / static_cast<double>(waves * slots);
    if (fill >= 0.9) return static_cast<int>(s);
    if (fill > best_fill + 1e-9) best = s, best_fill = fill;
  }
  return static_cast<int>(best);
}

int lrpe_max_splits(const LrpeShape& shape, int sm_count) {
  // The fewest slice groups any softmax-over-the-sequence config launches, on the most slots.
  const long long groups = std::max(1LL, (1LL * shape.batch * shape.heads) / kLrpeMaxFoldSoftmaxSeq);
  const long long wanted = (1LL * kLrpeBpMaxBlocksPerSm * sm_count + groups - 1) / groups;
  return static_cast<int>(std::clamp<long long>(std::min<long long>(wanted, shape.n), 1, kMaxSplits));
}

std::size_t lrpe_stats_floats(const LrpeSpec& spec, const LrpeShape& shape, const LrpeLaunchPlan& plan) {
  if (spec.act != LrpeAct::softmax_seq) return 0;
  const std::size_t planes = spec.direction == LrpeDirection::forward ? 2 : 3;
  return planes * shape.batch * shape.heads * plan.splits * shape.d;
}

KernelSource render_lrpe(const LrpeSpec& spec, const LrpeConfig& c) {
  KernelSource k;
  k.op = std::string(lrpe_op_name(spec.op));
  k.entry = kLrpeApplyEntry;
  k.threads = c.threads;
  k.smem_bytes = 0;  // static shared memory only (softmax over the sequence)
  k.variant = to_string(spec) + "." + (spec.act == LrpeAct::softmax_seq ? to_string(c) : kernel_name(c));
  const bool fwd = spec.direction == LrpeDirection::forward;
  const bool md = spec.op == LrpeOp::md_cosine;
  const std::vector<TemplateArg> shape_args = {targ_type("T", spec.dtype), targ("V", c.vec),   targ("Threads", c.threads),
                                               targ("Rows", c.rows),       targ("Fold", c.fold)};
  // minBlocks: the config's occupancy (default 1: without it ptxas spills a few registers at its
  // own occupancy target, seen on sm_90a at 64–128 registers).
  std::vector<EntryShim> shims;
  if (spec.act == LrpeAct::softmax_seq) {
    std::vector<TemplateArg> stats_args = shape_args;
    stats_args.back() = targ("Fold", lrpe_stats_fold(spec, c));
    EntryShim stats{kLrpeStatsEntry, c.threads, c.occupancy, "LrpeParams", "lrpe::lrpe_column_stats", stats_args};
    stats.args.insert(stats.args.end(), {targ("Md", md), targ("Cache", c.cache), targ("Backward", !fwd)});
    shims.push_back(std::move(stats));
  }
  EntryShim apply{kLrpeApplyEntry, c.threads, c.occupancy, "LrpeParams",
                  fwd ? "lrpe::lrpe_forward" : "lrpe::lrpe_backward", shape_args};
  apply.args.insert(apply.args.end(), {targ("Act", static_cast<int>(spec.act)), targ("Md", md), targ("Cache", c.cache)});
  shims.push_back(std::move(apply));
  k.source = render_entry_shims("kgen_device/lrpe/lrpe.cuh", k.variant, shims);
  return k;
}

namespace {

// Appends the kernel of `c` for `spec` unless a variant of the same name is in `out`.
void add_lrpe_kernel(std::vector<KernelSource>& out, const LrpeSpec& spec, const LrpeConfig& c) {
  KernelSource k = render_lrpe(spec, c);
  if (std::ranges::none_of(out, [&](const KernelSource& e) { return e.variant == k.variant; })) out.push_back(std::move(k));
}

}  // namespace

std::vector<KernelSource> lrpe_all_variants(LrpeOp op) {
  std::vector<KernelSource> out;
  for (LrpeDirection dir : {LrpeDirection::forward, LrpeDirection::backward})
    for (DType t : {DType::f16, DType::bf16, DType::f32})
      for (LrpeAct act : kActs)
        for (bool cache : {false, true}) {
          LrpeSpec spec{op, dir, t, act};
          for (const auto& c : lrpe_config_space(spec, cache)) add_lrpe_kernel(out, spec, c);
        }
  return out;
}

std::vector<KernelSource> lrpe_default_variants(LrpeOp op) {
  std::vector<KernelSource> out;
  for (LrpeDirection dir : {LrpeDirection::forward, LrpeDirection::backward})
    for (DType t : {DType::f16, DType::bf16})
      for (LrpeAct act : kActs)
        for (bool cache : {false, true}) {
          const LrpeSpec spec{op, dir, t, act};
          if (lrpe_config_space(spec, cache).empty()) continue;  // no angle cache for this op
          // A batch that fills the default's fold (training), and a batch of one (inference).
          for (int batch : {kLrpeMaxFold, 1})
            add_lrpe_kernel(out, spec, lrpe_default_config(spec, LrpeShape{batch, 16, 4096, 128}, cache));
        }
  return out;
}

}  // namespace kgen
