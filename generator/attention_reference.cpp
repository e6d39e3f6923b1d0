#include "generator/attention_reference.h"

#include "generator/entry_shim.h"

#include <string>

#include "kgen_device/reference/params.h"

namespace kgen {
namespace {

// One extern "C" kernel that instantiates `function`, a template of `header`, with `args`.
KernelSource render_kernel(const std::string& op, const std::string& variant, const std::string& entry, const char* header,
                           const char* params, const std::string& function, std::vector<TemplateArg> args, int threads) {
  KernelSource k;
  k.op = op;
  k.variant = variant;
  k.entry = entry;
  k.threads = threads;
  k.smem_bytes = 0;
  const EntryShim shim{entry, threads, 0, params, function, std::move(args)};
  k.source = render_entry_shims(header, k.variant, std::span(&shim, 1));
  return k;
}

KernelSource render(DType dtype, const char* pass, int threads) {
  return render_kernel("attention_fwd_reference",
                       std::string("attention_fwd_reference.") + std::string(dtype_name(dtype)) + "." + pass,
                       std::string("kgen_reference_") + pass, "kgen_device/reference/attention_naive.cuh",
                       "ReferenceAttentionParams", std::string("reference_") + pass, {targ_type("T", dtype)}, threads);
}

KernelSource render_bwd(DType dtype, bool double_backward, const char* pass) {
  const std::string op = double_backward ? "attention_dbwd_reference" : "attention_bwd_reference";
  return render_kernel(op, op + "." + std::string(dtype_name(dtype)) + "." + pass,
                       "kgen_" + op + "_" + pass, "kgen_device/reference/attention_bwd_naive.cuh",
                       "ReferenceAttentionBwdParams", std::string("reference_bwd_") + pass,
                       {targ_type("T", dtype), targ("kDouble", double_backward)}, kReferenceBwdThreads);
}

}  // namespace

KernelSource render_attention_reference_scores(DType dtype) {
  return render(dtype, "scores", kReferenceScoresThreads);
}

KernelSource render_attention_reference_softmax_pv(DType dtype) {
  return render(dtype, "softmax_pv", kReferenceSoftmaxThreads);
}

KernelSource render_attention_reference_bwd_rows(DType dtype, bool double_backward) {
  return render_bwd(dtype, double_backward, "rows");
}

KernelSource render_attention_reference_bwd_keys(DType dtype, bool double_backward) {
  return render_bwd(dtype, double_backward, "keys");
}

}  // namespace kgen
