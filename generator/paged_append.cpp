#include "generator/paged_append.h"

#include <algorithm>
#include <span>

#include "generator/config_text.h"
#include "generator/entry_shim.h"
#include "kgen_device/attention/paged_append_params.h"

namespace kgen {
namespace {

static_assert(static_cast<int>(AppendRotary::halves) == kAppendRotaryHalves &&
                  static_cast<int>(AppendRotary::pairs) == kAppendRotaryPairs,
              "AppendRotary values are the template's rotary codes");

constexpr const char* kPrefix = "paged_append.";

int element_bytes(DType t) { return t == DType::f32 ? 4 : 2; }

}  // namespace

std::string to_string(const PagedAppendSpec& s) {
  std::string out = kPrefix + std::string(dtype_name(s.dtype));
  if (s.rotary == AppendRotary::halves) out += ".rotary";
  if (s.rotary == AppendRotary::pairs) out += ".rotary_interleaved";
  if (s.rotary_f32) out += ".cos_fp32";
  return out;
}

std::optional<PagedAppendSpec> parse_paged_append_spec(const std::string& text) {
  auto parts = split_fields(text, '.');
  if (parts.size() < 2 || parts.size() > 4 || parts[0] + "." != kPrefix) return std::nullopt;
  PagedAppendSpec s;
  auto dtype = parse_dtype(parts[1]);
  if (!dtype || dtype_name(*dtype) != parts[1] || *dtype == DType::i32) return std::nullopt;
  s.dtype = *dtype;
  std::size_t i = 2;
  if (i < parts.size() && parts[i] == "rotary") s.rotary = AppendRotary::halves, ++i;
  else if (i < parts.size() && parts[i] == "rotary_interleaved") s.rotary = AppendRotary::pairs, ++i;
  if (i < parts.size() && parts[i] == "cos_fp32" && s.rotary != AppendRotary::none && s.dtype != DType::f32)
    s.rotary_f32 = true, ++i;
  if (i != parts.size()) return std::nullopt;
  return s;
}

std::string to_string(const PagedAppendConfig& c) {
  return "ap:t" + std::to_string(c.threads) + ":v" + std::to_string(c.vec);
}

std::optional<PagedAppendConfig> parse_paged_append_config(const std::string& text) {
  auto parts = split_fields(text, ':');
  PagedAppendConfig c;
  if (parts.size() != 3 || parts[0] != "ap" || !parse_prefixed_int(parts[1], "t", c.threads) ||
      !parse_prefixed_int(parts[2], "v", c.vec))
    return std::nullopt;
  return c;
}

std::vector<ConfigField> explain(const PagedAppendConfig& c) {
  const auto n = [](int v) { return std::to_string(v); };
  return {{"ap", "paged K/V append: threads share a row, each owning one piece of it"},
          {"t" + n(c.threads), n(c.threads) + " threads per block"},
          {"v" + n(c.vec), n(c.vec) + " elements per thread, moved as one piece (head dims up to " +
                               n(c.threads * c.vec) + ")"}};
}

std::optional<std::string> check_paged_append_config(const PagedAppendSpec& spec, const PagedAppendConfig& c) {
  if (c.threads != 64 && c.threads != 128 && c.threads != 256) return field_refusal("ap", "t", "64, 128 or 256 (threads per block)", c.threads);
  if (c.vec != 2 && c.vec != 4 && c.vec != 8) return field_refusal("ap", "v", "2, 4 or 8 (elements per thread)", c.vec);
  if (c.vec * element_bytes(spec.dtype) > 16)
    return "vec " + std::to_string(c.vec) + " of " + std::string(dtype_name(spec.dtype)) +
           " passes 16 bytes per piece";
  return std::nullopt;
}

std::optional<std::string> check_paged_append_config_for_head_dim(const PagedAppendSpec& spec,
                                                                  const PagedAppendConfig& c, int head_dim) {
  if (auto why = check_paged_append_config(spec, c)) return why;
  if (head_dim > c.threads * c.vec)
    return "t" + std::to_string(c.threads) + ":v" + std::to_string(c.vec) + " serves head dims up to " +
           std::to_string(c.threads * c.vec) + ", not " + std::to_string(head_dim);
  return std::nullopt;
}

std::vector<PagedAppendConfig> paged_append_config_space(const PagedAppendSpec& spec) {
  // Pieces of 16 and 8 bytes, blocks of 128 and 256 threads (what the kernel's speed can depend
  // on; the validity rule admits more for explicit configs).
  const PagedAppendConfig d = paged_append_default_config(spec);
  return {d, {256, d.vec}, {128, d.vec / 2}, {256, d.vec / 2}};
}

PagedAppendConfig paged_append_default_config(const PagedAppendSpec& spec) {
  return {128, 16 / element_bytes(spec.dtype)};
}

PagedAppendLaunchPlan paged_append_launch_plan(const PagedAppendConfig& c, int head_dim, long long rows) {
  PagedAppendLaunchPlan plan;
  const int pieces = std::max(1, (head_dim + c.vec - 1) / c.vec);
  while (plan.row_group < pieces) plan.row_group *= 2, ++plan.row_group_log2;
  const long long rows_per_block = c.threads / plan.row_group;
  plan.grid.x = static_cast<unsigned>(std::max(1LL, (rows + rows_per_block - 1) / rows_per_block));
  return plan;
}

KernelSource render_paged_append(const PagedAppendSpec& spec, const PagedAppendConfig& c) {
  KernelSource k;
  k.op = kPagedAppendOp;
  k.entry = kPagedAppendEntry;
  k.threads = c.threads;
  k.variant = to_string(spec) + "." + to_string(c);
  const DType table = spec.rotary_f32 ? DType::f32 : spec.dtype;
  const EntryShim shim{k.entry,
                       c.threads,
                       0,
                       "PagedAppendParams",
                       "paged_append",
                       {targ_type("T", spec.dtype), targ_type("C", table), targ("Rotary", static_cast<int>(spec.rotary)),
                        targ("V", c.vec), targ("Threads", c.threads)}};
  k.source = render_entry_shims("kgen_device/attention/paged_append.cuh", k.variant, std::span(&shim, 1));
  return k;
}

namespace {

// Every spec: each dtype (given), each rotary style, and for 16-bit caches both table dtypes.
std::vector<PagedAppendSpec> specs_of(std::initializer_list<DType> dtypes) {
  std::vector<PagedAppendSpec> out;
  for (DType t : dtypes)
    for (AppendRotary r : {AppendRotary::none, AppendRotary::halves, AppendRotary::pairs})
      for (bool f32 : {false, true})
        if (!f32 || (r != AppendRotary::none && t != DType::f32)) out.push_back({t, r, f32});
  return out;
}

}  // namespace

std::vector<KernelSource> paged_append_all_variants() {
  std::vector<KernelSource> out;
  for (const PagedAppendSpec& s : specs_of({DType::f16, DType::bf16, DType::f32}))
    for (const PagedAppendConfig& c : paged_append_config_space(s)) out.push_back(render_paged_append(s, c));
  return out;
}

std::vector<KernelSource> paged_append_default_variants() {
  std::vector<KernelSource> out;
  for (const PagedAppendSpec& s : specs_of({DType::f16, DType::bf16}))
    if (!s.rotary_f32) out.push_back(render_paged_append(s, paged_append_default_config(s)));
  return out;
}

}  // namespace kgen
