// The kernel that builds an attention variant's range tables (kgen_device/attention/
// variant_ranges.cuh) before the attention kernels of a call whose mask reads integer tensors.
#pragma once

#include "generator/kernel_source.h"

namespace kgen {

inline constexpr int kVariantRangeThreads = 256;

// One kernel for every variant, dtype and target: grid (the tensor's rows), kVariantRangeThreads threads.
KernelSource render_variant_ranges();

}  // namespace kgen
