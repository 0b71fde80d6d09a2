#!/usr/bin/env bash
# The packaged service's case (issue 25): kvtierd runs as one user, an engine
# as another, and a third user that may also reach the socket must get
# nowhere near the engine's buffer. The script creates the three users and a
# client group (as the .deb's kvtier-clients), starts a real kvtierd as the
# first, and checks:
#   1. the engine (Python client, as the connectors use it) registers a 0600
#      ShmBuffer by fd and PUTs/GETs pages through it, byte-exact;
#   2. the engine's raw handover + REGISTER with its ticket works;
#   3. the third user cannot open the buffer's shm object, cannot reach it
#      through /proc/<engine>/fd, cannot make the daemon open it by name, and
#      a ticket of the engine's is refused for it (PERMISSION_DENIED naming
#      the uids).
# Needs root (exit 77: skipped). Usage: cross_user_buffers.sh BUILD_DIR
set -uo pipefail
BUILD="$(cd "${1:?usage: $0 BUILD_DIR}" && pwd)"
SRC="$(cd "$(dirname "$0")/../.." && pwd)"
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root to create users"; exit 77; }
for tool in useradd groupadd setpriv /usr/bin/python3; do
  command -v "$tool" >/dev/null || { echo "SKIP: $tool missing"; exit 77; }
done
PEER="$BUILD/tests/security/buffer_peer"
KVTIERD="$BUILD/daemon/kvtierd"

getent group kvt-clients >/dev/null || groupadd --system kvt-clients
for u in kvt-daemon kvt-engine kvt-other; do
  id "$u" >/dev/null 2>&1 ||
    useradd --system --no-create-home --shell /usr/sbin/nologin -G kvt-clients "$u"
done
# exec: a background `as …` is then the process itself, so its pid is
# what `kill` must reach. Only ever call it in a subshell (`&`, `$(…)`, `(…)`).
as() { local u="$1"; shift; exec setpriv --reuid="$u" --regid="$u" --init-groups -- "$@"; }

TMP="$(mktemp -d /tmp/kvtier-xu.XXXXXX)"
DAEMON_PID=""
ENGINE_PID=""
cleanup() {
  # The test users run nothing else: whatever they still run is ours.
  pkill -u kvt-engine 2>/dev/null
  pkill -u kvt-other 2>/dev/null
  pkill -u kvt-daemon 2>/dev/null
  [ -z "$DAEMON_PID" ] || { kill "$DAEMON_PID" 2>/dev/null; wait "$DAEMON_PID" 2>/dev/null; }
  rm -rf "$TMP"
}
trap cleanup EXIT
chown kvt-daemon:kvt-daemon "$TMP"
chmod 0711 "$TMP"
cat >"$TMP/tenants.json" <<'JSON'
{"tenants": [{"name": "engine", "token": "engine-token-0123456789"},
             {"name": "other", "token": "other-token-0123456789"}]}
JSON
chown kvt-daemon "$TMP/tenants.json"
chmod 0600 "$TMP/tenants.json"
SOCK="$TMP/run/kvtierd.sock"
as kvt-daemon "$KVTIERD" --socket="$SOCK" --socket_group=kvt-clients \
  --state_dir="$TMP/state" --tenants_file="$TMP/tenants.json" \
  --host_bytes=64MiB --nvme_bytes=0 >"$TMP/kvtierd.log" 2>&1 &
DAEMON_PID=$!
for _ in $(seq 100); do [ -S "$SOCK.fds" ] && break; sleep 0.1; done
[ -S "$SOCK.fds" ] || { echo "FAIL: no buffer socket"; cat "$TMP/kvtierd.log"; exit 1; }
FAILS=0
PASSES=0
check() {  # check WHAT EXPECTED ACTUAL
  if [[ "$3" == *"$2"* ]]; then echo "ok   $1"; PASSES=$((PASSES + 1)); else echo "FAIL $1: expected '$2', got '$3'"; FAILS=$((FAILS + 1)); fi
}

# 1. The engine's own path: Python client, ShmBuffer, by fd (the default).
cat >"$TMP/engine.py" <<'PY'
import os, stat, sys, time
import numpy as np
import kvtier
layout = kvtier.Layout(layers=2, kv_heads=2, head_dim=64, tokens_per_page=64)
c = kvtier.Client(sys.argv[1], tenant="engine", token="engine-token-0123456789", layout=layout)
pb = c.page_bytes
buf = kvtier.ShmBuffer(8 * pb)
st = os.stat("/dev/shm" + buf.name)
assert stat.S_IMODE(st.st_mode) == 0o600 and st.st_uid == os.getuid(), oct(st.st_mode)
bid = c.register(buf)
view = np.frombuffer(buf, dtype=np.uint8).reshape(8, pb)
view[0:4] = np.random.default_rng(7).integers(0, 256, size=(4, pb), dtype=np.uint8)
keys = kvtier.page_keys(layout, list(range(4 * layout.tokens_per_page)))
r = c.put(keys, bid, [i * pb for i in range(4)])
assert r.stored == 4, r
c.get(keys, bid, [(4 + i) * pb for i in range(4)])
assert (view[4:8] == view[0:4]).all(), "GET returned other bytes"
print("ENGINE_OK", buf.name, os.getpid(), flush=True)
time.sleep(60)  # keeps the buffer alive while the third user tries; killed at the end
PY
chmod 0644 "$TMP/engine.py"
as kvt-engine env PYTHONPATH="$BUILD/python" /usr/bin/python3 "$TMP/engine.py" \
  "ipc://$SOCK" </dev/null >"$TMP/engine.out" 2>&1 &
ENGINE_PID=$!
for _ in $(seq 150); do grep -q "ENGINE_OK\|Error" "$TMP/engine.out" 2>/dev/null && break; sleep 0.1; done
check "engine registers its 0600 ShmBuffer by fd and PUT/GET round-trips" "ENGINE_OK" \
  "$(cat "$TMP/engine.out")"
read -r _ NAME EPID <<<"$(grep ENGINE_OK "$TMP/engine.out")"

# 2. The raw protocol. handover FILE: a memfd handed over by the engine's
# uid, kept open (sleep feeds its stdin) while its ticket is used.
HANDOVERS=()
handover() {
  (sleep 60 | as kvt-engine "$PEER" handover "$SOCK.fds" >"$1") </dev/null >/dev/null 2>&1 &
  HANDOVERS+=($!)
  for _ in $(seq 50); do [ -s "$1" ] && break; sleep 0.1; done
}
handover "$TMP/h1"
TICKET="$(head -1 "$TMP/h1")"
check "engine's ticket registers for the engine" "OK" \
  "$(as kvt-engine "$PEER" register-ticket "ipc://$SOCK" engine engine-token-0123456789 "$TICKET")"
handover "$TMP/h2"
TICKET2="$(head -1 "$TMP/h2")"
STOLEN="$(as kvt-other "$PEER" register-ticket "ipc://$SOCK" other other-token-0123456789 "$TICKET2")"
check "the engine's ticket is refused for the third user" "PERMISSION_DENIED" "$STOLEN"
check "... naming the uid that handed it over" "handed over by uid $(id -u kvt-engine)" "$STOLEN"

# 3. The third user and the buffer itself.
if [ -n "${NAME:-}" ]; then
  check "third user cannot open /dev/shm$NAME" "Permission denied" \
    "$(as kvt-other cat "/dev/shm$NAME" 2>&1)"
  check "third user cannot list /proc/$EPID/fd" "Permission denied" \
    "$(as kvt-other ls "/proc/$EPID/fd" 2>&1)"
  OPENED=0
  TRIED=0
  for fd in $(ls "/proc/$EPID/fd"); do
    TRIED=$((TRIED + 1))
    (as kvt-other sh -c "exec 3<'/proc/$EPID/fd/$fd'") 2>/dev/null && OPENED=$((OPENED + 1))
  done
  check "third user opens none of the engine's $TRIED fds through /proc" "opened 0" "opened $OPENED"
  check "the daemon will not open the engine's buffer by name for the third user" "PERMISSION_DENIED" \
    "$(as kvt-other "$PEER" register-name "ipc://$SOCK" other other-token-0123456789 "$NAME" 65536)"
fi
for p in "${HANDOVERS[@]}"; do pkill -P "$p" 2>/dev/null; done
kill -0 "$DAEMON_PID" 2>/dev/null || { echo "FAIL: kvtierd died"; FAILS=$((FAILS + 1)); }
[ "$FAILS" = 0 ] || { echo "--- kvtierd log"; tail -20 "$TMP/kvtierd.log"; }
echo "$PASSES passed, $FAILS failed"
[ "$FAILS" = 0 ]
