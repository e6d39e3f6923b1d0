#!/usr/bin/env bash
# The C++ GPU test suites over an installed tree in dist/, split over every GPU and core of the
# machine (the device core's primitives in one process): the tests that walk a whole config space run as KGEN_GPU_TEST_SPLIT=i/n parts, the
# rest as gtest shards, all at once, sharing one kernel cache. A cold cache takes about 5 minutes
# on two H200s with 32 cores. Logs go to $1 (default ./gpu-tests), one per process, with a
# summary at the end; the exit status is 1 when any process failed.
# Usage: tools/gpu_tests.sh [log-dir]   (SPLIT=n parts per whole-space test, LIMIT=seconds each)
# The tree must hold the GPU test binaries: configure with -DKGEN_INSTALL_GPU_TESTS=ON before
# `cmake --install build --prefix dist`.
set -u
cd "$(dirname "$0")/.."
out=${1:-gpu-tests}
mkdir -p "$out" /tmp/kgen-tdb
export KGEN_CACHE_DIR=${KGEN_CACHE_DIR:-/tmp/kgen-cache} KGEN_TUNE_DB=/tmp/kgen-tdb/ KGEN_LOG_LEVEL=warn
export KGEN_LIBRARY=$PWD/dist/lib/libkgen.so
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
((gpus > 0)) || gpus=1
split=${SPLIT:-6}
limit=${LIMIT:-540}
launched=0
launch() {  # name, environment assignments, then the command
  local name=$1
  shift
  (env CUDA_VISIBLE_DEVICES=$((launched % gpus)) "$@" >"$out/$name.log" 2>&1; echo "exit $?" >>"$out/$name.log") &
  launched=$((launched + 1))
}
fwd_whole=(AttentionForwardGpuConfigs AttentionForwardGpuWgmma AttentionForwardGpuWs)
bwd_whole=(EveryWgmmaConfigOnSmallAndLargeShapes EveryDoubleBackwardWgmmaConfigOnSmallAndLargeShapes)
for t in "${fwd_whole[@]}"; do
  for ((i = 0; i < split; ++i)); do
    launch "fwd_${t}_$i" KGEN_GPU_TEST_SPLIT=$i/$split timeout "$limit" dist/bin/kgen_gpu_tests --gtest_brief=1 "--gtest_filter=$t.*"
  done
done
for t in "${bwd_whole[@]}"; do
  for ((i = 0; i < split; ++i)); do
    launch "bwd_${t}_$i" KGEN_GPU_TEST_SPLIT=$i/$split timeout "$limit" dist/bin/kgen_bwd_gpu_tests --gtest_brief=1 \
      "--gtest_filter=AttentionBackwardGpuWgmma.$t"
  done
done
fwd_rest=-$(printf '%s.*:' "${fwd_whole[@]}")
bwd_rest=-$(printf 'AttentionBackwardGpuWgmma.%s:' "${bwd_whole[@]}")
for ((i = 0; i < 4; ++i)); do
  launch "fwd_rest_$i" GTEST_TOTAL_SHARDS=4 GTEST_SHARD_INDEX=$i timeout "$limit" dist/bin/kgen_gpu_tests --gtest_brief=1 "--gtest_filter=$fwd_rest"
done
for ((i = 0; i < 6; ++i)); do
  launch "bwd_rest_$i" GTEST_TOTAL_SHARDS=6 GTEST_SHARD_INDEX=$i timeout "$limit" dist/bin/kgen_bwd_gpu_tests --gtest_brief=1 "--gtest_filter=$bwd_rest"
done
launch core timeout "$limit" dist/bin/kgen_core_gpu_tests --gtest_brief=1
wait
status=0
for f in "$out"/*.log; do
  last=$(tail -1 "$f")
  [[ $last == "exit 0" ]] || status=1
  printf '%-72s %s | %s\n' "$(basename "$f")" "$last" "$(grep -hE '^\[  (PASSED|FAILED) ' "$f" | head -1)"
done
grep -h '^\[  FAILED  \]' "$out"/*.log | sort -u
exit $status
