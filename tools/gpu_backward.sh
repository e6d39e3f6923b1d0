#!/usr/bin/env bash
# GPU batch for the backward and double backward over an installed tree in dist/: warm, C++ GPU
# tests, Python autograd tests, and the side-by-side benchmarks. Logs go to $OUT (or ./gpu-out).
# Usage: tools/gpu_backward.sh [tests|bench|all]
set -uo pipefail
cd "$(dirname "$0")/.."
what=${1:-all}
out=${OUT:-gpu-out}
mkdir -p "$out"
export KGEN_CACHE_DIR=/tmp/kgen-cache KGEN_TUNE_DB=/tmp/kgen-tdb/ KGEN_LIBRARY=$PWD/dist/lib/libkgen.so
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/python:${PYTHONPATH:-}
step() { echo; echo "=== $* ($(date -u +%FT%TZ))"; }
{
  step env
  nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,driver_version --format=csv,noheader
  step warm
  dist/bin/kgen warm --arch sm_90a --ops attention_fwd,attention_bwd,attention_double_bwd --jobs 16 --quiet 2>&1 | tail -1
  if [[ $what != bench ]]; then
    step "C++ GPU tests (backward, double backward)"
    KGEN_LOG_LEVEL=warn timeout 240 dist/bin/kgen_bwd_gpu_tests --gtest_brief=1 2>&1 | tail -25
    step "Python autograd tests"
    timeout 200 python3 -m pytest -q python/tests/test_autograd_gpu.py 2>&1 | tail -15
  fi
  if [[ $what != tests ]]; then
    step "bench backward"
    KGEN_LOG_LEVEL=warn timeout 240 python3 bench/compare_attention_backward.py --only backward --out "$out/bwd.md" 2>&1 | tail -30
    step "bench double backward"
    KGEN_LOG_LEVEL=warn timeout 300 python3 bench/compare_attention_backward.py --only double --out "$out/dbl.md" 2>&1 | tail -30
  fi
  nvidia-smi --query-gpu=clocks.sm,clocks.max.sm --format=csv,noheader
} 2>&1 | tee "$out/session.log"
