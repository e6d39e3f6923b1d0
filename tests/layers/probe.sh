#!/usr/bin/env bash
# probe.sh CMAKE BUILD_DIR TARGET builds|fails HEADER: builds TARGET and checks the outcome.
set -uo pipefail
cmake=$1 build=$2 target=$3 expect=$4 header=$5
out=$("$cmake" --build "$build" --target "$target" 2>&1)
rc=$?
if [ "$expect" = builds ]; then
  [ $rc -eq 0 ] && exit 0
  echo "expected $target to build:"; echo "$out"; exit 1
fi
if [ $rc -eq 0 ]; then echo "expected including $header to fail to build, but it built"; exit 1; fi
if grep -q "$header: No such file" <<<"$out"; then exit 0; fi
echo "the build failed, but not because $header is out of view:"; echo "$out"; exit 1
