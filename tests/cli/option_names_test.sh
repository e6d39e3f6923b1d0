#!/usr/bin/env bash
# One naming rule for options across the CLI: an option that takes a comma-separated list is
# named in the plural and answers to the singular too (--ops/--op, --archs/--arch,
# --dtypes/--dtype, --head-dims/--head-dim, ...); an option of one value (inspect's, and the
# operator of check, bench and tune) is singular. Needs no GPU and compiles nothing.
set -u
kgen=$1
fails=0
# shellcheck source=expect.sh
. "$(dirname "$0")/expect.sh"

# warm and replay: --ops and --archs, or their singulars; errors name the plural.
expect 2 "ops: unknown operator 'nope'" -- warm --op nope
expect 2 "ops: unknown operator 'nope'" -- warm --ops nope
expect 2 "archs: unknown target 'sm_99'" -- warm --archs sm_99
expect 2 "archs: unknown target 'sm_99'" -- warm --arch sm_99
expect 2 "archs: empty list" -- warm --archs ''
expect 0 "--ops,--op" -- warm --help
expect 0 "--archs,--arch" -- warm --help
expect 0 "--ops,--op" -- replay --help
expect 0 "--archs,--arch" -- replay --help
# check, bench and tune: every list option also by its singular, with the same cases.
for name in dtypes head-dims seqlens acts directions grids extras configs; do
  expect 0 "--$name,--${name%s}" -- check --help
done
plural=$("$kgen" check --op lrpe_cosine --list --dtypes fp16 --acts softmax_seq --directions bwd --batch 2 --heads 3 \
  --head-dims 64 --seqlens 4096 2>&1)
singular=$("$kgen" check --op lrpe_cosine --list --dtype fp16 --act softmax_seq --direction bwd --batch 2 --heads 3 \
  --head-dim 64 --seqlen 4096 2>&1)
if [ -n "$plural" ] && [ "$plural" = "$singular" ]; then ok "check --list: singular and plural names give the same cases"
else fail "check --list: singular and plural names differ: '$plural' vs '$singular'"; fi
expect 0 "grid8x8 l0" -- bench --op md_lrpe_cosine --grid 8x8 --extra 0 --acts none --list
expect 0 "^config fa2:bm64:bn64:w4:s2$" -- bench --op attention_fwd --config fa2:bm64:bn64:w4:s2 --seqlens 512 --list
# The old `bench md_lrpe --dim` (its --head-dims) and --dims (grid dims) keep their meaning.
expect 0 "d64 .*grid8x8" -- bench md_lrpe --dim 64 --dims 2 --grid 8x8,4x4x4 --extras 0 --acts none --list
expect 2 "devices: empty list" -- tune --device '' --list
expect 0 "--devices,--device" -- tune --help
# inspect takes one variant: singular names only.
expect 2 "not expected: .*--dtypes" -- inspect --dtypes bf16

echo "$fails failed"
[ "$fails" = 0 ]
