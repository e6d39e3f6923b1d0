#!/usr/bin/env bash
# `kgen check`, `kgen bench` and `kgen tune` take --op for every operator with one set of sweep
# option names; the old `check|bench lrpe|md_lrpe` sub-commands are aliases. Exit codes: 0 ok,
# 2 usage (one sentence naming the option), 3 no device.
set -u
kgen=$1
fails=0
# shellcheck source=expect.sh
. "$(dirname "$0")/expect.sh"
ops="attention_fwd attention_bwd attention_double_bwd lrpe_cosine md_lrpe_cosine"
valid="attention_fwd, attention_bwd, attention_double_bwd, lrpe_cosine, md_lrpe_cosine"
for cmd in check bench tune; do
  expect 0 "Operator: $valid" -- $cmd --help
  # The same sweep option names in all three commands.
  for opt in --dtypes --head-dims --seqlens --causal --batch --heads --heads-kv --tokens --hidden --deterministic \
             --acts --directions --grids --extras --configs; do
    expect 0 "$opt" -- $cmd --help
  done
  for op in $ops; do
    expect 0 "Usage" -- $cmd --op "$op" --help
  done
  expect 2 "op: unknown operator 'nope' \(kgen $cmd serves $valid\)" -- $cmd --op nope
done
for cmd in bench tune; do
  expect 0 "--warmup" -- $cmd --help
  expect 0 "--reps" -- $cmd --help
done
expect 2 "reps" -- check --reps 3
# The aliases, marked as such.
expect 0 "lrpe +Alias of .kgen check --op lrpe_cosine." -- check --help
expect 0 "md_lrpe +Alias of .kgen bench --op md_lrpe_cosine." -- bench --help
expect 0 "Alias of .kgen check --op md_lrpe_cosine" -- check md_lrpe --help
expect 0 "--dims" -- bench md_lrpe --help
expect 0 "--dim" -- bench lrpe --help
# An option that does not apply to the operator is named with it.
expect 2 "acts: does not apply to --op attention_fwd \(it applies to lrpe_cosine, md_lrpe_cosine\)" -- check --op attention_fwd --acts silu
expect 2 "causal: does not apply to --op lrpe_cosine \(it applies to attention_fwd, attention_bwd, attention_double_bwd\)" -- bench --op lrpe_cosine --causal yes
expect 2 "grids: does not apply to --op lrpe_cosine \(it applies to md_lrpe_cosine\)" -- tune --op lrpe_cosine --grids 8x8
expect 2 "deterministic: does not apply to --op attention_double_bwd \(it applies to attention_bwd\)" -- tune --op attention_double_bwd --deterministic
expect 2 "heads-kv: does not apply to --op md_lrpe_cosine" -- check --op md_lrpe_cosine --heads-kv 2
expect 2 "quick: does not apply to --op lrpe_cosine" -- check --op lrpe_cosine --quick
expect 2 "launch: does not apply to --op attention_bwd" -- bench --op attention_bwd --launch
# Bad values, named, before any device is needed.
expect 2 "acts: unknown act 'gelu'" -- check --op lrpe_cosine --acts gelu
expect 2 "grids: '4x4x4x4' has more than 3 dims" -- bench --op md_lrpe_cosine --grids 4x4x4x4
expect 2 "causal: expected yes, no or both, got 'maybe'" -- check --op attention_bwd --causal maybe
expect 2 "heads-kv: 4 does not divide 6 query heads" -- bench --op attention_fwd --heads 6 --heads-kv 4
expect 2 "batch: 'x' is not an integer" -- tune --op lrpe_cosine --batch x
expect 2 "directions: expected fwd and/or bwd, got 'up'" -- bench md_lrpe --directions up
expect 2 "dims: grids have 1, 2 or 3 dims, got 4" -- bench md_lrpe --dims 4
expect 2 "configs: cannot parse 'bp:t256' as an attention_fwd config" -- tune --configs bp:t256
# --list: the cases the options make, without a device. The same option means the same in
# check, bench and tune.
count() {  # count N ARGS...: kgen ARGS --list prints N lines
  local want=$1
  shift
  local got
  got=$("$kgen" "$@" --list 2>&1 | wc -l)
  if [ "$got" != "$want" ]; then
    echo "FAIL: kgen $* --list -> $got lines (want $want)"
    fails=$((fails + 1))
  else
    echo "ok: kgen $* --list ($want)"
  fi
}
count 14 check --op attention_fwd --dtypes bf16 --head-dims 64 --quick                   # 7 shapes × causal
count 28 check --op attention_bwd --dtypes bf16 --head-dims 64 --quick                   # × both modes
count 14 check --op attention_bwd --dtypes bf16 --head-dims 64 --quick --deterministic
count 14 check --op attention_double_bwd --dtypes bf16 --head-dims 64 --quick
count 8 check --op attention_fwd --dtypes bf16 --head-dims 64 --seqlens 512,1024 --configs 'fa2:bm64:bn64:w4:s2'  # 2 n × causal × (default, config)
count 16 check --op md_lrpe_cosine --dtypes bf16 --acts none                              # 4 grids × cache × 2 directions
count 10 check lrpe --dtypes bf16 --acts silu                                             # 5 shapes × 2 directions
count 4 bench md_lrpe --dims 2 --extras 10 --directions fwd
count 3 bench --op md_lrpe_cosine --grids 64x64 --seqlens 4096,1024 --extras 0 --directions fwd
count 3 tune --op md_lrpe_cosine --acts none --directions fwd
count 2 tune --op attention_bwd --deterministic --seqlens 4096
expect 0 "^bf16 b3 hq6 hkv2 nq100 nk100 d64 causal bhnd$" -- bench --op attention_fwd --list --heads 6 --heads-kv 2 --batch 3 --seqlens 100 --head-dims 64 --causal yes
expect 0 "\(b=3 h=6 h_kv=2 n_q=100 n_k=100\)" -- tune --op attention_fwd --list --heads 6 --heads-kv 2 --batch 3 --seqlens 100 --head-dims 64 --causal yes
expect 0 "lrpe_cosine bwd fp16 act=softmax_seq b2 h3 n4096 d64" -- check --op lrpe_cosine --list --dtypes fp16 --acts softmax_seq --directions bwd --batch 2 --heads 3 --head-dims 64 --seqlens 4096
expect 0 "grid16x16x16 l10 .*cache" -- check --op md_lrpe_cosine --list --grids 16x16x16 --extras 10 --acts none
expect 0 "deterministic" -- tune --op attention_bwd --deterministic --list --seqlens 4096
if ! "$kgen" show-config | grep -q "devices       none"; then
  echo "note: a GPU is present; skipping the no-device checks"
else
  nodev="no CUDA driver|no GPU|no usable GPU"
  for op in $ops; do
    expect 3 "$nodev" -- check --op "$op"
    expect 3 "$nodev" -- bench --op "$op"
    expect 3 "$nodev" -- tune --op "$op" --reps 2
  done
  expect 3 "$nodev" -- check --op attention_bwd --deterministic --seqlens 256 --configs 'fa2:bm64:bn64:w4'
  expect 3 "$nodev" -- bench --op md_lrpe_cosine --grids 64x64 --extras 10 --configs 'bp:t256:r1:v8:b2|bp:t256:r1:v8:b2:cache'
  expect 3 "$nodev" -- check lrpe --acts silu
  expect 3 "$nodev" -- check md_lrpe
  expect 3 "$nodev" -- bench lrpe --dim 64 --seqlens 4096
  expect 3 "$nodev" -- bench md_lrpe --dims 3 --extras 10
  expect 3 "$nodev" -- bench --launch
fi
[ "$fails" = 0 ] && echo "all op command checks passed"
exit "$fails"
