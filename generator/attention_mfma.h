// The MFMA attention family (AMD CDNA matrix cores: gfx90a, gfx942, gfx950): validity rules,
// config spaces, defaults and rendering of its forward and backward kernels
// (templates/kgen_device/attention/forward_mfma.cuh, backward_mfma.cuh). attention_forward.cpp
// and attention_backward.cpp call these for the `mfma:` configs:
//   forward  "mfma:bm<query rows>:bn<keys per tile>:w<waves>"   (32 query rows per wave)
//   backward "mfma:bm<query rows per tile>:bn<keys>:w<waves>"   (32 keys per wave)
// fp16/bf16 with head dims 64 and 128, causal or not, GQA.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "generator/attention_backward.h"
#include "generator/attention_forward.h"
#include "generator/entry_shim.h"
#include "generator/kernel_source.h"
#include "generator/target.h"

namespace kgen {

// Whether the MFMA family serves `dtype` at `head_dim` on `target` at all.
bool mfma_serves(DType dtype, int head_dim, const Target& target);

// ---- forward ----
// Why `config` (path mfma) is invalid for `spec` on `target`, or nullopt.
std::optional<std::string> check_mfma_forward_config(const AttentionForwardSpec& spec, const AttentionForwardConfig& config,
                                                     const Target& target);
// The valid MFMA configs, in canonical order (empty where the family does not serve the spec).
std::vector<AttentionForwardConfig> mfma_forward_config_space(const AttentionForwardSpec& spec, const Target& target);
// The heuristic's MFMA config for a call, or nullopt where the family does not serve it.
std::optional<AttentionForwardConfig> mfma_forward_default_config(const AttentionForwardSpec& spec, const Target& target);
// Fills the launch sizes of `k` and the template arguments of `shim`; returns the header.
std::string render_mfma_forward(const AttentionForwardSpec& spec, const AttentionForwardConfig& config, KernelSource& k,
                                EntryShim& shim);

// ---- backward ----
std::optional<std::string> check_mfma_backward_config(const AttentionBackwardSpec& spec, const BackwardMfmaConfig& config,
                                                      const Target& target);
std::vector<AttentionBackwardConfig> mfma_backward_config_space(const AttentionBackwardSpec& spec, const Target& target);
std::optional<BackwardMfmaConfig> mfma_backward_default_config(const AttentionBackwardSpec& spec, const Target& target);
// `kernel` is kv_atomic, kv or dq (the row helpers are the other families'); fills `k` and
// `shim` as above and returns the header.
std::string render_mfma_backward(const AttentionBackwardSpec& spec, const BackwardMfmaConfig& config,
                                 BackwardKernel kernel, KernelSource& k, EntryShim& shim);

}  // namespace kgen
