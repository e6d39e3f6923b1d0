#!/usr/bin/env bash
# `kgen warm` says what ended up in the cache: kernels built but not stored (no writable layer, a
# publish failing, a size cap evicting them again) are counted in the summary line and make the
# exit code 1; --quiet prints only errors and the summary; per-kernel lines are debug level;
# the progress line is rewritten with '\r' only on a terminal, with warnings above it (off a
# terminal it is a plain line every few seconds: warm_interrupt_test.sh).
# Usage: warm_output_test.sh KGEN WORKDIR
set -u
kgen=$1
work=$2
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ok() { echo "ok: $*"; }

rm -rf "$work"
mkdir -p "$work"
# One cheap kernel configuration of every operator: 8 kernels on sm_80 (the backward ops launch several).
manifest="$work/all_ops.jsonl"
cat >"$manifest" <<'EOF'
{"op":"attention_fwd","variant":"attention_fwd.fp32.d32.full","config":"simt:bm4:bn32:dmax32"}
{"op":"attention_bwd","variant":"attention_bwd.fp32.d32.full","config":"simt:w4:dmax32"}
{"op":"attention_double_bwd","variant":"attention_double_bwd.fp32.d32.full","config":"simt:w4:dmax32"}
{"op":"lrpe_cosine","variant":"lrpe_cosine.fwd.fp32.none","config":"sp:t128:r2:v8"}
{"op":"md_lrpe_cosine","variant":"md_lrpe_cosine.fwd.fp32.none","config":"sp:t128:r2:v8"}
EOF
kernels=8
summary_re="^compiled [0-9]+, cached [0-9]+, failed [0-9]+, not stored [0-9]+$"

# run NAME WANT_RC [VAR=VALUE...] ARGS...: runs kgen (in that environment) with stdout and stderr
# together into $out; checks the exit code.
run() {
  local name=$1 want=$2
  shift 2
  local vars=()
  while [[ "${1:-}" =~ ^[A-Z_]+= ]]; do
    vars+=("$1")
    shift
  done
  out=$(env "${vars[@]}" "$kgen" "$@" 2>&1)
  local rc=$?
  if [ "$rc" != "$want" ]; then
    fail "$name: exit $rc, want $want"
    echo "$out" | tail -5
    return 1
  fi
}
# has NAME PATTERN / lacks NAME PATTERN: extended regex over $out.
has() { grep -Eq -- "$2" <<<"$out" && ok "$1" || { fail "$1: output lacks /$2/"; echo "$out" | tail -5; }; }
lacks() { ! grep -Eq -- "$2" <<<"$out" && ok "$1" || { fail "$1: output has /$2/"; grep -E -- "$2" <<<"$out" | head -3; }; }

# A writable cache: everything stored, exit 0; no per-kernel lines and no '\r' off a terminal.
if run "fresh warm" 0 warm --manifest "$manifest" --arch sm_80 --cache-dir "$work/good"; then
  has "fresh warm: summary" "^compiled $kernels, cached 0, failed 0, not stored 0$"
  lacks "fresh warm: no per-kernel lines at the default level" "^kgen \[debug\]"
  lacks "fresh warm: no line rewritten in place off a terminal" $'\r'
fi
# A writable KGEN_CACHE_PATH layer takes the publishes before the root, and warm names it.
mkdir -p "$work/layer"
if run "warm into a layer" 0 KGEN_CACHE_PATH="$work/layer" warm --manifest "$manifest" --arch sm_80 --cache-dir "$work/root"; then
  has "layer: the progress names the layer" "^warming $kernels variants into $work/layer\$"
  [ -n "$(ls -A "$work/layer" 2>/dev/null)" ] && ok "layer: entries stored in the layer" || fail "layer: the layer is empty"
  [ -z "$(ls -A "$work/root" 2>/dev/null)" ] && ok "layer: nothing stored in the root" || fail "layer: the root holds entries"
fi
if run "verbose re-warm" 0 warm --manifest "$manifest" --arch sm_80 --cache-dir "$work/good" --verbose; then
  n=$(grep -Ec '^kgen \[debug\] \[[0-9]+/8\] cached ' <<<"$out")
  [ "$n" = "$kernels" ] && ok "verbose: one debug line per kernel" || fail "verbose: $n per-kernel lines, want $kernels"
  has "verbose: summary" "^compiled 0, cached $kernels, failed 0, not stored 0$"
fi
if run "KGEN_LOG_LEVEL=debug" 0 KGEN_LOG_LEVEL=debug warm --manifest "$manifest" --arch sm_80 --cache-dir "$work/good"; then
  has "KGEN_LOG_LEVEL=debug: per-kernel lines" "^kgen \[debug\] \[1/8\] cached "
fi
if run "quiet" 0 KGEN_LOG_LEVEL=debug warm --manifest "$manifest" --arch sm_80 --cache-dir "$work/good2" -q; then
  [ "$out" = "compiled $kernels, cached 0, failed 0, not stored 0" ] && ok "quiet: the summary line only, even over KGEN_LOG_LEVEL=debug" ||
    { fail "quiet: printed more than the summary"; echo "$out" | head -5; }
fi
run "quiet and verbose" 2 warm --manifest "$manifest" --arch sm_80 --cache-dir "$work/good" -q -v && ok "quiet and verbose exclude each other"

# No writable layer: a root below a regular file (root can create nothing there either).
echo x >"$work/file"
if run "unwritable cache" 1 warm --manifest "$manifest" --arch sm_80 --cache-dir "$work/file/cache"; then
  has "unwritable: summary counts not stored" "^compiled $kernels, cached 0, failed 0, not stored $kernels$"
  has "unwritable: an error says why" "^kgen \[error\] $kernels built kernels were not stored in the cache .*no writable cache layer"
fi
if run "unwritable, quiet" 1 warm --manifest "$manifest" --arch sm_80 --cache-dir "$work/file/cache" --quiet; then
  bad=$(grep -Ev "^kgen \[error\] |$summary_re" <<<"$out")
  [ -z "$bad" ] && ok "unwritable, quiet: errors and the summary only" || { fail "unwritable, quiet: other lines"; echo "$bad" | head -3; }
  has "unwritable, quiet: summary" "not stored $kernels$"
fi

# Publishes fail although the layer looks writable (as on a full disk): one warning, then the count.
mkdir -p "$work/broken/v1"
echo x >"$work/broken/v1/tmp"
if run "failing publish" 1 warm --manifest "$manifest" --arch sm_80 --cache-dir "$work/broken" --jobs 1; then
  has "failing publish: summary" "^compiled $kernels, cached 0, failed 0, not stored $kernels$"
  n=$(grep -c '^kgen \[warn\] cache: publish' <<<"$out")
  [ "$n" = 1 ] && ok "failing publish: one warning line" || fail "failing publish: $n warning lines, want 1"
fi

# A size cap below what is warmed: entries evicted before the end are not stored.
if run "size cap" 1 KGEN_CACHE_MAX_BYTES=100000 warm --manifest "$manifest" --arch sm_80 --cache-dir "$work/capped" --jobs 1; then
  has "size cap: summary counts the evicted" "^compiled $kernels, cached 0, failed 0, not stored [1-9][0-9]*$"
  has "size cap: an error names the cap" "^kgen \[error\] [0-9]+ built kernels were evicted .*size cap 100000 bytes"
fi

# On a terminal (script(1) gives the command one): a progress line rewritten in place, with the
# log lines of the run (the size cap's evictions, after the first kernels) printed above it,
# never inside it.
if command -v script >/dev/null && script -qec true /dev/null >/dev/null 2>&1; then
  tty_run() {  # tty_run WANT_RC [VAR=VALUE...] ARGS...: the terminal's bytes, less the tty's CR before each LF
    local want=$1
    shift
    local vars=()
    while [[ "${1:-}" =~ ^[A-Z_]+= ]]; do
      vars+=("$1")
      shift
    done
    script -qec "$(printf '%q ' env "${vars[@]}" "$kgen" "$@")" /dev/null </dev/null >"$work/tty.out"
    local rc=$?
    out=$(sed 's/\r$//' "$work/tty.out")
    [ "$rc" = "$want" ] || fail "terminal: kgen $* exit $rc, want $want"
  }
  tty_run 1 KGEN_CACHE_MAX_BYTES=100000 warm --manifest "$manifest" --arch sm_80 --cache-dir "$work/capped-tty" --jobs 1
  has "terminal: progress line with an ETA" $'\r\033\\[Kwarm \\[[0-9]+/8\\] [0-9]+s, ETA [0-9]+s \\| compiled [0-9]+, cached 0, failed 0, not stored [0-9]+'
  # What the terminal shows of each line: the text after its last erase.
  shown=$(sed 's/.*\x1b\[K//' <<<"$out")
  n=$(grep -c '^kgen \[info\] cache: size cap' <<<"$shown")
  [ "$n" -gt 1 ] && ok "terminal: the log lines show on lines of their own" ||
    fail "terminal: $n size-cap log lines on lines of their own, want more than 1"
  garbled=$(grep -E 'ETA.*kgen \[|kgen \[.*warm \[[0-9]+/' <<<"$shown")
  [ -z "$garbled" ] && ok "terminal: no line mixes progress and a log line" || { fail "terminal: garbled"; echo "$garbled" | head -3; }
  grep -Eq "^compiled $kernels, cached 0, failed 0, not stored [1-9][0-9]*$" <<<"$shown" && ok "terminal: summary on its own line" ||
    fail "terminal: summary not on its own line"
  tty_run 0 warm --manifest "$manifest" --arch sm_80 --cache-dir "$work/good" --quiet
  lacks "terminal, quiet: no progress line" $'\r|ETA'
else
  echo "note: script(1) cannot give a terminal here; skipping the terminal checks"
fi

[ "$fails" = 0 ] && echo "all warm output checks passed"
exit "$fails"
