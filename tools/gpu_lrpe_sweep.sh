#!/usr/bin/env bash
# LRPE config sweep on the lent GPU machine over an installed tree in dist/ (cmake --install build
# --prefix dist --strip): B = H = 12, D = 128, bf16, n = 16384, every cell checked against the
# fp64 reference before it is timed; then the LRPE GPU tests. Logs go to $OUT (or ./gpu-out):
#   sweep.log        kgen bench lrpe / md_lrpe tables (speed with each cell's share of the
#                    bandwidth floor, memory), one column per config; compile lines (registers)
#   gpu-tests.log    kgen_gpu_tests --gtest_filter='*Lrpe*'
# About 2–3 minutes for the sweep on an H200 (fresh cache: the configs outside the pre-warmed
# space compile on first use, ~0.5 s each), then up to 4 minutes of tests.
# Usage: OUT=/some/dir tools/gpu_lrpe_sweep.sh
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-out}
mkdir -p "$out"
export KGEN_CACHE_DIR=/tmp/kgen-cache
kgen=dist/bin/kgen
step() { echo; echo "=== $* ($(date -u +%FT%TZ))"; }
bench() { echo "\$ kgen bench $*"; KGEN_LOG_LEVEL=info /usr/bin/time -f "wall %e s" $kgen bench "$@" 2>&1; }
# Candidates for the elementwise acts and softmax over features (the "kgen" column is each act's
# default, generator/lrpe.cpp swept_default): folds 2 and 4 at 128 and 256 threads with occupancy
# caps (o<k>: registers for k resident blocks), two rows in flight, the bp launch, one uncapped
# config. (vec 16 was measured slower for every act: docs/kernels/measurements.md, "LRPE defaults".)
configs='sp:t128:r1:v8:b2:o8|sp:t128:r1:v8:b4:o4|sp:t128:r1:v8:b4:o6|sp:t128:r2:v8:b2:o6|sp:t256:r1:v8:b4|sp:t256:r1:v8:b2:o4|bp:t256:r1:v8:b2:o3|bp:t128:r1:v8:b2:o6'
# Softmax over the sequence (bp only, fold <= 4).
seq_configs='bp:t128:r2:v8:o8|bp:t128:r2:v8:o5|bp:t128:r4:v8:o4|bp:t256:r2:v8:o3|bp:t256:r2:v8'
common=(--seqlens 16384 --reps 10 --warmup 3)
{
  step env
  nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,driver_version --format=csv,noheader
  step "warm the lrpe config spaces (sm_90a)"
  $kgen warm --arch sm_90a --ops lrpe_cosine,md_lrpe_cosine --jobs 16 --quiet 2>&1 | tail -1
  step "lrpe_cosine: none, silu, softmax over features"
  bench lrpe --acts none,silu,softmax "${common[@]}" --configs "$configs"
  step "lrpe_cosine: softmax over the sequence"
  bench lrpe --acts softmax_seq "${common[@]}" --configs "$seq_configs"
  step "md_lrpe_cosine 3d, l = 10 (n = 10 + side^3), with and without the angle cache"
  bench md_lrpe --dims 3 --extras 10 --reps 10 --warmup 3 --configs 'bp:t256:r1:v8:b2|bp:t256:r1:v8:b2:cache'
  nvidia-smi --query-gpu=clocks.sm,clocks.max.sm --format=csv,noheader
} > "$out/sweep.log" 2>&1
{
  step "LRPE GPU tests"
  KGEN_LOG_LEVEL=warn timeout 240 dist/bin/kgen_gpu_tests --gtest_filter='*Lrpe*' --gtest_brief=1 2>&1 | tail -40
} > "$out/gpu-tests.log" 2>&1
grep -E "^(lrpe|md_lrpe).*-speed-|^[0-9]+ |FAIL|ERROR|wall" "$out/sweep.log" | head -80
tail -5 "$out/gpu-tests.log"
