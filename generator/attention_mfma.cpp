#include "generator/attention_mfma.h"

#include "generator/config_text.h"

#include <algorithm>

#include "kgen_device/attention/mfma_config.h"

namespace kgen {
namespace {

// VGPRs a lane may use (architectural ones; gfx90a and later have as many accumulation
// registers again, which the estimate leaves as slack). Every config within it compiles without
// scratch for gfx90a, gfx942 and gfx950 (clang 22): tests/runtime/compiler/amd_compile_test.cpp
// and the AMD replay table. gfx90a's fallback compiler, ROCm 5.2's hiprtc, builds the key-major
// backward at d = 128 without scratch too, in 422-434 registers (166-178 of them AGPRs).
constexpr int kVgprBudget = 256;

std::string number(int x) { return std::to_string(x); }

// Why `bytes` of LDS do not fit a block on `target` (nullopt when they do).
std::optional<std::string> lds_limit_error(int bytes, const Target& target) {
  if (bytes <= target.max_smem_per_block) return std::nullopt;
  return "needs " + number(bytes) + " bytes of LDS, " + target.arch + " allows " + number(target.max_smem_per_block);
}

// What the forward and the backward require alike: an AMD target, 16-bit inputs, d = 64 or 128,
// 32 rows per wave.
std::optional<std::string> check_common(DType dtype, int head_dim, int rows, int waves, const Target& target,
                                        const char* rows_name) {
  if (target.vendor != Vendor::amd) return "the mfma path needs an AMD CDNA target (gfx90a, gfx942, gfx950), not " + target.arch;
  if (dtype == DType::f32) return std::string("mfma path needs fp16 or bf16 inputs");
  if (head_dim != 64 && head_dim != 128) return "mfma path has no head_dim=" + number(head_dim) + " specialisation (64 or 128)";
  // Divided, not multiplied: a config's wave count may be any number it parses to.
  if (waves < 1 || rows % attention_mfma::kWaveRows != 0 || rows / attention_mfma::kWaveRows != waves)
    return std::string("mfma ") + rows_name + " must be 32 per wave (" + rows_name + " = 32·w)";
  return std::nullopt;
}

// Whether the forward's K and Vᵀ tiles are swizzled on `target` (mfma_config.h's SwizzledLds) or
// padded: gfx950 keeps the padded tiles (forward_mfma.cuh chooses by the compiler's target).
bool forward_lds_swizzled(const Target& target) { return target.processor() != "gfx950"; }

// Blocks per compute unit the forward's launch bounds ask for: two 4-wave blocks (two waves per
// SIMD) where their swizzled tiles fit 64 KiB together; the registers then fit 256 per lane
// without scratch (tests/replay/amd.tsv). Other configs keep the forward's one block.
int forward_min_blocks(const AttentionForwardSpec& spec, const AttentionForwardConfig& c) {
  constexpr int kLdsPerCu = 64 * 1024;
  return c.warps == 4 && 2 * attention_mfma::forward_lds_bytes(spec.head_dim, c.block_n, true) <= kLdsPerCu ? 2 : 1;
}

// The backward's query-major dQ kernel tile: attention_backward_dq_tile's rows, so the launch
// grid is the fa2 kernel's.
int dq_block_m() { return attention_mfma::kDqWaves * attention_mfma::kWaveRows; }

}  // namespace

bool mfma_serves(DType dtype, int head_dim, const Target& target) {
  return target.vendor == Vendor::amd && dtype != DType::f32 && (head_dim == 64 || head_dim == 128);
}

std::optional<std::string> check_mfma_forward_config(const AttentionForwardSpec& spec, const AttentionForwardConfig& c,
                                                     const Target& target) {
  if (auto why = check_common(spec.dtype, spec.head_dim, c.block_m, c.warps, target, "bm")) return why;
  if (c.block_m != 64 && c.block_m != 128) return field_refusal("mfma", "bm", "64 or 128 (2 or 4 waves)", c.block_m);
  if (c.block_n != 32 && c.block_n != 64 && c.block_n != 128)
    return field_refusal("mfma", "bn", "32, 64 or 128 (keys per tile)", c.block_n);
  if (attention_mfma::forward_vgpr_estimate(spec.head_dim, c.block_n) > kVgprBudget)
    return "mfma head_dim=" + number(spec.head_dim) + " with bn" + number(c.block_n) + " exceeds the VGPR budget";
  return lds_limit_error(attention_mfma::forward_lds_bytes(spec.head_dim, c.block_n, forward_lds_swizzled(target)), target);
}

std::vector<AttentionForwardConfig> mfma_forward_config_space(const AttentionForwardSpec& spec, const Target& target) {
  std::vector<AttentionForwardConfig> out;
  if (!mfma_serves(spec.dtype, spec.head_dim, target)) return out;
  for (int bm : {128, 64})
    for (int bn : {64, 32, 128}) {
      const AttentionForwardConfig c{.path = ForwardPath::mfma, .block_m = bm, .block_n = bn, .stages = 1, .warps = bm / attention_mfma::kWaveRows};
      if (!check_mfma_forward_config(spec, c, target)) out.push_back(c);
    }
  return out;
}

std::optional<AttentionForwardConfig> mfma_forward_default_config(const AttentionForwardSpec& spec, const Target& target) {
  // 4 waves of 32 query rows against 64-key tiles (32 KiB of LDS at d = 128): unmeasured, no AMD
  // GPU has run it; the tuner can pick another where one exists. At d = 64, 128-key tiles: the
  // per-tile work (O's rescale, the new maximum, waits and barriers) spread over twice the MFMAs:
  // fewer non-MFMA instructions per MFMA in the main loop (gfx942 bf16 6.1 where 64-key tiles
  // issue 7.0, gfx950 9.8 where they issue 11.3: docs/kernels/amd_mfma.md), still two blocks per
  // compute unit (gfx90a, gfx942: 32 KiB of swizzled tiles, 256 VGPRs;
  // gfx950: 35 KiB of padded tiles, at most 250 VGPRs; no AGPRs, no scratch: tests/replay/amd.tsv).
  const int block_n = spec.head_dim == 64 ? 128 : 64;
  const AttentionForwardConfig c{.path = ForwardPath::mfma, .block_m = 128, .block_n = block_n, .stages = 1, .warps = 4};
  if (check_mfma_forward_config(spec, c, target)) return std::nullopt;
  return c;
}

std::string render_mfma_forward(const AttentionForwardSpec& spec, const AttentionForwardConfig& c, KernelSource& k,
                                EntryShim& shim) {
  k.threads = attention_mfma::threads(c.warps);
  k.smem_bytes = 0;  // static: the tiles' layout and size depend on the target (forward_mfma.cuh)
  shim.min_blocks = forward_min_blocks(spec, c);
  shim.function = "attention_forward_mfma";
  shim.args.insert(shim.args.end(), {targ("D", spec.head_dim), targ("BM", c.block_m), targ("BN", c.block_n),
                                     targ("Causal", spec.causal)});
  return "kgen_device/attention/forward_mfma.cuh";
}

std::optional<std::string> check_mfma_backward_config(const AttentionBackwardSpec& spec, const BackwardMfmaConfig& c,
                                                      const Target& target) {
  if (auto why = check_common(spec.dtype, spec.head_dim, c.keys, c.waves, target, "bn")) return why;
  if (c.query_rows != 32 && c.query_rows != 64)
    return field_refusal("mfma", "bm", "32 or 64 (query rows per tile)", c.query_rows);
  if (c.keys != 64 && c.keys != 128) return field_refusal("mfma", "bn", "64 or 128 (2 or 4 waves)", c.keys);
  if (c.column_splits != 1 && c.column_splits != 2) return std::string("mfma column splits must be 1 or 2");
  if (c.column_splits == 2 && spec.head_dim != 128) return std::string("mfma column splits (c2) serve head_dim=128 only");
  if (attention_mfma::kv_vgpr_estimate(spec.head_dim / c.column_splits) > kVgprBudget)
    return "mfma backward head_dim=" + number(spec.head_dim) + " exceeds the VGPR budget on " + target.arch +
           " (its dK/dV columns split over two blocks, \":c2\", fit)";
  const int lds = std::max(attention_mfma::kv_lds_bytes(spec.head_dim, c.query_rows, c.keys, true),
                           attention_mfma::dq_lds_bytes(spec.head_dim, attention_mfma::kDqBlockN));
  return lds_limit_error(lds, target);
}

std::vector<AttentionBackwardConfig> mfma_backward_config_space(const AttentionBackwardSpec& spec, const Target& target) {
  std::vector<AttentionBackwardConfig> out;
  if (!mfma_serves(spec.dtype, spec.head_dim, target)) return out;
  // Column splits only where one block's accumulators do not fit the VGPR estimate.
  for (int bn : {64, 128})
    for (int bm : {32, 64}) {
      BackwardMfmaConfig c{.query_rows = bm, .keys = bn, .waves = bn / attention_mfma::kWaveRows};
      if (check_mfma_backward_config(spec, c, target)) c.column_splits = 2;
      if (!check_mfma_backward_config(spec, c, target)) out.push_back(c);
    }
  return out;
}

std::optional<BackwardMfmaConfig> mfma_backward_default_config(const AttentionBackwardSpec& spec, const Target& target) {
  // 2 waves of 32 keys against 32-row query tiles: fits the 64 KiB of gfx90a/gfx942 with the
  // atomic-dQ tiles at d = 128. Unmeasured.
  BackwardMfmaConfig c{.query_rows = 32, .keys = 64, .waves = 2};
  if (check_mfma_backward_config(spec, c, target)) c.column_splits = 2;
  if (check_mfma_backward_config(spec, c, target)) return std::nullopt;
  return c;
}

std::string render_mfma_backward(const AttentionBackwardSpec& spec, const BackwardMfmaConfig& c,
                                 BackwardKernel kernel, KernelSource& k, EntryShim& shim) {
  const int d = spec.head_dim;
  if (kernel == BackwardKernel::dq) {
    k.threads = attention_mfma::threads(attention_mfma::kDqWaves);
    k.smem_bytes = attention_mfma::dq_lds_bytes(d, attention_mfma::kDqBlockN);
    k.variant = to_string(spec) + ".mfma_dq:bm" + number(dq_block_m()) + ":bn" + number(attention_mfma::kDqBlockN);
    shim.function = "attention_backward_mfma_dq";
    shim.args = {targ_type("T", spec.dtype), targ("D", d), targ("BN", attention_mfma::kDqBlockN), targ("Causal", spec.causal)};
  } else {
    const bool atomic = kernel == BackwardKernel::kv_atomic;
    k.threads = attention_mfma::threads(c.waves);
    k.smem_bytes = attention_mfma::kv_lds_bytes(d, c.query_rows, c.keys, atomic);
    shim.function = "attention_backward_mfma_kv";
    shim.args = {targ_type("T", spec.dtype), targ("D", d),         targ("BM", c.query_rows),
                 targ("Waves", c.waves),     targ("Causal", spec.causal), targ("AtomicDQ", atomic)};
    if (c.column_splits != 1) shim.args.push_back(targ("Splits", c.column_splits));
  }
  return "kgen_device/attention/backward_mfma.cuh";
}

}  // namespace kgen
