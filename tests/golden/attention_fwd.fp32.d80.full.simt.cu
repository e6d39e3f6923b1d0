#include "kgen_device/attention/forward_simt.cuh"

// kgen variant attention_fwd.fp32.d128.full.simt:bm4:bn32:dmax128
extern "C" __global__ void __launch_bounds__(128, 1) kgen_attention_fwd(const kgen::AttentionForwardParams p) {
  kgen::attention_forward_simt</*T=*/float, /*DMax=*/128, /*BN=*/32, /*Warps=*/4, /*Causal=*/false>(p);
}
