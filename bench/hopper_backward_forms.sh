#!/usr/bin/env bash
# One device batch for the Hopper backward's TMA-load forms (ARCHITECTURE.md, "backward, wgmma
# with decoupled warpgroups"; docs/kernels/measurements.md "Q and dO by TMA" has its first run):
# Q/dO loaded by TMA (`:l`), with and without dQ by TMA. Correctness first, then time:
#   1. the GPU test of those forms (every form at d = 64, 128, 80, 40, causal and not, the odd
#      sizes, GQA 1/4/8, both layouts, atomic and deterministic dQ, NaN-poisoned outputs);
#   2. `kgen check` of every form at the benchmark's head dims;
#   3. `kgen bench`: the forms side by side with the default and the configs without TMA loads
#      (a2:t, a1, a2), every row checked before it is timed;
#   4. the SM clock before and after.
# A failing step stops the batch: nothing is timed that did not pass.
#
# On the GPU machine, from the repository root, with kgen installed in dist/ and the GPU test
# binary beside it (dist/bin/kgen_bwd_gpu_tests):
#   bench/hopper_backward_forms.sh "$OUT"          # about 6 minutes on an H200
# Logs: forms_test.log, forms_check.log, forms_bench.log, clocks.log under the folder given.
set -euo pipefail
out=${1:?usage: bench/hopper_backward_forms.sh OUT_DIR}
mkdir -p "$out"
export KGEN_LOG_LEVEL=warn
clock() { nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader | sed "s/^/$1: /" >>"$out/clocks.log"; }
forms=wg:bm64:bn128:a2:t:l,wg:bm64:bn128:a1:l,wg:bm64:bn128:a2:l
clock before
dist/bin/kgen_bwd_gpu_tests --gtest_filter='AttentionBackwardGpuWgmma.ExplicitFormsOnSmallAndLargeShapes' 2>&1 |
  tee "$out/forms_test.log"
dist/bin/kgen check --op attention_bwd --dtypes bf16,fp16 --head-dims 64,128,96 --configs "$forms" --quick 2>&1 |
  tee "$out/forms_check.log"
dist/bin/kgen bench --op attention_bwd --dtypes bf16 --head-dims 128,64 --causal both --seqlens 1024,4096,16384 \
  --configs "wg:bm64:bn128:a2:t,wg:bm64:bn128:a1,wg:bm64:bn128:a2,$forms" 2>&1 | tee "$out/forms_bench.log"
clock after
cat "$out/clocks.log"
