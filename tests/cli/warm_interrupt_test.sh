#!/usr/bin/env bash
# Ctrl-C during `kgen warm`: SIGINT stops the workers after the compiles under way, the output
# ends with "interrupted: compiled N, cached M of T (...)" on a line of its own, the exit code is
# 130, and what was compiled is in the cache. Off a terminal the progress line is printed every
# few seconds. Then --defaults on the same cache and the options it excludes.
# Usage: warm_interrupt_test.sh KGEN WORKDIR
set -u
kgen=$1
work=$2
fails=0
# shellcheck source=expect.sh
. "$(dirname "$0")/expect.sh"

rm -rf "$work"
mkdir -p "$work"
# Job control: a background job's SIGINT is not ignored, as it is for `&` without it.
set -m
# Every forward variant for sm_80: hundreds of kernels, minutes of work on any machine.
"$kgen" warm --ops attention_fwd --arch sm_80 --jobs 2 --cache-dir "$work/cache" >"$work/out" 2>&1 &
pid=$!
sleep 7
kill -INT "$pid"
wait "$pid"
rc=$?
set +m
out=$(cat "$work/out")
[ "$rc" = 130 ] && ok "exit 130 after SIGINT" || { fail "exit $rc after SIGINT, want 130"; tail -5 <<<"$out"; }
summary=$(grep -E '^interrupted: compiled [0-9]+, cached 0 of [0-9]+ \(failed 0, not stored 0\)$' <<<"$out")
[ -n "$summary" ] && ok "summary line: $summary" || { fail "no interrupted summary line"; tail -5 <<<"$out"; }
[ "$(tail -1 <<<"$out")" = "$summary" ] && ok "the summary ends the output" || fail "output after the summary"
grep -q '^compiled [0-9]' <<<"$out" && fail "the summary of a finished warm was printed too" || ok "no finished-warm summary"
grep -Eq '^warm \[[0-9]+/[0-9]+\] [0-9]+s, ETA [0-9hms]+ \| compiled [0-9]+, cached 0, failed 0, not stored 0$' <<<"$out" && ok "off a terminal: a plain progress line" ||
  fail "off a terminal: no progress line"
compiled=$(sed -E 's/^interrupted: compiled ([0-9]+),.*/\1/' <<<"$summary")
total=$(sed -E 's/.* of ([0-9]+) .*/\1/' <<<"$summary")
if [ -n "$summary" ]; then
  [ "$compiled" -gt 0 ] && [ "$compiled" -lt "$total" ] && ok "stopped early: $compiled of $total" ||
    fail "compiled $compiled of $total: not stopped early"
  entries=$("$kgen" cache --cache-dir "$work/cache" stat 2>/dev/null | sed -nE 's/^entries +([0-9]+)$/\1/p')
  [ "$entries" = "$compiled" ] && ok "the cache holds what was compiled" || fail "the cache holds $entries entries, want $compiled"
fi

# --defaults excludes the options that choose other items.
expect 2 "ops excludes --defaults" -- warm --defaults --ops attention_fwd --cache-dir "$work/cache"
expect 2 "manifest excludes --defaults" -- warm --defaults --manifest "$work/out" --cache-dir "$work/cache"
expect 2 "db excludes --defaults" -- warm --defaults --db "$work/out" --cache-dir "$work/cache"
expect 2 "defaults excludes --all" -- warm --defaults --all --cache-dir "$work/cache"
expect 2 "ops: unknown operator 'nope'" -- warm --all --ops nope --cache-dir "$work/cache"

[ "$fails" = 0 ] && echo "all warm interrupt checks passed"
exit "$fails"
