// paged_append (docs/attention.md §10): new K/V rows written into their pages, with an optional
// fused rotary embedding. Spec (what is fixed per compiled kernel), config space, validity rules,
// the per-shape default, the launch plan and rendering of one variant.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "generator/kernel_source.h"
#include "generator/target.h"

namespace kgen {

// FlashAttention's rotary styles: halves is GPT-NeoX (rotary_interleaved=False), pairs GPT-J
// (rotary_interleaved=True). Values match kAppendRotary* of paged_append_params.h.
enum class AppendRotary { none = 0, halves = 1, pairs = 2 };

struct PagedAppendSpec {
  DType dtype = DType::bf16;               // the caches, k_new, v_new, q
  AppendRotary rotary = AppendRotary::none;
  bool rotary_f32 = false;                 // the cos/sin tables are fp32 (else the caches' dtype)
  bool operator==(const PagedAppendSpec&) const = default;
};

struct PagedAppendConfig {
  int threads = 128;  // threads per block
  int vec = 8;        // elements per thread (one piece of vec · sizeof(T) <= 16 bytes)
  bool operator==(const PagedAppendConfig&) const = default;
};

// "paged_append.bf16", "paged_append.fp16.rotary", "paged_append.bf16.rotary_interleaved.cos_fp32"
// (rotary: halves; rotary_interleaved: pairs; cos_fp32: fp32 tables for a 16-bit cache).
std::string to_string(const PagedAppendSpec& s);
std::optional<PagedAppendSpec> parse_paged_append_spec(const std::string& text);

// "ap:t128:v8".
std::string to_string(const PagedAppendConfig& c);
std::optional<PagedAppendConfig> parse_paged_append_config(const std::string& text);
std::vector<ConfigField> explain(const PagedAppendConfig& c);

// Why `config` cannot compile for `spec` (nullopt when it can): names the offending field.
std::optional<std::string> check_paged_append_config(const PagedAppendSpec& spec, const PagedAppendConfig& config);
// Why `config` cannot serve rows of `head_dim` elements (beyond check_paged_append_config).
std::optional<std::string> check_paged_append_config_for_head_dim(const PagedAppendSpec& spec,
                                                                  const PagedAppendConfig& config, int head_dim);

// Every valid config of `spec` (the default first).
std::vector<PagedAppendConfig> paged_append_config_space(const PagedAppendSpec& spec);
// The built-in default: 16-byte pieces, 128 threads (a bandwidth-bound copy of a few rows).
PagedAppendConfig paged_append_default_config(const PagedAppendSpec& spec);

// Threads per row (a power of two covering head_dim in pieces of config.vec) and the grid of
// `rows` rows.
struct PagedAppendLaunchPlan {
  int row_group = 1, row_group_log2 = 0;
  LaunchGrid grid;
};
PagedAppendLaunchPlan paged_append_launch_plan(const PagedAppendConfig& config, int head_dim, long long rows);

inline constexpr const char* kPagedAppendEntry = "kgen_paged_append";
inline constexpr const char* kPagedAppendOp = "paged_append";

KernelSource render_paged_append(const PagedAppendSpec& spec, const PagedAppendConfig& config);

// Every kernel `kgen warm` compiles: fp16, bf16 and fp32, each rotary style and table dtype, the
// whole config space.
std::vector<KernelSource> paged_append_all_variants();
// The defaults' kernels (`kgen warm --defaults`): fp16 and bf16, each rotary style with tables of
// the caches' dtype (FlashAttention's rule; fp32 tables compile on first use).
std::vector<KernelSource> paged_append_default_variants();

}  // namespace kgen
