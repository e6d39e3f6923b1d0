#!/usr/bin/env bash
# --json for scripts and dashboards: `kgen show-config --json` prints one JSON object,
# `kgen cache stat --json` {"root", "entries", "bytes"}, and `kgen bench --json` takes the option
# (its rows as one JSON array need a GPU: without one it fails as bench always does, exit 3).
set -u
kgen=$1
fails=0
# shellcheck source=expect.sh
. "$(dirname "$0")/expect.sh"
use_scratch

# check_json NAME PYTHON-EXPR FILE: the file is JSON and the expression (over `j`) holds.
check_json() {
  if python3 -c 'import json, sys; j = json.load(open(sys.argv[2])); sys.exit(0 if eval(sys.argv[1]) else 1)' "$2" "$3"; then
    ok "$1"
  else
    fail "$1: $(head -c 400 "$3")"
  fi
}

KGEN_CACHE_DIR="$scratch/root" KGEN_CACHE_PATH="$scratch/layer" "$kgen" show-config --json >"$scratch/config.json"
check_json "show-config --json: one object with every part" \
  "isinstance(j, dict) and all(k in j for k in ('version', 'templates_digest', 'compilers', 'targets', 'devices', 'cache_layers', 'env', 'operators'))" \
  "$scratch/config.json"
check_json "show-config --json: the cache layers in search order, the root last and writable" \
  "[l['path'] for l in j['cache_layers']] == ['$scratch/layer', '$scratch/root'] and j['cache_layers'][1]['writable']" \
  "$scratch/config.json"
check_json "show-config --json: unset variables are null, set ones their value" \
  "j['env']['KGEN_CACHE_PATH'] == '$scratch/layer' and 'KGEN_NO_JIT' in j['env']" "$scratch/config.json"
expect 0 "^templates +[0-9a-f]{16}" -- show-config

mkdir -p "$scratch/cache"
"$kgen" cache --cache-dir "$scratch/cache" stat --json >"$scratch/stat.json"
check_json "cache stat --json: root, entries, bytes" \
  "j == {'root': '$scratch/cache', 'entries': 0, 'bytes': 0}" "$scratch/stat.json"
expect 0 "^entries +0$" -- cache --cache-dir "$scratch/cache" stat
expect 1 "cache root .* does not exist" -- cache --cache-dir "$scratch/missing" stat --json

expect 0 "--json +Print the rows as one JSON array" -- bench --help
expect 0 "--json" -- bench md_lrpe --help
expect 2 "not expected: .*--json|json: does not apply" -- check --json
if ! "$kgen" show-config | grep -q '^devices *none'; then
  ok "bench --json without a GPU: a GPU is here, skipped"
else
  expect 3 "no CUDA driver|no GPU|no usable GPU" -- bench --json --seqlens 512
  expect 3 "no CUDA driver|no GPU|no usable GPU" -- bench --op lrpe_cosine --json
fi

echo "$fails failed"
[ "$fails" = 0 ]
