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
# And the other way: a flag the docs name (kvtier's flags have underscores;
# other tools' hyphens) must be a flag of some program. BENCHMARKS.md is a
# history (flags that existed then); TOOLS.md is generated.
known=$(for p in $(/usr/bin/python3 scripts/flags_reference.py --programs "$BUILD"); do
  "$p" --help 2>/dev/null | grep -oE '^  --(\[no\])?[a-z0-9_]+' | sed -E 's/^  --(\[no\])?//'
done | sort -u)
for doc in README.md docs/OPERATIONS.md docs/SECURITY.md docs/PROTOCOL.md docs/PYTHON.md \
           docs/INTEGRATIONS.md; do
  for f in $(grep -oE -- '--[a-z][a-z0-9]*_[a-z0-9_]+' "$doc" | sed 's/^--//' | sort -u); do
    if ! grep -qx -- "$f" <<<"$known"; then
      echo "FAIL: $doc names --$f, which no program has"
      failures=$((failures + 1))
    fi
  done
done
echo "docs_flags_test: $failures failures"
[ "$failures" -eq 0 ]
