// The replay table: one row per kernel that `kgen warm` builds (every operator, every variant,
// each target), with a digest of its machine code and its resources. It is checked in
// (tests/replay/table.tsv) and regenerated in CI, so any change to a generated kernel shows up as
// a diff that must be committed with the change; a refactor that means to change nothing shows
// none. `kgen replay` writes or checks it.
//
// Each row also records a digest of the kernel's compile inputs (inputs_digest): its source, the
// template headers it includes, entry, compiler version, target and options. A check compiles
// only the rows whose inputs changed (or that are new) and takes the others from the table, since
// the same inputs give the same machine code; `kgen replay --check FILE --full` compiles all.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "jit/kernel_builder.h"
#include "jit/warm.h"

namespace kgen {

struct ReplayRow {
  std::string target;   // "sm_90a"
  std::string op;       // "attention_fwd"
  std::string variant;  // KernelSource::variant
  std::string entry;    // kernel entry point
  std::string code_sha256;  // of the executable sections of the binary (see code_digest)
  int registers = -1;
  int spill_bytes = 0;  // spill stores + spill loads
  int static_smem = 0;
  int dynamic_smem = 0;
  int threads = 0;
  int stack_bytes = 0;            // the compiler's stack frame
  bool serialized_wgmma = false;  // ptxas serialised the kernel's wgmma instructions
  std::string inputs_sha256;      // inputs_digest() of the kernel
};

// SHA-256 over everything that decides a kernel's machine code: the source, every embedded
// template header it includes (directly or through other headers, by name and text), the entry
// point, the compiler's version and options, and the target. Changes to headers the kernel does
// not include, to kgen's version or to the host leave it unchanged.
std::string inputs_digest(const KernelSource& source, const Target& target);

// SHA-256 over the executable sections (the machine code) of an ELF image, in section order,
// each as (size, bytes). Line tables and other debug sections are left out, so moving a comment
// in a template changes nothing here while any change to an instruction does. Throws
// Error(internal) when `image` is not a 64-bit little-endian ELF file.
std::string code_digest(const std::vector<std::byte>& image);

// Rows of `items`, sorted by (target, op, variant). An item with a row in `known` (same target,
// op and variant) whose inputs_sha256 equals the item's inputs_digest() takes that row as is; the
// others are built through `builder` (cache hits count). A failed build throws Error naming the
// variant. `*built`, when given, receives how many items were built rather than taken from `known`.
std::vector<ReplayRow> replay_rows(KernelBuilder& builder, const std::vector<WarmItem>& items, int jobs,
                                   const WarmProgress& progress = {}, const std::vector<ReplayRow>& known = {},
                                   std::size_t* built = nullptr);

// The targets of tests/replay/table.tsv, `kgen replay`'s default.
inline constexpr std::string_view kReplayTableTargets = "sm_80,sm_90a,sm_100a,sm_103a,sm_120";

// Whether the replay table holds only `target`'s built-in defaults (default_warm_items) rather
// than every variant: the Blackwell targets (sm_100a, sm_103a, sm_120, sm_121), which kgen compiles
// for but has not run on. Their rows show that the kernels those devices would launch first
// compile without spills, and guard their machine code, at a tenth of a whole space's compiles.
bool replay_defaults_only(const Target& target);

// The kernels of the replay table for `archs`, restricted to the operators `ops` (all if empty):
// warm_items(ops, {arch}) for each target, or its defaults where replay_defaults_only(). Throws
// Error(invalid_argument) naming an unknown operator or target.
std::vector<WarmItem> replay_items(const std::vector<std::string>& ops, const std::vector<std::string>& archs);

// Whether `row` is one of the operators `ops` on one of the targets `archs` (either empty: all).
bool replay_row_selected(const ReplayRow& row, const std::vector<std::string>& ops, const std::vector<std::string>& archs);

// `rows`, built for the operators `ops` on the targets `archs` (either empty: all), merged into
// `table`: its rows of other operators or targets kept as they are, the selection's replaced by
// `rows`; sorted as replay_rows sorts. What `kgen replay --write` of a subset writes, so that the
// rest of the file is not lost.
std::vector<ReplayRow> merge_replay_rows(const std::vector<ReplayRow>& table, std::vector<ReplayRow> rows,
                                         const std::vector<std::string>& ops, const std::vector<std::string>& archs);

// The table as text: a header line, then one tab-separated line per row.
std::string format_replay_table(const std::vector<ReplayRow>& rows);

// The rows of a table written by format_replay_table. Throws Error(invalid_argument) naming
// `where` and the line for a malformed line.
std::vector<ReplayRow> parse_replay_table(const std::string& text, const std::string& where);

// The differences from `expected` to `actual`, one line each ("- row" gone, "+ row" new, and
// both lines for a changed row, keyed by (target, op, variant)); empty when they are equal.
std::vector<std::string> diff_replay_tables(const std::vector<ReplayRow>& expected, const std::vector<ReplayRow>& actual);

}  // namespace kgen
