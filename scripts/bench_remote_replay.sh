#!/usr/bin/env bash
# Two-daemon trace replay with the shared cache (issues 15 and 23): replays
# tests/data/synthetic_trace.jsonl with kvtier-stress (1 MiB pages, as
# scripts/replay.sh) in fresh daemons and state dirs per configuration:
#   a  one daemon, host 2GiB + NVMe 8GiB, no shared cache
#   b  two daemons, each 1GiB + 4GiB, no shared cache; requests alternate
#   c  as b, both on one loopback Redis Cluster (scripts/redis_cluster.sh)
#   d  as c, with one master killed (kill -9) at FAILOVER_AT of the replay
#   e  as c, with one master hung (SIGSTOP) for HANG_S (10) seconds there
#   f  as a, on the same kind of cluster: (c)-(f) is what splitting one
#      daemon in two costs when both sides have the cluster beside them
# and prints hit rates, (c)-(a) and (c)-(b) in percentage points, corrupt
# pages, the shared cache's counters (kvtierctl stats) and, for d, failed
# requests and the time until the hit rate is back within 2 pp of its value
# before the kill. Reports go to $OUT_DIR (default $KVTIER_BUILD_DIR/remote_replay).
# Extra arguments go to every kvtier-stress run (e.g. --concurrency=2).
#
# Environment: KVTIER_BUILD_DIR (default: scripts/lib/bench_build.sh), NO_BUILD=1, KVTIER_BENCH_DIR
# (NVMe files; a real disk; default /tmp), CONFIGS ("a b c d"), FAILOVER (1:
# run d), FAILOVER_AT (0.4), MAX_REQUESTS (0: the whole trace), TRACE,
# REDIS_MAXMEMORY (per node, 1300mb, policy allkeys-lru: the shared cache's
# only bound, since its records belong to the cluster, not to a daemon),
# SERIES_INTERVAL_MS (1000), KVTIERD_FLAGS (every daemon), REMOTE_FLAGS (c, d),
# SCALE (1): divides the page size and every capacity (host, NVMe) by it,
# keeping every page count, so hit rates stay comparable while the cluster
# holds SCALE times fewer bytes (SCALE=4: 256 KiB pages, 256MiB + 1GiB
# per daemon; size REDIS_MAXMEMORY to match).
set -euo pipefail
# shellcheck source=lib/usage.sh
. "$(dirname "$0")/lib/usage.sh"
cd "$(dirname "$0")/.."
# shellcheck source=lib/bench_build.sh
. scripts/lib/bench_build.sh
BUILD_DIR="$(bench_build_dir)"
CONFIGS="${CONFIGS:-a b c d e}"
HANG_S="${HANG_S:-10}"
[ "${FAILOVER:-1}" = 1 ] || CONFIGS="${CONFIGS//[de]/}"
FAILOVER_AT="${FAILOVER_AT:-0.4}"
MAX_REQUESTS="${MAX_REQUESTS:-0}"
TRACE="${TRACE:-tests/data/synthetic_trace.jsonl}"
REDIS_MAXMEMORY="${REDIS_MAXMEMORY:-1300mb}"
SERIES_INTERVAL_MS="${SERIES_INTERVAL_MS:-1000}"
KVTIERD_FLAGS="${KVTIERD_FLAGS-}"
REMOTE_FLAGS="${REMOTE_FLAGS-}"
OUT="${OUT_DIR:-$BUILD_DIR/remote_replay}"
SCALE="${SCALE:-1}"
case "$SCALE" in 1|2|4|8|16) ;; *) echo "SCALE must be 1, 2, 4, 8 or 16" >&2; exit 2 ;; esac
mib() { echo "$(( $1 / SCALE ))MiB"; }  # mib 1024: 1 GiB at scale 1
if [ "${NO_BUILD:-0}" != 1 ]; then
  [ -f "$BUILD_DIR/CMakeCache.txt" ] || cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$BUILD_DIR" -j2 --target kvtierd kvtierctl kvtier-stress >/dev/null
fi
KVTIERD="${KVTIERD:-$BUILD_DIR/daemon/kvtierd}"
CTL="${KVTIERCTL:-$BUILD_DIR/tools/kvtierctl}"
STRESS="$BUILD_DIR/tools/stress/kvtier-stress"
STRESS_ARGS=(--page_bytes="$(( 1024 / SCALE ))KiB" "$@")
mkdir -p "$OUT"
rm -f "$OUT"/*.json "$OUT"/*.csv "$OUT"/*.txt

TMP="$(mktemp -d "${KVTIER_BENCH_DIR:-/tmp}/kvtier-rr.XXXXXX")"
# shellcheck source=lib/kvtierd.sh
. scripts/lib/kvtierd.sh
CLUSTER=""
cleanup() {
  kvtier_stop_all
  [ -z "$CLUSTER" ] || scripts/redis_cluster.sh stop "$CLUSTER" >/dev/null 2>&1 || true
  rm -rf "$TMP"
}
trap cleanup EXIT

# start_cluster NAME: a fresh cluster in $TMP/NAME, maxmemory on every node
# (redis_cluster.sh has no config passthrough: CONFIG SET after start).
start_cluster() {
  CLUSTER="$TMP/$1"
  scripts/redis_cluster.sh start "$CLUSTER" >/dev/null
  local d
  for d in "$CLUSTER"/node-*; do
    redis-cli -p "$(cat "$d/port")" config set maxmemory "$REDIS_MAXMEMORY" >/dev/null
    redis-cli -p "$(cat "$d/port")" config set maxmemory-policy allkeys-lru >/dev/null
  done
}
stop_cluster() {
  scripts/redis_cluster.sh stop "$CLUSTER" >/dev/null 2>&1 || true
  CLUSTER=""
}
cluster_rss_mb() {
  local d sum=0 pid
  for d in "$CLUSTER"/node-*; do
    pid=$(cat "$d/redis.pid" 2>/dev/null || echo 0)
    sum=$((sum + $(awk '/^VmRSS:/ {print $2}' "/proc/$pid/status" 2>/dev/null || echo 0)))
  done
  echo $((sum / 1024))
}

# kill_master_at LABEL STRESS_PID [hang]: kill -9 the first master once the
# replay (its progress bar in $TMP/LABEL.err) has done FAILOVER_AT of its
# requests; with "hang", SIGSTOP it for HANG_S seconds instead, then SIGCONT.
kill_master_at() {
  local done_n total d port
  while kill -0 "$2" 2>/dev/null; do
    read -r done_n total _ < <(tr '\r' '\n' <"$TMP/$1.err" | grep -o '[0-9]*/[0-9]* req' |
                                tail -1 | tr '/' ' ')
    if [ -n "${total:-}" ] && awk -v n="$done_n" -v t="$total" -v f="$FAILOVER_AT" \
                                  'BEGIN { exit !(n >= t * f) }'; then
      for d in "$CLUSTER"/node-*; do
        port=$(cat "$d/port")
        [ "$(redis-cli -p "$port" role 2>/dev/null | head -1)" = master ] || continue
        if [ "${3:-}" = hang ]; then
          kill -STOP "$(cat "$d/redis.pid")"
          echo "$(date +%s.%N) $done_n $total 127.0.0.1:$port" >"$OUT/$1-kill.txt"
          echo "== $1: hung master 127.0.0.1:$port at request $done_n of $total for ${HANG_S}s"
          sleep "$HANG_S"
          kill -CONT "$(cat "$d/redis.pid")"
          return 0
        fi
        kill -9 "$(cat "$d/redis.pid")"
        echo "$(date +%s.%N) $done_n $total 127.0.0.1:$port" >"$OUT/$1-kill.txt"
        echo "== $1: killed master 127.0.0.1:$port at request $done_n of $total"
        return 0
      done
    fi
    sleep 0.2
  done
}

# replay LABEL HOST NVME N_DAEMONS [remote]: fresh daemons, one kvtier-stress run.
replay() {
  local label=$1 host=$2 nvme=$3 n=$4 remote=${5:-} eps=() pids=() i flags
  flags=(--host_bytes="$host" --nvme_bytes="$nvme")
  if [ -n "$remote" ]; then
    start_cluster "$label-cluster"
    # shellcheck disable=SC2206
    (umask 077; head -c32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$TMP/secret"; echo >>"$TMP/secret")
    flags+=(--remote_seeds="$(cat "$CLUSTER/seeds")" --remote_secret_file="$TMP/secret" $REMOTE_FLAGS)
  fi
  for i in $(seq "$n"); do
    # shellcheck disable=SC2086
    kvtier_start "$label$i" "${flags[@]}" $KVTIERD_FLAGS
    pids+=("$KVTIER_LAST_PID")
    eps+=("ipc://$TMP/$label$i.sock")
  done
  for i in "${pids[@]}"; do kvtier_wait_host "$i" "$host"; done
  echo "== $label: $n daemon(s), host $host, NVMe $nvme${remote:+, shared cache (maxmemory $REDIS_MAXMEMORY per node)}; load $(cut -d' ' -f1-3 /proc/loadavg)"
  local ep_list
  ep_list=$(IFS=,; echo "${eps[*]}")
  set +e
  "$STRESS" --trace="$TRACE" --endpoints="$ep_list" --max_requests="$MAX_REQUESTS" \
    --stop_on_error=false --series_interval_ms="$SERIES_INTERVAL_MS" --progress=on \
    --json_out="$OUT/$label.json" --series_csv="$OUT/$label-series.csv" "${STRESS_ARGS[@]}" \
    >"$OUT/$label.txt" 2>"$TMP/$label.err" &
  local spid=$!
  [ "$label" = d ] && kill_master_at "$label" "$spid"
  [ "$label" = e ] && kill_master_at "$label" "$spid" hang
  wait "$spid"
  local rc=$?
  set -e
  [ "$rc" -le 1 ] || { cat "$OUT/$label.txt" "$TMP/$label.err" >&2; exit 1; }
  grep -E '^  (requests|hit rate|endpoint|failed|corrupt)' "$OUT/$label.txt" || true
  for i in $(seq "$n"); do
    "$CTL" --endpoint="ipc://$TMP/$label$i.sock" stats --json >"$OUT/$label-stats$i.json" 2>/dev/null || true
  done
  [ -z "$remote" ] || echo "== $label: cluster RSS $(cluster_rss_mb) MiB" | tee "$OUT/$label-rss.txt"
  kvtier_stop_all
  [ -z "$remote" ] || stop_cluster
}

for c in $CONFIGS; do
  case "$c" in
    a) replay a "$(mib 2048)" "$(mib 8192)" 1 ;;
    b) replay b "$(mib 1024)" "$(mib 4096)" 2 ;;
    c) replay c "$(mib 1024)" "$(mib 4096)" 2 remote ;;
    d) replay d "$(mib 1024)" "$(mib 4096)" 2 remote ;;
    e) replay e "$(mib 1024)" "$(mib 4096)" 2 remote ;;
    f) replay f "$(mib 2048)" "$(mib 8192)" 1 remote ;;
    *) echo "unknown config '$c' (a b c d e f)" >&2; exit 2 ;;
  esac
done
python3 scripts/lib/remote_replay_summary.py "$OUT" "$SERIES_INTERVAL_MS"
