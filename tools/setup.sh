#!/usr/bin/env bash
# Fresh machine → built kgen → the main job: on a GPU, verify and time the default attention
# shapes; without one, pre-warm the cache for sm_80 and sm_90a with every operator's built-in
# defaults (`kgen warm --defaults`, minutes; `kgen warm` afterwards builds every variant).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install_deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build build
build/bin/kgen demo
