#!/usr/bin/env bash
# One version everywhere: every program prints exactly "<program> <VERSION>"
# for --version and exits 0, where VERSION is CMake's PROJECT_VERSION (the
# top-level project(VERSION)); with --python, kvtier.__version__ is VERSION too.
#   version_test.sh VERSION [--python PYTHON PYTHONPATH] PROGRAM_PATH ...
set -u
[[ $# -ge 2 ]] || { echo "usage: version_test.sh VERSION [--python PY PATH] PROGRAM..."; exit 2; }
want=$1
shift
failures=0 checked=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

if [[ ${1:-} == --python ]]; then
  py=$2 pypath=$3
  shift 3
  got=$(PYTHONPATH=$pypath "$py" -c 'import kvtier; print(kvtier.__version__)' 2>&1)
  [[ $got == "$want" ]] || fail "kvtier.__version__ is '$got', want '$want'"
  checked=$((checked + 1))
fi

for prog in "$@"; do
  name=$(basename "$prog")
  if [[ ! -x $prog ]]; then
    fail "$prog is not built"
    continue
  fi
  out=$("$prog" --version 2>/dev/null)
  rc=$?
  [[ $rc -eq 0 ]] || fail "$name --version exited $rc"
  [[ $out == "$name $want" ]] || fail "$name --version printed '$out', want '$name $want'"
  checked=$((checked + 1))
done
echo "version_test: $checked checked against $want, $failures failures"
[[ $failures -eq 0 ]]
