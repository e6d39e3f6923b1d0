#!/usr/bin/env bash
# GPU batch for the Hopper (wgmma) forward and backward over an installed tree in dist/.
# Usage: tools/gpu_hopper.sh tests|bench   (logs under $OUT, or ./gpu-out)
#   tests: warm, the forward and backward C++ GPU tests, the Python autograd tests (~8 min)
#   bench: forward and backward side by side with SDPA's backends, every row checked (~4 min)
set -uo pipefail
cd "$(dirname "$0")/.."
what=${1:-tests}
out=${OUT:-gpu-out}
mkdir -p "$out"
export KGEN_CACHE_DIR=/tmp/kgen-cache KGEN_LIBRARY=$PWD/dist/lib/libkgen.so
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/python:${PYTHONPATH:-}
step() { echo; echo "=== $* ($(date -u +%FT%TZ))"; }
{
  step env
  nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,driver_version --format=csv,noheader
  step warm
  dist/bin/kgen warm --arch sm_90a --ops attention_fwd,attention_bwd,attention_double_bwd --jobs 16 --quiet 2>&1 | tail -1
  if [[ $what == tests ]]; then
    step "C++ GPU tests: backward, double backward"
    KGEN_LOG_LEVEL=warn timeout 230 dist/bin/kgen_bwd_gpu_tests --gtest_brief=1 2>&1 | tail -25
    step "C++ GPU tests: forward"
    KGEN_LOG_LEVEL=warn timeout 300 dist/bin/kgen_gpu_tests --gtest_brief=1 --gtest_filter='-*Lrpe*' 2>&1 | tail -25
    step "Python autograd tests"
    timeout 120 python3 -m pytest -q python/tests/test_autograd_gpu.py 2>&1 | tail -8
  else
    step "bench forward: bench/compare_attention.py --head-dims 64,128 --seqlens 2k,4k,8k,16k"
    KGEN_LOG_LEVEL=warn timeout 150 python3 bench/compare_attention.py --head-dims 64,128 --seqlens 2k,4k,8k,16k 2>&1 | tail -24
    step "bench backward: bench/compare_attention_backward.py --only backward --kgen-configs deterministic"
    KGEN_LOG_LEVEL=warn timeout 240 python3 bench/compare_attention_backward.py --only backward --kgen-configs deterministic --out "$out/bwd.md" 2>&1 | tail -24
  fi
  nvidia-smi --query-gpu=clocks.sm,clocks.max.sm --format=csv,noheader
} 2>&1 | tee "$out/hopper-$what.log"
