#!/usr/bin/env bash
# A newcomer's path through README.md, with the installed programs: install
# into a fresh prefix ("Installing as a service", with a temporary prefix),
# start kvtierd with no flags ("Running the daemon as a sidecar": its default
# socket and state under $XDG_RUNTIME_DIR / $XDG_STATE_HOME, here fresh
# directories), `kvtierctl stats` with no flags (its tables must have the
# README sample's columns, "Reading kvtierctl stats"), the README's trace
# replay against the default socket (PUTs and GETs, every byte checked), the
# README's Python line, then SIGTERM: exit 0. Fails where README and program
# disagree. Usage: newcomer_test.sh SOURCE_DIR BUILD_DIR
set -uo pipefail
SRC="$(cd "${1:?usage: $0 SOURCE_DIR BUILD_DIR}" && pwd)"
BUILD="$(cd "${2:?}" && pwd)"
# State on the build's disk: the NVMe tier refuses tmpfs (as the README says).
WORK="$(mktemp -d "$BUILD/newcomer.XXXXXX")"
DAEMON=""
cleanup() {
  [ -z "$DAEMON" ] || kill -KILL "$DAEMON" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
FAILS=0
PASSES=0
ok() { echo "ok   $*"; PASSES=$((PASSES + 1)); }
fail() { echo "FAIL $*"; FAILS=$((FAILS + 1)); }
readme_block() {  # the fenced block after the README line matching $1
  awk -v pat="$1" 'found && /^```/ { if (inside) exit; inside = 1; next }
                   inside { print } $0 ~ pat { found = 1 }' "$SRC/README.md"
}

# Installing: the README's command with a temporary prefix instead of /usr.
grep -q '^cmake --install build --prefix /usr' "$SRC/README.md" ||
  fail "README's install command changed: update this test"
P="$WORK/prefix"
cmake --install "$BUILD" --prefix "$P" >"$WORK/install.log" 2>&1 &&
  ok "cmake --install build --prefix PREFIX" || { fail "install"; cat "$WORK/install.log"; }

# The sidecar with defaults: no flags at all.
export XDG_RUNTIME_DIR="$WORK/run" XDG_STATE_HOME="$WORK/state" HOME="$WORK/home"
mkdir -p "$XDG_RUNTIME_DIR" "$HOME"
chmod 0700 "$XDG_RUNTIME_DIR"
export PATH="$P/bin:$PATH"
unset KVTIER_ENDPOINT KVTIER_TENANT KVTIER_TOKEN
kvtierd --help >/dev/null 2>&1 && ok "kvtierd --help" || fail "kvtierd --help"
kvtierd >"$WORK/kvtierd.log" 2>&1 &
DAEMON=$!
SOCK="$XDG_RUNTIME_DIR/kvtier/kvtierd.sock"
for _ in $(seq 100); do [ -S "$SOCK" ] && break; sleep 0.1; done
[ -S "$SOCK" ] && ok "kvtierd with no flags listens on \$XDG_RUNTIME_DIR/kvtier/kvtierd.sock (README)" ||
  { fail "no socket at $SOCK"; tail -5 "$WORK/kvtierd.log"; }
[ -d "$XDG_STATE_HOME/kvtier/nvme" ] && ok "state and the NVMe tier under \$XDG_STATE_HOME/kvtier (README)" ||
  fail "no $XDG_STATE_HOME/kvtier/nvme"

# kvtierctl stats with no flags: the README sample's table columns.
STATS="$(kvtierctl stats 2>&1)" && ok "kvtierctl stats finds the daemon with no flags" ||
  fail "kvtierctl stats: $STATS"
SAMPLE="$(readme_block '^## Reading `kvtierctl stats`')"
for table in TIER NAMESPACE; do
  want="$(grep -m1 "^$table " <<<"$SAMPLE" | tr -s ' ')"
  got="$(grep -m1 "^$table " <<<"$STATS" | tr -s ' ')"
  [ -n "$want" ] && [ "$want" = "$got" ] && ok "stats' $table columns are the README's" ||
    fail "stats' $table columns: README '$want', program '$got'"
done

# The README's replay against the default socket, exactly as printed but for
# the installed binary's path (and from the source tree, where its trace is).
LINE="$(readme_block '^## Replaying a trace' | grep -A1 'kvtier-stress' | tr -d '\\\n' | tr -s ' ')"
CMD="$(sed -E 's@^build/tools/stress/kvtier-stress@kvtier-stress@; s@#.*$@@' <<<"$LINE")"
[[ "$CMD" == kvtier-stress* ]] || fail "README's replay line changed: '$LINE'"
(cd "$WORK" && ln -s "$SRC/tests" tests && eval "$CMD" >"$WORK/stress.log" 2>&1) &&
  ok "README's replay: $CMD" || { fail "replay: $CMD"; tail -5 "$WORK/stress.log"; }
grep -q '"corrupt_pages": 0' "$WORK/report.json" 2>/dev/null && ok "replay: 0 corrupt pages" ||
  fail "replay report has corrupt pages or is missing"
AFTER="$(kvtierctl stats --json 2>/dev/null)"
WHY="$(/usr/bin/python3 - "$AFTER" <<'PY' 2>&1
import json, sys
s = json.loads(sys.argv[1])
host = [t for t in s["tiers"] if t.get("name") == "host"]
if not host:
    sys.exit("no host tier in kvtierctl stats --json")
h = host[0]
if not (h["pages"] > 0 and h["bytes_in"] > 0 and h["bytes_out"] > 0):
    sys.exit(f"host tier pages {h['pages']}, bytes_in {h['bytes_in']}, bytes_out {h['bytes_out']} "
             "after a replay that GETs pages from RAM")
PY
)" && ok "stats after the replay: pages stored, bytes in and out of RAM" || fail "stats after the replay: $WHY"

# The README's Python line, against the installed package.
PYLINE="$(readme_block '^## From Python and the engines' | grep -m1 "import kvtier; print")"
PYDIR="$(find "$P" -type d -name dist-packages -path '*python3*' | head -1)"
[ -n "$PYLINE" ] && (cd "$WORK" && PYTHONPATH="$PYDIR" eval "$PYLINE" >"$WORK/py.log" 2>&1) &&
  ok "README's Python line: $PYLINE" || { fail "Python line '$PYLINE'"; cat "$WORK/py.log" 2>/dev/null; }

# SIGTERM: a clean stop.
kill -TERM "$DAEMON"
wait "$DAEMON"
RC=$?
DAEMON=""
[ "$RC" = 0 ] && ok "SIGTERM: exit 0" || fail "SIGTERM: exit $RC"
echo "$PASSES passed, $FAILS failed"
[ "$FAILS" = 0 ]
