#!/usr/bin/env bash
# vendor_headers.sh SOURCE_DIR: the vendor SDKs (CUDA driver and runtime, NVRTC, HIP, hiprtc)
# and kgen's own vendor tables are included only by the backends in runtime/driver/ and
# runtime/compiler/ (the compiler's include path cannot stop it: the toolkit may sit in
# /usr/local/include). Lists every other include and fails if there is one, or if a folder it
# searches is missing (a moved folder must be named here again, not skipped).
set -uo pipefail
cd "$1"
folders=(runtime/base cache generator runtime/jit runtime/tuning runtime/ops check include python)
for f in "${folders[@]}"; do
  [ -d "$f" ] || { echo "vendor_headers.sh: no folder $f in $1"; exit 1; }
done
pattern='#[[:space:]]*include[[:space:]]*[<"](cuda\.h|cuda_runtime[a-z_]*\.h|nvrtc\.h|hip/[^>"]*|hiprtc\.h|driver/cuda_driver\.h)[>"]'
found=$(grep -rnE "$pattern" "${folders[@]}")
if [ -n "$found" ]; then
  echo "vendor headers outside runtime/driver/ and runtime/compiler/:"
  echo "$found"
  exit 1
fi
echo "no vendor header outside runtime/driver/ and runtime/compiler/"
