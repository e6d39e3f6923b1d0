#include "generator/attention_reference.h"

#include <string>

namespace kgen {
namespace {

KernelSource render(DType dtype, const char* pass, int threads) {
  const char* t = dtype == DType::f16 ? "kgen::half_t" : dtype == DType::bf16 ? "kgen::bfloat16_t" : "float";
  KernelSource k;
  k.op = "attention_fwd_reference";
  k.variant = std::string("attention_fwd_reference.") + std::string(dtype_name(dtype)) + "." + pass;
  k.entry = std::string("kgen_reference_") + pass;
  k.threads = threads;
  k.smem_bytes = 0;
  k.source = std::string("#include \"kgen/reference/attention_naive.cuh\"\n\n// kgen variant ") + k.variant +
             "\nextern \"C\" __global__ void __launch_bounds__(" + std::to_string(threads) + ") " + k.entry +
             "(const kgen::ReferenceAttentionParams p) {\n  kgen::reference_" + pass + "<" + t + ">(p);\n}\n";
  return k;
}

}  // namespace

KernelSource render_attention_reference_scores(DType dtype) {
  return render(dtype, "scores", kReferenceScoresThreads);
}

KernelSource render_attention_reference_softmax_pv(DType dtype) {
  return render(dtype, "softmax_pv", kReferenceSoftmaxThreads);
}

}  // namespace kgen
