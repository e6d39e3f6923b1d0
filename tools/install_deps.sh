#!/usr/bin/env bash
# Installs the Debian packages kgen builds and tests with (no network access is needed at
# configure or build time afterwards). The CUDA toolkit (nvcc, NVRTC, cuda.h) must already be
# installed; CMake's CUDAToolkit module finds it. The AMD compile tier needs clang-22 (every AMD
# target) and ROCm 5.2's hiprtc (libamdhip64-dev, with comgr and the device libraries: gfx90a's
# compiler where clang-22 is missing, and the tests of that backend),
# llvm-22-tools for llvm-objdump-22 and FileCheck (on PTX and on AMD ISA); libclang-rt-22-dev for the sanitizer and
# libFuzzer build of .ci/run; libzstd-dev for the compressed cache archives (`kgen cache export`).
set -euo pipefail
packages=(cmake ninja-build g++ nlohmann-json3-dev libgtest-dev libcli11-dev libssl-dev libzstd-dev libdlpack-dev python3-pytest python3-numpy
          libamdhip64-dev libamd-comgr-dev rocm-device-libs clang-22 lld-22 llvm-22 llvm-22-tools libclang-rt-22-dev)
missing=()
for p in "${packages[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
