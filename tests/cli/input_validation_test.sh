#!/usr/bin/env bash
# Values mean what they say: a size is bytes or K/M/G/T (powers of 1024) wherever kgen reads one,
# an empty list or path is an error naming its option (never "every operator" or "the default"),
# and the cache commands refuse a cache root that is missing, a file, or unreadable. Compiles one
# small kernel (sm_80, fp32 simt) into a scratch cache.
set -u
kgen=$1
fails=0
# shellcheck source=expect.sh
. "$(dirname "$0")/expect.sh"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
cache="$scratch/cache"
echo '{"op":"attention_fwd","variant":"attention_fwd.fp32.d32.full","config":"simt:bm4:bn32:dmax32"}' >"$scratch/one.jsonl"
expect 0 "compiled 1, cached 0, failed 0" -- warm --manifest "$scratch/one.jsonl" --arch sm_80 --cache-dir "$cache" --quiet

# Sizes: "1G" is a gibibyte, not 1 byte; a value that is not a size is a usage error, and nothing is removed.
KGEN_CACHE_MAX_BYTES=1G expect 0 "removed 0 entries" -- cache --cache-dir "$cache" gc
for bad in 1Q -5 1.5G " 1G" 99999999999999999999 16777216T 0x10; do
  KGEN_CACHE_MAX_BYTES=$bad expect 2 "KGEN_CACHE_MAX_BYTES: '$bad' is" -- cache --cache-dir "$cache" gc
done
KGEN_CACHE_MAX_BYTES=0 expect 2 "KGEN_CACHE_MAX_BYTES: 0 sets no size cap" -- cache --cache-dir "$cache" gc
expect 0 "removed 0 entries" -- cache --cache-dir "$cache" gc --max-bytes 5G
expect 0 "removed 0 entries" -- cache --cache-dir "$cache" gc --max-bytes 512MiB
KGEN_CACHE_MAX_BYTES=1 expect 0 "removed 0 entries" -- cache --cache-dir "$cache" gc --max-bytes 1g
expect 2 "max-bytes: '1.5G' is not a size" -- cache --cache-dir "$cache" gc --max-bytes 1.5G
expect 2 "max-bytes: '-1' is not a size" -- cache --cache-dir "$cache" gc --max-bytes -1
expect 2 "max-bytes: '18446744073709551616' is more than" -- cache --cache-dir "$cache" gc --max-bytes 18446744073709551616
expect 2 "max-bytes: empty value" -- cache --cache-dir "$cache" gc --max-bytes ''
expect 2 "max-bytes: 0 would remove every entry" -- cache --cache-dir "$cache" gc --max-bytes 0
expect 0 "entries +1$" -- cache --cache-dir "$cache" stat

# Empty lists and paths.
expect 2 "ops: empty list" -- warm --ops '' --cache-dir "$cache"
expect 2 "ops: empty list" -- warm --ops , --cache-dir "$cache"
expect 2 "archs: empty list" -- warm --arch '' --cache-dir "$cache"
expect 2 "manifest: empty value" -- warm --manifest '' --cache-dir "$cache"
expect 2 "db: empty value" -- warm --db '' --cache-dir "$cache"
expect 2 "cache-dir: empty value" -- warm --ops attention_fwd --cache-dir ''
expect 2 "cache-dir: empty value" -- cache --cache-dir '' clear
expect 2 "dtypes: empty list" -- bench --dtypes '' --list
expect 2 "head-dims: empty list" -- check --head-dims , --list
expect 2 "seqlens: empty list" -- tune --seqlens '' --list
expect 2 "batch: empty list" -- bench --batch '' --list
expect 2 "acts: empty list" -- bench lrpe --acts '' --list
expect 2 "grids: empty list" -- check --op md_lrpe_cosine --grids '' --list
expect 2 "configs: no config in" -- tune --configs '|' --list
expect 2 "devices: empty list" -- tune --devices '' --list
expect 2 "db-dir: empty value" -- tune --db-dir '' --list
expect 2 "db: empty value" -- tune show --db ''
expect 2 "config: empty value" -- inspect --config ''
expect 2 "variant: empty value" -- inspect --op attention_bwd --variant ''

# Cache roots: missing, a regular file, unreadable.
for cmd in ls stat verify clear "gc --max-bytes 1G" "export $scratch/out.kgenarc"; do
  # shellcheck disable=SC2086
  expect 1 "cache root $scratch/missing does not exist" -- cache --cache-dir "$scratch/missing" $cmd
  # shellcheck disable=SC2086
  expect 1 "cache root $scratch/one.jsonl is not a directory" -- cache --cache-dir "$scratch/one.jsonl" $cmd
done
[ -e "$scratch/missing" ] && { echo "FAIL: a cache command created the missing root"; fails=$((fails + 1)); }
expect 0 "exported 1 entries" -- cache --cache-dir "$cache" export "$scratch/a.kgenarc"
expect 1 "cache root $scratch/one.jsonl is not a directory" -- cache --cache-dir "$scratch/one.jsonl" import "$scratch/a.kgenarc"
expect 0 "imported 1 entries" -- cache --cache-dir "$scratch/new/root" import "$scratch/a.kgenarc"
expect 0 "entries 1, corrupt 0" -- cache --cache-dir "$scratch/new/root" verify
chmod 777 "$scratch/new/root"
expect 1 "cache root $scratch/new/root is writable by every user" -- cache --cache-dir "$scratch/new/root" ls
if [ "$(id -u)" != 0 ]; then  # root reads any directory
  mkdir "$scratch/locked" && chmod 000 "$scratch/locked"
  expect 1 "cache root $scratch/locked cannot be read" -- cache --cache-dir "$scratch/locked" ls
  chmod 700 "$scratch/locked"
fi
# Entry contents never reach the terminal raw: an escape sequence written into an entry's
# metadata prints escaped in `cache ls`.
python3 - "$scratch/esc" <<'PY'
import hashlib, json, os, struct, sys
key = hashlib.sha256(b"escape").hexdigest()
meta = json.dumps({"target": "sm_80", "variant": "v\x1b]0;owned\x07\x1b[2J"}).encode()
body = b"KGEN\x01" + struct.pack("<I", 1)
for part in (key.encode(), meta, b"\0" * 64):
    body += struct.pack("<Q", len(part)) + part
os.makedirs(f"{sys.argv[1]}/v1/{key[:2]}", mode=0o700)
os.chmod(sys.argv[1], 0o700)
open(f"{sys.argv[1]}/v1/{key[:2]}/{key}.kgen", "wb").write(body + hashlib.sha256(body).digest())
PY
listing=$("$kgen" cache --cache-dir "$scratch/esc" ls)
if printf '%s' "$listing" | grep -q $'\x1b'; then
  echo "FAIL: cache ls printed an entry's escape sequence raw"; fails=$((fails + 1))
elif ! printf '%s' "$listing" | grep -qF 'v\x1b]0;owned\x07\x1b[2J'; then
  echo "FAIL: cache ls did not print the escaped variant: $listing"; fails=$((fails + 1))
fi

[ "$fails" = 0 ] && echo "all input validation checks passed"
exit "$fails"
