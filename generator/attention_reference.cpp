#include "generator/attention_reference.h"

#include <string>

#include "kgen_device/reference/params.h"

namespace kgen {
namespace {

const char* element_type(DType dtype) {
  return dtype == DType::f16 ? "kgen::half_t" : dtype == DType::bf16 ? "kgen::bfloat16_t" : "float";
}

// One extern "C" kernel that calls kgen::<call>(p), a template of `header`, with its params struct.
KernelSource render_kernel(const std::string& op, const std::string& variant, const std::string& entry,
                           const char* header, const char* params, const std::string& call, int threads) {
  KernelSource k;
  k.op = op;
  k.variant = variant;
  k.entry = entry;
  k.threads = threads;
  k.smem_bytes = 0;
  k.source = std::string("#include \"") + header + "\"\n\n// kgen variant " + k.variant +
             "\nextern \"C\" __global__ void __launch_bounds__(" + std::to_string(threads) + ") " + k.entry +
             "(const kgen::" + params + " p) {\n  kgen::" + call + "(p);\n}\n";
  return k;
}

KernelSource render(DType dtype, const char* pass, int threads) {
  return render_kernel("attention_fwd_reference",
                       std::string("attention_fwd_reference.") + std::string(dtype_name(dtype)) + "." + pass,
                       std::string("kgen_reference_") + pass, "kgen_device/reference/attention_naive.cuh",
                       "ReferenceAttentionParams", std::string("reference_") + pass + "<" + element_type(dtype) + ">",
                       threads);
}

KernelSource render_bwd(DType dtype, bool double_backward, const char* pass) {
  const std::string op = double_backward ? "attention_dbwd_reference" : "attention_bwd_reference";
  const std::string targs = std::string("<") + element_type(dtype) + (double_backward ? ", true>" : ", false>");
  return render_kernel(op, op + "." + std::string(dtype_name(dtype)) + "." + pass,
                       "kgen_" + op + "_" + pass, "kgen_device/reference/attention_bwd_naive.cuh",
                       "ReferenceAttentionBwdParams", std::string("reference_bwd_") + pass + targs,
                       kReferenceBwdThreads);
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
