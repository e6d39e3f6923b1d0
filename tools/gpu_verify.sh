#!/usr/bin/env bash
# Batches on the lent GPU machine over an installed tree in dist/. Steps (default: all, in order):
#   warm      kgen warm for sm_90a, every operator
#   cpp       the C++ GPU test suites, split over the GPUs and cores (tools/gpu_tests.sh)
#   python    the Python tests
#   check     kgen check --op X for every operator (--quick where it applies)
#   bench     the standard forward and backward sweep of kgen bench, side by side with a second
#             installed tree (BEFORE=dist-old by default; skipped when absent), alternating the
#             two so clock drift hits both
# Logs go to $OUT (or ./gpu-out). Usage: tools/gpu_verify.sh [step,...]
# The tree must hold the GPU test binaries: configure with -DKGEN_INSTALL_GPU_TESTS=ON before
# `cmake --install build --prefix dist`.
set -uo pipefail
cd "$(dirname "$0")/.."
steps=,${1:-warm,cpp,python,check,bench},
out=${OUT:-gpu-out}
before=${BEFORE:-dist-old}
mkdir -p "$out" /tmp/kgen-tdb
export KGEN_CACHE_DIR=/tmp/kgen-cache KGEN_TUNE_DB=/tmp/kgen-tdb/ KGEN_LIBRARY=$PWD/dist/lib/libkgen.so
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/python:${PYTHONPATH:-}
step() { echo; echo "=== $* ($(date -u +%FT%TZ))"; }
want() { [[ $steps == *,$1,* ]]; }
clocks() { nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,driver_version --format=csv,noheader; }
{
  step "env: $steps"
  clocks
  dist/bin/kgen show-config
  if want warm; then
    step "warm sm_90a (every operator)"
    dist/bin/kgen warm --arch sm_90a --jobs 16 --quiet 2>&1 | tail -3
  fi
  if want cpp; then
    step "C++ GPU tests, split over the GPUs and cores (tools/gpu_tests.sh)"
    tools/gpu_tests.sh "$out/cpp" 2>&1 | tail -40
  fi
  if want python; then
    step "Python tests"
    timeout 240 python3 -m pytest -q python/tests 2>&1 | tail -5
  fi
  if want check; then
    for op in attention_fwd attention_bwd attention_double_bwd lrpe_cosine md_lrpe_cosine; do
      quick=(); [[ $op == attention_* ]] && quick=(--quick)
      step "kgen check --op $op ${quick[*]}"
      KGEN_LOG_LEVEL=warn timeout 240 dist/bin/kgen check --op "$op" "${quick[@]}" > "$out/check_$op.txt" 2>&1
      echo "exit $?"; tail -4 "$out/check_$op.txt"
    done
  fi
  if want bench; then
    for op in attention_fwd attention_bwd; do
      for tree in "$before" dist; do
        [[ -x $tree/bin/kgen ]] || { echo "no $tree/bin/kgen: skipped"; continue; }
        step "$tree: kgen bench --op $op (standard sweep)"
        KGEN_LIBRARY=$PWD/$tree/lib/libkgen.so KGEN_LOG_LEVEL=warn timeout 280 "$tree/bin/kgen" bench --op "$op" 2>&1 |
          tee "$out/bench_${op}_$(basename "$tree").md" | tail -40
        clocks
      done
    done
  fi
} 2>&1 | tee -a "$out/session.log"
