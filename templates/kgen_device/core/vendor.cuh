// The vendor a device template is compiled for. KGEN_AMD is 1 in AMD device compiles (hiprtc,
// or clang's HIP device compile with kgen_device/core/hip_prelude.h), 0 under NVRTC; the other
// core headers choose their bodies by it, and nothing outside core/ tests it.
#pragma once

#if defined(__HIP_DEVICE_COMPILE__) || defined(__AMDGCN__)
#define KGEN_AMD 1
#else
#define KGEN_AMD 0
#endif

#if KGEN_AMD
// __launch_bounds__(threads[, min_blocks]) with its NVIDIA meaning, for hiprtc (replacing HIP's)
// and clang alike. `threads` bounds the block: without it the compiler budgets registers for 1024
// threads (the fp32 simt forward then spilled 568 B per lane on gfx942). `min_blocks` blocks stay
// resident on one compute unit, i.e. ceil(min_blocks · waves per block / 4) waves on each of its
// 4 SIMDs; HIP's own macro takes the number as waves per SIMD, which would cap LRPE's o8 configs
// at 64 VGPRs (measured: 400+ B of spills each) instead of 128.
#undef __launch_bounds__
#define kgen_launch_bounds_1(threads) __attribute__((amdgpu_flat_work_group_size(1, threads)))
#define kgen_launch_bounds_2(threads, min_blocks)            \
  __attribute__((amdgpu_flat_work_group_size(1, threads), \
                 amdgpu_waves_per_eu(((min_blocks) * (((threads) + 63) / 64) + 3) / 4)))
#define kgen_launch_bounds_pick(_1, _2, name, ...) name
#define __launch_bounds__(...) \
  kgen_launch_bounds_pick(__VA_ARGS__, kgen_launch_bounds_2, kgen_launch_bounds_1, )(__VA_ARGS__)
#endif
