#include "kgen_device/attention/forward_wgmma.cuh"

// kgen variant attention_fwd.bf16.d128.causal.wg:bm128:bn128:s2
extern "C" __global__ void __launch_bounds__(256, 1) kgen_attention_fwd(const kgen::AttentionForwardParams p) {
  kgen::attention_forward_wgmma<kgen::bfloat16_t, 128, 128, 2, 2, true>(p);
}
