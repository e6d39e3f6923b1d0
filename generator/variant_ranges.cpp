#include "generator/variant_ranges.h"

#include <span>

#include "generator/entry_shim.h"

namespace kgen {

KernelSource render_variant_ranges() {
  KernelSource k;
  k.op = "attention_fwd";
  k.entry = "kgen_variant_ranges";
  k.variant = "attention_fwd.variant_ranges";
  k.threads = kVariantRangeThreads;
  k.smem_bytes = 0;
  EntryShim shim{k.entry, k.threads, 0, "VariantRangeParams", "variant_ranges", {targ("Threads", kVariantRangeThreads)}};
  k.source = render_entry_shims("kgen_device/attention/variant_ranges.cuh", k.variant, std::span(&shim, 1));
  return k;
}

}  // namespace kgen
