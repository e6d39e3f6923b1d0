#include "kgen_device/attention/forward_fa2.cuh"

// kgen variant attention_fwd.bf16.d128.causal.fa2:bm128:bn64:w8:s2
extern "C" __global__ void __launch_bounds__(256, 1) kgen_attention_fwd(const kgen::AttentionForwardParams p) {
  kgen::attention_forward_fa2</*T=*/kgen::bfloat16_t, /*D=*/128, /*BM=*/128, /*BN=*/64, /*Warps=*/8, /*Stages=*/2, /*Causal=*/true>(p);
}
