#!/usr/bin/env bash
# Runs the benchmarks of docs/BENCHMARKS.md: builds kvtier (Release, without
# test hooks: scripts/lib/bench_build.sh picks the folder) if needed,
# starts two private kvtierd (one for throughput/lookup/redis, a fresh one for
# the memory figure) and a private redis-server on 127.0.0.1, runs
# kvtier-bench, prints a summary, and stops all three on exit. Not a test: it
# takes ~2-3 minutes and wants an otherwise idle machine.
#   scripts/bench.sh [kvtier-bench flags...]   e.g. --repeats=11 --page_sizes=1MiB
# JSON of every figure: $BENCH_JSON (default bench.json in that folder). The
# daemon: $KVTIERD (default that folder's daemon/kvtierd), with extra flags $KVTIERD_FLAGS
# (e.g. --frontend_copy_bytes=0).
set -euo pipefail
# shellcheck source=lib/usage.sh
. "$(dirname "$0")/lib/usage.sh"
cd "$(dirname "$0")/.."
# shellcheck source=lib/bench_build.sh
. scripts/lib/bench_build.sh
BUILD_DIR="$(bench_build_dir)"
BENCH_JSON="${BENCH_JSON:-$BUILD_DIR/bench.json}"

BUILD_LOG="$(mktemp -t kvtier-bench-build.XXXXXX.log)"
GEN=()
command -v ninja >/dev/null 2>&1 && GEN=(-G Ninja)
# Only what the benchmark runs (and its dependencies), in Release.
if ! { [ -f "$BUILD_DIR/CMakeCache.txt" ] ||
       cmake -S . -B "$BUILD_DIR" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release; } >"$BUILD_LOG" 2>&1 ||
   ! cmake --build "$BUILD_DIR" -j "$(nproc)" --target kvtierd kvtierctl kvtier-bench \
       >>"$BUILD_LOG" 2>&1; then
  tail -30 "$BUILD_LOG" >&2
  echo "bench: build failed (full log: $BUILD_LOG)" >&2
  exit 1
fi
rm -f "$BUILD_LOG"
BENCH="$BUILD_DIR/tools/bench/kvtier-bench"
KVTIERD="${KVTIERD:-$BUILD_DIR/daemon/kvtierd}"
CTL="$BUILD_DIR/tools/kvtierctl"

TMP="$(mktemp -d /tmp/kvtier-bench.XXXXXX)"
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$TMP"
}
trap cleanup EXIT

# start_kvtierd NAME HOST_BYTES: a daemon on an ipc socket in $TMP, no TCP.
start_kvtierd() {
  local dir="$TMP/$1"
  mkdir -p "$dir"
  "$KVTIERD" --socket="$dir/kvtierd.sock" --state_dir="$dir/state" --host_bytes="$2" \
    --nvme_bytes=0 --log_level=warn ${KVTIERD_FLAGS:-} >"$dir/log" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 100); do
    "$CTL" --endpoint="ipc://$dir/kvtierd.sock" stats >/dev/null 2>&1 && return 0
    kill -0 "${PIDS[-1]}" 2>/dev/null || break
    sleep 0.1
  done
  cat "$dir/log" >&2
  echo "bench: kvtierd ($1) did not start" >&2
  exit 1
}

# Big enough for the largest working set (2 x 256 MiB per page size, slabs of
# one size class not yet reused by the next) without eviction.
start_kvtierd main 2GiB
start_kvtierd memory 1GiB

SECTIONS=(throughput lookup lookup_batch memory)
REDIS_FLAG=()
if command -v redis-server >/dev/null 2>&1; then
  PORT="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
  redis-server --bind 127.0.0.1 --port "$PORT" --save '' --appendonly no \
    --dir "$TMP" --logfile "$TMP/redis.log" --protected-mode yes &
  PIDS+=($!)
  for _ in $(seq 100); do
    redis-cli -h 127.0.0.1 -p "$PORT" ping >/dev/null 2>&1 && break
    sleep 0.1
  done
  SECTIONS=(throughput lookup lookup_batch redis memory)
  REDIS_FLAG=(--redis="127.0.0.1:$PORT")
else
  echo "bench: redis-server not installed (scripts/setup.sh installs it); skipping the Redis baseline"
fi

echo "== machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), \
$(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo) RAM, kernel $(uname -r)"
echo "== load average before: $(cut -d' ' -f1-3 /proc/loadavg)  (figures are only meaningful near 0)"
START=$(date +%s)
"$BENCH" "${SECTIONS[@]}" --endpoint="ipc://$TMP/main/kvtierd.sock" \
  --memory_endpoint="ipc://$TMP/memory/kvtierd.sock" "${REDIS_FLAG[@]}" \
  --json="$BENCH_JSON" "$@"
echo "== load average after: $(cut -d' ' -f1-3 /proc/loadavg); took $(( $(date +%s) - START )) s"
echo "== figures written to $BENCH_JSON"
