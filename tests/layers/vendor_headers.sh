#!/usr/bin/env bash
# vendor_headers.sh SOURCE_DIR: the vendor SDKs (CUDA driver and runtime, NVRTC, HIP, hiprtc)
# and kgen's own vendor tables are included only by the backends in driver/ and compiler/ (the
# compiler's include path cannot stop it: the toolkit may sit in /usr/local/include). Lists
# every other include and fails if there is one.
set -uo pipefail
cd "$1"
pattern='#[[:space:]]*include[[:space:]]*[<"](cuda\.h|cuda_runtime[a-z_]*\.h|nvrtc\.h|hip/[^>"]*|hiprtc\.h|driver/cuda_driver\.h)[>"]'
found=$(grep -rnE "$pattern" base cache generator jit tuning ops check include python 2>/dev/null)
if [ -n "$found" ]; then
  echo "vendor headers outside driver/ and compiler/:"
  echo "$found"
  exit 1
fi
echo "no vendor header outside driver/ and compiler/"
