#!/usr/bin/env bash
# consumer_test.sh CMAKE BUILD_DIR SOURCE_DIR: installs the build into a temporary prefix, then
# configures, builds and runs tests/package/consumer against it through find_package(kgen).
set -euo pipefail
cmake=$1 build=$2 src=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$cmake" --install "$build" --prefix "$work/prefix" >/dev/null
"$cmake" -S "$src/tests/package/consumer" -B "$work/consumer" -G Ninja -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
"$cmake" --build "$work/consumer" >/dev/null
"$work/consumer/kgen_consumer"
