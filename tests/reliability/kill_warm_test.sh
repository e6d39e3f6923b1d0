#!/usr/bin/env bash
# N concurrent `kgen warm --manifest` processes into one fresh cache, some SIGKILLed mid-compile
# or mid-publish at random moments. Afterwards: `cache verify` finds nothing corrupt, no staging
# file survives verify (a dead writer's is recognised by its released lock), no variant was
# compiled twice (their --verbose lines), and a re-run compiles only what was never published.
# Usage: kill_warm_test.sh KGEN MANIFEST WORKDIR [ROUNDS]
set -u
kgen=$1
manifest=$2
work=$3
rounds=${4:-3}
procs=8
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

mkdir -p "$work"
rev="$work/manifest-reversed.jsonl"
tac "$manifest" >"$rev"
variants=$(grep -c . "$manifest")

for round in $(seq 1 "$rounds"); do
  dir="$work/round$round"
  rm -rf "$dir"
  mkdir -p "$dir/cache/v1/tmp" "$dir/out"
  # A crashed writer's staging file from long before this run: verify must clean it.
  echo partial >"$dir/cache/v1/tmp/0123abcd.1.2.3.tmp"
  touch -d '2 hours ago' "$dir/cache/v1/tmp/0123abcd.1.2.3.tmp"

  pids=()
  for i in $(seq 1 "$procs"); do
    m=$manifest
    [ $((i % 2)) = 0 ] && m=$rev  # half walk the manifest backwards: locks cross
    "$kgen" warm --manifest "$m" --arch sm_80 --cache-dir "$dir/cache" --jobs 1 --verbose \
      >"$dir/out/$i.out" 2>"$dir/out/$i.err" &
    pids+=($!)
  done
  killed=()
  for i in $(seq 1 "$procs"); do
    if [ $((i % 2)) = 1 ] || [ "$i" = 4 ]; then  # kill 5 of 8
      delay=$(awk -v r="$RANDOM" 'BEGIN { printf "%.2f", 0.1 + (r % 250) / 100 }')
      (sleep "$delay"; kill -KILL "${pids[$((i - 1))]}" 2>/dev/null) &
      killed+=("$i")
    fi
  done
  for i in $(seq 1 "$procs"); do
    wait "${pids[$((i - 1))]}"
    rc=$?
    if [[ " ${killed[*]} " == *" $i "* ]]; then
      [ "$rc" = 0 ] || [ "$rc" = 137 ] || fail "round $round: killed process $i exited $rc"
    elif [ "$rc" != 0 ] || ! grep -q "failed 0" "$dir/out/$i.out"; then
      fail "round $round: surviving process $i exited $rc"
      tail -5 "$dir/out/$i.out" "$dir/out/$i.err"
    fi
  done
  wait  # the killers

  # Each variant compiled by at most one process (the per-key lock), killed ones included.
  dup=$(cat "$dir"/out/*.err | sed -n 's/^kgen \[debug\] \[[0-9]*\/[0-9]*\] compiled \(.*\) for sm_80 in .*/\1/p' | sort | uniq -d)
  [ -z "$dup" ] || fail "round $round: compiled more than once: $dup"

  sleep 3  # past kUnlockedTempGrace, so the killed writers' staging files count as dead
  out=$("$kgen" cache --cache-dir "$dir/cache" verify 2>&1)
  rc=$?
  [ "$rc" = 0 ] && grep -q "corrupt 0" <<<"$out" || fail "round $round: verify -> $rc: $out"
  left=$(find "$dir/cache/v1/tmp" -type f | wc -l)
  [ "$left" = 0 ] || fail "round $round: $left staging files survived verify: $(ls "$dir/cache/v1/tmp")"

  entries=$("$kgen" cache --cache-dir "$dir/cache" stat | awk '/^entries/ { print $2 }')
  out=$(KGEN_LOG_LEVEL=warn "$kgen" warm --manifest "$manifest" --arch sm_80 --cache-dir "$dir/cache" --jobs 1 2>&1)
  want="compiled $((variants - entries)), cached $entries, failed 0"
  grep -q "^$want" <<<"$out" || fail "round $round: re-run wanted '$want', got: $(tail -1 <<<"$out")"
  echo "round $round: ${#killed[@]} of $procs killed, $entries of $variants published, re-run: $(grep '^compiled' <<<"$out")"
done
[ "$fails" = 0 ] && echo "kill test passed"
exit "$fails"
