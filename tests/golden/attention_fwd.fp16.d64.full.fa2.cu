#include "kgen_device/attention/forward_fa2.cuh"

// kgen variant attention_fwd.fp16.d64.full.fa2:bm64:bn128:w4:s2
extern "C" __global__ void __launch_bounds__(128, 1) kgen_attention_fwd(const kgen::AttentionForwardParams p) {
  kgen::attention_forward_fa2<kgen::half_t, 64, 64, 128, 4, 2, false>(p);
}
