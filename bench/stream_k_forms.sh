#!/usr/bin/env bash
# One device batch for the forward's stream-K forms (`ws:…:persist:sk`, ARCHITECTURE.md
# "Stream-K"): correctness first, then time.
#   1. the GPU tests that run them: StreamKCutsQueryTilesBetweenBlocks (every stream-K form of
#      the space at d = 64, 48, 128, 256, 96, 200 on shapes that cut query tiles between blocks),
#      StreamKReplaysInACudaGraph, and
#      EveryWsConfigOnOddShapesAndTheDefaultsLarge (every ws form, in 4 parts alongside);
#   2. `kgen bench` of the cells where the last round of whole tiles idles SMs (bf16, no mask:
#      d = 128 at 1k/2k/4k, d = 64 at 1k/2k, GQA h 64/8 at 4k/8k), each stream-K form beside the
#      plain persistent form it cuts, every row checked before it is timed;
#   3. the SM clock before and after.
# A failing step stops the batch: nothing is timed that did not pass.
#
# On the GPU machine, from the repository root, with kgen installed in dist/ and the GPU test
# binary beside it (dist/bin/kgen_gpu_tests):
#   bench/stream_k_forms.sh "$OUT"
# Logs: sk_test.log, ws_test_<i>.log, sk_bench.log, clocks.log under the folder given.
set -euo pipefail
out=${1:?usage: bench/stream_k_forms.sh OUT_DIR}
mkdir -p "$out"
export KGEN_LOG_LEVEL=warn
clock() { nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader | sed "s/^/$1: /" >>"$out/clocks.log"; }
clock before
pids=()
for i in 0 1 2 3; do
  KGEN_CACHE_DIR=/tmp/kgen_sk_ws$i KGEN_GPU_TEST_SPLIT=$i/4 dist/bin/kgen_gpu_tests \
    --gtest_filter='AttentionForwardGpuWs.EveryWsConfigOnOddShapesAndTheDefaultsLarge' >"$out/ws_test_$i.log" 2>&1 &
  pids+=($!)
done
dist/bin/kgen_gpu_tests --gtest_filter='AttentionForwardGpuWs.StreamK*' 2>&1 |
  tee "$out/sk_test.log"
for pid in "${pids[@]}"; do wait "$pid"; done
tail -n 3 "$out"/ws_test_*.log
bench() { dist/bin/kgen bench --op attention_fwd --dtypes bf16 --causal no --warmup 10 --reps 50 "$@" 2>&1 | tee -a "$out/sk_bench.log"; }
bench --head-dims 128 --seqlens 1024,2048,4096 \
  --configs ws:bm128:bn128:s2:pp1:persist,ws:bm128:bn128:s2:pp1:persist:sk
bench --head-dims 64 --seqlens 1024,2048 \
  --configs ws:bm192:bn128:s2:pp1:persist,ws:bm192:bn128:s2:pp1:persist:sk,ws:bm128:bn128:s2:pp1:persist:sk
bench --head-dims 128 --seqlens 4096,8192 --batch 1 --heads 64 --heads-kv 8 \
  --configs ws:bm128:bn128:s2:pp1:persist,ws:bm128:bn128:s2:pp1:persist:sk,ws:bm128:bn176:s2:pp1:persist,ws:bm128:bn176:s2:pp1:persist:sk
clock after
cat "$out/clocks.log"
