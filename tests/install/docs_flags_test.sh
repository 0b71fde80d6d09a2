#!/usr/bin/env bash
# The docs cannot drift from the programs: docs/TOOLS.md (generated from every
# program's --help) matches each built program, and every flag of kvtierd and
# kvtierctl is also explained by hand in docs/OPERATIONS.md (or the README).
# Usage: docs_flags_test.sh SOURCE_DIR BUILD_DIR
set -u
SRC=$1
BUILD=$2
failures=0
cd "$SRC" || exit 2
/usr/bin/python3 scripts/flags_reference.py --check docs/TOOLS.md \
  $(/usr/bin/python3 scripts/flags_reference.py --programs "$BUILD") || failures=$((failures + 1))
for prog in daemon/kvtierd tools/kvtierctl; do
  name=$(basename "$prog")
  flags=$("$BUILD/$prog" --help | grep -oE '^  --(\[no\])?[a-z0-9_]+' | sed -E 's/^  --(\[no\])?//')
  n=0
  for f in $flags; do
    n=$((n + 1))
    if ! grep -qE -- "--(\[no\])?$f\b" docs/OPERATIONS.md README.md; then
      echo "FAIL: $name --$f is in no hand-written doc (docs/OPERATIONS.md, README.md)"
      failures=$((failures + 1))
    fi
  done
  echo "$name: $n flags, each explained in docs/OPERATIONS.md or README.md unless named above"
done
echo "docs_flags_test: $failures failures"
[ "$failures" -eq 0 ]
