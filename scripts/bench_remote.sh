#!/usr/bin/env bash
# Shared-cache benchmarks (issues 15 and 23), on a private loopback Redis Cluster
# (scripts/redis_cluster.sh: 3 masters + 3 replicas) and two kvtierd nodes
# sharing it, all started here and stopped at the end:
#   get      64 x 1 MiB pages PUT on node A and EVICTed into the cluster (sealed), read
#            by node B (each repeat first drops B's copies: every GET fetches,
#            opens and stores) in 64- and 32-page GETs, vs a raw pipelined hiredis GET of
#            the same records (kvtier-bench remote_get). Target: >= 0.8x.
#   decoder  a 4,096-token prompt computed on A, pushed into the cluster and
#            restored on B: TTFT vs recomputing, same tokens
#            (kvtier-remote-ttft-bench). Target: >= 10x.
# Usage: scripts/bench_remote.sh [get|decoder|both] [extra args]: extra arguments
# go to the section's program (give one section with them: the flags differ).
# Environment: KVTIER_BUILD_DIR (default: scripts/lib/bench_build.sh), NO_BUILD=1 to skip building,
# KVTIERD / KVTIERCTL (binaries; default in the build dir), KVTIER_BENCH_DIR
# (where the NVMe files go; a real disk, not tmpfs; default /tmp).
set -euo pipefail
# shellcheck source=lib/usage.sh
. "$(dirname "$0")/lib/usage.sh"
cd "$(dirname "$0")/.."
# shellcheck source=lib/bench_build.sh
. scripts/lib/bench_build.sh
BUILD_DIR="$(bench_build_dir)"
SECTION="${1:-both}"
[ $# -gt 0 ] && shift
case "$SECTION" in get|decoder|both) ;; *) echo "usage: $0 [get|decoder|both] [args]" >&2; exit 2 ;; esac
if [ "${NO_BUILD:-0}" != 1 ]; then
  [ -f "$BUILD_DIR/CMakeCache.txt" ] || cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$BUILD_DIR" -j2 --target kvtierd kvtierctl kvtier-bench kvtier-remote-ttft-bench >/dev/null
fi
KVTIERD="${KVTIERD:-$BUILD_DIR/daemon/kvtierd}"
CTL="${KVTIERCTL:-$BUILD_DIR/tools/kvtierctl}"
BENCH="$BUILD_DIR/tools/bench/kvtier-bench"
TTFT="$BUILD_DIR/client/decoder/kvtier-remote-ttft-bench"

TMP="$(mktemp -d "${KVTIER_BENCH_DIR:-/tmp}/kvtier-remote-bench.XXXXXX")"
# shellcheck source=lib/kvtierd.sh
. scripts/lib/kvtierd.sh
cleanup() {
  kvtier_stop_all
  scripts/redis_cluster.sh stop "$TMP/cluster" >/dev/null 2>&1 || true
  rm -rf "$TMP"
}
trap cleanup EXIT

scripts/redis_cluster.sh start "$TMP/cluster"
SEEDS="$(cat "$TMP/cluster/seeds")"
# The fleet's sealing secret: both nodes must have the same one.
(umask 077; head -c32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$TMP/secret"; echo >>"$TMP/secret")

# Node A writes, node B reads; separate state dirs, one cluster, the default
# tenant on both. LOOKUP lookahead off: a LOOKUP moves nothing.
start_nodes() {  # prefix
  local common=(--remote_seeds="$SEEDS" --remote_secret_file="$TMP/secret"
                --prefetch_lookahead=false --host_bytes=256MiB
                --nvme_bytes=512MiB)
  kvtier_start "$1-a" "${common[@]}" --nvme_dir="$TMP/$1-a-nvme"
  wait_arena
  kvtier_start "$1-b" "${common[@]}" --nvme_dir="$TMP/$1-b-nvme" --promote_on_get=false
  wait_arena
}
# The daemon fills its host arena in the background: not while measuring.
wait_arena() {
  if declare -F kvtier_wait_host >/dev/null; then kvtier_wait_host "$KVTIER_LAST_PID" 256MiB; fi
}

remote_line() {  # node: its shared-cache counters from kvtierctl stats
  "$CTL" --endpoint="ipc://$TMP/$1.sock" stats --json | python3 -c '
import json, sys
d = json.load(sys.stdin)
c = d.get("shared_cache", d.get("stats", {}).get("shared_cache", {}))
print("  shared cache of", sys.argv[1] + ":", {k: c.get(k, 0) for k in
      ("published", "fetch_hits", "fetch_misses", "fetched_bytes", "rejected", "malformed",
       "io_errors")})
' "$1"
}

rc=0
if [ "$SECTION" = get ] || [ "$SECTION" = both ]; then
  start_nodes get
  echo "== remote_get: load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
  "$BENCH" remote_get --endpoint="ipc://$TMP/get-b.sock" --writer_endpoint="ipc://$TMP/get-a.sock" \
    --remote_seeds="$SEEDS" --json="$BUILD_DIR/remote_get.json" "$@" || rc=1
  echo "== remote_get: load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
  remote_line get-b || true
  kvtier_stop_all
fi
if [ "$SECTION" = decoder ] || [ "$SECTION" = both ]; then
  start_nodes dec
  echo "== remote decoder: load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
  "$TTFT" --endpoint="ipc://$TMP/dec-b.sock" --writer_endpoint="ipc://$TMP/dec-a.sock" "$@" || rc=1
  echo "== remote decoder: load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
  remote_line dec-b || true
  kvtier_stop_all
fi
exit $rc
