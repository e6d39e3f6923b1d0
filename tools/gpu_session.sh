#!/usr/bin/env bash
# One batch on the lent GPU machine over an installed tree in dist/: GPU tests, Python tests,
# cold compile per variant, first-call and launch overhead, two tuning runs of one shape, and a
# short checked benchmark. Logs go to $OUT (or ./gpu-out). Usage: tools/gpu_session.sh
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-out}
mkdir -p "$out" /tmp/kgen-tdb
export KGEN_CACHE_DIR=/tmp/kgen-cache KGEN_TUNE_DB=/tmp/kgen-tdb/ KGEN_LIBRARY=$PWD/dist/lib/libkgen.so
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/python:${PYTHONPATH:-}
kgen=dist/bin/kgen
step() { echo; echo "=== $* ($(date -u +%FT%TZ))"; }
{
  step env
  nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,driver_version --format=csv,noheader
  $kgen show-config
  step "cold compile per attention_fwd variant (sm_90a, fresh cache, one at a time)"
  $kgen warm --arch sm_90a --ops attention_fwd --jobs 1 --cache-dir /tmp/kgen-cold --verbose 2>&1 |
    sed -n 's/.*compiled \(attention_fwd[^ ]*\) for sm_90a in \([0-9]*\) ms.*/\2 \1/p' | sort -n > "$out/compile_ms.txt"
  awk '{a[NR]=$1; s+=$1} END {printf "variants %d, compile ms: min %d, median %d, mean %.0f, max %d\n", NR, a[1], a[int((NR+1)/2)], s/NR, a[NR]}' "$out/compile_ms.txt"
  grep "fa2" "$out/compile_ms.txt" | awk '{a[NR]=$1} END {printf "fa2 variants %d: median %d ms, max %d ms\n", NR, a[int((NR+1)/2)], a[NR]}'
  step warm
  $kgen warm --arch sm_90a --jobs 16 --quiet 2>&1 | tail -1
  step gpu-tests
  KGEN_LOG_LEVEL=warn timeout 260 dist/bin/kgen_gpu_tests --gtest_brief=1 2>&1 | tail -20
  step python-tests
  timeout 120 python3 -m pytest -q python/tests 2>&1 | tail -3
  step "first call and launch overhead: kgen bench --launch"
  KGEN_LOG_LEVEL=warn $kgen bench --launch
  for i in 1 2; do
    step "tune run $i: kgen tune --dtypes bf16 --head-dims 128 --causal no --seqlens 4096 --db-dir /tmp/kgen-tdb/run$i"
    /usr/bin/time -f "wall %e s" $kgen tune --dtypes bf16 --head-dims 128 --causal no --seqlens 4096 --db-dir /tmp/kgen-tdb/run$i 2>&1 | grep -v "^check+time\|^compile\|^\s*$"
  done
  step "kgen bench --head-dims 64,128 --seqlens 4096 --warmup 0 --reps 30 (uses run1's record)"
  KGEN_TUNE_DB=/tmp/kgen-tdb/run1/ $kgen bench --head-dims 64,128 --seqlens 4096 --warmup 0 --reps 30 2>&1
  nvidia-smi --query-gpu=clocks.sm,clocks.max.sm --format=csv,noheader
} 2>&1 | tee "$out/session.log"
