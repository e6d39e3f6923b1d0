// Warm manifests: JSON Lines, one variant of any registered operator per line, for
// `kgen warm --manifest FILE`.
//
//   {"op":"attention_fwd","variant":"attention_fwd.bf16.d128.causal","config":"fa2:bm128:bn32:w4:s2"}
//   {"op":"attention_bwd","variant":"attention_bwd.bf16.d64.causal.deterministic"}
//   {"op":"md_lrpe_cosine","variant":"md_lrpe_cosine.bwd.bf16.none.cache","config":"bp:t256:r2:v8:cache"}
//
// Keys: op (required; an operator name as in `kgen show-config`), variant (required; the
// operator's variant key, as in tuning-database records and `kgen inspect --variant`), config
// (optional non-empty string; absent = every config of the variant valid on each target). Every
// kernel of a config is compiled (the backward ops launch several). Unknown keys are errors
// (typos must not silently widen a warm). Blank lines are skipped; duplicates compile once.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "jit/warm.h"

namespace kgen {

// The items of the manifest at `path` for each of `archs`, in manifest order (targets inner).
// Throws Error(invalid_argument, "manifest:LINE: \"FIELD\": reason") for a bad value (unknown
// operator, variant key or config, a config invalid for a target), "manifest:LINE: reason" for a
// line that is not a JSON object of the known keys, "manifest: …" for an unreadable file and
// "--archs: …" for a bad target.
std::vector<WarmItem> read_manifest(const std::filesystem::path& path, const std::vector<std::string>& archs);

}  // namespace kgen
