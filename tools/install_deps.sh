#!/usr/bin/env bash
# Installs the Debian packages kgen builds and tests with (no network access is needed at
# configure or build time afterwards). The CUDA toolkit (nvcc, NVRTC, cuda.h) must already be
# installed; CMake's CUDAToolkit module finds it.
set -euo pipefail
packages=(cmake ninja-build g++ nlohmann-json3-dev libgtest-dev libcli11-dev libssl-dev libfmt-dev
          llvm-14-tools libdlpack-dev python3-pytest python3-numpy)
missing=()
for p in "${packages[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
