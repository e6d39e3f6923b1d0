#!/usr/bin/env bash
# One batch on the lent GPU machine: environment, library check, warm, GPU tests, kgen check,
# kgen bench, Python tests and the side-by-side benchmark. Logs go to $OUT (or ./gpu-out).
# Usage: tools/gpu_session.sh [all|tests|bench]   (expects an installed tree in dist/)
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-out}
mkdir -p "$out"
what=${1:-all}
export KGEN_CACHE_DIR=/tmp/kgen-cache KGEN_LIBRARY=$PWD/dist/lib/libkgen.so PYTHONUNBUFFERED=1
export PYTHONPATH=$PWD/dist/python:${PYTHONPATH:-}
step() { echo; echo "=== $* ($(date +%T))"; }
{
  step env
  nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,driver_version --format=csv
  ldd dist/bin/kgen dist/lib/libkgen.so dist/bin/kgen_gpu_tests | grep -E "not found|=>" | sort -u
  dist/bin/kgen show-config
  step warm
  dist/bin/kgen warm --arch sm_90a --jobs 16 --quiet
} 2>&1 | tee "$out/env.log"
if [ "$what" = all ] || [ "$what" = tests ]; then
  step gpu-tests | tee "$out/tests.log"
  timeout 400 dist/bin/kgen_gpu_tests --gtest_brief=1 2>&1 | tail -150 | tee -a "$out/tests.log"
  step python-tests | tee -a "$out/tests.log"
  timeout 200 python3 -m pytest -q python/tests 2>&1 | tail -30 | tee -a "$out/tests.log"
fi
if [ "$what" = all ] || [ "$what" = bench ]; then
  step kgen-bench | tee "$out/bench.log"
  timeout 300 dist/bin/kgen bench --head-dims 64,128 --seqlens 512,1024,2048,4096,8192,16384 2>&1 | tee -a "$out/bench.log"
  step compare | tee -a "$out/bench.log"
  timeout 300 python3 bench/compare_attention.py --out "$out/compare.md" 2>&1 | tee -a "$out/bench.log"
  nvidia-smi --query-gpu=clocks.sm,clocks.max.sm --format=csv | tee -a "$out/bench.log"
fi
