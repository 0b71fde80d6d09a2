#!/usr/bin/env bash
# A soak (issue 28): kvtierd under a mixed workload for DURATION seconds, to
# show that nothing grows and nothing is lost.
#   scripts/soak.sh DURATION [OUT_DIR]          (default 120 s, <build>/soak)
# - one kvtierd (host 256 MiB + NVMe 1 GiB, so eviction, cleaning and NVMe
#   reads run all the time) beside a loopback Redis Cluster (its shared
#   cache, sealed records);
# - scripts/lib/soak_driver.py: tenants alpha, beta and ledger, each one
#   thread of LOOKUP with leases, byte-checked GETs, PUTs, PREFETCH and
#   DELETE, and an admin FLUSH every 20 s; the daemon runs write-through, so
#   every page a PUT of tenant ledger acknowledged must survive any restart;
# - every RESTART_S (default DURATION/3, at least 60 s) the daemon is
#   restarted, SIGTERM and SIGKILL in turn, after which every durable ledger
#   page must be found byte for byte;
# - every 10 s: RSS (and RssAnon), open fds (and how many are sockets and
#   the NVMe index's RocksDB files), threads, the NVMe directory's size, index
#   pages, p50/p99 per request type over that 10 s window (from the bucket
#   counts the daemon's /metrics endpoint gives between two samples: the
#   latencies of STATS are since the daemon started, which hides a trend)
#   and the cluster's memory (all nodes' used_memory) to OUT_DIR/soak.csv
#   (and soak.png with gnuplot).
# Pass (scripts/lib/soak_report.py): 0 failed, 0 corrupt, 0 ledger pages
# lost; RSS growing <= 5% per hour (least squares over the run's samples
# after each daemon lifetime's warm-up: its first minute, and a minute after
# the shared cache first published, the NVMe tier full and every part of the
# daemon running; each lifetime's own fit is printed, not judged: a
# restarted daemon refills its bounded pools first); per lifetime after its
# warm-up, fds not growing (the last third of a lifetime at most 1
# above the first, RocksDB's own files at most 4: they come and go with its
# flushes and compactions), threads flat (max - min <= 2); GET/PUT/LOOKUP
# p99 of the last minute's 10 s windows (their median) within 20% of the
# first ten minutes' after the first minute (only judged for runs of 20
# minutes and more). Exit 0 on pass, 1 on a failed
# check, 2 on bad setup.
# Environment: KVTIER_BUILD_DIR (default: the release build a benchmark
# measures, scripts/lib/bench_build.sh; CTest's soak_test names its own test
# build), NO_BUILD=1, KVTIER_BENCH_DIR (a real disk for NVMe; default the
# build dir), RESTART_S, SAMPLE_S (10).
set -euo pipefail
# shellcheck source=lib/usage.sh
. "$(dirname "$0")/lib/usage.sh"
cd "$(dirname "$0")/.."
DURATION="${1:-120}"
if [ -n "${KVTIER_BUILD_DIR:-}" ]; then
  BUILD_DIR="$KVTIER_BUILD_DIR"
else
  # shellcheck source=lib/bench_build.sh
  . scripts/lib/bench_build.sh
  BUILD_DIR="$(bench_build_dir)"
fi
OUT="${2:-$BUILD_DIR/soak}"
SAMPLE_S="${SAMPLE_S:-10}"
RESTART_S="${RESTART_S:-$(( DURATION / 3 > 60 ? DURATION / 3 : 60 ))}"
if [ "${NO_BUILD:-0}" != 1 ]; then
  cmake --build "$BUILD_DIR" -j2 --target kvtierd kvtierctl kvtier_python_package >/dev/null
fi
KVTIERD="$BUILD_DIR/daemon/kvtierd"
CTL="$BUILD_DIR/tools/kvtierctl"
export PYTHONPATH="$BUILD_DIR/python"
command -v redis-server >/dev/null || { echo "soak: redis-server missing (scripts/setup.sh)"; exit 2; }
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
rm -f "$OUT"/soak.csv "$OUT"/driver-*.jsonl "$OUT"/ledger-*.json "$OUT"/soak.png "$OUT"/.buckets.json
TMP="$(mktemp -d "$(cd "${KVTIER_BENCH_DIR:-$BUILD_DIR}" && pwd)/kvtier-soak.XXXXXX")"
CLUSTER="$TMP/cluster"
DAEMON=""
DRIVER=""
cleanup() {
  [ -z "$DRIVER" ] || kill -TERM "$DRIVER" 2>/dev/null || true
  [ -z "$DAEMON" ] || { kill -TERM "$DAEMON" 2>/dev/null; wait "$DAEMON" 2>/dev/null || true; }
  scripts/redis_cluster.sh stop "$CLUSTER" >/dev/null 2>&1 || true
  rm -rf "$TMP"
}
trap cleanup EXIT

# Bounded like a production cluster (docs/OPERATIONS.md, "Sizing"): without
# maxmemory the records of an hour's PUTs outgrew this machine's RAM.
REDIS_CLUSTER_MAXMEMORY="${REDIS_CLUSTER_MAXMEMORY:-256mb}" scripts/redis_cluster.sh start "$CLUSTER" >/dev/null
SEEDS="$(cat "$CLUSTER/seeds")"
python3 -c 'import os; print(os.urandom(32).hex())' >"$TMP/secret"
chmod 0600 "$TMP/secret"
cat >"$TMP/tenants.json" <<'JSON'
{"tenants": [
  {"name": "alpha",  "token": "alpha-token-0123", "quota": {"host": "128MiB", "nvme": "384MiB"}},
  {"name": "beta",   "token": "beta-token-01234", "quota": {"host": "128MiB", "nvme": "384MiB"}},
  {"name": "ledger", "token": "ledger-token-012", "reserve": {"host": "16MiB", "nvme": "256MiB"}},
  {"name": "ops",    "token": "ops-token-012345", "admin": true}
]}
JSON
chmod 0600 "$TMP/tenants.json"
SOCK="$TMP/kvtierd.sock"
# The /metrics port (loopback): free now; the daemon takes it at each start.
METRICS_PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
REMOTE_ARGS=(--remote_seeds="$SEEDS" --remote_secret_file="$TMP/secret")
[ "${REMOTE:-1}" = 1 ] || REMOTE_ARGS=()
start_daemon() {
  "$KVTIERD" --socket="$SOCK" --state_dir="$TMP/state" --tenants_file="$TMP/tenants.json" \
    --host_bytes=256MiB --host_slab_bytes=4MiB --nvme_bytes="${NVME_BYTES:-1GiB}" --hugepages=off \
    --write_policy=write-through --metrics_port="$METRICS_PORT" \
    "${REMOTE_ARGS[@]}" --log_level=warn \
    >>"$OUT/kvtierd.log" 2>&1 &
  DAEMON=$!
  for _ in $(seq 300); do
    "$CTL" --endpoint="ipc://$SOCK" --tenant=ops --token=ops-token-012345 ping >/dev/null 2>&1 &&
      return 0
    kill -0 "$DAEMON" 2>/dev/null || { tail -5 "$OUT/kvtierd.log"; exit 2; }
    sleep 0.1
  done
  echo "soak: kvtierd did not start"; exit 2
}
DRIVER_ARGS=(--endpoint="ipc://$SOCK" --tenants=${SOAK_TENANTS:-alpha:alpha-token-0123,beta:beta-token-01234,ledger:ledger-token-012}
             --admin=ops:ops-token-012345 --state="$TMP")
start_driver() {
  /usr/bin/python3 scripts/lib/soak_driver.py "${DRIVER_ARGS[@]}" --seconds="$1" \
    >>"$OUT/driver-$EPOCH.jsonl" 2>>"$OUT/driver.err" &
  DRIVER=$!
}
sample() {  # one CSV row: the columns of the header below
  local t=$1 rss anon fds sock rfd thr rdb stats cluster=0 port used
  rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$DAEMON/status" 2>/dev/null || echo 0)
  anon=$(awk '/^RssAnon:/ {print $2}' "/proc/$DAEMON/status" 2>/dev/null || echo 0)
  thr=$(awk '/^Threads:/ {print $2}' "/proc/$DAEMON/status" 2>/dev/null || echo 0)
  fds=$(ls "/proc/$DAEMON/fd" 2>/dev/null | wc -l)
  # What the fds are: sockets (clients, the cluster) and the NVMe index's
  # RocksDB files (table files come and go with flushes and compactions).
  sock=$(find "/proc/$DAEMON/fd" -lname 'socket:*' 2>/dev/null | wc -l)
  rfd=$(find "/proc/$DAEMON/fd" -lname "$TMP/state/nvme/*" ! -lname '*.data' 2>/dev/null | wc -l)
  rdb=$(du -sk "$TMP/state/nvme" 2>/dev/null | awk '{print $1}')
  stats=$("$CTL" --endpoint="ipc://$SOCK" --tenant=ops --token=ops-token-012345 stats --json 2>/dev/null || echo '{}')
  # The shared cache's memory, all nodes (bounded by REDIS_CLUSTER_MAXMEMORY).
  if [ ${#REMOTE_ARGS[@]} -gt 0 ]; then
    for port in $(tr ',' '\n' <<<"$SEEDS" | cut -d: -f2); do
      used=$(redis-cli -p "$port" info memory 2>/dev/null | awk -F: '/^used_memory:/ {print int($2 / 1024)}')
      cluster=$(( cluster + ${used:-0} ))
    done
  fi
  python3 - "$t" "$EPOCH" "$rss" "$fds" "$thr" "${rdb:-0}" "$stats" "$cluster" "$METRICS_PORT" \
    "$OUT/.buckets.json" "$anon" "$sock" "$rfd" >>"$OUT/soak.csv" <<'PY'
import json, re, sys, urllib.request
t, epoch, rss, fds, thr, rdb, raw, cluster, port, prev_file, anon, sock, rfd = sys.argv[1:]
try:
    s = json.loads(raw)
except ValueError:
    s = {}
# Cumulative bucket counts per request type now, from /metrics.
now = {}
try:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
except OSError:
    text = ""
pat = re.compile(r'^kvtier_request_duration_seconds_bucket\{type="(\w+)",le="([^"]+)"\} (\d+)', re.M)
for typ, le, n in pat.findall(text):
    now.setdefault(typ, []).append((float("inf") if le == "+Inf" else float(le) * 1e6, int(n)))
try:
    prev = json.load(open(prev_file))
except (OSError, ValueError):
    prev = {}
json.dump(now, open(prev_file, "w"))

def window_quantile(cur, old, q):
    """q-quantile (us) of the requests between two cumulative snapshots,
    interpolated inside its bucket as Prometheus' histogram_quantile does;
    0 when none. A restarted daemon's counts start again: then since then."""
    old = dict((le, n) for le, n in (old or []))
    counts = [(le, n - old.get(le, 0)) for le, n in cur]
    if any(c < 0 for _, c in counts):  # restarted since the last sample
        counts = cur
    total = counts[-1][1] if counts else 0
    if total <= 0:
        return 0.0
    rank, lo, below = q * total, 0.0, 0
    for le, c in counts:
        if c >= rank:
            if le == float("inf"):
                return lo
            return lo + (le - lo) * (rank - below) / max(1, c - below)
        lo, below = le, c
    return lo

row = [t, epoch, rss, fds, thr, rdb, str(s.get("daemon", {}).get("index_pages", 0))]
for req in ("LOOKUP", "GET", "PUT"):
    cur = now.get(req, [])
    row += [f"{window_quantile(cur, prev.get(req), 0.5):.0f}",
            f"{window_quantile(cur, prev.get(req), 0.99):.0f}"]
row += [cluster, anon, sock, rfd, str(s.get("shared_cache", {}).get("published", 0))]
print(",".join(row))
PY
}

echo "t_s,epoch,rss_kb,fds,threads,nvme_dir_kb,index_pages,lookup_p50_us,lookup_p99_us,get_p50_us,get_p99_us,put_p50_us,put_p99_us,cluster_kb,rss_anon_kb,fds_socket,fds_rocksdb,published" >"$OUT/soak.csv"
: >"$OUT/kvtierd.log"
: >"$OUT/driver.err"
START=$(date +%s)
EPOCH=0
KILL_NEXT=TERM
start_daemon
echo "soak: ${DURATION}s, restart every ${RESTART_S}s, samples every ${SAMPLE_S}s -> $OUT"
while :; do
  now=$(( $(date +%s) - START ))
  [ "$now" -lt "$DURATION" ] || break
  left=$(( DURATION - now ))
  run=$(( left < RESTART_S ? left : RESTART_S ))
  start_driver "$run"
  EPOCH_END=$(( $(date +%s) + run ))
  while [ "$(date +%s)" -lt "$EPOCH_END" ]; do
    sample $(( $(date +%s) - START ))
    sleep "$SAMPLE_S"
  done
  wait "$DRIVER" || true
  DRIVER=""
  sample $(( $(date +%s) - START ))
  [ $(( $(date +%s) - START )) -lt "$DURATION" ] || break
  # A restart: SIGTERM and SIGKILL in turn; then the ledger must be whole.
  kill "-$KILL_NEXT" "$DAEMON"
  wait "$DAEMON" 2>/dev/null || true
  echo "soak: t=$(( $(date +%s) - START ))s restart after SIG$KILL_NEXT"
  KILL_NEXT=$([ "$KILL_NEXT" = TERM ] && echo KILL || echo TERM)
  EPOCH=$(( EPOCH + 1 ))
  start_daemon
  /usr/bin/python3 scripts/lib/soak_driver.py "${DRIVER_ARGS[@]}" --check_ledger \
    >"$OUT/ledger-$EPOCH.json" 2>>"$OUT/driver.err" || true
done
kill -TERM "$DAEMON"
wait "$DAEMON"
RC=$?
DAEMON=""
echo "{\"final_sigterm_exit\": $RC}" >"$OUT/final.json"
/usr/bin/python3 scripts/lib/soak_report.py "$OUT" "$DURATION"
