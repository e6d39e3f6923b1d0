#include "generator/attention_backward.h"

#include "generator/entry_shim.h"

#include <algorithm>
#include <sstream>
#include <stdexcept>

#include "generator/attention_mfma.h"
#include "generator/config_table.h"
#include "generator/config_text.h"
#include "generator/variant.h"
#include "kgen_device/attention/backward_cols_config.h"
#include "kgen_device/attention/backward_wide_config.h"
#include "kgen_device/attention/backward_config.h"

namespace kgen {
namespace {

constexpr int kMaxRegistersPerThread = 255;
constexpr int kRowWarps = 4;  // warps per block of the row-wise helper kernels
using attention_fwd::fa2_tile_head_dim;
using attention_fwd::mma_head_dim;
using attention_fwd::wgmma_tile_head_dim;

bool is_bwd_fa2_head_dim(int d) { return attention_fwd::tensor_core_head_dim(d); }
bool is_bwd_wgmma_head_dim(int d) { return is_bwd_fa2_head_dim(d) && wgmma_tile_head_dim(d) <= 128; }
// Above 128 columns (192- and 256-column tiles) the wgmma backward's kernels are the column-share
// kernel (attention_backward_wgmma_kv_cols, config "wg:bm64:bn64:c2") and the wide ones below.
bool is_bwd_wgmma_cols_head_dim(int d) { return is_bwd_fa2_head_dim(d) && wgmma_tile_head_dim(d) > 128; }
// Above 128 columns the warp-specialised wide kernel (backward_wide_ws.cuh): a producer warpgroup
// and two consumers that split a key block, config "wg:bm64:bn96:a1:t:l:w" at the 192-column tile
// (96 keys) and "wg:bm64:bn48:a1:t:l:w" at the 256-column one (48 keys).
constexpr BackwardWgmmaConfig kWideWs{.keys = attention_bwd::kWideKeys, .async_wgs = 1, .tma_dq = true,
                                      .tma_loads = true, .warp_specialised = true};
constexpr BackwardWgmmaConfig kWideWs256{.keys = attention_bwd::wide_ws_keys(256), .async_wgs = 1, .tma_dq = true,
                                         .tma_loads = true, .warp_specialised = true};
bool is_wide_ws(const BackwardWgmmaConfig& c) {
  return c.warp_specialised && (c.keys == attention_bwd::kWideKeys || c.keys == attention_bwd::wide_ws_keys(256));
}
// Its cp.async form, which also serves its deterministic mode: the three-warpgroup wide kernel
// (c3) at the 192-column tile, the column-share kernel (c2) at 256.
BackwardWgmmaConfig wide_ws_cp_async_form(int head_dim) {
  if (wgmma_tile_head_dim(head_dim) == attention_bwd::kWideHeadDim)
    return BackwardWgmmaConfig{.keys = attention_bwd::kWideKeys, .column_splits = 3};
  return BackwardWgmmaConfig{.keys = 64, .column_splits = 2};
}
// The fa2 key-major kernels (backward and double backward) split their row accumulators' columns
// over two blocks above 128 columns (Splits in backward_fa2.cuh, double_backward_fa2.cuh); each
// block keeps at most 128 of them in registers.
int column_splits(int d) { return mma_head_dim(d) > 128 ? 2 : 1; }
int split_columns(int d) { return std::min(mma_head_dim(d), 128); }

// Registers per thread of the wgmma key-major kernel: dK and dV accumulators (D/2 each), Sᵀ and
// dPᵀ (BM/2 each), plus addressing and loop state.
int wgmma_kv_register_estimate(int d, int bm) { return d + bm + 48; }

// Registers per thread of the key-major kernel for r = 16 or 32 keys per warp: dK and dV
// accumulators (2·r·D/32), Sᵀ/Pᵀ and dPᵀ/dSᵀ tiles (2·r·BM/32), the repacked A fragments of one
// k-step (r·BM/64 at most), plus addressing, loop state and B fragments.
int kv_register_estimate(int d, int bm, int keys_per_warp) {
  const int r = keys_per_warp;
  return 2 * r * d / 32 + 2 * r * bm / 32 + r * bm / 64 + 48;
}

std::string kernel_name(BackwardKernel k) {
  switch (k) {
    case BackwardKernel::preprocess: return "preprocess";
    case BackwardKernel::kv_atomic: return "kv_atomic";
    case BackwardKernel::kv: return "kv";
    case BackwardKernel::dq_convert: return "dq_convert";
    case BackwardKernel::dq: return "dq";
    case BackwardKernel::simt_dq: return "simt_dq";
    case BackwardKernel::simt_dkdv: return "simt_dkdv";
    case BackwardKernel::dkv_convert: return "dkv_convert";
    case BackwardKernel::sinks: return "sinks";
  }
  return "?";
}

// Why `smem` bytes of dynamic shared memory do not fit a block on `target` (nullopt if they do).
std::optional<std::string> smem_limit_error(int smem, const Target& target) {
  if (smem <= target.max_smem_per_block) return std::nullopt;
  return "needs " + std::to_string(smem) + " bytes of shared memory, " + target.arch + " allows " +
         std::to_string(target.max_smem_per_block);
}

// Appends `k` unless a variant of the same name is already in `out`.
void add_unique(std::vector<KernelSource>& out, KernelSource k) {
  for (const auto& e : out)
    if (e.variant == k.variant) return;
  out.push_back(std::move(k));
}

unsigned blocks(int n, int per_block) { return static_cast<unsigned>((n + per_block - 1) / per_block); }

// Outside 1..kMaxHeadDim: the sentence every path's check gives.
std::optional<std::string> head_dim_range_error(int head_dim) {
  if (head_dim >= 1 && head_dim <= kMaxHeadDim) return std::nullopt;
  return "head_dim=" + std::to_string(head_dim) + " is unsupported: kgen serves 1.." + std::to_string(kMaxHeadDim);
}

// Shared memory of the decoupled wgmma kernel of config `c` on a tile of `tile` columns.
int async_smem_bytes(int tile, const BackwardWgmmaConfig& c) {
  return attention_bwd::wgmma_kv_async_smem_bytes(tile, c.query_rows, c.tma_dq, c.warp_specialised && c.tma_dq);
}

}  // namespace

DqTile attention_backward_dq_tile(int head_dim) { return {64, mma_head_dim(head_dim) <= 128 ? 64 : 32, 4}; }

namespace {

std::string n(int v) { return std::to_string(v); }
// The key-major kernel's tile, as the fa2, wgmma and mfma forms write it (bm, bn).
std::string query_rows_meaning(int rows) { return n(rows) + " query rows per tile of the key-major kernel"; }
std::string keys_meaning(int keys) { return n(keys) + " keys per block of the key-major kernel"; }

// The tables of the config forms (generator/config_table.h): text, members and meanings.
constexpr std::string_view kFa2Meaning = "tensor-core path with mma.sync m16n8k16 (sm_80 and later)";
constexpr std::string_view kWgmmaMeaning = "Hopper path: wgmma, one block per key block (sm_90a)";
using Fa2Field = ConfigTextField<BackwardFa2Config>;
const Fa2Field kFa2Fields[] = {
    {.name = "bm", .number = &BackwardFa2Config::query_rows,
     .meaning = [](const BackwardFa2Config& c) { return query_rows_meaning(c.query_rows); }},
    {.name = "bn", .number = &BackwardFa2Config::keys,
     .meaning = [](const BackwardFa2Config& c) { return keys_meaning(c.keys); }},
    {.name = "w", .number = &BackwardFa2Config::warps,
     .meaning = [](const BackwardFa2Config& c) { return n(c.warps) + " warps, " + n(c.keys / std::max(1, c.warps)) + " keys each"; }},
};
const ConfigTextForm<BackwardFa2Config> kFa2Form{"fa2", kFa2Meaning, kFa2Fields};

using WgField = ConfigTextField<BackwardWgmmaConfig>;
constexpr int kAsyncField = 3;  // index of "a" in kWgmmaFields: the flags after it need it
const WgField kWgmmaFields[] = {
    {.name = "bm", .number = &BackwardWgmmaConfig::query_rows,
     .meaning = [](const BackwardWgmmaConfig& c) { return query_rows_meaning(c.query_rows); }},
    {.name = "bn", .number = &BackwardWgmmaConfig::keys,
     .meaning = [](const BackwardWgmmaConfig& c) { return keys_meaning(c.keys); }},
    {.name = "c", .number = &BackwardWgmmaConfig::column_splits, .unwritten = 1, .last = true,
     .meaning = [](const BackwardWgmmaConfig& c) {
       if (c.column_splits == 3)
         return std::string("three warpgroups share the block's 96 keys: 32 each for S and dP, 64 head-dim rows each "
                            "of dK and dV (accumulated transposed), 64 columns each of dQ (added by TMA reduce-adds)");
       return n(c.column_splits) + " warpgroups share the block's keys, each with 1/" + n(c.column_splits) +
              " of the columns (dQ added by TMA reduce-adds at head dims 136-192, by red_add2 above)";
     }},
    {.name = "a", .number = &BackwardWgmmaConfig::async_wgs, .unwritten = 0,
     .meaning = [](const BackwardWgmmaConfig& c) {
       if (c.warp_specialised && (c.keys == attention_bwd::kWideKeys || c.keys == attention_bwd::wide_ws_keys(256)))
         return "two consumer warpgroups of " + n(c.keys / 2) + " keys each, meeting only where dQ needs every key's dS";
       return std::string(c.async_wgs == 2 ? "warpgroups decoupled and staggered by one tile's exponentials"
                                           : "warpgroups decoupled: no block barrier per query tile, dQ added a tile late");
     }},
    {.name = "t", .flag = &BackwardWgmmaConfig::tma_dq, .needs = kAsyncField,
     .meaning = [](const BackwardWgmmaConfig&) { return std::string("dQ added from shared memory by TMA reduce-adds"); }},
    {.name = "l", .flag = &BackwardWgmmaConfig::tma_loads, .needs = kAsyncField,
     .meaning = [](const BackwardWgmmaConfig&) { return std::string("Q and dO tiles loaded by TMA"); }},
    {.name = "w", .flag = &BackwardWgmmaConfig::warp_specialised, .needs = kAsyncField,
     .meaning = [](const BackwardWgmmaConfig&) {
       return std::string("a producer warpgroup issues the loads (and dQ's reduce-adds); the others only compute");
     }},
    {.name = "p", .flag = &BackwardWgmmaConfig::persistent, .needs = kAsyncField,
     .meaning = [](const BackwardWgmmaConfig&) { return std::string("persistent grid: one block per SM walks the key blocks"); }},
    {.name = "g", .number = &BackwardWgmmaConfig::group_splits, .unwritten = 1, .needs = kAsyncField,
     .meaning = [](const BackwardWgmmaConfig& c) {
       return n(c.group_splits) + " blocks per K/V head and key block split the group's query heads";
     }},
};
const ConfigTextForm<BackwardWgmmaConfig> kWgmmaForm{"wg", kWgmmaMeaning, kWgmmaFields};

using SimtField = ConfigTextField<BackwardSimtConfig>;
const SimtField kSimtFields[] = {
    {.name = "w", .number = &BackwardSimtConfig::warps,
     .meaning = [](const BackwardSimtConfig& c) { return n(c.warps) + " warps per block"; }},
    {.name = "dmax", .number = &BackwardSimtConfig::max_head_dim,
     .meaning = [](const BackwardSimtConfig& c) { return "head dims up to " + n(c.max_head_dim) + " in registers"; }},
};
const ConfigTextForm<BackwardSimtConfig> kSimtForm{"simt", "general path: plain fp32 arithmetic, any head dim and dtype",
                                                   kSimtFields};

using MfmaField = ConfigTextField<BackwardMfmaConfig>;
const MfmaField kMfmaFields[] = {
    {.name = "bm", .number = &BackwardMfmaConfig::query_rows,
     .meaning = [](const BackwardMfmaConfig& c) { return query_rows_meaning(c.query_rows); }},
    {.name = "bn", .number = &BackwardMfmaConfig::keys,
     .meaning = [](const BackwardMfmaConfig& c) { return keys_meaning(c.keys); }},
    {.name = "w", .number = &BackwardMfmaConfig::waves,
     .meaning = [](const BackwardMfmaConfig& c) { return n(c.waves) + " waves, 32 keys each"; }},
    {.name = "c", .number = &BackwardMfmaConfig::column_splits, .unwritten = 1,
     .meaning = [](const BackwardMfmaConfig& c) {
       return n(c.column_splits) + " blocks share a key block, each with 1/" + n(c.column_splits) + " of the columns";
     }},
};
const ConfigTextForm<BackwardMfmaConfig> kMfmaForm{"mfma", "AMD matrix-core path (MFMA, wave64)", kMfmaFields};

using DblFa2Field = ConfigTextField<DoubleBackwardFa2Config>;
const DblFa2Field kDblFa2Fields[] = {
    {.name = "bm", .number = &DoubleBackwardFa2Config::rows,
     .meaning = [](const DoubleBackwardFa2Config& c) {
       return n(c.rows) + " rows per block: query rows of the query-major kernels, keys of the key-major one";
     }},
    {.name = "bn", .number = &DoubleBackwardFa2Config::tile,
     .meaning = [](const DoubleBackwardFa2Config& c) {
       return n(c.tile) + " keys per score tile of the query-major kernels (query rows per tile of the key-major one)";
     }},
    {.name = "w", .number = &DoubleBackwardFa2Config::warps,
     .meaning = [](const DoubleBackwardFa2Config& c) { return n(c.warps) + " warps, 16 rows each"; }},
};
const ConfigTextForm<DoubleBackwardFa2Config> kDblFa2Form{"fa2", kFa2Meaning, kDblFa2Fields};

using DblWgField = ConfigTextField<DoubleBackwardWgmmaConfig>;
const DblWgField kDblWgmmaFields[] = {
    {.name = "bm", .number = &DoubleBackwardWgmmaConfig::tile,
     .meaning = [](const DoubleBackwardWgmmaConfig& c) { return "score tiles " + n(c.tile) + " wide"; }},
    {.name = "bn", .number = &DoubleBackwardWgmmaConfig::rows,
     .meaning = [](const DoubleBackwardWgmmaConfig& c) { return n(c.rows) + " rows per block of both passes, 64 per warpgroup"; }},
    {.name = "c", .number = &DoubleBackwardWgmmaConfig::column_splits, .unwritten = 1,
     .meaning = [](const DoubleBackwardWgmmaConfig& c) {
       return n(c.column_splits) + " warpgroups share the block's rows, each with 1/" + n(c.column_splits) + " of the columns";
     }},
};
const ConfigTextForm<DoubleBackwardWgmmaConfig> kDblWgmmaForm{"wg", "Hopper path: wgmma (sm_90a)", kDblWgmmaFields};

const ConfigTextForm<BackwardFa2Config>& text_form(const BackwardFa2Config&) { return kFa2Form; }
const ConfigTextForm<BackwardWgmmaConfig>& text_form(const BackwardWgmmaConfig&) { return kWgmmaForm; }
const ConfigTextForm<BackwardSimtConfig>& text_form(const BackwardSimtConfig&) { return kSimtForm; }
const ConfigTextForm<BackwardMfmaConfig>& text_form(const BackwardMfmaConfig&) { return kMfmaForm; }
const ConfigTextForm<DoubleBackwardFa2Config>& text_form(const DoubleBackwardFa2Config&) { return kDblFa2Form; }
const ConfigTextForm<DoubleBackwardWgmmaConfig>& text_form(const DoubleBackwardWgmmaConfig&) { return kDblWgmmaForm; }

// The head word of `c`'s text ("fa2", "wg", "mfma", "simt").
std::string_view text_form_head(const AttentionBackwardConfig& c) {
  return std::visit([](const auto& f) { return text_form(f).head; }, c.form);
}

// `form` parsed from `parts`, as a config.
template <class C>
std::optional<AttentionBackwardConfig> parse_form(const ConfigTextForm<C>& form, const std::vector<std::string>& parts) {
  if (auto c = parse_config(form, parts)) return AttentionBackwardConfig(*c);
  return std::nullopt;
}

// The form of path C in `c`, for a kernel only that path launches.
template <class C>
const C& form_of(const AttentionBackwardConfig& c) {
  if (const C* f = c.as<C>()) return *f;
  throw std::invalid_argument(to_string(c) + " launches no such kernel (attention_backward_kernels lists its kernels)");
}

}  // namespace

BackwardPath AttentionBackwardConfig::path() const {
  return std::visit(
      [](const auto& f) {
        using C = std::decay_t<decltype(f)>;
        if constexpr (std::is_same_v<C, BackwardFa2Config> || std::is_same_v<C, DoubleBackwardFa2Config>) return BackwardPath::fa2;
        else if constexpr (std::is_same_v<C, BackwardWgmmaConfig> || std::is_same_v<C, DoubleBackwardWgmmaConfig>)
          return BackwardPath::wgmma;
        else if constexpr (std::is_same_v<C, BackwardMfmaConfig>) return BackwardPath::mfma;
        else {
          static_assert(std::is_same_v<C, BackwardSimtConfig>);
          return BackwardPath::simt;
        }
      },
      form);
}

std::string to_string(const AttentionBackwardConfig& c) {
  return std::visit([](const auto& f) { return print_config(text_form(f), f); }, c.form);
}

std::vector<ConfigField> explain(const AttentionBackwardConfig& c) {
  return std::visit([](const auto& f) { return explain_config(text_form(f), f); }, c.form);
}

std::optional<AttentionBackwardConfig> parse_attention_backward_config(const std::string& text) {
  const std::vector<std::string> parts = split_fields(text, ':');
  if (parts.empty()) return std::nullopt;
  if (parts[0] == kFa2Form.head) return parse_form(kFa2Form, parts);
  if (parts[0] == kWgmmaForm.head) return parse_form(kWgmmaForm, parts);
  if (parts[0] == kMfmaForm.head) return parse_form(kMfmaForm, parts);
  if (parts[0] == kSimtForm.head) return parse_form(kSimtForm, parts);
  return std::nullopt;
}

std::optional<AttentionBackwardConfig> parse_attention_double_backward_config(const std::string& text) {
  const std::vector<std::string> parts = split_fields(text, ':');
  if (auto c = parse_form(kDblFa2Form, parts)) return c;
  if (auto c = parse_form(kDblWgmmaForm, parts)) return c;
  return parse_attention_backward_config(text);
}

std::string to_string(const AttentionBackwardSpec& s) {
  return attention_spec_text("attention_bwd", {s.dtype, s.head_dim, s.causal, s.variant, s.sinks, s.packed, false, s.head_dim_v});
}

std::optional<AttentionBackwardSpec> parse_attention_backward_spec(const std::string& text) {
  const auto f = parse_attention_spec_text("attention_bwd", text);
  if (!f) return std::nullopt;
  return AttentionBackwardSpec{f->dtype, f->head_dim, f->causal, f->variant, f->sinks, f->packed, f->head_dim_v};
}

std::string attention_backward_variant_key(const AttentionBackwardSpec& s, bool deterministic) {
  return to_string(s) + (deterministic ? ".deterministic" : "");
}

std::optional<std::pair<AttentionBackwardSpec, bool>> parse_attention_backward_variant_key(const std::string& text) {
  constexpr std::string_view kSuffix = ".deterministic";
  const bool deterministic = text.ends_with(kSuffix);
  auto spec = parse_attention_backward_spec(deterministic ? text.substr(0, text.size() - kSuffix.size()) : text);
  if (!spec) return std::nullopt;
  return std::pair{*spec, deterministic};
}

namespace {

std::optional<std::string> check_fa2(const AttentionBackwardSpec& spec, const BackwardFa2Config& c, const Target& target) {
  if (auto why = nvidia_only_path("fa2", target)) return why;
  if (spec.dtype == DType::f32) return std::string("fa2 path needs fp16 or bf16 inputs");
  if (!is_bwd_fa2_head_dim(spec.head_dim))
    return "fa2 backward has no head_dim=" + std::to_string(spec.head_dim) + " specialisation";
  if (c.query_rows != 32 && c.query_rows != 64) return field_refusal("fa2", "bm", "32 or 64 (query rows per tile)", c.query_rows);
  if (c.keys != 64 && c.keys != 128) return field_refusal("fa2", "bn", "64 or 128 (keys per block)", c.keys);
  if ((c.warps != 4 && c.warps != 8) || (c.keys / c.warps != 16 && c.keys / c.warps != 32))
    return field_refusal("fa2", "w", "4 or 8, with 16 or 32 keys per warp (bn / w)", c.warps);
  if (kv_register_estimate(split_columns(spec.head_dim), c.query_rows, c.keys / c.warps) > kMaxRegistersPerThread)
    return "fa2 head_dim=" + std::to_string(spec.head_dim) + " with bm" + std::to_string(c.query_rows) +
           " and " + std::to_string(c.keys / c.warps) + " keys per warp exceeds the register budget";
  const int tile = fa2_tile_head_dim(spec.head_dim);
  const DqTile dq = attention_backward_dq_tile(spec.head_dim);
  return smem_limit_error(std::max(attention_bwd::fa2_kv_smem_bytes(tile, c.query_rows, c.keys, true),
                                   attention_bwd::fa2_q_smem_bytes(tile, dq.block_m, dq.block_n)),
                          target);
}

std::optional<std::string> check_wgmma(const AttentionBackwardSpec& spec, const BackwardWgmmaConfig& c,
                                       const Target& target) {
  if (auto why = nvidia_only_path("wgmma", target)) return why;
  if (auto why = wgmma_only_path("wgmma", target)) return why;
  if (spec.dtype == DType::f32) return std::string("wgmma path needs fp16 or bf16 inputs");
  const int tile = wgmma_tile_head_dim(spec.head_dim);
  if (c.query_rows != 64 && c.query_rows != 128)
    return field_refusal("wgmma", "bm", "64 (one wgmma M of query rows) or 128", c.query_rows);
  if (c.query_rows == 128 && (c.async_wgs == 0 || tile != 64 || (c.tma_dq && !c.warp_specialised) ||
                              c.column_splits != 1))
    return std::string(
        "wgmma bm128 takes a decoupled kernel (a1, a2) on the 64-column tile (head dims up to 64), "
        "with dQ by red_add2 or, warp-specialised (w), by TMA (t)");
  if (c.tma_dq && c.async_wgs == 0) return std::string("wgmma dQ by TMA (t) takes a decoupled kernel (a1, a2)");
  if (c.tma_loads && c.async_wgs == 0)
    return std::string("wgmma Q/dO loads by TMA (l) take a decoupled kernel (a1, a2)");
  if (c.warp_specialised && ((!c.tma_dq && c.query_rows != 128) || !c.tma_loads))
    return std::string("wgmma warp specialisation (w) takes loads by TMA (l) and dQ by TMA (t) with 64-row tiles: "
                       "wg:bm64:bn128:a2:t:l:w, wg:bm128:bn128:a2:l:w or wg:bm128:bn128:a2:t:l:w");
  if (c.persistent && !c.warp_specialised)
    return std::string("wgmma persistent grids (p) take the warp-specialised kernel (w): wg:bm64:bn128:a2:t:l:w:p");
  if (c.group_splits != 1 &&
      ((c.group_splits != 2 && c.group_splits != 4 && c.group_splits != 8) || c.async_wgs == 0))
    return std::string("wgmma group splits (g2, g4, g8) take 2, 4 or 8 splits and a decoupled kernel (a1, a2)");
  int smem = 0;
  if (is_wide_ws(c) || (c.warp_specialised && tile > 128)) {
    if (!attention_bwd::wide_ws_tile(tile))
      return "wgmma warp-specialised wide backward (bn96:w, bn48:w) serves head dims 136-256, not head_dim=" +
             std::to_string(spec.head_dim);
    const int keys = attention_bwd::wide_ws_keys(tile);
    const std::string form = "bn" + n(keys) + ":w";
    if (c.keys != keys)
      return field_refusal("wgmma warp-specialised at head_dim=" + n(spec.head_dim), "bn",
                           n(keys) + " (two consumers of " + n(keys / 2) + " keys)", c.keys);
    if (c.query_rows != attention_bwd::kWideQueryRows)
      return field_refusal("wgmma " + form, "bm", "64 (one wgmma M of query rows)", c.query_rows);
    if (c.async_wgs != 1 || c.persistent || c.group_splits != 1 || c.column_splits != 1)
      return "wgmma " + form + " is wg:bm64:" + form.substr(0, form.size() - 2) + ":a1:t:l:w (no a2, p, g or c)";
    const int d_v = spec.head_dim_v > 0 ? spec.head_dim_v : spec.head_dim;
    smem = attention_bwd::wide_ws_smem_bytes(d_v, tile);
  } else if (c.column_splits == 3) {
    if (wgmma_tile_head_dim(spec.head_dim) != attention_bwd::kWideHeadDim)
      return "wgmma wide-head-dim backward (c3) serves head dims 136-192, not head_dim=" + std::to_string(spec.head_dim);
    if (c.keys != attention_bwd::kWideKeys)
      return field_refusal("wgmma c3", "bn", "96 (three warpgroups sharing 96 keys)", c.keys);
    if (c.query_rows != attention_bwd::kWideQueryRows)
      return field_refusal("wgmma c3", "bm", "64 (one wgmma M of query rows)", c.query_rows);
    smem = attention_bwd::kWideSmemBytes;
  } else if (c.column_splits == 2) {
    if (!is_bwd_wgmma_cols_head_dim(spec.head_dim))
      return "wgmma column-share backward (c2) serves head dims above 128, not head_dim=" +
             std::to_string(spec.head_dim);
    if (c.keys != 64) return field_refusal("wgmma c2", "bn", "64 (two warpgroups sharing 64 keys)", c.keys);
    smem = attention_bwd::wgmma_cols_smem_bytes(tile, c.query_rows, attention_bwd::wgmma_cols_tma_dq(tile, spec.head_dim));
  } else {
    if (c.column_splits != 1)
      return std::string("wgmma splits must be 1, or 2 or 3 above 128 columns (c2: 64 keys, c3: 96 keys)");
    if (!is_bwd_wgmma_head_dim(spec.head_dim))
      return "wgmma backward has no head_dim=" + std::to_string(spec.head_dim) +
             " specialisation without column sharing (c2)";
    if (c.keys != 64 && c.keys != 128)
      return field_refusal("wgmma", "bn", "64 or 128 (one or two warpgroups)", c.keys);
    if (wgmma_kv_register_estimate(tile, c.query_rows) > kMaxRegistersPerThread)
      return "wgmma head_dim=" + std::to_string(spec.head_dim) + " with bm" + std::to_string(c.query_rows) +
             " exceeds the register budget";
    if (c.async_wgs < 0 || c.async_wgs > 2) return std::string("wgmma async (a<k>) must be 1 or 2");
    if (c.async_wgs != 0 && c.keys != 128)
      return field_refusal("wgmma async (a1, a2)", "bn", "128 (two warpgroups)", c.keys);
    smem = c.async_wgs != 0 ? async_smem_bytes(tile, c)
                            : attention_bwd::wgmma_kv_smem_bytes(tile, c.query_rows, c.keys / 64, true);
  }
  const DqTile dq = attention_backward_dq_tile(spec.head_dim);
  smem = std::max(smem, attention_bwd::fa2_q_smem_bytes(fa2_tile_head_dim(spec.head_dim), dq.block_m, dq.block_n));
  return smem_limit_error(smem, target);
}

std::optional<std::string> check_simt(const AttentionBackwardSpec& spec, const BackwardSimtConfig& c) {
  if (c.max_head_dim != attention_simt_bucket(spec.head_dim))
    return "simt max_head_dim must be " + std::to_string(attention_simt_bucket(spec.head_dim)) +
           " for head_dim=" + std::to_string(spec.head_dim);
  if (c.warps != 4 && c.warps != 8) return std::string("simt warps must be 4 or 8");
  return std::nullopt;
}

}  // namespace

std::optional<std::string> check_attention_backward_config(const AttentionBackwardSpec& spec,
                                                           const AttentionBackwardConfig& c,
                                                           const Target& target) {
  if (c.as<DoubleBackwardFa2Config>() || c.as<DoubleBackwardWgmmaConfig>())
    return to_string(c) + " is read as a double-backward config (parse_attention_double_backward_config)";
  if (auto why = head_dim_range_error(spec.head_dim)) return why;
  // The warp-specialised kernel serves variants and packed batches (its atomic mode; the
  // deterministic mode's kernels do not: runtime/ops/attention_backward.cpp runs fa2 or simt
  // there). The column-share (c2) and wide (c3) kernels serve v's own head dim.
  const auto* wg = c.as<BackwardWgmmaConfig>();
  if (auto why = check_head_dim_v(spec.head_dim, spec.head_dim_v, spec.has_variant(),
                                  wg && (wg->column_splits == 3 || is_wide_ws(*wg)) ? "wg:c3"
                                  : wg && wg->column_splits == 2 ? "wg:c2"
                                                                 : text_form_head(c),
                                  "attention_bwd"))
    return why;
  if (auto why = check_variant_path(spec.has_variant(), c.path() == BackwardPath::mfma ? "mfma" : "")) return why;
  if (spec.has_variant() && wg &&
      (!wg->warp_specialised || wg->persistent || !wg->tma_dq || is_wide_ws(*wg) ||
       (spec.packed && wg->group_splits != 1)))
    return std::string("variants and packed batches run on the warp-specialised wgmma kernel with dQ by TMA (w, t; "
                       "no p, and no group splits for packed batches: wg:bm64:bn128:a1:t:l:w, "
                       "wg:bm128:bn128:a2:t:l:w), or on fa2: and simt:");
  if (const auto* m = c.as<BackwardMfmaConfig>()) return check_mfma_backward_config(spec, *m, target);
  if (const auto* f = c.as<BackwardFa2Config>()) return check_fa2(spec, *f, target);
  if (wg) return check_wgmma(spec, *wg, target);
  return check_simt(spec, *c.as<BackwardSimtConfig>());
}

std::vector<AttentionBackwardConfig> attention_backward_config_space(const AttentionBackwardSpec& spec,
                                                                     const Target& target) {
  std::vector<AttentionBackwardConfig> out;
  auto keep = [&](const AttentionBackwardConfig& c) {
    if (!check_attention_backward_config(spec, c, target)) out.push_back(c);
  };
  for (const auto& c : mfma_backward_config_space(spec, target)) out.push_back(c);
  using Wg = BackwardWgmmaConfig;
  if (spec.dtype != DType::f32 && is_bwd_wgmma_head_dim(spec.head_dim) && has_wgmma(target)) {
    for (int bn : {128, 64}) keep(Wg{.keys = bn});
    for (int a : {2, 1})
      for (bool t : {false, true})
        for (bool l : {false, true}) keep(Wg{.async_wgs = a, .tma_dq = t, .tma_loads = l});
    for (int a : {2, 1}) keep(Wg{.async_wgs = a, .tma_dq = true, .tma_loads = true, .warp_specialised = true});
    keep(Wg{.async_wgs = 2, .tma_dq = true, .tma_loads = true, .warp_specialised = true, .persistent = true});  // persistent (:p)
    for (int a : {2, 1})
      for (bool l : {false, true}) keep(Wg{.query_rows = 128, .async_wgs = a, .tma_loads = l});
    for (int a : {2, 1})
      for (bool t : {false, true}) keep(Wg{.query_rows = 128, .async_wgs = a, .tma_dq = t, .tma_loads = true, .warp_specialised = true});
  }
  if (spec.dtype != DType::f32 && is_bwd_wgmma_cols_head_dim(spec.head_dim) && has_wgmma(target)) {
    keep(Wg{.keys = 64, .column_splits = 2});
    keep(Wg{.keys = attention_bwd::kWideKeys, .column_splits = 3});
    keep(kWideWs);
    keep(kWideWs256);
  }
  if (spec.dtype != DType::f32 && is_bwd_fa2_head_dim(spec.head_dim))
    for (int bm : {64, 32})
      for (auto [bn, warps] : {std::pair{128, 8}, {64, 4}}) keep(BackwardFa2Config{.query_rows = bm, .keys = bn, .warps = warps});
  keep(attention_backward_general_config(spec));
  return out;
}

std::vector<AttentionBackwardConfig> attention_backward_config_space(const AttentionBackwardSpec& spec,
                                                                     const Target& target, int group) {
  std::vector<AttentionBackwardConfig> out = attention_backward_config_space(spec, target);
  const std::size_t unsplit = out.size();
  for (int split : {2, 4, 8}) {
    if (group % split != 0) continue;
    for (std::size_t i = 0; i < unsplit; ++i) {
      const auto* wg = out[i].as<BackwardWgmmaConfig>();
      if (!wg || !wg->warp_specialised) continue;
      BackwardWgmmaConfig c = *wg;
      c.group_splits = split;
      if (!check_attention_backward_config(spec, c, target)) out.push_back(c);
    }
  }
  return out;
}

namespace {

// Grouped heads on the Hopper key-major kernels (the 64- and 128-column tiles, the atomic mode):
// into how many blocks (2, 4 or 8) each K/V head's query heads split, or 1. Each block adds its
// partial dK and dV into fp32 rows. The rules, each the fastest measured
// (docs/kernels/measurements.md, "Finer group splits, and scratch memory that stays mapped"):
// - with a mask, the 128-column tile: eight blocks from d = 120 (once the K/V blocks fill about
//   two waves, below), else four (two where the group is no multiple of 4);
// - without a mask, from 1k keys and only while the K/V blocks fill at most half the machine:
//   two blocks;
// - the 64-column tile, from 1k keys, with a mask or up to 2k keys: four blocks with the
//   producer warpgroup.
// Below 1k keys the split stays as measured first (with a mask, the 128-column tile, two
// blocks); groups of 2 are not split, which was slower.
// Whether the groups split at all: of an even size from 4, of a multiple of 4 above 48 columns
// on the 64-column tile (nothing measured below).
bool hopper_group_splittable(const AttentionBackwardSpec& spec, int group, bool tile64) {
  return group >= 4 && group % 2 == 0 && (!tile64 || (spec.head_dim > 48 && group % 4 == 0));
}

// kv_blocks: b·h_kv·⌈n_k / 128⌉.
int hopper_group_split(const AttentionBackwardSpec& spec, const AttentionShape& shape, bool tile64,
                       long long kv_blocks, int sm_count) {
  const int group = shape.heads_q / shape.heads_kv;
  if (!hopper_group_splittable(spec, group, tile64)) return 1;
  if (tile64) return shape.n_k >= 1024 && (spec.causal || shape.n_k <= 2048) ? 4 : 1;
  if (!spec.causal) return shape.n_k >= 1024 && kv_blocks * 2 <= sm_count ? 2 : 1;
  if (shape.n_k < 1024) return 2;
  // Eight blocks only once the K/V blocks fill about two waves; four won below that
  // (docs/kernels/measurements.md, "Eight-block group splits by wave count").
  if (spec.head_dim >= 120 && group % 8 == 0 && 2 * kv_blocks > 3LL * sm_count) return 8;
  return group % 4 == 0 ? 4 : 2;
}

}  // namespace

namespace {

// The default of a spec with v's own head dim (MLA), for the backward and the double backward:
// `plain_default` gives the one-head-dim spec's default on a target, `check` checks a config.
// On sm_90a the plain spec's default where it serves d_v, else sm_80's (fa2, with V, dO and their
// products over d_v), else the general path; on AMD targets the general path.
template <class PlainDefault, class Check>
AttentionBackwardConfig head_dim_v_default(const AttentionBackwardSpec& spec, const Target& target,
                                           PlainDefault plain_default, Check check) {
  if (target.vendor != Vendor::nvidia) return attention_backward_general_config(spec);
  AttentionBackwardSpec plain = spec;
  plain.head_dim_v = 0;
  if (has_wgmma(target))
    if (AttentionBackwardConfig c = plain_default(plain, target); !check(spec, c, target)) return c;
  const AttentionBackwardConfig c = plain_default(plain, *parse_target("sm_80"));
  return check(spec, c, target) ? attention_backward_general_config(spec) : c;
}

}  // namespace

AttentionBackwardConfig attention_backward_default_config(const AttentionBackwardSpec& spec,
                                                          const AttentionShape& shape, const Target& target,
                                                          int sm_count) {
  if (spec.head_dim_v > 0)  // above 128 columns on sm_90a the plain default (c3 or c2), else fa2
    return head_dim_v_default(
        spec, target,
        [&](const AttentionBackwardSpec& plain, const Target& t) {
          return attention_backward_default_config(plain, shape, t, sm_count);
        },
        check_attention_backward_config);
  if (spec.has_variant()) {
    // A variant narrows the plain default: its score step keeps more values live per element.
    AttentionBackwardSpec plain = spec;
    plain.variant.clear(), plain.sinks = plain.packed = false;
    AttentionBackwardConfig c = attention_backward_default_config(plain, shape, target, sm_count);
    // sm_90a: the plain default where it is the warp-specialised kernel (on its plain grid, dQ by
    // TMA; packed batches unsplit), on 64-row query tiles (on 128-row tiles a modification's score
    // step spills: ptxas, d = 64, softcap 152 bytes, ALiBi 44; none on 64-row tiles); else sm_80's
    // rule. The MFMA kernels do not serve variants yet.
    if (target.arch == "sm_90a") {
      // Under 1k keys the plain default is a kernel without a producer warpgroup, which serves no
      // variant: the warp-specialised form that the plain default takes at 1k keys serves them
      // there (sm_80's fa2 rule took packed rows of 512 keys to 1.7× that time; H200,
      // docs/kernels/measurements.md, "Packed batches on a compact grid").
      if (const auto* wg = c.as<BackwardWgmmaConfig>(); wg && !wg->warp_specialised && shape.n_k < 1024) {
        AttentionShape longer = shape;
        longer.n_k = 1024;
        c = attention_backward_default_config(plain, longer, target, sm_count);
      }
      if (auto* wg = c.as<BackwardWgmmaConfig>(); wg && wg->warp_specialised) {
        wg->persistent = false, wg->tma_dq = true, wg->query_rows = 64;
        if (spec.packed) wg->group_splits = 1;
        if (!check_attention_backward_config(spec, c, target)) return c;
      }
      return attention_backward_default_config(spec, shape, *parse_target("sm_80"), sm_count);
    }
    // fa2: 32-row query tiles and 16 keys per warp keep the key-major kernel within its registers
    // (ptxas, d = 64: 64-row tiles spill 108–144 bytes with a tensor-indexed mask).
    const auto* fa2 = c.as<BackwardFa2Config>();
    if (!fa2) return attention_backward_general_config(spec);
    BackwardFa2Config narrow = *fa2;
    narrow.query_rows = 32;
    if (narrow.keys / narrow.warps == 32) narrow.warps = narrow.keys / 16;
    if (!check_attention_backward_config(spec, narrow, target)) return narrow;
    return check_attention_backward_config(spec, c, target) ? attention_backward_general_config(spec) : c;
  }
  if (auto c = mfma_backward_default_config(spec, target)) return *c;  // AMD matrix cores
  // d = 32 on sm_90a: without a mask the padded 64-column wgmma tile, faster than fa2 at every
  // length; causal, fa2:bm64:bn64:w4 on small grids, the wgmma kernels on full ones
  // (docs/kernels/measurements.md, "d = 32 backward").
  const bool tile64 = wgmma_tile_head_dim(spec.head_dim) == 64;
  const bool hopper = spec.dtype != DType::f32 && is_bwd_wgmma_head_dim(spec.head_dim) && has_wgmma(target);
  const long long kv_blocks = 1LL * shape.batch * shape.heads_kv * blocks(shape.n_k, 128);
  const int group_split = hopper ? hopper_group_split(spec, shape, tile64, kv_blocks, sm_count) : 1;
  // Grouped heads from 1k keys (hopper_group_splittable): each K/V block walks the whole group,
  // so the two-warpgroup kernels win once their blocks, split or not, fill half the machine
  // (docs/kernels/measurements.md, "Finer group splits, and scratch memory that stays mapped").
  const bool grouped_tiles = hopper && shape.n_k >= 1024 &&
                             hopper_group_splittable(spec, shape.heads_q / shape.heads_kv, tile64);
  const bool small = attention_backward_shape_class(shape, sm_count) == 1 &&
                     !(grouped_tiles && 2 * kv_blocks * group_split >= sm_count);
  const bool wgmma_d32 = spec.head_dim == 32 && (!spec.causal || !small);
  if (hopper && (spec.head_dim > 32 || wgmma_d32)) {
    // Other head dims up to 128 run on the 64- or 128-column tile, zero-padded.
    // Hopper: two warpgroups of 64 keys against query tiles, decoupled (a1, a2); one warpgroup of
    // 64 keys per block against 64-row tiles when the blocks would not fill the machine.
    const bool grouped = shape.heads_q != shape.heads_kv;
    BackwardWgmmaConfig c;
    if (tile64) {
      // The 64-column tile: 128-row query tiles, faster than 64-row ones at d = 32–64; without a
      // mask a2 above 48 columns and a1 with TMA loads (:l) up to 48, with one a2:l
      // (docs/kernels/measurements.md, "128-row query tiles in the Hopper backward"). dQ by
      // red_add2: TMA reduce-adds gained nothing on this tile ("dQ by TMA reduce-adds in the
      // Hopper backward").
      c.query_rows = 128;
      c.async_wgs = !spec.causal && spec.head_dim <= 48 ? 1 : 2;
      c.tma_loads = spec.causal || spec.head_dim <= 48;
      // A producer warpgroup for the loads (dQ stays red_add2 from the consumers), faster at d = 64
      // from 4k keys (measured there, taken from d = 49; docs/kernels/measurements.md,
      // "Warp-specialised Hopper backward"). Split grouped heads (hopper_group_split) take it from
      // 1k keys. Unsplit, dQ goes through the staging boxes to the producer's dQ warp as well (:t,
      // a two-stage ring), faster at d = 64 from 1k keys without grouped heads, a1 with a mask
      // (a2:t:l:w spills there; measured at d = 64, taken from d = 49: "dQ by TMA on 128-row
      // tiles").
      if (spec.head_dim > 48 && group_split > 1) {
        c.tma_loads = true, c.warp_specialised = true;
      } else if (spec.head_dim > 48 && shape.n_k >= 1024) {
        c.tma_loads = true, c.warp_specialised = true, c.tma_dq = true;
        c.async_wgs = spec.causal ? 1 : 2;
      }
      c.group_splits = group_split;  // only above 48 columns, where async_wgs is already 2
    } else {
      // The 128-column tile: the staggered a2, faster than the block-synchronous wg:bm64:bn128
      // (docs/kernels/measurements.md, "Decoupled warpgroups in the Hopper backward").
      // dQ through shared memory and TMA reduce-adds, faster everywhere on this tile ("dQ by TMA
      // reduce-adds in the Hopper backward").
      c.tma_dq = true;
      // Q and dO by TMA: faster without a mask and with one below d = 120; with a mask at d = 128
      // it lost (d = 120 is taken as d = 128), except with grouped heads, where the unstaggered
      // a1:t:l won ("Q and dO by TMA in the Hopper backward").
      c.tma_loads = !spec.causal || spec.head_dim < 120 || grouped;
      // The unstaggered a1 with a mask at d = 104 and 112, where it is the one that stays
      // spill-free, and with a mask and grouped heads from d = 120.
      const bool a1 = spec.causal && ((spec.head_dim >= 104 && spec.head_dim <= 112) || (spec.head_dim >= 120 && grouped));
      c.async_wgs = a1 ? 1 : 2;
      // Grouped heads: each group's query heads split over several blocks (hopper_group_split;
      // first measured with two: docs/kernels/measurements.md, "Group splits: grouped heads with a
      // mask"). The causal walks of a group's key blocks are long (8 heads × the tiles from the
      // diagonal on), and the heaviest ones set the kernel's time; split, they are shorter.
      c.group_splits = group_split;
      // A producer warpgroup for the loads and the dQ reduce-adds, from 1k keys: faster than the
      // decoupled kernels at d = 80–128 (docs/kernels/measurements.md, "Warp-specialised Hopper
      // backward"); at 1k keys without a mask it only tied (the persistent form below takes
      // them), and rows of 512 keys and under did not gain.
      // Grouped heads, split (hopper_group_split): from 1k keys with or without a mask, the
      // stagger as without grouped heads from d = 120.
      // Without group splits, the a2 form on a persistent grid (:p): the next key block's K, V,
      // Q and dO load under this one's last dQ and its dK and dV stores; a little faster from 1k
      // keys. Group splits and the a1 forms keep one block per key block (the a1 forms spill on
      // it; with a group split it lost); rows under 1k keys keep the decoupled kernel, which won
      // there (docs/kernels/measurements.md, "A persistent grid for the warp-specialised
      // backward").
      if (shape.n_k >= 1024) {
        c.tma_loads = true, c.warp_specialised = true;
        if (group_split > 1 && spec.head_dim >= 120) c.async_wgs = 2;
        c.persistent = group_split == 1 && c.async_wgs == 2;
      }
    }
    if (small) c = BackwardWgmmaConfig{.query_rows = 64, .keys = 64};
    if (!check_attention_backward_config(spec, c, target)) return c;
  }
  if (spec.dtype != DType::f32 && is_bwd_wgmma_cols_head_dim(spec.head_dim) && has_wgmma(target)) {
    // Above 128 columns: blocks of keys with dKᵀ and dVᵀ accumulated transposed, on a producer
    // warpgroup and two consumers, 96 keys up to 192 columns (bn96:w), 48 above (bn48:w); c2 (two
    // warpgroups sharing 64 keys and splitting the dK, dV and dQ columns) where neither serves.
    for (const BackwardWgmmaConfig c : {kWideWs, kWideWs256, BackwardWgmmaConfig{.keys = 64, .column_splits = 2}})
      if (!check_attention_backward_config(spec, c, target)) return c;
  }
  if (spec.dtype != DType::f32 && is_bwd_fa2_head_dim(spec.head_dim)) {
    // 128 keys on 8 warps (16 each) against 64-row query tiles; halve the key tile when the
    // blocks would not fill the machine once.
    // Above 128 columns (two column splits) the registers take 32-row query tiles, and on
    // sm_80 the shared memory 64-key blocks.
    const bool causal_d32 = spec.head_dim == 32 && spec.causal && has_wgmma(target);
    for (int bn : {128, 64}) {
      if ((small || causal_d32) && bn == 128) continue;
      for (int bm : {64, 32}) {
        const BackwardFa2Config c{.query_rows = bm, .keys = bn, .warps = bn / 16};
        if (!check_attention_backward_config(spec, c, target)) return c;
      }
    }
  }
  return attention_backward_general_config(spec);
}

int attention_backward_shape_class(const AttentionShape& shape, int sm_count) {
  const long long kv_blocks = 1LL * shape.batch * shape.heads_kv * blocks(shape.n_k, 128);
  return kv_blocks < sm_count ? 1 : 0;
}

int attention_double_backward_shape_class(const AttentionShape& shape, int sm_count) {
  const long long q_blocks = 1LL * shape.batch * shape.heads_q * blocks(shape.n_q, 64);
  return 2 * q_blocks < sm_count ? 1 : 0;
}

AttentionBackwardConfig attention_backward_general_config(const AttentionBackwardSpec& spec) {
  return BackwardSimtConfig{.warps = 4, .max_head_dim = attention_simt_bucket(spec.head_dim)};
}

std::vector<BackwardKernel> attention_backward_kernels(const AttentionBackwardConfig& c, bool deterministic) {
  using K = BackwardKernel;
  if (c.as<BackwardSimtConfig>()) return {K::preprocess, K::simt_dkdv, K::simt_dq};
  if (deterministic) return {K::preprocess, K::kv, K::dq};
  if (const auto* wg = c.as<BackwardWgmmaConfig>(); wg && wg->group_splits > 1) return {K::preprocess, K::kv_atomic, K::dq_convert, K::dkv_convert};
  return {K::preprocess, K::kv_atomic, K::dq_convert};
}

LaunchGrid attention_backward_grid(const AttentionBackwardConfig& c, BackwardKernel kernel, const AttentionShape& s,
                                   int head_dim, int sm_count) {
  const auto hq = static_cast<unsigned>(s.heads_q), hkv = static_cast<unsigned>(s.heads_kv),
             b = static_cast<unsigned>(s.batch);
  switch (kernel) {
    case BackwardKernel::preprocess: return {blocks(s.n_q, attention_bwd::preprocess_block_rows(kRowWarps, head_dim)), hq, b};
    case BackwardKernel::dq_convert: return {blocks(s.n_q, attention_bwd::row_block_rows(kRowWarps, head_dim)), hq, b};
    case BackwardKernel::kv_atomic:
    case BackwardKernel::kv: {
      if (const auto* f = c.as<BackwardFa2Config>())
        return {blocks(s.n_k, f->keys) * static_cast<unsigned>(column_splits(head_dim)), hkv, b};
      if (const auto* m = c.as<BackwardMfmaConfig>())
        return {blocks(s.n_k, m->keys) * static_cast<unsigned>(m->column_splits), hkv, b};
      const auto& wg = form_of<BackwardWgmmaConfig>(c);
      // Group splits (the atomic kernel): y = kv head · splits + part.
      const unsigned parts = kernel == BackwardKernel::kv_atomic ? static_cast<unsigned>(wg.group_splits) : 1u;
      // Persistent (the atomic kernel): at most one block per SM over every key block
      // (backward_ws.cuh's KeyBlockRounds).
      if (wg.persistent && kernel == BackwardKernel::kv_atomic) {
        const long long items = 1LL * blocks(s.n_k, wg.keys) * hkv * parts * b;
        return {static_cast<unsigned>(std::clamp<long long>(items, 1, std::max(sm_count, 1))), 1, 1};
      }
      return {blocks(s.n_k, wg.keys), hkv * parts, b};
    }
    case BackwardKernel::dkv_convert: return {blocks(s.n_k, attention_bwd::row_block_rows(kRowWarps, head_dim)), hkv, b};
    case BackwardKernel::dq: return {blocks(s.n_q, attention_backward_dq_tile(0).block_m), hq, b};
    case BackwardKernel::simt_dq: return {blocks(s.n_q, form_of<BackwardSimtConfig>(c).warps), hq, b};
    case BackwardKernel::simt_dkdv: return {blocks(s.n_k, form_of<BackwardSimtConfig>(c).warps), hkv, b};
    case BackwardKernel::sinks: return {blocks(s.n_q, 32 * kRowWarps), hq, b};
  }
  return {};
}

std::optional<LaunchGrid> attention_backward_packed_grid(const AttentionBackwardConfig& c, BackwardKernel kernel,
                                                         long long rows_k, int sequences, int heads_kv) {
  const auto* wg = c.as<BackwardWgmmaConfig>();
  // The kernel render_attention_backward names attention_backward_wgmma_kv_ws.
  if (kernel != BackwardKernel::kv_atomic || !wg || !wg->warp_specialised || wg->persistent || is_wide_ws(*wg) ||
      wg->column_splits != 1)
    return std::nullopt;
  return packed_tile_grid(rows_k, wg->keys, sequences, heads_kv);
}

KernelSource render_attention_backward(const AttentionBackwardSpec& spec, const AttentionBackwardConfig& c,
                                       BackwardKernel kernel) {
  KernelSource k;
  k.op = "attention_bwd";
  k.entry = "kgen_attention_bwd_" + kernel_name(kernel);
  const int d = spec.head_dim;
  EntryShim shim{"", 0, 1, "AttentionBackwardParams", "", {}};
  std::string include;
  switch (kernel) {
    case BackwardKernel::sinks:
      // Independent of dtype, head_dim and causal: one kernel.
      include = "kgen_device/attention/backward_sinks.cuh";
      k.threads = 32 * kRowWarps;
      k.variant = "attention_bwd.sinks";
      shim.function = "attention_backward_sinks";
      shim.args = {targ("Warps", kRowWarps)};
      shim.variant_args = true;
      break;
    case BackwardKernel::preprocess:
    case BackwardKernel::dq_convert:
    case BackwardKernel::dkv_convert:
      // Independent of head_dim and causal: one variant per dtype (the preprocess of a v head dim
      // of its own: one per dtype and d_v, "attention_bwd.bf16.dv128.preprocess").
      include = "kgen_device/attention/backward_rows.cuh";
      k.threads = attention_bwd::row_threads(kRowWarps);
      k.variant = "attention_bwd." + std::string(dtype_name(spec.dtype)) + "." + kernel_name(kernel);
      shim.function = "attention_backward_" + kernel_name(kernel);
      shim.args = {targ_type("T", spec.dtype), targ("Warps", kRowWarps)};
      if (kernel == BackwardKernel::preprocess && spec.head_dim_v > 0) {
        k.variant = "attention_bwd." + std::string(dtype_name(spec.dtype)) + ".dv" + std::to_string(spec.head_dim_v) + ".preprocess";
        shim.args.push_back(targ("HeadDimV", spec.head_dim_v));
      }
      break;
    case BackwardKernel::kv_atomic:
    case BackwardKernel::kv: {
      const bool atomic = kernel == BackwardKernel::kv_atomic;
      k.variant = to_string(spec) + "." + to_string(c) + "." + kernel_name(kernel);
      if (const auto* m = c.as<BackwardMfmaConfig>()) {
        include = render_mfma_backward(spec, *m, kernel, k, shim);
        break;
      }
      if (const auto* wg = c.as<BackwardWgmmaConfig>(); wg && is_wide_ws(*wg) && atomic) {
        // The wide kernel's warp-specialised form (its deterministic mode: wide_ws_cp_async_form).
        const int d_v = spec.head_dim_v > 0 ? spec.head_dim_v : d;
        const int tile = wgmma_tile_head_dim(d);
        include = "kgen_device/attention/backward_wide_ws.cuh";
        k.threads = attention_bwd::kWgmmaWsThreads;
        k.smem_bytes = attention_bwd::wide_ws_smem_bytes(d_v, tile);
        shim.function = "attention_backward_wgmma_kv_wide_ws";
        shim.params = "AttentionBackwardTmaParams", shim.grid_constant = true;
        shim.args = {targ_type("T", spec.dtype), targ("D", tile), targ("BM", wg->query_rows),
                     targ("Causal", spec.causal), targ("HeadDim", d), targ("HeadDimV", d_v)};
        break;
      }
      const BackwardWgmmaConfig* wg_form = c.as<BackwardWgmmaConfig>();
      BackwardWgmmaConfig cp_async_form;
      if (wg_form && is_wide_ws(*wg_form)) cp_async_form = wide_ws_cp_async_form(d), wg_form = &cp_async_form;
      if (const auto* wg = wg_form; wg && wg->column_splits == 3) {
        // The wide kernel: dQ by TMA in the atomic mode, none in the deterministic one.
        const int d_v = spec.head_dim_v > 0 ? spec.head_dim_v : d;
        include = "kgen_device/attention/backward_wide.cuh";
        k.threads = attention_bwd::kWideThreads;
        k.smem_bytes = attention_bwd::kWideSmemBytes;
        shim.function = atomic ? "attention_backward_wgmma_kv_wide_tma" : "attention_backward_wgmma_kv_wide";
        if (atomic) shim.params = "AttentionBackwardTmaParams", shim.grid_constant = true;
        shim.args = {targ_type("T", spec.dtype), targ("D", attention_bwd::kWideHeadDim), targ("BM", wg->query_rows),
                     targ("Causal", spec.causal), targ("HeadDim", d), targ("HeadDimV", d_v)};
        break;
      }
      if (const auto* wg = wg_form; wg && wg->column_splits == 2) {
        const int tile = wgmma_tile_head_dim(d);
        include = "kgen_device/attention/backward_wgmma.cuh";
        k.threads = attention_bwd::kWgmmaColsThreads;
        // The atomic mode adds dQ by TMA at the 192-column tile and at head dim 256: its own entry,
        // with the maps.
        const bool tma_dq = atomic && attention_bwd::wgmma_cols_tma_dq(tile, d);
        k.smem_bytes = attention_bwd::wgmma_cols_smem_bytes(tile, wg->query_rows, tma_dq);
        shim.function = tma_dq ? "attention_backward_wgmma_kv_cols_tma" : "attention_backward_wgmma_kv_cols";
        shim.args = {targ_type("T", spec.dtype), targ("D", tile), targ("BM", wg->query_rows), targ("Causal", spec.causal)};
        if (tma_dq) shim.params = "AttentionBackwardTmaParams", shim.grid_constant = true;
        else shim.args.push_back(targ("AtomicDQ", atomic));
        if (spec.head_dim_v > 0) {
          shim.args.push_back(targ("HeadDim", d));
          shim.args.push_back(targ("HeadDimV", spec.head_dim_v));
        } else {
          add_head_dim_args(shim, tile, d);
        }
        break;
      }
      if (const auto* wg = c.as<BackwardWgmmaConfig>()) {
        const int tile = wgmma_tile_head_dim(d);
        include = "kgen_device/attention/backward_wgmma.cuh";
        if (wg->warp_specialised && atomic) {  // its deterministic mode is the kernel below
          include = "kgen_device/attention/backward_ws.cuh";
          k.threads = attention_bwd::kWgmmaWsThreads;
          k.smem_bytes = async_smem_bytes(tile, *wg);
          shim.function = wg->persistent ? "attention_backward_wgmma_kv_ws_persistent" : "attention_backward_wgmma_kv_ws";
          shim.params = "AttentionBackwardTmaParams", shim.grid_constant = true;
          shim.args = {targ_type("T", spec.dtype),       targ("D", tile),  targ("BM", wg->query_rows),
                       targ("Causal", spec.causal),       targ("Stagger", wg->async_wgs == 2),
                       targ("HeadDim", d),                targ("GroupSplit", wg->group_splits)};
          if ((wg->query_rows == 128 && wg->tma_dq) || spec.has_variant()) shim.args.push_back(targ("TmaDQ", wg->tma_dq));
          break;
        }
        if (wg->async_wgs != 0 && atomic) {  // decoupled; their deterministic mode is the kernel below
          k.threads = 256;
          k.smem_bytes = async_smem_bytes(tile, *wg);
          // dQ by TMA alone keeps its own entry (the default); TMA loads and group splits take the
          // general one.
          const bool general = wg->tma_loads || wg->group_splits != 1;
          shim.function = general      ? "attention_backward_wgmma_kv_async_maps"
                          : wg->tma_dq ? "attention_backward_wgmma_kv_async_tma"
                                       : "attention_backward_wgmma_kv_async";
          if (wg->tma_dq || general) shim.params = "AttentionBackwardTmaParams", shim.grid_constant = true;
          shim.args = {targ_type("T", spec.dtype), targ("D", tile), targ("BM", wg->query_rows),
                       targ("Causal", spec.causal), targ("Stagger", wg->async_wgs == 2)};
          if (general)
            for (TemplateArg a : {targ("TmaDQ", wg->tma_dq), targ("TmaLoads", wg->tma_loads)}) shim.args.push_back(std::move(a));
        } else {
          k.threads = wg->keys / 64 * 128;
          k.smem_bytes = attention_bwd::wgmma_kv_smem_bytes(tile, wg->query_rows, wg->keys / 64, atomic);
          shim.function = "attention_backward_wgmma_kv";
          shim.args = {targ_type("T", spec.dtype), targ("D", tile),          targ("BM", wg->query_rows),
                       targ("WGs", wg->keys / 64),  targ("Causal", spec.causal), targ("AtomicDQ", atomic)};
        }
        if (atomic && wg->async_wgs != 0 && wg->group_splits != 1) {  // GroupSplit follows an explicit HeadDim
          add_explicit_head_dim_args(shim, d);
          shim.args.push_back(targ("GroupSplit", wg->group_splits));
        } else {
          add_head_dim_args(shim, tile, d);
        }
        break;
      }
      const auto& fa2 = form_of<BackwardFa2Config>(c);
      const int tile = fa2_tile_head_dim(d);
      include = "kgen_device/attention/backward_fa2.cuh";
      k.threads = fa2.warps * 32;
      k.smem_bytes = attention_bwd::fa2_kv_smem_bytes(tile, fa2.query_rows, fa2.keys, atomic);
      shim.function = "attention_backward_fa2_kv";
      shim.args = {targ_type("T", spec.dtype), targ("D", tile),             targ("BM", fa2.query_rows), targ("BN", fa2.keys),
                   targ("Warps", fa2.warps),   targ("Causal", spec.causal), targ("AtomicDQ", atomic)};
      if (spec.head_dim_v > 0) add_head_dim_v_args(shim, d, spec.head_dim_v, column_splits(d));
      else if (spec.has_variant()) add_explicit_head_dim_args(shim, d, column_splits(d));
      else add_head_dim_args(shim, tile, d, column_splits(d));
      break;
    }
    case BackwardKernel::dq: {
      if (const auto* m = c.as<BackwardMfmaConfig>()) {
        include = render_mfma_backward(spec, *m, kernel, k, shim);
        break;
      }
      const DqTile t = attention_backward_dq_tile(d);
      include = "kgen_device/attention/backward_fa2.cuh";
      k.threads = t.warps * 32;
      const int tile = fa2_tile_head_dim(d);
      k.smem_bytes = attention_bwd::fa2_q_smem_bytes(tile, t.block_m, t.block_n);
      k.variant = to_string(spec) + ".dq:bm" + std::to_string(t.block_m) + ":bn" + std::to_string(t.block_n) +
                  ":w" + std::to_string(t.warps);
      shim.function = "attention_backward_fa2_dq";
      shim.args = {targ_type("T", spec.dtype), targ("D", tile),      targ("BM", t.block_m),
                   targ("BN", t.block_n),      targ("Warps", t.warps), targ("Causal", spec.causal)};
      if (spec.head_dim_v > 0) add_head_dim_v_args(shim, d, spec.head_dim_v);
      else if (spec.has_variant()) add_explicit_head_dim_args(shim, d);
      else add_head_dim_args(shim, tile, d);
      break;
    }
    case BackwardKernel::simt_dq:
    case BackwardKernel::simt_dkdv: {
      const auto& simt = form_of<BackwardSimtConfig>(c);
      include = "kgen_device/attention/backward_simt.cuh";
      k.threads = attention_bwd::row_threads(simt.warps);
      AttentionBackwardSpec bucket = spec;
      bucket.head_dim = simt.max_head_dim;  // one kernel serves every head_dim up to the bucket
      k.variant = to_string(bucket) + "." + to_string(c) + "." + kernel_name(kernel);
      shim.function = "attention_backward_" + kernel_name(kernel);
      shim.args = {targ_type("T", spec.dtype), targ("DMax", simt.max_head_dim), targ("Warps", simt.warps),
                   targ("Causal", spec.causal)};
      if (spec.head_dim_v > 0) add_head_dim_v_args(shim, 0, spec.head_dim_v);
      break;
    }
  }
  shim.entry = k.entry;
  shim.threads = k.threads;
  // The kernels that compute scores take the variant; the row kernels are the plain ones.
  std::string prelude;
  const bool scores = kernel == BackwardKernel::kv_atomic || kernel == BackwardKernel::kv ||
                      kernel == BackwardKernel::dq || kernel == BackwardKernel::simt_dq ||
                      kernel == BackwardKernel::simt_dkdv;
  if (scores && spec.has_variant()) {
    shim.args.push_back(targ("Variant", std::string("KgenVariant")));
    shim.variant_args = true;
    prelude = render_variant_prelude(spec.variant, spec.sinks, spec.packed);
  }
  k.source = render_entry_shims(include, k.variant, std::span(&shim, 1), prelude);
  return k;
}

bool attention_backward_dq_by_tma(const AttentionBackwardSpec& spec, const AttentionBackwardConfig& c) {
  const auto* wg = c.as<BackwardWgmmaConfig>();
  return wg && (wg->tma_dq || wg->column_splits == 3 ||
                (wg->column_splits == 2 &&
                 attention_bwd::wgmma_cols_tma_dq(wgmma_tile_head_dim(spec.head_dim), spec.head_dim)));
}

AttentionBackwardConfig attention_backward_config_without_tma_loads(const AttentionBackwardSpec& spec,
                                                                    AttentionBackwardConfig config) {
  auto* wg = config.as<BackwardWgmmaConfig>();
  if (!wg || !wg->tma_loads) return config;
  // The wide warp-specialised kernel's cp.async form: the three-warpgroup wide kernel (c3).
  if (is_wide_ws(*wg)) return wide_ws_cp_async_form(spec.head_dim);
  BackwardWgmmaConfig& c = *wg;
  c.tma_loads = false;
  c.warp_specialised = false, c.persistent = false;
  // Without TMA loads the decoupled kernels keep the cp.async addresses: at d = 105-112 with a
  // mask a1:t spills 12 + 12 bytes and a2:t 12 + 24 (d = 104: a1:t none).
  if (c.async_wgs != 0 && spec.causal && spec.head_dim > 104 && spec.head_dim <= 112)
    c.async_wgs = 0, c.tma_dq = false, c.group_splits = 1;
  // 128-row query tiles add dQ by TMA only warp-specialised: without, red_add2 from the staggered
  // a2 (the measured cp.async form, docs/kernels/measurements.md "128-row query tiles").
  if (c.query_rows == 128 && c.tma_dq) c.tma_dq = false, c.async_wgs = 2;
  // With 128-row query tiles at d = 49-56 with a mask, a2 spills 12 bytes (d = 64 and up to 48:
  // none); the 64-row form does not.
  if (c.query_rows == 128 && spec.causal && spec.head_dim > 48 && spec.head_dim <= 56) c.query_rows = 64;
  return config;
}

AttentionBackwardConfig attention_backward_variant_config(const AttentionBackwardSpec& spec,
                                                          const AttentionBackwardConfig& c,
                                                          const AttentionShape& shape, int sm_count,
                                                          bool deterministic, bool tensor_maps) {
  if (!spec.has_variant() || !c.as<BackwardWgmmaConfig>() || (!deterministic && tensor_maps)) return c;
  return attention_backward_default_config(spec, shape, *parse_target("sm_80"), sm_count);
}

std::vector<AttentionShape> attention_backward_default_shapes() {
  return {AttentionShape{8, 16, 16, 4096, 4096}, AttentionShape{1, 1, 1, 128, 128},  AttentionShape{1, 64, 8, 4096, 4096},
          AttentionShape{1, 64, 8, 16384, 16384}, AttentionShape{1, 64, 8, 1024, 1024}};
}

namespace {

// Appends the kernels of `spec`'s defaults for attention_backward_default_shapes() on `target`:
// both modes, and what serves views without tensor maps in their place.
void add_backward_defaults(std::vector<KernelSource>& out, const AttentionBackwardSpec& spec, const Target& target) {
  for (const AttentionShape& shape : attention_backward_default_shapes()) {
    const auto c = attention_backward_default_config(spec, shape, target, 132);
    for (bool deterministic : {false, true}) {
      const auto mode = attention_backward_variant_config(spec, c, shape, 132, deterministic, true);
      for (BackwardKernel kernel : attention_backward_kernels(mode, deterministic))
        add_unique(out, render_attention_backward(spec, mode, kernel));
    }
    // TMA loads serve the atomic mode only. (A variant's views without tensor maps, rare, build
    // their fa2 kernels on first use.)
    if (spec.has_variant()) continue;
    const auto without = attention_backward_config_without_tma_loads(spec, c);
    for (BackwardKernel kernel : attention_backward_kernels(without, false))
      add_unique(out, render_attention_backward(spec, without, kernel));
  }
}

// What `add` appends for each spec of `kgen warm --defaults`: fp16 and bf16,
// kAttentionDefaultWarmHeadDims, both masks.
std::vector<KernelSource> default_spec_variants(
    void (*add)(std::vector<KernelSource>&, const AttentionBackwardSpec&, const Target&), const Target& target) {
  std::vector<KernelSource> out;
  for (DType t : {DType::f16, DType::bf16})
    for (int d : kAttentionDefaultWarmHeadDims)
      for (bool causal : {false, true}) add(out, {t, d, causal}, target);
  return out;
}

// The specs of v head dims of their own that the replay table builds (kAttentionWarmHeadDimPairs,
// NVIDIA only): fp16 and bf16 (fa2) and fp32 (simt), both masks.
std::vector<AttentionBackwardSpec> head_dim_pair_specs(const Target& target) {
  std::vector<AttentionBackwardSpec> out;
  if (target.vendor != Vendor::nvidia) return out;
  for (auto [d, dv] : kAttentionWarmHeadDimPairs)
    for (DType t : {DType::f16, DType::bf16, DType::f32})
      for (bool causal : {false, true}) {
        AttentionBackwardSpec spec{t, d, causal};
        spec.head_dim_v = dv;
        out.push_back(spec);
      }
  return out;
}

}  // namespace

std::vector<KernelSource> attention_backward_all_variants(const Target& target) {
  std::vector<KernelSource> out;
  auto add_defaults = [&](const AttentionBackwardSpec& spec) { add_backward_defaults(out, spec, target); };
  // The tile head dims: the whole config space, and the defaults outside it (group splits).
  for (DType t : {DType::f16, DType::bf16, DType::f32})
    for (int d : {32, 64, 96, 128, 256})
      for (bool causal : {false, true}) {
        const AttentionBackwardSpec spec{t, d, causal};
        for (const auto& c : attention_backward_config_space(spec, target))
          for (bool deterministic : {false, true})
            for (BackwardKernel kernel : attention_backward_kernels(c, deterministic))
              add_unique(out, render_attention_backward(spec, c, kernel));
        add_defaults(spec);
      }
  // Every other tensor-core head dim: the defaults.
  for (DType t : {DType::f16, DType::bf16})
    for (int d : attention_default_only_head_dims())
      for (bool causal : {false, true}) add_defaults({t, d, causal});
  // The warm variants' defaults, with the sinks' gradient kernel where they have sinks (NVIDIA).
  if (target.vendor == Vendor::nvidia)
  for (const auto& [canonical, sinks] : attention_warm_variants())
    for (DType t : {DType::f16, DType::bf16})
      for (int d : kAttentionDefaultWarmHeadDims) {
        const AttentionBackwardSpec spec{t, d, true, canonical, sinks};
        add_defaults(spec);
        if (sinks) add_unique(out, render_attention_backward(spec, attention_backward_general_config(spec),
                                                              BackwardKernel::sinks));
      }
  // Packed batches, causal (NVIDIA).
  if (target.vendor == Vendor::nvidia)
    for (DType t : {DType::f16, DType::bf16})
      for (int d : kAttentionDefaultWarmHeadDims) {
        AttentionBackwardSpec spec{t, d, true};
        spec.packed = true;
        add_defaults(spec);
      }
  // v head dims of their own: the defaults.
  for (const AttentionBackwardSpec& spec : head_dim_pair_specs(target)) add_defaults(spec);
  return out;
}

std::vector<KernelSource> attention_backward_default_variants(const Target& target) {
  return default_spec_variants(add_backward_defaults, target);
}

// ---- double backward ----

namespace {

// The fa2 double backward serves every tensor-core head dim; above 128 columns it splits its
// Q̄/dŌ and K̄/V̄ columns over two blocks, as the backward's key-major kernel (column_splits).
bool is_dbl_fa2_head_dim(int d) { return attention_fwd::tensor_core_head_dim(d); }

// 16 rows per warp: Q̄/dŌ (or K̄/V̄) accumulators (2·16·D/32 = D), four score-shaped tiles
// (4·16·bn/32 = 2·bn) and their repacked A fragments, plus addressing and statistics; the
// factor 4 on bn matches ptxas on sm_80 and sm_90a (the query-major kernel keeps both passes'
// state live): every config it admits compiles without spills.
int dbl_register_estimate(int d, int bn) { return d + 4 * bn + 60; }

// The r/c pass keeps no Q̄/dŌ accumulators and the key-major kernel only K̄/V̄: both take
// 32-key (query) tiles where the apply pass needs 16 (d = 96, 128), halving their per-tile
// barriers and loads.
// On 256-column tiles (d > 224) the wide tiles would not fit sm_80's shared memory: they keep bn.
int dbl_wide_tile(int bn, int d = 0) { return fa2_tile_head_dim(d) > 224 ? bn : std::max(bn, 32); }

// The wgmma double backward (double_backward_wgmma.cuh): `rows` rows per block (64 per
// warpgroup) in both passes, score tiles `tile` wide. Per thread: the two row accumulators
// (tile head dim D) and the four score tiles (2·tile); D + 2·tile ≤ 192 leaves room for
// the A fragments, addressing and statistics.
// Above 128 columns (`:c2`) the tile is 256 columns wide and both warpgroups of a block own the
// same 64 rows, each keeping 128 of the accumulators' columns.
int dbl_wgmma_register_estimate(int d, int tile) { return d + 2 * tile + 60; }
int dbl_wgmma_tile(const DoubleBackwardWgmmaConfig& c, int head_dim) {
  return c.column_splits == 2 ? 256 : wgmma_tile_head_dim(head_dim);
}
int dbl_wgmma_smem_bytes(int d, const DoubleBackwardWgmmaConfig& c) {
  return std::max(attention_bwd::wgmma_dbl_q_smem_bytes(d, c.rows / 64, c.tile),
                  attention_bwd::wgmma_dbl_kv_smem_bytes(d, c.rows / 64, c.tile));
}

// `wg`: the double backward's wgmma form, or nullptr for a backward wgmma config (refused).
std::optional<std::string> check_dbl_wgmma_config(const AttentionBackwardSpec& spec, const DoubleBackwardWgmmaConfig* wg,
                                                  const Target& target) {
  if (auto why = nvidia_only_path("wgmma", target)) return why;
  if (auto why = wgmma_only_path("wgmma", target)) return why;
  if (spec.dtype == DType::f32) return std::string("wgmma path needs fp16 or bf16 inputs");
  if (!wg) return std::string("the wgmma double backward has no decoupled (a1, a2), TMA dQ (t) or TMA load (l) form");
  const DoubleBackwardWgmmaConfig& c = *wg;
  if (c.column_splits == 2) {
    if (!is_bwd_wgmma_cols_head_dim(spec.head_dim))
      return "wgmma double backward with two column halves (c2) serves head dims above 128, not head_dim=" +
             std::to_string(spec.head_dim);
    if (c.tile != 32 || c.rows != 64)
      return "wgmma double backward c2 takes bm32 and bn64 (two warpgroups sharing 64 rows), got bm" +
             std::to_string(c.tile) + " and bn" + std::to_string(c.rows);
    return smem_limit_error(dbl_wgmma_smem_bytes(dbl_wgmma_tile(c, spec.head_dim), c), target);
  }
  if (c.column_splits != 1) return std::string("wgmma double backward splits must be 1, or 2 above 128 columns");
  if (!is_bwd_wgmma_head_dim(spec.head_dim))
    return "wgmma double backward without column halves (c2) serves head dims up to 128, not head_dim=" +
           std::to_string(spec.head_dim);
  if (c.tile != 32 && c.tile != 64) return field_refusal("wgmma double backward", "bm", "32 or 64 (score tile)", c.tile);
  if (c.rows != 64 && c.rows != 128)
    return field_refusal("wgmma double backward", "bn", "64 or 128 (one or two warpgroups)", c.rows);
  const int tile = wgmma_tile_head_dim(spec.head_dim);
  if (dbl_wgmma_register_estimate(tile, c.tile) > kMaxRegistersPerThread)
    return "wgmma double backward head_dim=" + std::to_string(spec.head_dim) + " with bm" +
           std::to_string(c.tile) + " exceeds the register budget";
  return smem_limit_error(dbl_wgmma_smem_bytes(tile, c), target);
}

std::string dbl_kernel_name(DoubleBackwardKernel k) {
  switch (k) {
    case DoubleBackwardKernel::preprocess: return "preprocess";
    case DoubleBackwardKernel::q_stats: return "q_stats";
    case DoubleBackwardKernel::fused: return "fused";
    case DoubleBackwardKernel::simt_q: return "simt_q";
    case DoubleBackwardKernel::simt_kv: return "simt_kv";
  }
  return "?";
}

}  // namespace

std::string double_backward_variant_key(const AttentionBackwardSpec& s) {
  return "attention_double_bwd" + to_string(s).substr(std::string("attention_bwd").size());
}

std::optional<AttentionBackwardSpec> parse_double_backward_variant_key(const std::string& text) {
  constexpr std::string_view kPrefix = "attention_double_bwd.";
  if (!text.starts_with(kPrefix)) return std::nullopt;
  return parse_attention_backward_spec("attention_bwd." + text.substr(kPrefix.size()));
}

std::optional<std::string> check_attention_double_backward_config(const AttentionBackwardSpec& spec,
                                                                  const AttentionBackwardConfig& c,
                                                                  const Target& target) {
  // v's own head dim: fa2 and simt serve it, without a variant.
  if (auto why = check_head_dim_v(spec.head_dim, spec.head_dim_v, spec.has_variant(), text_form_head(c),
                                  "attention_double_bwd"))
    return why;
  if (c.as<BackwardSimtConfig>()) return check_attention_backward_config(spec, c, target);
  if (c.path() == BackwardPath::wgmma) {
    if (auto why = head_dim_range_error(spec.head_dim)) return why;
    if (const auto* wg = c.as<BackwardWgmmaConfig>(); wg && wg->async_wgs == 0 && !wg->tma_dq && !wg->tma_loads)
      return to_string(c) + " is read as a backward config (parse_attention_double_backward_config)";
    return check_dbl_wgmma_config(spec, c.as<DoubleBackwardWgmmaConfig>(), target);
  }
  if (c.path() == BackwardPath::mfma) return std::string("the double backward has no mfma path (use simt on AMD)");
  if (!c.as<DoubleBackwardFa2Config>())
    return to_string(c) + " is read as a backward config (parse_attention_double_backward_config)";
  const DoubleBackwardFa2Config& f = *c.as<DoubleBackwardFa2Config>();
  if (auto why = nvidia_only_path("fa2", target)) return why;
  if (auto why = head_dim_range_error(spec.head_dim)) return why;
  if (spec.dtype == DType::f32) return std::string("fa2 path needs fp16 or bf16 inputs");
  if (!is_dbl_fa2_head_dim(spec.head_dim))
    return "fa2 double backward has no head_dim=" + std::to_string(spec.head_dim) + " specialisation";
  if (f.rows != 32 && f.rows != 64 && f.rows != 128) return field_refusal("fa2", "bm", "32, 64 or 128", f.rows);
  if (f.tile != 16 && f.tile != 32 && f.tile != 64) return field_refusal("fa2", "bn", "16, 32 or 64", f.tile);
  if (f.warps != f.rows / 16) return std::string("fa2 warps must be bm / 16");
  if (dbl_register_estimate(split_columns(spec.head_dim), f.tile) > kMaxRegistersPerThread)
    return "fa2 head_dim=" + std::to_string(spec.head_dim) + " with bn" + std::to_string(f.tile) +
           " exceeds the register budget";
  const int tile = fa2_tile_head_dim(spec.head_dim);
  const int wide = dbl_wide_tile(f.tile, spec.head_dim);
  const int smem = std::max({attention_bwd::fa2_dbl_q_smem_bytes(tile, f.rows, f.tile),
                             attention_bwd::fa2_dbl_q_smem_bytes(tile, f.rows, wide),
                             attention_bwd::fa2_dbl_kv_smem_bytes(tile, wide, f.rows)});
  return smem_limit_error(smem, target);
}

std::vector<AttentionBackwardConfig> attention_double_backward_config_space(const AttentionBackwardSpec& spec,
                                                                            const Target& target) {
  std::vector<AttentionBackwardConfig> out;
  auto keep = [&](const AttentionBackwardConfig& c) {
    if (!check_attention_double_backward_config(spec, c, target)) out.push_back(c);
  };
  if (spec.dtype != DType::f32 && has_wgmma(target)) {
    for (int rows : {64, 128})
      for (int tile : {64, 32}) keep(DoubleBackwardWgmmaConfig{.tile = tile, .rows = rows});
    keep(DoubleBackwardWgmmaConfig{.tile = 32, .rows = 64, .column_splits = 2});
  }
  if (spec.dtype != DType::f32)
    for (int rows : {64, 32})
      for (int tile : {16, 32, 64}) keep(DoubleBackwardFa2Config{.rows = rows, .tile = tile, .warps = rows / 16});
  keep(attention_backward_general_config(spec));
  return out;
}

AttentionBackwardConfig attention_double_backward_default_config(const AttentionBackwardSpec& spec,
                                                                 const Target& target) {
  if (spec.head_dim_v > 0)  // fa2 (dP, Z, dŌ and V̄ over d_v): the wgmma kernels take one head dim
    return head_dim_v_default(
        spec, target,
        [](const AttentionBackwardSpec& plain, const Target& t) { return attention_double_backward_default_config(plain, t); },
        check_attention_double_backward_config);
  // Hopper, 32 to 128 columns: the wgmma kernels, one warpgroup of 64 rows per block, 64-wide
  // score tiles on the 64-column tile and 32-wide on the 128-column one (registers); faster than
  // fa2 at every measured d (docs/kernels/measurements.md, "The double backward on wgmma"). A score
  // modification (f′ and f″ per element) takes 32-wide tiles on the 64-column tile too: at 64 its
  // fused kernel spills, and the 32-wide tiles were faster ("Score modifications on 32-wide
  // tiles").
  if (spec.dtype != DType::f32 && spec.head_dim >= 32 && is_bwd_wgmma_head_dim(spec.head_dim) && has_wgmma(target)) {
    const bool score_mod = !spec.variant.empty() && Variant::from_canonical(spec.variant).has_score_mod();
    const int tile = wgmma_tile_head_dim(spec.head_dim) == 64 && !score_mod ? 64 : 32;
    const DoubleBackwardWgmmaConfig c{.tile = tile, .rows = 64};
    if (!check_attention_double_backward_config(spec, c, target)) return c;
  }
  // Above 128 columns: the 256-column tile, two warpgroups sharing 64 rows and splitting the
  // columns (`:c2`), faster than fa2 at d = 160–256 (docs/kernels/measurements.md, "The double
  // backward on wgmma").
  if (spec.dtype != DType::f32 && is_bwd_wgmma_cols_head_dim(spec.head_dim) && has_wgmma(target)) {
    const DoubleBackwardWgmmaConfig c{.tile = 32, .rows = 64, .column_splits = 2};
    if (!check_attention_double_backward_config(spec, c, target)) return c;
  }
  // 32-row tiles only where 64 do not fit (large head dims on sm_80's shared memory).
  for (int rows : {64, 32})
    for (int tile : {64, 32, 16}) {
      const DoubleBackwardFa2Config c{.rows = rows, .tile = tile, .warps = rows / 16};
      if (!check_attention_double_backward_config(spec, c, target)) return c;
    }
  return attention_backward_general_config(spec);
}

AttentionBackwardConfig attention_double_backward_default_config(const AttentionBackwardSpec& spec,
                                                                 const AttentionShape& shape, const Target& target,
                                                                 int sm_count) {
  AttentionBackwardConfig c = attention_double_backward_default_config(spec, target);
  // Fewer 64-row query tiles than half the SMs (b·h = 1 at n <= 4096 on 132 SMs): 32-row tiles on
  // 2 warps double the blocks of both passes, which gains on small grids; on larger ones the
  // 64-row tiles' K/V reuse wins over the fuller grid (docs/kernels/measurements.md, "32-row
  // double-backward tiles for small grids").
  const auto* fa2 = c.as<DoubleBackwardFa2Config>();
  if (fa2 && attention_double_backward_shape_class(shape, sm_count) == 1) {
    const DoubleBackwardFa2Config small{.rows = 32, .tile = fa2->tile, .warps = 2};
    if (!check_attention_double_backward_config(spec, small, target)) return small;
  }
  return c;
}

int attention_double_backward_stats_splits(const AttentionBackwardConfig& c, const AttentionShape& s, int sm_count,
                                           bool deterministic) {
  const auto* fa2 = c.as<DoubleBackwardFa2Config>();
  const auto* wg = c.as<DoubleBackwardWgmmaConfig>();
  if ((!fa2 && !wg) || deterministic) return 1;
  // Split the key range of the r/c pass while the blocks stay within about four per SM (measured
  // on 132 SMs) and every split keeps at least two key tiles.
  const long long q_blocks = 1LL * s.batch * s.heads_q * blocks(s.n_q, wg ? wg->rows : fa2->rows);
  const long long key_tiles = blocks(s.n_k, wg ? wg->tile : dbl_wide_tile(fa2->tile));
  int splits = 1;
  while (splits < 4 && q_blocks * splits * 2 <= 4LL * sm_count && key_tiles >= 4LL * splits) splits *= 2;
  return splits;
}

std::vector<DoubleBackwardKernel> attention_double_backward_kernels(const AttentionBackwardConfig& c) {
  using K = DoubleBackwardKernel;
  if (c.as<BackwardSimtConfig>()) return {K::preprocess, K::simt_q, K::simt_kv};
  return {K::preprocess, K::q_stats, K::fused};
}

LaunchGrid attention_double_backward_grid(const AttentionBackwardConfig& c, DoubleBackwardKernel kernel,
                                          const AttentionShape& s, int sm_count, bool deterministic, int head_dim,
                                          bool packed) {
  const auto hq = static_cast<unsigned>(s.heads_q), hkv = static_cast<unsigned>(s.heads_kv),
             b = static_cast<unsigned>(s.batch);
  const auto* wg = c.as<DoubleBackwardWgmmaConfig>();
  // Rows per block of both passes (the tensor-core forms).
  const auto rows = [&] { return wg ? wg->rows : form_of<DoubleBackwardFa2Config>(c).rows; };
  switch (kernel) {
    case DoubleBackwardKernel::preprocess:
      return {blocks(s.n_q, attention_bwd::preprocess_block_rows(kRowWarps, head_dim)), hq, b};
    case DoubleBackwardKernel::q_stats:
      return {blocks(s.n_q, rows()) * static_cast<unsigned>(attention_double_backward_stats_splits(c, s, sm_count, deterministic)),
              hq, b};
    case DoubleBackwardKernel::fused: {
      const unsigned splits = wg ? 1u : static_cast<unsigned>(column_splits(head_dim));
      // Packed: two equal halves (the kernels' fused_query_blocks), each of the longest sequence's tiles.
      if (packed) return {2 * std::max(blocks(s.n_q, rows()), blocks(s.n_k, rows())) * splits, hq, b};
      return {(blocks(s.n_q, rows()) + blocks(s.n_k, rows())) * splits, hq, b};
    }
    case DoubleBackwardKernel::simt_q: return {blocks(s.n_q, form_of<BackwardSimtConfig>(c).warps), hq, b};
    case DoubleBackwardKernel::simt_kv: return {blocks(s.n_k, form_of<BackwardSimtConfig>(c).warps), hkv, b};
  }
  return {};
}

KernelSource render_attention_double_backward(const AttentionBackwardSpec& spec, const AttentionBackwardConfig& c,
                                              DoubleBackwardKernel kernel) {
  if (kernel == DoubleBackwardKernel::preprocess) return render_attention_backward(spec, c, BackwardKernel::preprocess);
  KernelSource k;
  k.op = "attention_double_bwd";
  k.entry = "kgen_attention_double_bwd_" + dbl_kernel_name(kernel);
  const int d = fa2_tile_head_dim(spec.head_dim);  // the tile's head dim
  EntryShim shim{"", 0, 1, "AttentionBackwardParams", "", {}};
  std::string include = "kgen_device/attention/double_backward_fa2.cuh";
  AttentionBackwardSpec named = spec;
  if (const auto* wg = c.as<DoubleBackwardWgmmaConfig>()) {
    // c2: the fused kernel's two warpgroups share each block's 64 rows; the r/c pass (no row
    // accumulators) runs one warpgroup.
    const int tile = dbl_wgmma_tile(*wg, spec.head_dim);
    const bool stats = kernel == DoubleBackwardKernel::q_stats;
    const int splits = stats ? 1 : wg->column_splits;
    const int wgs = stats ? wg->rows / 64 : wg->warpgroups();
    include = "kgen_device/attention/double_backward_wgmma.cuh";
    k.threads = wgs * 128;
    k.smem_bytes = stats ? attention_bwd::wgmma_dbl_q_smem_bytes(tile, wg->rows / 64, wg->tile) : dbl_wgmma_smem_bytes(tile, *wg);
    shim.function = stats ? "attention_double_backward_wgmma_q" : "attention_double_backward_wgmma_fused";
    shim.args = {targ_type("T", spec.dtype), targ("D", tile), targ("Tile", wg->tile), targ("WGs", wgs),
                 targ("Causal", spec.causal)};
    if (stats) shim.args.push_back(targ("Pass", std::string("kgen::DoubleBackwardRowPass::stats")));
    if (spec.has_variant()) add_explicit_head_dim_args(shim, spec.head_dim, splits);
    else add_head_dim_args(shim, tile, spec.head_dim, splits);
  } else if (const auto* simt = c.as<BackwardSimtConfig>()) {
    include = "kgen_device/attention/double_backward_simt.cuh";
    k.threads = attention_bwd::row_threads(simt->warps);
    named.head_dim = simt->max_head_dim;
    shim.function = "attention_double_backward_" + dbl_kernel_name(kernel);
    shim.args = {targ_type("T", spec.dtype), targ("DMax", simt->max_head_dim), targ("Warps", simt->warps),
                 targ("Causal", spec.causal)};
    if (spec.head_dim_v > 0) add_head_dim_v_args(shim, 0, spec.head_dim_v);
  } else {
    const auto& fa2 = form_of<DoubleBackwardFa2Config>(c);
    const int wide = dbl_wide_tile(fa2.tile, spec.head_dim);
    if (kernel == DoubleBackwardKernel::q_stats) {
      k.threads = fa2.warps * 32;
      k.smem_bytes = attention_bwd::fa2_dbl_q_smem_bytes(d, fa2.rows, wide);
      shim.function = "attention_double_backward_fa2_q";
      shim.args = {targ_type("T", spec.dtype), targ("D", d),         targ("BM", fa2.rows), targ("BN", wide),
                   targ("Warps", fa2.warps),   targ("Causal", spec.causal), targ("Pass", std::string("kgen::DoubleBackwardRowPass::stats"))};
      if (spec.head_dim_v > 0) add_head_dim_v_args(shim, spec.head_dim, spec.head_dim_v, 1);
      else if (spec.has_variant()) add_explicit_head_dim_args(shim, spec.head_dim, 1);
      else add_head_dim_args(shim, d, spec.head_dim);
    } else {
      // The key-major part uses the transposed tile: `rows` keys against `wide`-row query tiles.
      k.threads = fa2.warps * 32;
      k.smem_bytes = std::max(attention_bwd::fa2_dbl_q_smem_bytes(d, fa2.rows, fa2.tile),
                              attention_bwd::fa2_dbl_kv_smem_bytes(d, wide, fa2.rows));
      shim.function = "attention_double_backward_fa2_fused";
      shim.args = {targ_type("T", spec.dtype), targ("D", d),         targ("BM", fa2.rows),        targ("BN", fa2.tile),
                   targ("KvBM", wide), targ("Warps", fa2.warps), targ("Causal", spec.causal)};
      if (spec.head_dim_v > 0) add_head_dim_v_args(shim, spec.head_dim, spec.head_dim_v, column_splits(spec.head_dim));
      else if (spec.has_variant()) add_explicit_head_dim_args(shim, spec.head_dim, column_splits(spec.head_dim));
      else add_head_dim_args(shim, d, spec.head_dim, column_splits(spec.head_dim));
    }
  }
  k.variant = double_backward_variant_key(named) + "." + to_string(c) + "." + dbl_kernel_name(kernel);
  shim.entry = k.entry;
  shim.threads = k.threads;
  // Every kernel here computes scores: a variant's struct and inputs reach them all.
  std::string prelude;
  if (spec.has_variant()) {
    shim.args.push_back(targ("Variant", std::string("KgenVariant")));
    shim.variant_args = true;
    prelude = render_variant_prelude(spec.variant, spec.sinks, spec.packed);
  }
  k.source = render_entry_shims(include, k.variant, std::span(&shim, 1), prelude);
  return k;
}

std::vector<AttentionShape> attention_double_backward_default_shapes() {
  return {AttentionShape{1, 1, 1, 8192, 8192}, AttentionShape{1, 1, 1, 128, 128}};
}

namespace {

// Appends the kernels of `spec`'s defaults for attention_double_backward_default_shapes() on
// `target`, without the preprocess kernel (attention_bwd's).
void add_double_backward_defaults(std::vector<KernelSource>& out, const AttentionBackwardSpec& spec, const Target& target) {
  for (const AttentionShape& shape : attention_double_backward_default_shapes()) {
    const auto c = attention_double_backward_default_config(spec, shape, target, 132);
    for (DoubleBackwardKernel kernel : attention_double_backward_kernels(c))
      if (kernel != DoubleBackwardKernel::preprocess) add_unique(out, render_attention_double_backward(spec, c, kernel));
  }
}

}  // namespace

std::vector<KernelSource> attention_double_backward_all_variants(const Target& target) {
  std::vector<KernelSource> out;
  for (DType t : {DType::f16, DType::bf16, DType::f32})
    for (int d : {32, 64, 96, 128, 256})
      for (bool causal : {false, true}) {
        const AttentionBackwardSpec spec{t, d, causal};
        for (const auto& c : attention_double_backward_config_space(spec, target))
          for (DoubleBackwardKernel kernel : attention_double_backward_kernels(c)) {
            if (kernel == DoubleBackwardKernel::preprocess) continue;  // attention_bwd's kernel
            add_unique(out, render_attention_double_backward(spec, c, kernel));
          }
      }
  // Every other tensor-core head dim: the defaults of both shape classes.
  for (DType t : {DType::f16, DType::bf16})
    for (int d : attention_default_only_head_dims())
      for (bool causal : {false, true}) add_double_backward_defaults(out, {t, d, causal}, target);
  // The warm variants' defaults (NVIDIA, as the backward's).
  if (target.vendor == Vendor::nvidia)
    for (const auto& [canonical, sinks] : attention_warm_variants())
      for (DType t : {DType::f16, DType::bf16})
        for (int d : kAttentionDefaultWarmHeadDims) add_double_backward_defaults(out, {t, d, true, canonical, sinks}, target);
  // Packed batches, causal (NVIDIA, as the backward's): the defaults, fp32's general path, and on
  // wgmma targets the fa2 kernels an explicit config names.
  if (target.vendor == Vendor::nvidia)
    for (int d : kAttentionDefaultWarmHeadDims) {
      for (DType t : {DType::f16, DType::bf16, DType::f32}) {
        AttentionBackwardSpec spec{t, d, true};
        spec.packed = true;
        add_double_backward_defaults(out, spec, target);
      }
      AttentionBackwardSpec spec{DType::bf16, d, true};
      spec.packed = true;
      if (has_wgmma(target))  // sm_80's default fa2 form (64-row tiles, the widest score tile that fits)
        for (int bn : {64, 32, 16}) {
          const AttentionBackwardConfig fa2 = DoubleBackwardFa2Config{.rows = 64, .tile = bn, .warps = 4};
          if (check_attention_double_backward_config(spec, fa2, target)) continue;
          for (DoubleBackwardKernel kernel : attention_double_backward_kernels(fa2))
            if (kernel != DoubleBackwardKernel::preprocess) add_unique(out, render_attention_double_backward(spec, fa2, kernel));
          break;
        }
    }
  // v head dims of their own: the defaults, as the backward's.
  for (const AttentionBackwardSpec& spec : head_dim_pair_specs(target)) add_double_backward_defaults(out, spec, target);
  return out;
}

std::vector<KernelSource> attention_double_backward_default_variants(const Target& target) {
  return default_spec_variants(add_double_backward_defaults, target);
}

}  // namespace kgen
