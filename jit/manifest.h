// Warm manifests: JSON Lines, one variant per line, for `kgen warm --manifest FILE`.
//
//   {"op":"attention_fwd","dtype":"bf16","head_dim":128,"causal":true,"config":"fa2:bm128:bn32:w4:s2"}
//
// Keys: op (required; "attention_fwd"), dtype (required; fp16, bf16, fp32 and their aliases),
// head_dim (required integer), causal (optional boolean, default false), config (optional
// string; absent = the op's whole config space for each target). Unknown keys are errors
// (typos must not silently widen a warm). Blank lines are skipped; duplicates compile once.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "jit/warm.h"

namespace kgen {

// The items of the manifest at `path` for each of `archs`, in manifest order (targets inner).
// Throws Error(invalid_argument, "manifest:LINE: reason") for a malformed line, a bad value or a
// config invalid for a target; "manifest: …" for an unreadable or empty file or a bad arch.
std::vector<WarmItem> read_manifest(const std::filesystem::path& path, const std::vector<std::string>& archs);

}  // namespace kgen
