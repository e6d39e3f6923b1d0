#include "generator/attention_forward.h"

#include "generator/entry_shim.h"
#include "generator/variant.h"
#include "generator/variant_ranges.h"
#include "kgen/types.hpp"

#include <algorithm>
#include <bit>
#include <charconv>
#include <sstream>

#include "generator/attention_mfma.h"
#include "generator/config_text.h"
#include "kgen_device/attention/forward_config.h"
#include "kgen_device/attention/forward_ws_config.h"
#include "kgen_device/attention/fp8_params.h"
#include "kgen_device/attention/paged_tile.h"

namespace kgen {
namespace {

constexpr int kSimtHeadDims[] = {32, 64, 128, 256};
constexpr int kMaxRegistersPerThread = 255;

using attention_fwd::fa2_tile_head_dim;
using attention_fwd::mma_head_dim;
using attention_fwd::wgmma_tile_head_dim;
bool is_fa2_head_dim(int d) { return attention_fwd::tensor_core_head_dim(d); }
bool is_wgmma_head_dim(int d) { return is_fa2_head_dim(d); }

// Registers per thread of the wgmma kernel: O (D/2) and S (BN/2) accumulators, P packed to 16
// bits (BN/4), plus addressing and softmax state.
int wgmma_register_estimate(int d, int bn) { return d / 2 + bn / 2 + bn / 4 + 40; }
// Dynamic shared memory of a wg config: its tiles, and with paged K/V the slots of the tiles'
// page ids.
int wgmma_config_smem_bytes(const AttentionForwardSpec& spec, const AttentionForwardConfig& c) {
  return attention_fwd::wgmma_smem_bytes(wgmma_tile_head_dim(spec.head_dim), c.block_m / 64, c.block_n, c.stages) +
         (spec.paged ? attention_fwd::kPagedTileIdBytes : 0);
}
// Registers per consumer thread of the warp-specialised kernel: O (D/2, d being V's and O's
// columns), S of the next tile (BN/2) and P of the current one packed (BN/4), plus addressing and
// softmax state; setmaxnreg gives each consumer 240.
int ws_register_estimate(int d, int bn) { return d / 2 + bn / 2 + bn / 4 + 40; }
// The ws kernel's V and O columns (forward_ws.cuh's DV).
int ws_v_tile(const AttentionForwardSpec& spec) {
  return attention_fwd::ws_v_cols(wgmma_tile_head_dim(spec.head_dim), spec.head_dim, spec.v_dim());
}
constexpr int kWsConsumerRegisters = 240;
int simt_bucket(int d) { return attention_simt_bucket(d); }

// Registers per thread of the fa2 kernel, estimated from its fragments for r = 16 or 32 rows
// per warp, with d the head-dim columns its mma cover (mma_head_dim): O accumulator (r·D/32),
// S accumulator (r·BN/32), Q fragments when kept in registers (r·D/64, only while r·D <= 2048),
// fragments in flight (r·BN/64), plus addressing and softmax state. With 32 rows per warp, Q re-read and D + BN >= 192 the kernel keeps its
// Q·Kᵀ k-loop rolled (kRollQK in forward_fa2.cuh), so only one k-step of K fragments (BN/4) is
// in flight. Checked against ptxas -v on sm_80 and sm_90a: every config it admits compiles
// without spills (tests/runtime/compiler/compile_test.cpp).
int fa2_register_estimate(int d, int bn, int rows_per_warp) {
  const int r = rows_per_warp;
  const int q_frags = r * d <= 2048 ? r * d / 64 : 0;
  const bool rolled_qk = r == 32 && q_frags == 0 && d + bn >= 192;
  const int in_flight = rolled_qk ? bn / 4 : r * bn / 64;
  // Unrolled with 32 rows and d above 128 (d = 144 with 32-key tiles), ptxas spills on sm_90a
  // although the count says 232: no such config.
  if (r == 32 && !rolled_qk && d > 128) return kMaxRegistersPerThread + 1;
  return r * d / 32 + r * bn / 32 + q_frags + in_flight + 40;
}

}  // namespace

std::vector<int> attention_default_only_head_dims() {
  std::vector<int> out;
  for (int d = 8; d <= kMaxHeadDim; d += 8)
    if (std::ranges::find(kAttentionWarmHeadDims, d) == std::end(kAttentionWarmHeadDims)) out.push_back(d);
  return out;
}

void add_head_dim_args(EntryShim& shim, int tile, int head_dim, int splits) {
  if (tile != head_dim || splits > 1) shim.args.push_back(targ("HeadDim", head_dim));
  if (splits > 1) shim.args.push_back(targ("Splits", splits));
}

void add_explicit_head_dim_args(EntryShim& shim, int head_dim, int splits) {
  shim.args.push_back(targ("HeadDim", head_dim));
  if (splits > 0) shim.args.push_back(targ("Splits", splits));
}

void add_head_dim_v_args(EntryShim& shim, int head_dim, int head_dim_v, int splits) {
  if (head_dim > 0) shim.args.push_back(targ("HeadDim", head_dim));
  if (splits > 0) shim.args.push_back(targ("Splits", splits));
  shim.args.push_back(targ("Variant", std::string("kgen::NoVariant")));
  shim.args.push_back(targ("HeadDimV", head_dim_v));
}

int attention_simt_bucket(int head_dim) {
  for (int b : kSimtHeadDims)
    if (head_dim <= b) return b;
  return 0;
}

std::string to_string(const AttentionForwardConfig& c) {
  std::ostringstream s;
  if (c.path == ForwardPath::fa2)
    s << "fa2:bm" << c.block_m << ":bn" << c.block_n << ":w" << c.warps << ":s" << c.stages;
  else if (c.path == ForwardPath::wgmma)
    s << "wg:bm" << c.block_m << ":bn" << c.block_n << ":s" << c.stages << (c.split_keys ? ":split" : "");
  else if (c.path == ForwardPath::ws)
    s << "ws:bm" << c.block_m << ":bn" << c.block_n << ":s" << c.stages << ":pp" << c.ping_pong
      << (c.split_keys ? ":split" : "") << (c.persistent ? ":persist" : "") << (c.stream_k ? ":sk" : "");
  else if (c.path == ForwardPath::mfma)
    s << "mfma:bm" << c.block_m << ":bn" << c.block_n << ":w" << c.warps;
  else
    s << "simt:bm" << c.block_m << ":bn" << c.block_n << ":dmax" << c.max_head_dim;
  return s.str();
}

std::vector<ConfigField> explain(const AttentionForwardConfig& c) {
  const std::string bm = std::to_string(c.block_m), bn = std::to_string(c.block_n);
  std::vector<ConfigField> f;
  switch (c.path) {
    case ForwardPath::fa2: f.push_back({"fa2", "tensor-core path with mma.sync m16n8k16 (sm_80 and later)"}); break;
    case ForwardPath::wgmma: f.push_back({"wg", "Hopper path: wgmma from shared memory, K/V tiles copied by every thread with cp.async (sm_90a)"}); break;
    case ForwardPath::ws:
      f.push_back({"ws", "Hopper warp-specialised path: a producer warp loads K/V by TMA, consumer warpgroups compute (sm_90a)"});
      break;
    case ForwardPath::mfma: f.push_back({"mfma", "AMD matrix-core path (MFMA, wave64)"}); break;
    case ForwardPath::simt: f.push_back({"simt", "general path: plain fp32 arithmetic, any head dim and dtype"}); break;
  }
  f.push_back({"bm" + bm, c.path == ForwardPath::simt ? bm + " query rows per block, one per warp" : bm + " query rows per block"});
  f.push_back({"bn" + bn, bn + " keys per K/V tile"});
  if (c.path == ForwardPath::fa2)
    f.push_back({"w" + std::to_string(c.warps), std::to_string(c.warps) + " warps per block, " +
                                                    std::to_string(c.block_m / std::max(1, c.warps)) + " query rows each"});
  if (c.path == ForwardPath::mfma)
    f.push_back({"w" + std::to_string(c.warps), std::to_string(c.warps) + " waves per block"});
  if (c.path == ForwardPath::fa2 || c.path == ForwardPath::wgmma || c.path == ForwardPath::ws)
    f.push_back({"s" + std::to_string(c.stages), std::to_string(c.stages) + " K/V tile buffers in shared memory (loads run ahead)"});
  if (c.path == ForwardPath::ws)
    f.push_back({"pp" + std::to_string(c.ping_pong),
                 c.ping_pong ? "consumer warpgroups take turns: one's exponentials under the other's matrix products"
                             : "consumer warpgroups run without turns"});
  if (c.split_keys) f.push_back({"split", "a query tile's keys are cut over several blocks; a second kernel merges their partial results"});
  if (c.persistent) f.push_back({"persist", "persistent grid: one block per SM walks the query tiles, the next tile loading under this one"});
  if (c.stream_k) f.push_back({"sk", "stream-K: whole rounds of query tiles, then the last round's keys cut evenly over the blocks"});
  if (c.path == ForwardPath::simt)
    f.push_back({"dmax" + std::to_string(c.max_head_dim), "head dims up to " + std::to_string(c.max_head_dim) + " in registers"});
  return f;
}

std::optional<AttentionForwardConfig> parse_attention_forward_config(const std::string& text) {
  const std::vector<std::string> parts = split_fields(text, ':');
  AttentionForwardConfig c;
  if (parts.size() == 5 && parts[0] == "fa2") c.path = ForwardPath::fa2;
  else if ((parts.size() == 4 || (parts.size() == 5 && parts[4] == "split")) && parts[0] == "wg") {
    c.path = ForwardPath::wgmma;
    c.split_keys = parts.size() == 5;
  }
  else if ((parts.size() == 5 || (parts.size() == 6 && (parts[5] == "split" || parts[5] == "persist")) ||
            (parts.size() == 7 && parts[5] == "persist" && parts[6] == "sk")) &&
           parts[0] == "ws") {
    c.path = ForwardPath::ws;
    c.split_keys = parts.size() == 6 && parts[5] == "split";
    c.persistent = parts.size() >= 6 && parts[5] == "persist";
    c.stream_k = parts.size() == 7;
  }
  else if (parts.size() == 4 && parts[0] == "simt") c.path = ForwardPath::simt;
  else if (parts.size() == 4 && parts[0] == "mfma") c.path = ForwardPath::mfma;
  else return std::nullopt;
  const auto number = parse_prefixed_int;
  bool ok = number(parts[1], "bm", c.block_m) && number(parts[2], "bn", c.block_n);
  if (c.path == ForwardPath::fa2) {
    ok = ok && number(parts[3], "w", c.warps) && number(parts[4], "s", c.stages);
    c.max_head_dim = 0;
  } else if (c.path == ForwardPath::wgmma) {
    ok = ok && number(parts[3], "s", c.stages);
    c.max_head_dim = 0;
    c.warps = c.block_m / 16;
  } else if (c.path == ForwardPath::ws) {
    ok = ok && number(parts[3], "s", c.stages) && number(parts[4], "pp", c.ping_pong);
    c.max_head_dim = 0;
    c.warps = c.block_m / 16;
  } else if (c.path == ForwardPath::mfma) {
    ok = ok && number(parts[3], "w", c.warps);
    c.max_head_dim = 0;
    c.stages = 1;
  } else {
    ok = ok && number(parts[3], "dmax", c.max_head_dim);
    c.stages = 1;
    c.warps = 0;
  }
  if (!ok) return std::nullopt;
  return c;
}

std::string attention_spec_text(std::string_view op, const AttentionForwardSpec& s) {
  std::ostringstream o;
  o << op << "." << dtype_name(s.dtype) << ".d" << s.head_dim;
  if (s.head_dim_v > 0) o << "v" << s.head_dim_v;
  o << (s.causal ? ".causal" : ".full")
    << (s.packed ? ".packed" : "") << (s.paged ? ".paged" : "") << (s.sinks ? ".sinks" : "") << (s.fp8 ? ".fp8" : "");
  if (!s.variant.empty()) o << ".var{" << s.variant << "}";
  return o.str();
}

std::string to_string(const AttentionForwardSpec& s) { return attention_spec_text("attention_fwd", s); }

std::optional<AttentionForwardSpec> parse_attention_forward_spec(const std::string& text) {
  return parse_attention_spec_text("attention_fwd", text);
}

std::optional<AttentionForwardSpec> parse_attention_spec_text(std::string_view op, const std::string& text) {
  std::string head = text, variant;
  if (const std::size_t at = text.find(".var{"); at != std::string::npos) {
    if (text.back() != '}') return std::nullopt;
    head = text.substr(0, at);
    variant = text.substr(at + 5, text.size() - at - 6);
    if (variant.empty()) return std::nullopt;
  }
  std::vector<std::string> parts = split_fields(head, '.');
  bool sinks = false, packed = false, paged = false, fp8 = false;
  if (parts.size() > 4 && parts.back() == "fp8") fp8 = true, parts.pop_back();
  if (parts.size() > 4 && parts.back() == "sinks") sinks = true, parts.pop_back();
  if (parts.size() > 4 && parts.back() == "paged") paged = true, parts.pop_back();
  if (parts.size() > 4 && parts.back() == "packed") packed = true, parts.pop_back();
  if (parts.size() != 4 || parts[0] != op) return std::nullopt;
  auto dtype = parse_dtype(parts[1]);
  int d = 0, dv = 0;
  std::string dims = parts[2];
  if (const std::size_t v = dims.find('v'); v != std::string::npos) {
    if (!parse_prefixed_int(dims.substr(v), "v", dv) || dv <= 0) return std::nullopt;
    dims.resize(v);
  }
  if (!dtype || !parse_prefixed_int(dims, "d", d) || (parts[3] != "causal" && parts[3] != "full")) return std::nullopt;
  return AttentionForwardSpec{*dtype, d, parts[3] == "causal", variant, sinks, packed, paged, dv, fp8};
}

std::optional<std::string> check_head_dim_v(int head_dim, int head_dim_v, bool has_variant, std::string_view path,
                                            std::string_view op) {
  if (head_dim_v == 0) return std::nullopt;
  const std::string dv = std::to_string(head_dim_v), dqk = std::to_string(head_dim);
  if (head_dim_v < 0 || head_dim_v >= head_dim)
    return "v: head dim " + dv + " must be below q's " + dqk + " (d_v <= d_qk; equal head dims need no d_v)";
  if (has_variant)
    return "v: head dim " + dv + " differs from q's " + dqk + "; " + std::string(op) +
           " serves that for plain and causal attention only, not with a variant, sinks, packed batches or paged K/V";
  if (path == "wg" || path == "mfma")
    return "v: head dim " + dv + " differs from q's " + dqk + "; the " + std::string(path) +
           " kernels take one head dim, fa2:, simt:, the forward's ws: and the backward's column-share wg (c2, c3; "
           "head dims above 128) serve d_v < d_qk";
  if ((path == "fa2" || path == "ws" || path == "wg:c2" || path == "wg:c3") && head_dim_v % 8 != 0)
    return "v: head dim " + dv + " is not a multiple of 8, which " + std::string(path) + " needs (simt: serves it)";
  return std::nullopt;
}

std::optional<std::string> check_attention_forward_spec(const AttentionForwardSpec& spec) {
  if (spec.head_dim < 1 || spec.head_dim > kMaxHeadDim)
    return "head_dim=" + std::to_string(spec.head_dim) + " is unsupported: kgen serves 1.." +
           std::to_string(kMaxHeadDim);
  if (auto why = check_head_dim_v(spec.head_dim, spec.head_dim_v, spec.has_variant(), "", "attention_fwd")) return why;
  if (spec.fp8) {
    if (spec.dtype != DType::f16 && spec.dtype != DType::bf16)
      return "o: dtype " + std::string(dtype_name(spec.dtype)) + " is unsupported with FP8 inputs (fp16 or bf16)";
    if (spec.head_dim != 128 && spec.head_dim != 256)
      return "q: head_dim=" + std::to_string(spec.head_dim) + " is unsupported with FP8 inputs (128 or 256)";
    if (spec.has_variant() || spec.head_dim_v > 0)
      return std::string("q: FP8 inputs run plain or causal attention, not a variant, sinks, packed batches, paged "
                         "K/V or a head dim of v's own");
  }
  if (!spec.variant.empty()) {
    try {
      Variant::from_canonical(spec.variant);
    } catch (const Error& e) {
      return std::string("variant: ") + e.what();
    }
  }
  return std::nullopt;
}

std::string render_variant_prelude(const std::string& canonical, bool sinks, bool packed, bool paged) {
  const Variant variant = canonical.empty() ? Variant() : Variant::from_canonical(canonical);
  return "#include \"kgen_device/core/atomic.cuh\"\n#include \"kgen_device/core/expr_math.cuh\"\n\n" +
         variant.device_struct("KgenVariantExpr") +
         "\nstruct KgenVariant : KgenVariantExpr {\n  static constexpr bool kSinks = " + (sinks ? "true" : "false") +
         ", kPacked = " + (packed ? "true" : "false") + ", kPaged = " + (paged ? "true" : "false") + ";\n};\n\n";
}

std::optional<std::string> check_variant_path(bool has_variant, std::string_view path) {
  if (has_variant && (path == "wg" || path == "mfma"))
    return "the " + std::string(path) +
           " kernels do not serve variants (window, softcap, alibi, sinks, masks, score_mod) yet; the ws:, fa2: "
           "and simt: kernels do";
  return std::nullopt;
}

std::optional<std::string> check_attention_forward_config(const AttentionForwardSpec& spec,
                                                          const AttentionForwardConfig& c,
                                                          const Target& target) {
  if (auto why = check_attention_forward_spec(spec)) return why;
  if (c.split_keys && c.path != ForwardPath::ws && c.path != ForwardPath::wgmma)
    return std::string("split applies to ws and wg configs only");
  if (c.persistent && c.path != ForwardPath::ws) return std::string("persist applies to ws configs only");
  if (c.persistent && c.split_keys) return std::string("a ws config is split or persist, not both");
  if (c.stream_k && !c.persistent) return std::string("sk applies to persist configs only");
  if (c.stream_k && spec.causal) return std::string("sk applies to calls without a mask only");
  if (c.stream_k && spec.has_variant()) return std::string("sk applies to plain attention only, not to a variant");
  if (c.split_keys && spec.sinks) return std::string("split does not add sinks; a ws config without split does");
  if (spec.packed && c.split_keys)
    return std::string("packed batches run on the plain or persistent grid; a ws config without split serves them");
  if (spec.packed && c.persistent && (!spec.variant.empty() || spec.sinks))
    return std::string("a packed batch runs on the persistent grid without a variant or sinks beside it; a ws config "
                       "without persist serves them");
  if (spec.paged && c.persistent) return std::string("paged K/V runs on the plain or split grid; a ws config without persist serves it");
  if (spec.paged && spec.packed) return std::string("paged K/V takes dense queries, not a packed batch");
  // The wg kernels serve one variant, paged K/V alone (its rows gathered by their cp.async copies).
  const bool paged_alone = spec.paged && spec.variant.empty() && !spec.sinks && !spec.packed;
  if (auto why = check_variant_path(spec.has_variant() && !(c.path == ForwardPath::wgmma && paged_alone),
                                    c.path == ForwardPath::wgmma  ? "wg"
                                    : c.path == ForwardPath::mfma ? "mfma"
                                                                  : ""))
    return why;
  if (auto why = check_head_dim_v(spec.head_dim, spec.head_dim_v, false,
                                  c.path == ForwardPath::ws      ? "ws"
                                  : c.path == ForwardPath::wgmma ? "wg"
                                  : c.path == ForwardPath::mfma  ? "mfma"
                                  : c.path == ForwardPath::fa2   ? "fa2"
                                                                 : "simt"))
    return why;
  if (c.path == ForwardPath::mfma) return check_mfma_forward_config(spec, c, target);
  if (spec.fp8) {
    if (c.path != ForwardPath::ws || !has_wgmma(target))
      return "FP8 inputs run on ws configs on the sm_90a target (Hopper), not " + to_string(c) + " on " + target.arch;
    if (!attention_fwd::fp8_tile_fits(c.block_m, c.block_n, wgmma_tile_head_dim(spec.head_dim)) || c.split_keys ||
        c.persistent)
      return std::string("FP8 inputs run ws configs of bm128 and bn128 (or bn192 at head_dim=128) on the plain "
                         "grid (no split, no persist)");
  }
  int smem = 0;
  if (c.path == ForwardPath::fa2) {
    if (auto why = nvidia_only_path("fa2", target)) return why;
    if (spec.dtype == DType::f32) return std::string("fa2 path needs fp16 or bf16 inputs");
    if (!is_fa2_head_dim(spec.head_dim))
      return "fa2 path has no head_dim=" + std::to_string(spec.head_dim) + " specialisation";
    if (c.block_m != 64 && c.block_m != 128) return field_refusal("fa2", "bm", "64 or 128 (query rows per block)", c.block_m);
    if (c.block_n != 32 && c.block_n != 64 && c.block_n != 128)
      return field_refusal("fa2", "bn", "32, 64 or 128 (keys per tile)", c.block_n);
    if (c.stages != 1 && c.stages != 2) return field_refusal("fa2", "s", "1 or 2 (K/V tile buffers)", c.stages);
    if ((c.warps != 4 && c.warps != 8) || (c.block_m / c.warps != 16 && c.block_m / c.warps != 32))
      return field_refusal("fa2", "w", "4 or 8, with 16 or 32 query rows per warp (bm / w)", c.warps);
    if (fa2_register_estimate(mma_head_dim(spec.head_dim), c.block_n, c.block_m / c.warps) > kMaxRegistersPerThread)
      return "fa2 head_dim=" + std::to_string(spec.head_dim) + " with bn" + std::to_string(c.block_n) +
             " and " + std::to_string(c.block_m / c.warps) + " rows per warp exceeds the register budget";
    smem = attention_fwd::fa2_smem_bytes(fa2_tile_head_dim(spec.head_dim), c.block_m, c.block_n, c.stages);
  } else if (c.path == ForwardPath::wgmma) {
    if (auto why = nvidia_only_path("wgmma", target)) return why;
    if (auto why = wgmma_only_path("wgmma", target)) return why;
    if (spec.dtype == DType::f32) return std::string("wgmma path needs fp16 or bf16 inputs");
    if (!is_wgmma_head_dim(spec.head_dim))
      return "wgmma path has no head_dim=" + std::to_string(spec.head_dim) + " specialisation";
    if (c.block_m != 64 && c.block_m != 128 && c.block_m != 192)
      return field_refusal("wgmma", "bm", "64, 128 or 192 (one to three warpgroups of 64 query rows)", c.block_m);
    if (c.block_n != 64 && c.block_n != 128 && c.block_n != 192)
      return field_refusal("wgmma", "bn", "64, 128 or 192 (keys per tile)", c.block_n);
    if (c.stages != 2 && c.stages != 3)
      return field_refusal("wgmma", "s", "2 (double-buffered) or 3 (pipelined: the next Q·Kᵀ overlaps the softmax)",
                           c.stages);
    if (c.warps != c.block_m / 16) return std::string("wgmma warps must be bm / 16");
    // One block per SM: the register file (64K) split over its threads, at most 255 each.
    const int budget = std::min(kMaxRegistersPerThread, 65536 / attention_fwd::wgmma_threads(c.block_m / 64) / 8 * 8);
    if (wgmma_register_estimate(wgmma_tile_head_dim(spec.head_dim), c.block_n) > budget)
      return "wgmma head_dim=" + std::to_string(spec.head_dim) + " with bn" + std::to_string(c.block_n) +
             " and " + std::to_string(c.block_m / 64) + " warpgroups exceeds the register budget";
    smem = wgmma_config_smem_bytes(spec, c);
  } else if (c.path == ForwardPath::ws) {
    if (auto why = wgmma_only_path("ws", target)) return why;
    if (spec.dtype == DType::f32) return std::string("ws path needs fp16 or bf16 inputs");
    if (!is_wgmma_head_dim(spec.head_dim))
      return "ws path has no head_dim=" + std::to_string(spec.head_dim) + " specialisation";
    const int tile = wgmma_tile_head_dim(spec.head_dim);
    const int v_tile = ws_v_tile(spec);
    if (spec.head_dim_v > 0 && (c.split_keys || c.persistent || c.stream_k))
      return "v: head dim " + std::to_string(spec.head_dim_v) + " differs from q's " + std::to_string(spec.head_dim) +
             "; ws serves that on the plain grid (no split, persist or stream-K)";
    if (c.block_m != 128 && c.block_m != 192)
      return field_refusal("ws", "bm", "128 or 192 (two or three consumer warpgroups)", c.block_m);
    if (c.block_n != 64 && c.block_n != 80 && c.block_n != 96 && c.block_n != 112 && c.block_n != 128 &&
        c.block_n != 176 && c.block_n != 192)
      return field_refusal("ws", "bn", "64, 80, 96, 112, 128, 176 or 192 (keys per tile)", c.block_n);
    // 96- and 112-key tiles: the 192-column tile (head dims 136–192, where 128-key tiles do not
    // fit shared memory in two stages) for plain attention of one head dim, one block per query
    // tile; variants, packed and paged batches, v head dims of their own and the split or
    // persistent grids keep the measured 64- and 128-key tiles.
    if ((c.block_n == 96 || c.block_n == 112) &&
        (tile != 192 || spec.has_variant() || spec.head_dim_v > 0 || c.split_keys || c.persistent || c.stream_k))
      return "ws bn" + std::to_string(c.block_n) +
             " serves head_dim 136..192 of plain attention on one block per query tile (no variant, packed or paged "
             "batch, v head dim of its own, split or persistent grid), not head_dim=" +
             std::to_string(spec.head_dim) + (spec.has_variant() || spec.head_dim_v > 0 ? " with this spec" : "") +
             (c.split_keys || c.persistent || c.stream_k ? " on this grid" : "");
    // Three consumers get 160 registers each: S, O and P fit on the 64-column tile up to
    // 128-key tiles (ptxas: spill-free, tests/replay/table.tsv). A rule, not the estimate below:
    // its 40-register allowance for addressing and softmax state is measured against the
    // two-consumer budget of 240 and would refuse the measured 160-register fit.
    if (c.block_m == 192 && (tile != 64 || c.block_n > 128))
      return "ws bm192 (three consumers of 160 registers) needs head_dim <= 64 and bn <= 128, not head_dim=" +
             std::to_string(spec.head_dim) + " with bn" + std::to_string(c.block_n);
    if (c.stages < 2 || c.stages > 4) return field_refusal("ws", "s", "2, 3 or 4 (K/V tile buffers)", c.stages);
    if (c.ping_pong != 0 && c.ping_pong != 1) return field_refusal("ws", "pp", "0 or 1", c.ping_pong);
    if (c.warps != c.block_m / 16) return std::string("ws warps must be bm / 16");
    // FP8: P packs to half the registers (four values each), so the 128-key tile fits at both
    // of its head dims (ptxas: spill-free, tests/replay/table.tsv).
    if (!spec.fp8 && ws_register_estimate(v_tile, c.block_n) > kWsConsumerRegisters)
      return "ws head_dim=" + std::to_string(spec.head_dim) + " with bn" + std::to_string(c.block_n) +
             " exceeds the consumers' register budget";
    smem = (spec.fp8 ? attention_fwd::fp8_ws_smem_bytes(tile, c.stages, c.block_n)
                     : attention_fwd::ws_config_smem_bytes_v(tile, v_tile, c.block_n, c.stages, c.block_m, c.persistent));
  } else {
    if (c.max_head_dim != simt_bucket(spec.head_dim))
      return field_refusal("simt", "dmax", std::to_string(simt_bucket(spec.head_dim)) + " for head_dim=" +
                           std::to_string(spec.head_dim), c.max_head_dim);
    if (c.block_m != 4 && c.block_m != 8)
      return field_refusal("simt", "bm", "4 or 8 (warps, one query row each)", c.block_m);
    if (c.block_n != 32 && c.block_n != 64) return field_refusal("simt", "bn", "32 or 64 (keys per tile)", c.block_n);
    smem = attention_fwd::simt_smem_bytes(c.max_head_dim, c.block_n);
  }
  if (smem > target.max_smem_per_block)
    return "needs " + std::to_string(smem) + " bytes of shared memory, " + target.arch +
           " allows " + std::to_string(target.max_smem_per_block);
  return std::nullopt;
}

std::vector<AttentionForwardConfig> attention_forward_config_space(const AttentionForwardSpec& spec,
                                                                   const Target& target) {
  std::vector<AttentionForwardConfig> out;
  auto keep = [&](const AttentionForwardConfig& c) {
    if (!check_attention_forward_config(spec, c, target)) out.push_back(c);
  };
  if (spec.fp8) {
    for (int block_n : {attention_fwd::kFp8KeyTile, 192})
      for (int stages : {2, 3, 4})
        for (int pp : {1, 0})
          keep({.path = ForwardPath::ws, .block_m = 128, .block_n = block_n, .stages = stages, .warps = 8, .ping_pong = pp});
    return out;
  }
  for (const auto& c : mfma_forward_config_space(spec, target)) out.push_back(c);
  if (spec.dtype != DType::f32 && is_wgmma_head_dim(spec.head_dim) && has_wgmma(target)) {
    // Ping-pong off is kept for the tuner only at 128-key tiles, where it came within noise.
    // Split keys (decode-like grids) only on the two-stage ping-pong tiles the defaults use.
    for (int bn : {128, 64, 192})
      for (int stages : {2, 3})
        for (int pp : {1, 0})
          if (pp == 1 || (bn == 128 && stages == 2)) keep({.path = ForwardPath::ws, .block_m = 128, .block_n = bn, .stages = stages, .warps = 8, .ping_pong = pp});
    for (int bn : {128, 64, 192}) keep({.path = ForwardPath::ws, .block_m = 128, .block_n = bn, .warps = 8, .ping_pong = 1, .split_keys = true});
    // Persistent grids (one block per SM over every query tile) on the same tiles, where two Q
    // buffers fit. Without a mask each persistent form also comes in stream-K (":sk").
    const int tile = wgmma_tile_head_dim(spec.head_dim);
    auto two_q_buffers = [&](int bn, int bm) { return attention_fwd::ws_q_buffers(tile, bn, 2, bm, true) == 2; };
    auto keep_ws = [&](AttentionForwardConfig c) {
      keep(c);
      if (c.persistent && !spec.causal) {
        c.stream_k = true;
        keep(c);
      }
    };
    for (int bn : {128, 64, 192})
      if (two_q_buffers(bn, 128)) keep_ws({.path = ForwardPath::ws, .block_m = 128, .block_n = bn, .warps = 8, .ping_pong = 1, .persistent = true});
    // Ping-pong off on the persistent 128-key grid, for the tuner: level with turns at d = 128
    // without a mask, bimodal for GQA; no stream-K form, which gained nothing
    // (docs/kernels/measurements.md, "Ping-pong off on the persistent grid").
    if (two_q_buffers(128, 128)) keep({.path = ForwardPath::ws, .block_m = 128, .block_n = 128, .warps = 8, .persistent = true});
    // 176-key tiles on the 128-column tile (S, P and O in 240 registers; two stages fit shared
    // memory with one Q buffer, so their persistent grid keeps one: ws_q_buffers), and 80-key
    // tiles on the 256-column tile (S, P and O in 228 of the 240 registers, two stages with Q in
    // 230,656 of the 232,448 bytes of shared memory; persistent with one Q buffer too). Both
    // one block per query tile and persistent; the defaults below take them for long rows.
    for (bool persistent : {false, true}) {
      if (tile == 128) keep_ws({.path = ForwardPath::ws, .block_m = 128, .block_n = 176, .warps = 8, .ping_pong = 1, .persistent = persistent});
      if (tile == 256) keep_ws({.path = ForwardPath::ws, .block_m = 128, .block_n = 80, .warps = 8, .ping_pong = 1, .persistent = persistent});
    }
    // 96- and 112-key tiles on the 192-column tile (two stages with one Q buffer fit shared memory
    // where 128 keys do not), one block per query tile; the defaults take 112.
    for (int bn : {112, 96}) keep({.path = ForwardPath::ws, .block_m = 128, .block_n = bn, .stages = 2, .warps = 8, .ping_pong = 1});
    // Three consumers (192 query rows) on the 64-column tile, one block per query tile or
    // persistent.
    for (int bn : {128, 64})
      for (bool persistent : {false, true})
        if (!persistent || two_q_buffers(bn, 192)) keep_ws({.path = ForwardPath::ws, .block_m = 192, .block_n = bn, .warps = 12, .ping_pong = 1, .persistent = persistent});
    for (int bm : {128, 192, 64})
      for (int bn : {128, 64, 192})
        for (int stages : {2, 3}) keep({.path = ForwardPath::wgmma, .block_m = bm, .block_n = bn, .stages = stages, .warps = bm / 16});
    // Split keys on one warpgroup (decode with few sequences), the tiles its defaults take.
    for (int bn : {128, 64}) keep({.path = ForwardPath::wgmma, .block_m = 64, .block_n = bn, .stages = 2, .warps = 4, .split_keys = true});
  }
  if (spec.dtype != DType::f32 && is_fa2_head_dim(spec.head_dim)) {
    for (int bm : {64, 128})
      for (int warps : {8, 4})
        for (int bn : {32, 64, 128}) keep({.path = ForwardPath::fa2, .block_m = bm, .block_n = bn, .warps = warps});
  }
  for (int warps : {4, 8})
    for (int bn : {32, 64}) keep({.path = ForwardPath::simt, .block_m = warps, .block_n = bn, .stages = 1, .max_head_dim = simt_bucket(spec.head_dim)});
  return out;
}

namespace {
AttentionForwardConfig plain_forward_default_config(const AttentionForwardSpec& spec, const AttentionShape& shape,
                                                    const Target& target, int sm_count);
// A packed batch with no variant, sinks or paged K/V beside it: its defaults keep the plain
// defaults' persistent grid, where the producer's warp walks the compact grid's tiles.
bool persistent_packed(const AttentionForwardSpec& spec) {
  return spec.packed && spec.variant.empty() && !spec.sinks && !spec.paged;
}
}  // namespace

AttentionForwardConfig attention_forward_default_config(const AttentionForwardSpec& spec,
                                                        const AttentionShape& shape,
                                                        const Target& target, int sm_count) {
  if (spec.fp8) {
    // d = 128: three stages of 192-key tiles (each tile's score step does 1.5 times the work of a
    // 128-key one for the same waits and hand-overs; 6–15 % faster than bn128:s2 without a mask
    // at 4k–16k keys on an H200, 2–8 % causal);
    // d = 256: two stages of 128-key tiles (196 KB of shared memory). Ping-pong turns.
    const bool wide = wgmma_tile_head_dim(spec.head_dim) > 128;
    return {.path = ForwardPath::ws, .block_m = 128, .block_n = wide ? attention_fwd::kFp8KeyTile : 192,
            .stages = wide ? 2 : 3, .warps = 8, .ping_pong = 1};
  }
  if (spec.head_dim_v > 0) {
    // v's own head dim: on sm_90a the warp-specialised kernel's plain grid (two consumers,
    // 128-key tiles, two stages: 192/128 fits in 208 KiB, docs/kernels/mla.md), elsewhere or where
    // that does not fit fa2 (sm_80's rule for q's head dim, its V, O and P·V over d_v) on NVIDIA
    // targets, else the general path.
    AttentionForwardSpec plain = spec;
    plain.head_dim_v = 0;
    if (target.vendor != Vendor::nvidia) return attention_forward_general_config(spec);
    for (int bn : {128, 64}) {
      const AttentionForwardConfig ws{.path = ForwardPath::ws, .block_m = 128, .block_n = bn, .stages = 2, .warps = 8,
                                      .ping_pong = 1};
      if (!check_attention_forward_config(spec, ws, target)) return ws;
    }
    const AttentionForwardConfig c = plain_forward_default_config(plain, shape, *parse_target("sm_80"), sm_count);
    return check_attention_forward_config(spec, c, target) ? attention_forward_general_config(spec) : c;
  }
  AttentionForwardConfig c = plain_forward_default_config(spec, shape, target, sm_count);
  if (!spec.has_variant()) return c;
  // A variant's score step keeps more values live per score element: the plain defaults' widest
  // tiles would spill (ptxas, d = 128: 176-key tiles with a window alone, 128-key tiles with a
  // modification beside a mask or sinks, persistent grids, fa2 32 rows per warp), their
  // one-block-per-tile forms with 128 keys (80 for a modification beside a mask or sinks), and 16
  // rows per warp, do not.
  const Variant v = spec.variant.empty() ? Variant() : Variant::from_canonical(spec.variant);
  const bool wide_keys = !(v.has_score_mod() && (v.has_mask() || spec.sinks));
  AttentionForwardConfig narrow = c;
  // A packed batch alone adds no per-score state: it keeps the plain defaults' key tiles.
  if (c.path == ForwardPath::ws && !persistent_packed(spec)) narrow.block_n = std::min(c.block_n, wide_keys ? 128 : 80);
  if (c.path == ForwardPath::fa2 && c.block_m / c.warps == 32) narrow.block_m = 16 * c.warps;
  if (c.path == ForwardPath::ws && c.block_m == 192) narrow.block_m = 128, narrow.warps = 8;
  // The persistent grid's state spills beside a variant's; a packed batch alone keeps it (the
  // producer's warp walks the compact grid: persistent_packed below).
  narrow.stream_k = false;
  if (!persistent_packed(spec)) narrow.persistent = false;
  if (spec.packed) narrow.split_keys = false;  // packed batches run on the plain or persistent grid
  return check_attention_forward_config(spec, narrow, target) ? c : narrow;
}

namespace {
AttentionForwardConfig plain_forward_default_config(const AttentionForwardSpec& spec, const AttentionShape& shape,
                                                    const Target& target, int sm_count) {
  if (!spec.has_variant())
    if (auto c = mfma_forward_default_config(spec, target)) return *c;  // AMD matrix cores
  // d = 32 takes the warp-specialised kernel from 4k keys, where its 192-key tiles beat fa2, and
  // wherever it takes three consumers (below); fa2 keeps shorter rows
  // (docs/kernels/measurements.md, "d = 32 on the warp-specialised forward").
  const int tile = wgmma_tile_head_dim(spec.head_dim);
  // Decode-like grids (shape class 2): the keys of each query tile over several blocks, so
  // b·h_q·⌈n_q/128⌉ blocks do not leave most SMs idle (docs/kernels/measurements.md, "Decode with
  // few sequences: split keys").
  const bool split = attention_forward_shape_class(shape, sm_count) == 2;
  const bool sectioned = attention_forward_sectioned(spec);
  const bool three_consumers = spec.head_dim >= 32 && tile == 64 && shape.n_q >= 1024 &&
                               (!spec.causal || shape.n_k > 2048 || (sectioned && shape.n_k >= 2048 && spec.head_dim > 32)) &&
                               !split;
  const bool ws_head_dim = spec.head_dim > 32 || (spec.head_dim == 32 && (shape.n_k >= 4096 || three_consumers));
  if (spec.dtype != DType::f32 && is_wgmma_head_dim(spec.head_dim) && ws_head_dim && has_wgmma(target)) {
    // Hopper: the warp-specialised TMA kernel, two consumer warpgroups of 64 query rows, faster
    // than the non-specialised wgmma kernel at every measured length (docs/kernels/measurements.md,
    // "Warp-specialised forward"). Key tiles per column tile:
    // - the 64-column tile: 192 keys from 4k keys, else 128 (same section);
    // - up to 128 columns: 128 keys (their registers allow it);
    // - 192 columns (head dims 136–192): 112 keys for plain attention on one block per query
    //   tile, where 128 do not fit shared memory in two stages, 1.09–1.24× the 64-key tiles
    //   ("112-key tiles at d = 136–192"); variants, packed and paged batches and split grids keep 64;
    // - 256 columns: 80 keys (S, P and O within 240 registers, two stages within shared memory),
    //   faster than 64 at every length; split-key grids keep 64, their space has no 80-key form
    //   ("80-key tiles at d = 256");
    // - 128 columns with long rows, from 8k keys without a mask and above 4k with one: 176 keys
    //   (the persistent rule below then makes the first persistent with one Q buffer, the second
    //   one block per query tile); shorter rows and split grids keep 128, faster at 2k
    //   ("176-key tiles and persistent grids at d = 128 and 256").
    const bool long_rows = spec.causal ? shape.n_k > 4096 : shape.n_k >= 8192;
    const int bn = tile == 64    ? (shape.n_k >= 4096 ? 192 : 128)
                   : tile == 256 ? (split ? 64 : 80)
                   : tile == 192 ? 112  // refused for split grids and variants: 64 below
                                 : (tile == 128 && long_rows && !split ? 176 : 128);
    // Short rows on the 64-column tile with a mask, up to 1k keys: one warpgroup of 64 rows per
    // block, several blocks per SM, beat the warp-specialised kernel and its persistent grid
    // (docs/kernels/measurements.md, "Short sequences on the 64-column tile"). Paged caches keep
    // the warp-specialised kernel there (not measured on the gathering copies).
    if (spec.causal && tile == 64 && shape.n_k <= 1024 && !spec.paged) {
      const AttentionForwardConfig w = *parse_attention_forward_config("wg:bm64:bn64:s2");
      if (!check_attention_forward_config(spec, w, target)) return w;
    }
    // Decode-like calls on grids that need no split: at most 64 query rows per (batch, head)
    // (one token per sequence with its group's query heads packed, or a few) against 1k keys or
    // more. One warpgroup of 64 rows per block streams K and V at the copy rate, where the
    // warp-specialised kernel's second consumer computes 64 rows that are never stored: 64-key
    // tiles where the grid has two blocks per SM or more (two fit on one), 128-key tiles where it
    // has fewer (docs/kernels/measurements.md, "Decode without a split: one warpgroup"). Paged
    // caches too (the copies gather their rows) where two blocks share an SM, up to 128 columns;
    // with one block per SM the warp-specialised kernel's TMA boxes were faster on pages of 64
    // (and within 3 % on pages of 16), so it keeps those grids ("Paged copies on one warpgroup").
    // Grids that need a split (few sequences) cut each query tile's keys over blocks of the same
    // kernel (128-key tiles, one block per SM, up to 128 columns), which reads at the copy rate
    // where the warp-specialised split kernel's second consumer idles ("Decode with few sequences
    // on one warpgroup"); paged caches keep the warp-specialised split kernel, as fast or faster
    // there on pages of 16 and 64.
    const bool two_per_sm = 1LL * shape.batch * shape.heads_q >= 2LL * sm_count;
    const bool decode = !spec.fp8 && shape.n_q <= 64 && shape.n_k >= 1024;
    if (decode && (split ? !spec.paged && tile <= 128 : !spec.paged || (tile <= 128 && two_per_sm))) {
      AttentionForwardConfig w{.path = ForwardPath::wgmma, .block_m = 64, .block_n = two_per_sm ? 64 : 128, .stages = 2,
                               .warps = 4, .split_keys = split};
      if (check_attention_forward_config(spec, w, target)) w.block_n = 64;
      if (!check_attention_forward_config(spec, w, target)) return w;
    }
    // The 64-column tile from 1k query rows: three consumers of 64 rows (192 query rows per
    // block) on 128-key tiles, a few percent faster than two. Causal rows under 2k keys (up to 2k
    // with a variant, or at d = 32) keep the kernels below, which won there, as do calls of under
    // 1k query rows (not measured with three consumers) and split-key grids
    // (docs/kernels/measurements.md, "Three consumer warpgroups"). Persistent without a mask up to
    // 2k keys; plain causal rows take one block per query tile in sections of heads (2k and 4k
    // keys: 0.343 and 0.590 ms against 0.356 and 0.618–0.625 for the persistent grids, "Causal
    // grids in sections of heads"), variants the persistent grid up to 4k keys.
    if (three_consumers) {
      AttentionForwardConfig c{.path = ForwardPath::ws, .block_m = 192, .block_n = 128, .warps = 12, .ping_pong = 1};
      c.persistent = spec.causal ? !sectioned && shape.n_k <= 4096 : shape.n_k <= 2048;
      // Without a mask, stream-K: faster than the plain persistent grid at d = 64; at d = 128 it
      // only ties, so the rule below keeps the plain grid (docs/kernels/measurements.md,
      // "Stream-K").
      c.stream_k = c.persistent && !spec.causal;
      if (!check_attention_forward_config(spec, c, target)) return c;
    }
    // Up to 128 columns and at 256, a persistent grid (one block per SM over every query tile,
    // the next tile's loads under the current one's work): faster without a mask at every length
    // and with one up to 4k keys; longer causal rows keep one block per query tile, which won at
    // 16k (docs/kernels/measurements.md, "Persistent forward grid"). The 256-column tile (80-key
    // tiles, one Q buffer) is persistent without a mask and with one up to 8k keys, alike
    // ("176-key tiles and persistent grids at d = 128 and 256"). d = 32 keeps its measured
    // default below; the 192-column tile is unmeasured.
    const bool persistent_rows =
        (tile <= 128 || tile == 256) && (!spec.causal || shape.n_k <= (tile == 256 ? 8192 : 4096));
    if (!split && spec.head_dim > 32 && persistent_rows) {
      AttentionForwardConfig c{.path = ForwardPath::ws, .block_m = 128, .block_n = bn, .warps = 8, .ping_pong = 1};
      c.persistent = true;
      // The 64-column tile with a mask, 1k to 2k keys (128-key tiles there; shorter rows took
      // wg:bm64:bn64 above): without ping-pong turns, ahead of them in `kgen bench` and in the
      // tuner's interleaved final at d = 64; d = 40–56 follow unmeasured
      // (docs/kernels/measurements.md, "Ping-pong off on the persistent grid").
      if (tile == 64 && spec.causal && shape.n_k <= 2048 && shape.n_q >= 1024) c.ping_pong = 0;
      if (!check_attention_forward_config(spec, c, target)) return c;
    }
    AttentionForwardConfig c{.path = ForwardPath::ws, .block_m = 128, .block_n = bn, .warps = 8, .ping_pong = 1, .split_keys = split};
    while (check_attention_forward_config(spec, c, target) && c.block_n > 64)
      c.block_n = c.block_n > 128 ? c.block_n - 64 : 64;
    if (!check_attention_forward_config(spec, c, target)) return c;
  }
  if (spec.dtype != DType::f32 && is_fa2_head_dim(spec.head_dim)) {
    // 128 query rows on 4 warps, 64-key tiles: the fastest for d = 64 and 128
    // (docs/kernels/measurements.md, "Tile choice and the spill-free 64-key tile"). d = 96 keeps
    // 32-key tiles (unmeasured). d = 256 keeps 16 rows per warp: 32 would not fit in registers.
    // Other head dims take the rule of the mma width they round up to.
    const int dc = mma_head_dim(spec.head_dim);
    const int bn = dc <= 64 || dc == 128 ? 64 : 32;
    AttentionForwardConfig c{.path = ForwardPath::fa2, .block_m = 128, .block_n = bn, .warps = 4};
    if (dc > 128) c.block_n = 32, c.warps = 8;  // 16 rows per warp
    if (dc > 192) c.block_m = 64, c.warps = 4;
    // Too few blocks to fill the machine once: halve the query tile.
    if (c.block_m == 128 && attention_forward_shape_class(shape, sm_count) == 1) c.block_m = 64, c.warps = 4;
    while (check_attention_forward_config(spec, c, target) && c.block_n > 32) c.block_n /= 2;
    if (!check_attention_forward_config(spec, c, target)) return c;
  }
  return attention_forward_general_config(spec);
}
}  // namespace

int attention_forward_paged_key_tile(int block_n, int page_size) {
  if (page_size % block_n == 0 || block_n % page_size == 0) return block_n;
  return static_cast<int>(std::bit_floor(static_cast<unsigned>(block_n)));
}

int attention_forward_shape_class(const AttentionShape& shape, int sm_count) {
  const long long blocks = 1LL * shape.batch * shape.heads_q * ((shape.n_q + 127) / 128);
  if (2 * blocks <= sm_count && shape.n_k >= kSplitKeysMinKeys) return 2;
  return blocks < sm_count ? 1 : 0;
}

int attention_forward_key_splits(const AttentionForwardConfig& c, const AttentionShape& shape, int sm_count) {
  if (!c.split_keys) return 1;
  const long long blocks = std::max(1LL, 1LL * shape.batch * shape.heads_q * ((shape.n_q + c.block_m - 1) / c.block_m));
  const long long tiles = (shape.n_k + c.block_n - 1) / c.block_n;
  return static_cast<int>(std::clamp(std::min<long long>(sm_count / blocks, tiles), 1LL, static_cast<long long>(kMaxKeySplits)));
}

AttentionForwardConfig attention_forward_general_config(const AttentionForwardSpec& spec) {
  return {.path = ForwardPath::simt, .block_m = 4, .block_n = 32, .stages = 1, .max_head_dim = simt_bucket(spec.head_dim)};
}

LaunchGrid attention_forward_grid(const AttentionForwardConfig& c, const AttentionShape& shape, int splits,
                                  int sm_count) {
  int rows = c.path == ForwardPath::simt ? attention_fwd::simt_block_m(c.block_m) : c.block_m;
  if (c.persistent) {
    const long long tiles = 1LL * shape.batch * shape.heads_q * ((shape.n_q + rows - 1) / rows);
    return {static_cast<unsigned>(std::clamp<long long>(tiles, 1, std::max(sm_count, 1))), 1, 1};
  }
  return {static_cast<unsigned>((shape.n_q + rows - 1) / rows * splits),
          static_cast<unsigned>(shape.heads_q), static_cast<unsigned>(shape.batch)};
}

int attention_forward_sections(const AttentionForwardConfig& c, const AttentionForwardSpec& spec,
                               const AttentionShape& shape, LaunchGrid& grid) {
  if (c.path != ForwardPath::ws || c.persistent || c.split_keys || !attention_forward_sectioned(spec)) return 0;
  const int key_bytes =
      (spec.head_dim + (spec.head_dim_v > 0 ? spec.head_dim_v : spec.head_dim)) * (spec.fp8 ? 1 : dtype_bytes(spec.dtype));
  const int s = attention_fwd::ws_causal_sections_log2(shape.heads_q, shape.heads_q / std::max(shape.heads_kv, 1),
                                                       shape.n_k, key_bytes);
  grid.x <<= s;
  grid.y >>= s;
  return s;
}

LaunchGrid attention_forward_packed_grid(const AttentionForwardConfig& c, long long rows, int sequences, int heads_q,
                                         int sm_count) {
  const LaunchGrid g = packed_tile_grid(rows, c.block_m, sequences, heads_q);
  if (!c.persistent) return g;
  const long long blocks = 1LL * g.x * g.y;
  return {static_cast<unsigned>(std::min<long long>(blocks, std::max(sm_count, 1))), 1, 1};
}

LaunchGrid attention_forward_combine_grid(const AttentionShape& shape) {
  return {static_cast<unsigned>((shape.n_q + attention_fwd::kCombineRows - 1) / attention_fwd::kCombineRows), static_cast<unsigned>(shape.heads_q),
          static_cast<unsigned>(shape.batch)};
}

KernelSource render_attention_forward(const AttentionForwardSpec& spec,
                                      const AttentionForwardConfig& c) {
  KernelSource k;
  k.op = "attention_fwd";
  k.entry = "kgen_attention_fwd";
  k.variant = to_string(spec) + "." + to_string(c);
  EntryShim shim{k.entry, 0, 1, "AttentionForwardParams", "", {targ_type("T", spec.dtype)}};
  // FP8 inputs: the element type E4m3In<o's type> (forward_ws.cuh).
  if (spec.fp8) shim.args[0] = targ("T", "kgen::E4m3In<" + targ_type("T", spec.dtype).value + ">");
  std::string header;
  if (c.path == ForwardPath::fa2) {
    k.threads = attention_fwd::fa2_threads(c.warps);
    const int tile = fa2_tile_head_dim(spec.head_dim);
    k.smem_bytes = attention_fwd::fa2_smem_bytes(tile, c.block_m, c.block_n, c.stages);
    header = "kgen_device/attention/forward_fa2.cuh";
    shim.function = "attention_forward_fa2";
    shim.args.insert(shim.args.end(), {targ("D", tile), targ("BM", c.block_m), targ("BN", c.block_n),
                                       targ("Warps", c.warps), targ("Stages", c.stages), targ("Causal", spec.causal)});
    if (spec.head_dim_v > 0) add_head_dim_v_args(shim, spec.head_dim, spec.head_dim_v);
    else if (spec.has_variant()) add_explicit_head_dim_args(shim, spec.head_dim);
    else add_head_dim_args(shim, tile, spec.head_dim);
  } else if (c.path == ForwardPath::wgmma) {
    k.threads = attention_fwd::wgmma_threads(c.block_m / 64);
    const int tile = wgmma_tile_head_dim(spec.head_dim);
    k.smem_bytes = wgmma_config_smem_bytes(spec, c);
    header = "kgen_device/attention/forward_wgmma.cuh";
    shim.function = "attention_forward_wgmma";
    shim.args.insert(shim.args.end(), {targ("D", tile), targ("BN", c.block_n), targ("WGs", c.block_m / 64),
                                       targ("Stages", c.stages), targ("Causal", spec.causal)});
    // A split grid's or a variant's kernel names HeadDim and SplitKeys (the Variant follows them).
    if (spec.has_variant() || c.split_keys) {
      add_explicit_head_dim_args(shim, spec.head_dim);
      shim.args.push_back(targ("SplitKeys", c.split_keys));
    } else {
      add_head_dim_args(shim, tile, spec.head_dim);
    }
    if (c.split_keys) {
      shim.params = "AttentionForwardSplitParams";
      shim.grid_constant = true;
    }
  } else if (c.path == ForwardPath::ws) {
    k.threads = attention_fwd::ws_threads(c.block_m);
    const int tile = wgmma_tile_head_dim(spec.head_dim);
    k.smem_bytes = (spec.fp8 ? attention_fwd::fp8_ws_smem_bytes(tile, c.stages, c.block_n)
                             : attention_fwd::ws_config_smem_bytes_v(tile, ws_v_tile(spec), c.block_n, c.stages,
                                                                     c.block_m, c.persistent));
    header = "kgen_device/attention/forward_ws.cuh";
    shim.function = "attention_forward_ws";
    // Stream-K's and a packed batch's persistent grid take a workspace (the packed grid's tile
    // counter in flags).
    shim.params = c.stream_k || (spec.packed && c.persistent) ? "AttentionForwardStreamParams"
                  : c.split_keys ? "AttentionForwardSplitParams"
                  : spec.fp8     ? "AttentionForwardFp8Params"
                                 : "AttentionForwardTmaParams";
    shim.grid_constant = true;
    shim.args.insert(shim.args.end(), {targ("D", tile), targ("BN", c.block_n), targ("Stages", c.stages),
                                       targ("Causal", spec.causal)});
    shim.args.push_back(targ("HeadDim", spec.head_dim));
    shim.args.push_back(targ("PingPong", c.ping_pong == 1));
    // The trailing template arguments, up to the last one that differs from its default.
    const TemplateArg tail[] = {targ("SplitKeys", c.split_keys), targ("Persistent", c.persistent),
                                targ("Consumers", c.block_m / 64), targ("StreamK", c.stream_k)};
    const bool differs[] = {c.split_keys, c.persistent, c.block_m != 128, c.stream_k};
    int used = 4;
    while (used > 0 && !differs[used - 1] && !spec.has_variant() && spec.head_dim_v == 0) --used;
    shim.args.insert(shim.args.end(), tail, tail + used);
    if (spec.head_dim_v > 0) add_head_dim_v_args(shim, 0, spec.head_dim_v);
  } else if (c.path == ForwardPath::mfma) {
    header = render_mfma_forward(spec, c, k, shim);
  } else {
    k.threads = attention_fwd::simt_threads(c.block_m);
    k.smem_bytes = attention_fwd::simt_smem_bytes(c.max_head_dim, c.block_n);
    // One simt kernel serves every head_dim up to max_head_dim: name it by the bucket.
    AttentionForwardSpec bucket = spec;
    bucket.head_dim = c.max_head_dim;
    k.variant = to_string(bucket) + "." + to_string(c);
    header = "kgen_device/attention/forward_simt.cuh";
    shim.function = "attention_forward_simt";
    shim.args.insert(shim.args.end(), {targ("DMax", c.max_head_dim), targ("BN", c.block_n), targ("Warps", c.block_m),
                                       targ("Causal", spec.causal)});
    if (spec.head_dim_v > 0) add_head_dim_v_args(shim, 0, spec.head_dim_v);
  }
  shim.threads = k.threads;
  std::string prelude;
  if (spec.has_variant()) {
    shim.args.push_back(targ("Variant", std::string("KgenVariant")));
    shim.variant_args = true;
    prelude = render_variant_prelude(spec.variant, spec.sinks, spec.packed, spec.paged);
  }
  k.source = render_entry_shims(header, k.variant, std::span(&shim, 1), prelude);
  return k;
}

KernelSource render_attention_forward_combine(DType dtype) {
  KernelSource k;
  k.op = "attention_fwd";
  k.entry = "kgen_attention_fwd_combine";
  k.variant = "attention_fwd." + std::string(dtype_name(dtype)) + ".combine";
  k.threads = 32 * attention_fwd::kCombineRows;
  k.smem_bytes = 0;
  EntryShim shim{k.entry, k.threads, 0, "AttentionForwardSplitParams", "attention_forward_combine", {targ_type("T", dtype)}};
  k.source = render_entry_shims("kgen_device/attention/forward_combine.cuh", k.variant, std::span(&shim, 1));
  return k;
}

KernelSource render_attention_fp8_v_transpose() {
  KernelSource k;
  k.op = "attention_fwd";
  k.entry = "kgen_attention_fp8_v_transpose";
  k.variant = "attention_fwd.fp8.v_transpose";
  k.threads = 128;
  k.smem_bytes = 0;
  EntryShim shim{k.entry, k.threads, 0, "AttentionFp8VParams", "attention_fp8_v_transpose", {targ("T", std::string("kgen::float8_e4m3_t"))}};
  k.source = render_entry_shims("kgen_device/attention/forward_fp8.cuh", k.variant, std::span(&shim, 1));
  return k;
}

int attention_fp8_keys_padded(int n_k) {
  const int tile = attention_fwd::kFp8KeyTile;
  return (n_k + tile - 1) / tile * tile;
}

LaunchGrid attention_fp8_v_transpose_grid(const AttentionShape& shape, int head_dim) {
  return {static_cast<unsigned>(attention_fp8_keys_padded(shape.n_k) / 32), static_cast<unsigned>((head_dim + 127) / 128),
          static_cast<unsigned>(shape.batch * shape.heads_kv)};
}

std::vector<KernelSource> render_attention_forward_kernels(const AttentionForwardSpec& spec,
                                                           const AttentionForwardConfig& config) {
  std::vector<KernelSource> out{render_attention_forward(spec, config)};
  if (spec.fp8) out.insert(out.begin(), render_attention_fp8_v_transpose());
  if (config.split_keys) out.push_back(render_attention_forward_combine(spec.dtype));
  // A mask that reads integer tensors (document ids): their range tables' kernel.
  if (!spec.variant.empty() && !Variant::from_canonical(spec.variant).mask_range_tensors().empty())
    out.push_back(render_variant_ranges());
  return out;
}

namespace {

// The shapes whose defaults `kgen warm` builds at the head dims outside the config space and
// `kgen warm --defaults` builds at kAttentionDefaultWarmHeadDims: machine-filling grids (b·n = 16k
// query rows of 16 heads) at each key count where the default changes its tiles, and one too
// small to fill the machine once. Decode-like calls are kDecodeShape.
std::vector<AttentionShape> forward_default_shapes() {
  std::vector<AttentionShape> shapes;
  for (int n : {1024, 2048, 4096, 8192, 16384}) shapes.push_back({16384 / n, 16, 16, n, n});
  shapes.push_back({1, 1, 1, 128, 128});
  return shapes;
}
constexpr AttentionShape kDecodeShape{1, 8, 8, 4, 4096};
// Decode of many sequences (two blocks per SM on 132 SMs): paged caches' one-warpgroup kernel.
constexpr AttentionShape kDecodeManyShape{64, 8, 8, 4, 4096};

// Appends the kernels of `c` for `spec` whose variant names are not in `out` yet.
void add_forward_kernels(std::vector<KernelSource>& out, const AttentionForwardSpec& spec, const AttentionForwardConfig& c) {
  for (KernelSource& k : render_attention_forward_kernels(spec, c))
    if (std::ranges::none_of(out, [&](const KernelSource& e) { return e.variant == k.variant; })) out.push_back(std::move(k));
}

}  // namespace

std::vector<std::pair<std::string, bool>> attention_warm_variants() {
  const auto canonical = [](const VariantPresets& p) { return Variant::parse(compose_variant(p)).canonical(); };
  return {{canonical({.window = true}), false},
          {canonical({.softcap = true}), false},
          {canonical({.alibi = true}), false},
          {canonical({.document = true}), false},
          {canonical({.window = true, .softcap = true}), true}};
}

std::vector<KernelSource> attention_forward_all_variants(const Target& target) {
  std::vector<KernelSource> out;
  auto add = [&](const AttentionForwardSpec& spec, const AttentionForwardConfig& c) { add_forward_kernels(out, spec, c); };
  // The warm variants' defaults of each shape class (NVIDIA: AMD serves variants on the general
  // path, compiled on first use).
  if (target.vendor == Vendor::nvidia)
  for (const auto& [canonical, sinks] : attention_warm_variants())
    for (DType t : {DType::f16, DType::bf16})
      for (int d : kAttentionDefaultWarmHeadDims) {
        const AttentionForwardSpec spec{t, d, true, canonical, sinks};
        for (const AttentionShape& shape : forward_default_shapes())
          add(spec, attention_forward_default_config(spec, shape, target, 132));
      }
  // Packed batches and paged K/V caches, causal: their defaults of each shape class (paged also
  // the decode shapes' kernels: split keys for few sequences, one warpgroup for many).
  if (target.vendor == Vendor::nvidia)
    for (DType t : {DType::f16, DType::bf16})
      for (int d : kAttentionDefaultWarmHeadDims) {
        AttentionForwardSpec packed{t, d, true}, paged{t, d, true};
        packed.packed = true, paged.paged = true;
        for (const AttentionShape& shape : forward_default_shapes()) {
          add(packed, attention_forward_default_config(packed, shape, target, 132));
          add(paged, attention_forward_default_config(paged, shape, target, 132));
        }
        add(paged, attention_forward_default_config(paged, kDecodeShape, target, 132));
        add(paged, attention_forward_default_config(paged, kDecodeManyShape, target, 132));
      }
  for (DType t : {DType::f16, DType::bf16, DType::f32})
    for (int d : kAttentionWarmHeadDims)
      for (bool causal : {false, true}) {
        AttentionForwardSpec spec{t, d, causal};
        for (const auto& c : attention_forward_config_space(spec, target)) add(spec, c);
      }
  // Every other tensor-core head dim: the defaults of each shape class (forward_default_shapes(),
  // and a decode-like call, non-causal: packed GQA decode is).
  for (DType t : {DType::f16, DType::bf16})
    for (int d : attention_default_only_head_dims()) {
      for (bool causal : {false, true})
        for (const AttentionShape& shape : forward_default_shapes())
          add({t, d, causal}, attention_forward_default_config({t, d, causal}, shape, target, 132));
      add({t, d, false}, attention_forward_default_config({t, d, false}, kDecodeShape, target, 132));
    }
  // v head dims of their own (kAttentionWarmHeadDimPairs, NVIDIA): the defaults of each shape
  // class, fa2 for fp16 and bf16, simt for fp32.
  if (target.vendor == Vendor::nvidia)
    for (auto [d, dv] : kAttentionWarmHeadDimPairs)
      for (DType t : {DType::f16, DType::bf16, DType::f32})
        for (bool causal : {false, true}) {
          AttentionForwardSpec spec{t, d, causal};
          spec.head_dim_v = dv;
          for (const AttentionShape& shape : forward_default_shapes())
            add(spec, attention_forward_default_config(spec, shape, target, 132));
          add(spec, attention_forward_default_config(spec, kDecodeShape, target, 132));
        }
  // FP8 inputs (wgmma targets): every config of their space, fp16 and bf16 outputs, both masks.
  if (has_wgmma(target))
    for (DType t : {DType::f16, DType::bf16})
      for (int d : {128, 256})
        for (bool causal : {false, true}) {
          AttentionForwardSpec spec{t, d, causal};
          spec.fp8 = true;
          for (const auto& c : attention_forward_config_space(spec, target)) add(spec, c);
        }
  return out;
}

std::vector<KernelSource> attention_forward_default_variants(const Target& target) {
  std::vector<AttentionShape> shapes = forward_default_shapes();
  shapes.push_back(kDecodeShape);
  std::vector<KernelSource> out;
  for (DType t : {DType::f16, DType::bf16})
    for (int d : kAttentionDefaultWarmHeadDims)
      for (bool causal : {false, true})
        for (const AttentionShape& shape : shapes) {
          const AttentionForwardSpec spec{t, d, causal};
          add_forward_kernels(out, spec, attention_forward_default_config(spec, shape, target, 132));
        }
  return out;
}

}  // namespace kgen
