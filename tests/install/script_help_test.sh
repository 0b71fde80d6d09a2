#!/usr/bin/env bash
# Every program in scripts/ answers --help and -h with its usage, exit 0, and
# does nothing else: it installs, builds, starts and writes nothing (an
# argument parser that took "--help" for an output path wrote a file of that
# name). Each runs from a copy of scripts/ in a scratch folder, so one that
# ignored --help would find no source tree there, and is stopped after 20 s.
#   script_help_test.sh SOURCE_DIR BUILD_DIR
set -u
SRC=$1
BUILD=$2
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cp -r "$SRC/scripts" "$TMP/scripts"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
checked=0
first_line=""  # of the last check's --help

check() {  # NAME COMMAND...
  local name=$1 opt out rc
  shift
  for opt in --help -h; do
    out=$(cd "$TMP" && PYTHONPATH="$BUILD/python:$SRC/tests/python" timeout 20 "$@" "$opt" 2>&1)
    rc=$?
    [[ $opt == --help ]] && first_line=$(head -n1 <<<"$out")
    [[ $rc -eq 0 ]] || { fail "$name $opt exited $rc: $(head -n3 <<<"$out")"; continue; }
    [[ -n $(head -n1 <<<"$out") ]] || fail "$name $opt printed nothing"
    local left
    left=$(cd "$TMP" && ls -A | grep -v '^scripts$')
    [[ -z $left ]] || { fail "$name $opt left: $left"; (cd "$TMP" && ls -A | grep -v '^scripts$' | xargs -r rm -rf --); }
  done
  checked=$((checked + 1))
}

for f in "$TMP"/scripts/*.sh; do
  name=scripts/$(basename "$f")
  check "$name" bash "$f"
  [[ $first_line == "$(basename "$f"):"* || $name == scripts/redis_cluster.sh ]] ||
    fail "$name --help does not start with its name"
done
# Python programs: those with a main guard.
for f in "$TMP"/scripts/*.py "$TMP"/scripts/lib/*.py; do
  grep -q '^if __name__ == "__main__":' "$f" || continue
  check "scripts/${f#"$TMP"/scripts/}" /usr/bin/python3 "$f"
done
echo "script_help_test: $checked programs, $failures failures"
[[ $failures -eq 0 ]]
