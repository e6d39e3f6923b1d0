#!/usr/bin/env bash
# The kgen CLI's contract: --help everywhere, exit codes scripts can use (0 ok, 1 failed,
# 2 usage, 3 no device), one clear sentence naming the bad argument.
set -u
kgen=$1
cache=$2
fails=0
expect() {  # expect EXIT_CODE PATTERN -- ARGS...
  local want=$1 pattern=$2
  shift 3
  local out rc
  out=$("$kgen" "$@" 2>&1)
  rc=$?
  if [ "$rc" != "$want" ] || ! grep -Eq -- "$pattern" <<<"$out"; then
    echo "FAIL: kgen $* -> exit $rc (want $want), output lacks /$pattern/:"
    echo "$out" | tail -5
    fails=$((fails + 1))
  else
    echo "ok: kgen $*"
  fi
}
for cmd in warm show-config inspect check bench demo "cache ls" "cache verify" "cache gc" "cache clear"; do
  # shellcheck disable=SC2086
  expect 0 "Usage" -- $cmd --help
done
expect 2 "arch: unknown target 'sm_99'" -- warm --arch sm_99 --cache-dir "$cache"
expect 2 "ops: unknown operator 'nope'" -- warm --ops nope --cache-dir "$cache"
expect 2 "jobs" -- warm --jobs -3
expect 2 "dtype: unknown dtype 'fp8'" -- inspect --dtype fp8
expect 2 "head-dim" -- inspect --head-dim 300
expect 2 "config" -- inspect --config fa2:bm64:bn64
expect 2 "" -- no-such-command
expect 0 "^#include \"kgen/attention/forward_fa2.cuh\"" -- inspect --show source --dtype bf16 --head-dim 128 --causal
expect 0 "key +[0-9a-f]{64}" -- inspect --show key --dtype fp16 --head-dim 64
expect 0 "compiled [0-9]+, cached [0-9]+, failed 0" -- warm --arch sm_80,sm_90a --cache-dir "$cache" --quiet
expect 0 "entries [0-9]+, corrupt 0" -- cache --cache-dir "$cache" verify
expect 0 "kgen +[0-9]+\.[0-9]+\.[0-9]+" -- show-config
if ! "$kgen" show-config | grep -q "devices       none"; then
  echo "note: a GPU is present; skipping the no-device checks"
else
  expect 3 "no CUDA driver|no GPU|no usable GPU" -- check --quick
  expect 3 "no CUDA driver|no GPU|no usable GPU" -- bench
fi
[ "$fails" = 0 ] && echo "all CLI checks passed"
exit "$fails"
