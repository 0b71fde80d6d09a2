# Sourced by benchmark scripts: private kvtierd instances under $TMP, each on
# its own socket and state directory, all stopped by kvtier_stop_all (install
# it in the script's EXIT trap). Needs KVTIERD, CTL and TMP.
KVTIER_PIDS=()
KVTIER_LAST_PID=""

# kvtier_start NAME FLAGS...: returns once `kvtierctl stats` answers on
# ipc://$TMP/NAME.sock; the daemon's pid is in KVTIER_LAST_PID.
kvtier_start() {
  local name=$1; shift
  "$KVTIERD" --socket="$TMP/$name.sock" --state_dir="$TMP/$name" --log_level=warn "$@" \
    >>"$TMP/$name.log" 2>&1 &
  KVTIER_LAST_PID=$!
  KVTIER_PIDS+=("$KVTIER_LAST_PID")
  for _ in $(seq 600); do
    "$CTL" --endpoint="ipc://$TMP/$name.sock" stats >/dev/null 2>&1 && return 0
    kill -0 "$KVTIER_LAST_PID" 2>/dev/null || { cat "$TMP/$name.log" >&2; exit 1; }
    sleep 0.01
  done
  echo "kvtierd $name did not start" >&2
  exit 1
}

kvtier_stop_all() {
  local p
  for p in "${KVTIER_PIDS[@]}"; do kill -TERM "$p" 2>/dev/null && wait "$p" 2>/dev/null || true; done
  KVTIER_PIDS=()
}

# kvtier_wait_host PID BYTES: waits (up to 60 s) until daemon PID has faulted
# in 95% of its BYTES (e.g. 1GiB) host arena, which it populates in the
# background, so a replay measures copies, not first-touch page faults.
kvtier_wait_host() {
  local want_kb have_kb
  want_kb=$(python3 -c "import re,sys; m=re.fullmatch(r'(\d+)(GiB|MiB|KiB)?',sys.argv[1]); \
print(int(int(m.group(1))*{'GiB':1<<20,'MiB':1<<10,'KiB':1,None:1/1024}[m.group(2)]*95//100))" "$2")
  for _ in $(seq 600); do
    have_kb=$(awk '/^RssShmem:/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0)
    [ "${have_kb:-0}" -ge "$want_kb" ] && return 0
    sleep 0.1
  done
}
