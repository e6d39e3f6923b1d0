set -uo pipefail
export KGEN_CACHE_DIR=/tmp/kgen-cache KGEN_LIBRARY=$PWD/dist/lib/libkgen.so PYTHONPATH=$PWD/python PYTHONUNBUFFERED=1
mkdir -p $OUT
{
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
echo "=== warm $(date -u +%T)"; dist/bin/kgen warm --arch sm_90a --jobs 16 --quiet 2>&1 | tail -1
echo "=== fwd gpu tests $(date -u +%T)"; KGEN_LOG_LEVEL=warn timeout 200 dist/bin/kgen_gpu_tests --gtest_brief=1 2>&1 | tail -8
echo "=== bwd gpu tests $(date -u +%T)"; KGEN_LOG_LEVEL=warn timeout 200 dist/bin/kgen_bwd_gpu_tests --gtest_brief=1 2>&1 | tail -12
echo "=== pytest $(date -u +%T)"; KGEN_LOG_LEVEL=warn timeout 150 python3 -m pytest -q python/tests 2>&1 | tail -12
echo "=== fwd bench $(date -u +%T)"; KGEN_LOG_LEVEL=warn timeout 100 dist/bin/kgen bench --dtypes bf16 --head-dims 128 --causal both --seqlens 4096,16384 --configs 'fa2:bm128:bn64:w4:s2|fa2:bm128:bn32:w4:s2' 2>&1 | tail -12
echo "=== end $(date -u +%T)"; nvidia-smi --query-gpu=clocks.sm --format=csv,noheader
} 2>&1 | tee $OUT/runA.log
