# Sourced by the CLI test scripts, after they set `kgen` and `fails=0`:
# expect EXIT_CODE PATTERN -- ARGS... runs `kgen ARGS`, counts a failure in `fails` unless it
# exits with EXIT_CODE and its output (stdout and stderr) matches the extended regex PATTERN.
expect() {
  local want=$1 pattern=$2
  shift 3
  local out rc
  out=$("$kgen" "$@" 2>&1)
  rc=$?
  if [ "$rc" != "$want" ] || ! grep -Eq -- "$pattern" <<<"$out"; then
    echo "FAIL: kgen $* -> exit $rc (want $want), output lacks /$pattern/:"
    echo "$out" | tail -5
    fails=$((fails + 1))
  else
    echo "ok: kgen $*"
  fi
}
# ok MESSAGE / fail MESSAGE: one result line of a check made by hand; fail counts in `fails`.
ok() { echo "ok: $*"; }
fail() {
  echo "FAIL: $*"
  fails=$((fails + 1))
}
# use_scratch: a fresh temporary directory in `scratch`, removed when the script exits.
use_scratch() {
  scratch=$(mktemp -d)
  trap 'rm -rf "$scratch"' EXIT
}
