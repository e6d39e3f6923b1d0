#include "kgen_device/attention/forward_wgmma.cuh"

// kgen variant attention_fwd.bf16.d128.causal.wg:bm128:bn128:s2
extern "C" __global__ void __launch_bounds__(256, 1) kgen_attention_fwd(const kgen::AttentionForwardParams p) {
  kgen::attention_forward_wgmma</*T=*/kgen::bfloat16_t, /*D=*/128, /*BN=*/128, /*WGs=*/2, /*Stages=*/2, /*Causal=*/true>(p);
}
