#!/usr/bin/env bash
# The whole test suite: builds if needed, then every ctest test (GPU tests skip without a GPU), one
# test per core at a time (arguments after it go to ctest; a later -j wins).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build
ctest --test-dir build --output-on-failure -j "$(nproc)" "$@"
