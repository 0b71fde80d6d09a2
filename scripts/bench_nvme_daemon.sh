#!/usr/bin/env bash
# NVMe tier through the daemon (docs/BENCHMARKS.md):
#  1. GET of NVMe-resident pages vs the same number of RAM-resident pages
#     (kvtier-bench nvme; 1 MiB pages, 512 MiB working set over a 128 MiB host tier).
#  2. Restart time with >= 100,000 pages indexed on NVMe: fill, kill -9, start
#     again, time until `kvtierctl stats` answers, and count the recovered pages.
# Needs a real disk for the NVMe directory: $NVME_BENCH_DIR (default /var/tmp).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${KVTIER_BUILD_DIR:-build}"
bash scripts/build.sh >/dev/null
KVTIERD="$BUILD_DIR/daemon/kvtierd"
CTL="$BUILD_DIR/tools/kvtierctl"
BENCH="$BUILD_DIR/tools/bench/kvtier-bench"
TMP="$(mktemp -d "${NVME_BENCH_DIR:-/var/tmp}/kvtier-nvme-bench.XXXXXX")"
# shellcheck source=lib/kvtierd.sh
. scripts/lib/kvtierd.sh
cleanup() {
  kvtier_stop_all
  rm -rf "$TMP"
}
trap cleanup EXIT

nvme_field() {  # nvme_field NAME FIELD
  "$CTL" --endpoint="ipc://$TMP/$1.sock" stats --json |
    python3 -c "import json,sys; t=[t for t in json.load(sys.stdin)['tiers'] if t['name']=='nvme'][0]; print(t['$2'])"
}

echo "== load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== 1. GET from NVMe vs GET from RAM"
kvtier_start e2e --host_bytes=128MiB --nvme_bytes=2GiB --promote_on_get=false
"$BENCH" nvme --endpoint="ipc://$TMP/e2e.sock" --page_sizes=1MiB --working_set=512MiB \
  --batch_bytes=32MiB --repeats=5
kill -TERM "$KVTIER_LAST_PID"; wait "$KVTIER_LAST_PID" || true

echo "== 2. restart with >= 100,000 pages on NVMe"
FLAGS=(--host_bytes=16MiB --host_slab_bytes=1MiB --nvme_bytes=2GiB)
kvtier_start restart "${FLAGS[@]}"
"$BENCH" fill --endpoint="ipc://$TMP/restart.sock" --fill_pages=110000 --fill_page_bytes=4KiB
for _ in $(seq 300); do
  [ "$(nvme_field restart pages)" -ge 100000 ] && break
  sleep 0.2
done
PAGES=$(nvme_field restart pages)
echo "nvme pages indexed before the kill: $PAGES"
kill -KILL "$KVTIER_LAST_PID"; wait "$KVTIER_LAST_PID" 2>/dev/null || true
T0=$(date +%s.%N)
kvtier_start restart "${FLAGS[@]}"
T1=$(date +%s.%N)
RECOVERED=$(nvme_field restart recovered_pages)
python3 -c "print(f'restart after kill -9: serving in {($T1 - $T0):.2f} s with {$RECOVERED} pages recovered (of $PAGES)')"
echo "== load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
