#!/usr/bin/env bash
# Every program answers --help and -h with its usage and its own flags, on
# stdout, exit 0 — and lists no flag of Abseil's (--flagfile, --helpfull...).
#   help_test.sh PROGRAM_PATH=OWN_FLAG ...   (one flag each program defines)
set -u
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

check() {
  local prog=$1 flag=$2 opt=$3 name out rc
  name=$(basename "$prog")
  out=$("$prog" "$opt" 2>/dev/null)
  rc=$?
  [[ $rc -eq 0 ]] || { fail "$name $opt exited $rc"; return; }
  # The listing names flags "--name=VALUE (default: ...)" or "--[no]name".
  grep -Eq -- "^  --(\[no\])?${flag}[ =]" <<<"$out" || fail "$name $opt does not list --$flag"
  [[ $(head -n1 <<<"$out") == "$name: "* ]] || fail "$name $opt does not start with its usage"
  ! grep -Eq -- "^  --(\[no\])?(flagfile|fromenv|helpfull|undefok|tryfromenv)[ =]" <<<"$out" ||
    fail "$name $opt lists Abseil's flags"
}

[[ $# -gt 0 ]] || { echo "usage: help_test.sh PROGRAM=FLAG ..."; exit 2; }
for pair in "$@"; do
  prog=${pair%%=*}
  flag=${pair#*=}
  if [[ ! -x $prog ]]; then
    fail "$prog is not built"
    continue
  fi
  for opt in --help -h; do check "$prog" "$flag" "$opt"; done
  # --help=SUBSTRING narrows the listing to matching flag names.
  out=$("$prog" "--help=$flag" 2>/dev/null) || fail "$(basename "$prog") --help=$flag failed"
  grep -Eq -- "^  --(\[no\])?${flag}[ =]" <<<"$out" || fail "$(basename "$prog") --help=$flag lost --$flag"
  # --version: "<program> <version>", exit 0.
  out=$("$prog" --version 2>/dev/null) || fail "$(basename "$prog") --version failed"
  [[ $out == "$(basename "$prog") "[0-9]* ]] || fail "$(basename "$prog") --version printed '$out'"
done
echo "help_test: $# programs, $failures failures"
[[ $failures -eq 0 ]]
