#include "kgen_device/attention/forward_fa2.cuh"

// kgen variant attention_fwd.fp16.d64.full.fa2:bm64:bn128:w4:s2
extern "C" __global__ void __launch_bounds__(128, 1) kgen_attention_fwd(const kgen::AttentionForwardParams p) {
  kgen::attention_forward_fa2</*T=*/kgen::half_t, /*D=*/64, /*BM=*/64, /*BN=*/128, /*Warps=*/4, /*Stages=*/2, /*Causal=*/false>(p);
}
