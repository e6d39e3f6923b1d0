// kgen::attention_paged_plan / attention_paged_run (docs/attention.md §10, "Plan and run"): the
// paged forward's validation, config decision, kernel loading and workspace sizing done once; a
// run compares its views with the plan's, points the prepared launch at them and launches.
#include <cstdint>
#include <memory>
#include <string>

#include "driver/device.h"
#include "ops/attention_forward.h"
#include "ops/tensor_checks.h"
#include "ops/validate_only.h"

namespace kgen {

struct AttentionPagedPlanState {
  AttentionForwardLaunch launch;  // prepared on the plan's views
  bool causal = false;            // options.causal (pack_query_heads reads it)
  bool aligned16 = false;         // every planned view allowed 16-byte loads
  TensorView q, k_cache, v_cache, o, lse, block_table, cache_seqlens;
  bool has_lse = false, has_lens = false;
  std::size_t workspace_bytes = 0;
};

namespace {

// `t` as planned: dtype, shape, strides and device; a data pointer, aligned as the plan's were.
void check_planned(const TensorView& t, const TensorView& planned, const char* name, bool aligned16_needed) {
  const std::string n(name);
  if (!t.data) invalid_argument(n + ": data pointer is null");
  bool same = t.dtype == planned.dtype && t.ndim == planned.ndim && t.device == planned.device;
  for (int i = 0; same && i < t.ndim; ++i)
    same = t.shape[i] == planned.shape[i] && (t.shape[i] == 1 || t.strides[i] == planned.strides[i]);
  if (!same)
    invalid_argument(n + ": " + std::string(dtype_name(t.dtype)) + " " + shape_string(t) + " on device " +
                     std::to_string(t.device) + " differs from the plan's " + std::string(dtype_name(planned.dtype)) +
                     " " + shape_string(planned) + " on device " + std::to_string(planned.device) +
                     " (dtype, shape, strides and device are fixed by the plan)");
  const std::uintptr_t a = reinterpret_cast<std::uintptr_t>(t.data);
  if (a % dtype_bytes(t.dtype) || (aligned16_needed && a % 16))
    invalid_argument(n + ": data pointer is not " + (aligned16_needed ? "16-byte" : "element") +
                     " aligned as the plan's was");
}

void check_presence(bool given, bool planned, const char* name) {
  if (given != planned)
    invalid_argument(std::string(name) + (given ? ": given, the plan had none" : ": missing, the plan had one"));
}

}  // namespace

std::size_t AttentionPagedPlan::workspace_bytes() const { return state_ ? state_->workspace_bytes : 0; }

std::string AttentionPagedPlan::config() const { return state_ ? to_string(state_->launch.config) : std::string(); }

int AttentionPagedPlan::splits() const {
  return state_ && state_->launch.split ? state_->launch.split_params.splits : 1;
}

AttentionPagedPlan attention_paged_plan(const TensorView& q, const TensorView& k_cache, const TensorView& v_cache,
                                        const TensorView& o, const TensorView* lse, const PagedKV& kv,
                                        const AttentionOptions& options) {
  auto state = std::make_shared<AttentionPagedPlanState>();
  state->launch = prepare_attention_forward(q, paged_cache_view(k_cache, "k_cache"),
                                            paged_cache_view(v_cache, "v_cache"), o, lse, options, nullptr, &kv);
  state->causal = options.causal;
  state->q = q, state->k_cache = k_cache, state->v_cache = v_cache, state->o = o;
  state->has_lse = lse != nullptr;
  if (lse) state->lse = *lse;
  state->block_table = *kv.block_table;  // prepare checked that it is given
  state->has_lens = kv.cache_seqlens != nullptr;
  if (kv.cache_seqlens) state->cache_seqlens = *kv.cache_seqlens;
  state->aligned16 = aligned16(q) && aligned16(k_cache) && aligned16(v_cache) && aligned16(o);
  state->workspace_bytes = attention_forward_workspace_bytes(state->launch);
  AttentionPagedPlan plan;
  plan.state_ = std::move(state);
  return plan;
}

void attention_paged_run(const AttentionPagedPlan& plan, const TensorView& q, const TensorView& k_cache,
                         const TensorView& v_cache, const TensorView& o, const TensorView* lse, const PagedKV& kv,
                         void* workspace, std::size_t workspace_bytes, void* stream) {
  if (!plan.state_) invalid_argument("plan: empty (make one with attention_paged_plan)");
  const AttentionPagedPlanState& s = *plan.state_;
  check_planned(q, s.q, "q", s.aligned16);
  check_planned(k_cache, s.k_cache, "k_cache", s.aligned16);
  check_planned(v_cache, s.v_cache, "v_cache", s.aligned16);
  check_planned(o, s.o, "o", s.aligned16);
  check_presence(lse != nullptr, s.has_lse, "lse");
  if (lse) check_planned(*lse, s.lse, "lse", false);
  check_presence(kv.block_table != nullptr, true, "block_table");
  check_planned(*kv.block_table, s.block_table, "block_table", false);
  check_presence(kv.cache_seqlens != nullptr, s.has_lens, "cache_seqlens");
  if (kv.cache_seqlens) check_planned(*kv.cache_seqlens, s.cache_seqlens, "cache_seqlens", false);
  if (s.workspace_bytes && !workspace)
    invalid_argument("workspace: null, the plan needs " + std::to_string(s.workspace_bytes) + " bytes");
  end_of_validation();

  AttentionForwardLaunch launch = s.launch;
  TensorView qv = q, ov = o, lsev = lse ? *lse : TensorView{};
  const TensorView kp = paged_cache_view(k_cache, "k_cache"), vp = paged_cache_view(v_cache, "v_cache");
  if (launch.packed_heads) {
    AttentionOptions packing;
    packing.causal = s.causal;
    if (!pack_query_heads(qv, ov, lse ? &lsev : nullptr, kp, packing))
      throw Error(Status::internal, "attention_paged_run: the planned views no longer pack their query heads");
  }
  use_primary_context(q.device);  // the tensor maps are encoded in the current context
  rebind_attention_forward(launch, qv, kp, vp, ov, lse ? &lsev : nullptr, &kv);
  launch_attention_forward(launch, q.device, stream, workspace, workspace_bytes);
}

}  // namespace kgen
