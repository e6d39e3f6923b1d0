#!/usr/bin/env bash
# The kgen CLI's contract: --help everywhere, exit codes scripts can use (0 ok, 1 failed,
# 2 usage, 3 no device), one clear sentence naming the bad argument.
set -u
kgen=$1
cache=$2
fails=0
# shellcheck source=expect.sh
. "$(dirname "$0")/expect.sh"
for cmd in warm show-config inspect check bench demo "cache ls" "cache verify" "cache gc" "cache clear" "cache export" "cache import"; do
  # shellcheck disable=SC2086
  expect 0 "Usage" -- $cmd --help
done
expect 2 "archs: unknown target 'sm_99'" -- warm --arch sm_99 --cache-dir "$cache"
expect 2 "ops: unknown operator 'nope'" -- warm --ops nope --cache-dir "$cache"
# The Blackwell targets: listed, the exact forms only, wgmma refused with the reason naming the
# target, the fa2 kernel their default forward.
expect 0 "sm_90a, sm_100a, sm_103a, sm_120, sm_121, gfx90a" -- warm --help
expect 0 "sm_100a, sm_103a, sm_120, sm_121" -- inspect --help
expect 0 "sm_80,sm_90a,sm_100a,sm_103a,sm_120" -- replay --help
expect 2 "archs: unknown target 'sm_100' \\(known: .*sm_100a" -- warm --arch sm_100 --cache-dir "$cache"
expect 2 "config: config 'wg:bm128:bn128:s2': wgmma path needs the sm_90a target, not sm_100a: Blackwell has no wgmma; its tensor-core path is tcgen05" -- inspect --arch sm_100a --config wg:bm128:bn128:s2
expect 2 "config: config 'ws:bm128:bn128:s2:pp1': ws path needs the sm_90a target, not sm_103a: Blackwell has no wgmma" -- inspect --arch sm_103a --config ws:bm128:bn128:s2:pp1
expect 2 "wgmma path needs the sm_90a target, not sm_120: Blackwell has no wgmma, and sm_120 has no tcgen05 either" -- inspect --arch sm_120 --op attention_bwd --variant attention_bwd.bf16.d64.causal --config wg:bm64:bn128:a2:t
expect 0 "^#include \"kgen_device/attention/forward_fa2.cuh\"" -- inspect --show source --dtype bf16 --head-dim 128 --causal --arch sm_121
expect 2 "jobs" -- warm --jobs -3
expect 2 "dtype: unknown dtype 'fp8'" -- inspect --dtype fp8
expect 2 "head-dim" -- inspect --head-dim 300
expect 2 "config" -- inspect --config fa2:bm64:bn64
expect 2 "op: unknown operator 'nope'" -- inspect --op nope
expect 2 "variant: required for --op lrpe_cosine" -- inspect --op lrpe_cosine
expect 2 "variant: unknown variant key 'lrpe_cosine.fwd.bf16.gelu'" -- inspect --op lrpe_cosine --variant lrpe_cosine.fwd.bf16.gelu
expect 2 "config: config 'sp:t128:r2:v8': softmax over the sequence needs the bp strategy" -- inspect --op lrpe_cosine --variant lrpe_cosine.fwd.bf16.softmax_seq --config sp:t128:r2:v8
expect 2 "" -- no-such-command
expect 2 "seqlens: 'x' is not an integer" -- bench --seqlens 12,x
expect 2 "op: unknown operator 'x'" -- bench --op x
expect 2 "op: unknown operator 'y'" -- check --op y
expect 2 "devices: '-1' is not an integer" -- tune --devices -1
expect 2 "dtypes: unknown dtype 'fp8'" -- tune --dtypes fp8
expect 2 "configs: cannot parse" -- tune --configs fa2:bm64
ops="attention_fwd attention_bwd attention_double_bwd lrpe_cosine md_lrpe_cosine"
for op in $ops; do
  expect 0 "Usage.*tune" -- tune --op "$op" --help
done
expect 0 "md_lrpe_cosine: the same with --grids" -- tune --help
expect 2 "op: unknown operator 'nope' \(kgen tune serves attention_fwd, attention_bwd, attention_double_bwd, lrpe_cosine, md_lrpe_cosine\)" -- tune --op nope
expect 2 "configs: cannot parse 'fa2:bm64:bn64:w4:s2' as an lrpe_cosine config" -- tune --op lrpe_cosine --configs fa2:bm64:bn64:w4:s2
expect 2 "configs: cannot parse 'sp:t256:r4:v8' as an attention_bwd config" -- tune --op attention_bwd --configs sp:t256:r4:v8
expect 2 "acts: unknown act 'gelu'" -- tune --op md_lrpe_cosine --acts gelu
expect 2 "directions: expected fwd and/or bwd, got 'up'" -- tune --op lrpe_cosine --directions up
expect 2 "grids: '4x4x4x4' has more than 3 dims" -- tune --op md_lrpe_cosine --grids 4x4x4x4
expect 0 "Usage" -- bench lrpe --help
expect 0 "Usage" -- check md_lrpe --help
expect 2 "acts: unknown act 'gelu'" -- bench lrpe --acts gelu
expect 2 "directions: expected fwd and/or bwd" -- bench md_lrpe --directions up
expect 2 "dtypes: unknown dtype 'fp8'" -- check lrpe --dtypes fp8
expect 0 "^#include \"kgen_device/attention/forward_ws.cuh\"" -- inspect --show source --dtype bf16 --head-dim 128 --causal
expect 0 "__grid_constant__ kgen::AttentionForwardTmaParams" -- inspect --show source --dtype bf16 --head-dim 128
expect 0 "^#include \"kgen_device/attention/forward_wgmma.cuh\"" -- inspect --show source --dtype bf16 --head-dim 128 --config wg:bm128:bn128:s2
expect 0 "^#include \"kgen_device/attention/forward_fa2.cuh\"" -- inspect --show source --dtype bf16 --head-dim 128 --causal --arch sm_80
expect 0 "key +[0-9a-f]{64}" -- inspect --show key --dtype fp16 --head-dim 64
expect 0 "pp0 +consumer warpgroups run without turns" -- inspect --explain ws:bm128:bn128:s2:pp0:persist
expect 0 "t +dQ added from shared memory by TMA" -- inspect --op attention_bwd --explain wg:bm64:bn128:a2:t:l
expect 2 "explain: 'fast' is not a config of lrpe_cosine" -- inspect --op lrpe_cosine --explain fast
expect 0 "kgen_lrpe_stats" -- inspect --op lrpe_cosine --variant lrpe_cosine.bwd.fp16.softmax_seq --config bp:t128:r2:v8 --show source
expect 0 "// ===== attention_bwd.bf16.d64.causal" -- inspect --op attention_bwd --variant attention_bwd.bf16.d64.causal --show key
# One operator's whole variant set (every variant of every operator compiles: the replay table's
# check and tests/runtime/jit/replay_defaults_test.cpp).
expect 0 "compiled [0-9]+, cached [0-9]+, failed 0" -- warm --ops lrpe_cosine --arch sm_80,sm_90a --cache-dir "$cache" --quiet
expect 0 "entries [0-9]+, corrupt 0" -- cache --cache-dir "$cache" verify
here=$(dirname "$0")
expect 0 "warming 2 variants" -- warm --db "$here/tuning_shard.jsonl" --arch sm_90a --cache-dir "$cache"
expect 2 "db: .*nonexistent" -- warm --db /nonexistent.jsonl --cache-dir "$cache"
# Records of every op (and one of an unknown op, skipped): winners plus each variant's default.
expect 0 "warming 12 variants" -- warm --db "$here/tuning_shard_all_ops.jsonl" --arch sm_90a --cache-dir "$cache"
expect 0 "kgen +[0-9]+\.[0-9]+\.[0-9]+" -- show-config

# Manifests and archives, in a small scratch cache (one cheap variant).
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
good='{"op":"attention_fwd","variant":"attention_fwd.fp32.d32.full","config":"simt:bm4:bn32:dmax32"}'
echo "$good" >"$scratch/good.jsonl"
printf '%s\n{"op":"conv2d","variant":"conv2d.bf16"}\n' "$good" >"$scratch/bad-op.jsonl"
printf '%s\n{"op":"attention_bwd","variant":"attention_bwd.bf16.d64.full","config":"fast"}\n' "$good" >"$scratch/bad-config.jsonl"
printf '{"op":"attention_fwd",\n' >"$scratch/bad-json.jsonl"
: >"$scratch/empty.jsonl"
small="$scratch/cache"
expect 2 "manifest: cannot read .*no-such.jsonl" -- warm --manifest "$scratch/no-such.jsonl" --cache-dir "$small"
expect 2 "manifest:2: \"op\": unknown operator 'conv2d'" -- warm --manifest "$scratch/bad-op.jsonl" --cache-dir "$small"
expect 2 "manifest:2: \"config\": cannot parse config 'fast'" -- warm --manifest "$scratch/bad-config.jsonl" --cache-dir "$small"
expect 2 "manifest:1: not valid JSON" -- warm --manifest "$scratch/bad-json.jsonl" --cache-dir "$small"
expect 2 "manifest:1: .*no variants" -- warm --manifest "$scratch/empty.jsonl" --cache-dir "$small"
# An attention variant is a specialisation like any other (docs/attention.md §8): warmed from its
# variant key; a broken expression text is named.
variant='attention_fwd.fp32.d32.causal.var{score=(softcap*tanh((score/softcap)));mask=;scalars=softcap:real;tensors=}'
echo "{\"op\":\"attention_fwd\",\"variant\":\"$variant\",\"config\":\"simt:bm4:bn32:dmax32\"}" >"$scratch/variant.jsonl"
echo '{"op":"attention_fwd","variant":"attention_fwd.fp32.d32.causal.var{score=(scor;mask=}"}' >"$scratch/bad-variant.jsonl"
expect 0 "compiled 1, cached 0, failed 0" -- warm --manifest "$scratch/variant.jsonl" --arch sm_80 --cache-dir "$scratch/cv"
expect 2 "manifest:1: \"variant\": variant key .*canonical variant text" -- warm --manifest "$scratch/bad-variant.jsonl" --cache-dir "$scratch/cv"
expect 2 "excludes" -- warm --manifest "$scratch/good.jsonl" --ops attention_fwd --cache-dir "$small"
expect 0 "compiled 1, cached 0, failed 0" -- warm --manifest "$scratch/good.jsonl" --arch sm_80 --cache-dir "$small"
expect 0 "compiled 0, cached 1, failed 0" -- warm --manifest "$scratch/good.jsonl" --arch sm_80 --cache-dir "$small"
expect 0 "exported 1 entries to .* bytes, zstd; [0-9]+ before" -- cache --cache-dir "$small" export "$scratch/a.kgenarc"
expect 0 "exported 1 entries" -- cache --cache-dir "$small" export --no-compress "$scratch/plain.kgenarc"
[ "$(od -An -tu4 -j8 -N4 "$scratch/a.kgenarc" | tr -d ' ')" = 2 ] || { echo "FAIL: export did not write a compressed (version 2) archive"; exit 1; }
[ "$(stat -c %s "$scratch/a.kgenarc")" -lt "$(stat -c %s "$scratch/plain.kgenarc")" ] || { echo "FAIL: the compressed archive is not smaller"; exit 1; }
expect 0 "imported 1 entries \(0 already present\), corrupt 0" -- cache --cache-dir "$scratch/c6" import "$scratch/plain.kgenarc"
expect 0 "imported 1 entries \(0 already present\), corrupt 0" -- cache --cache-dir "$scratch/c2" import "$scratch/a.kgenarc"
expect 0 "compiled 0, cached 1, failed 0" -- warm --manifest "$scratch/good.jsonl" --arch sm_80 --cache-dir "$scratch/c2"
expect 0 "imported 1 entries \(1 already present\)" -- cache --cache-dir "$scratch/c2" import "$scratch/a.kgenarc"
expect 2 "" -- cache export
expect 2 "no such archive file" -- cache --cache-dir "$scratch/c3" import "$scratch/missing.kgenarc"
expect 1 "not a kgen cache archive" -- cache --cache-dir "$scratch/c3" import "$scratch/good.jsonl"
expect 1 "cannot write" -- cache --cache-dir "$small" export "$scratch/good.jsonl/x.kgenarc"
# flip_middle_byte FROM TO: TO is a copy of FROM with its middle byte's bit 6 flipped.
flip_middle_byte() {
  cp "$1" "$2"
  local off byte
  off=$(( $(stat -c %s "$2") / 2 ))
  byte=$(od -An -tu1 -j"$off" -N1 "$2" | tr -d ' ')
  printf "$(printf '\\%03o' $(( byte ^ 64 )))" | dd of="$2" bs=1 seek="$off" conv=notrunc 2>/dev/null
}
# One flipped byte inside the member of an uncompressed archive: reported, skipped, exit 1;
# nothing corrupt lands. In a compressed one: the import stops there, exit 1, nothing corrupt lands.
flip_middle_byte "$scratch/a.kgenarc" "$scratch/flipped-zstd.kgenarc"
expect 1 "damaged|checksum mismatch" -- cache --cache-dir "$scratch/c7" import "$scratch/flipped-zstd.kgenarc"
expect 0 "corrupt 0" -- cache --cache-dir "$scratch/c7" verify
flip_middle_byte "$scratch/plain.kgenarc" "$scratch/flipped.kgenarc"
expect 1 "member 1 .*checksum mismatch; skipped" -- cache --cache-dir "$scratch/c4" import "$scratch/flipped.kgenarc"
expect 0 "entries 0, corrupt 0" -- cache --cache-dir "$scratch/c4" verify
cp "$scratch/plain.kgenarc" "$scratch/short.kgenarc"
truncate -s -60 "$scratch/short.kgenarc"
expect 1 "truncated" -- cache --cache-dir "$scratch/c5" import "$scratch/short.kgenarc"
cp "$scratch/a.kgenarc" "$scratch/short-zstd.kgenarc"
truncate -s -60 "$scratch/short-zstd.kgenarc"
expect 1 "truncated|ends inside a frame|damaged" -- cache --cache-dir "$scratch/c8" import "$scratch/short-zstd.kgenarc"
if ! "$kgen" show-config | grep -q "devices       none"; then
  echo "note: a GPU is present; skipping the no-device checks"
else
  expect 3 "no CUDA driver|no GPU|no usable GPU" -- check --quick
  expect 3 "no CUDA driver|no GPU|no usable GPU" -- bench
  for op in $ops; do
    expect 3 "no CUDA driver|no GPU|no usable GPU" -- tune --op "$op" --seqlens 1024 --reps 2
  done
fi
[ "$fails" = 0 ] && echo "all CLI checks passed"
exit "$fails"
