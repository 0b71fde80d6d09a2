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
