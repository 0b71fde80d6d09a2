#!/usr/bin/env bash
# NVMe tier through the daemon (docs/BENCHMARKS.md):
#  1. GET of NVMe-resident pages vs the same number of RAM-resident pages
#     (kvtier-bench nvme; 1 MiB pages, 512 MiB working set over a 128 MiB host tier),
#     and deep reads: GETs of 32 random NVMe-resident pages vs fio randread
#     1 MiB at queue depth 32 (io_uring, O_DIRECT) on a file in the same
#     directory, in the same run; prints both and the ratio (target >= 0.9).
#  2. Restart time with >= 100,000 pages indexed on NVMe: fill, kill -9, start
#     again, time until `kvtierctl stats` answers, and count the recovered pages.
# Needs a real disk for the NVMe directory: $NVME_BENCH_DIR (default /var/tmp).
# Environment: KVTIER_BUILD_DIR (default: scripts/lib/bench_build.sh), KVTIER_NO_BUILD=1 (use the binaries
# there as they are), NVME_BENCH_RESTART=0 (skip part 2), NVME_BENCH_REPEATS (5).
set -euo pipefail
# shellcheck source=lib/usage.sh
. "$(dirname "$0")/lib/usage.sh"
cd "$(dirname "$0")/.."
# shellcheck source=lib/bench_build.sh
. scripts/lib/bench_build.sh
BUILD_DIR="$(bench_build_dir)"
REPEATS="${NVME_BENCH_REPEATS:-5}"
[ -n "${KVTIER_NO_BUILD:-}" ] || KVTIER_BUILD_DIR="$BUILD_DIR" bash scripts/build.sh >/dev/null
command -v fio >/dev/null || { echo "bench_nvme_daemon: fio is not installed" >&2; exit 1; }
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
echo "== 1. GET from NVMe vs GET from RAM; GETs of 32 random NVMe pages vs fio"
echo "== $TMP on $(findmnt -n -o SOURCE,FSTYPE -T "$TMP" 2>/dev/null || echo '?'); O_DIRECT in both (no page cache)"
# fio on a 1 GiB file beside the NVMe tier's, same block size and depth;
# half its runs before kvtier's, half after (a virtio disk's speed drifts).
fio_gbps() {
  fio --name=deep --filename="$TMP/fio.dat" --size=1GiB --ioengine=io_uring --direct=1 \
    --rw=randread --bs=1M --iodepth=32 --numjobs=1 --time_based --runtime=2s \
    --output-format=json | python3 -c "import json,sys; print(json.load(sys.stdin)['jobs'][0]['read']['bw_bytes'] / 1e9)"
}
fio --name=layout --filename="$TMP/fio.dat" --size=1GiB --rw=write --bs=1M --direct=1 \
  --ioengine=io_uring --output=/dev/null
FIO=()
for _ in $(seq $(( (REPEATS + 1) / 2 ))); do FIO+=("$(fio_gbps)"); done
# No promotion on GET and no LOOKUP lookahead: pages stay where they are.
kvtier_start e2e --host_bytes=128MiB --nvme_bytes=2GiB --promote_on_get=false \
  --prefetch_lookahead=false
"$BENCH" nvme --endpoint="ipc://$TMP/e2e.sock" --page_sizes=1MiB --working_set=512MiB \
  --batch_bytes=32MiB --repeats="$REPEATS" --json="$TMP/nvme.json"
kill -TERM "$KVTIER_LAST_PID"; wait "$KVTIER_LAST_PID" || true
for _ in $(seq $(( REPEATS / 2 ))); do FIO+=("$(fio_gbps)"); done
python3 - "$TMP/nvme.json" "${FIO[@]}" <<'PY'
import json, statistics, sys
k = json.load(open(sys.argv[1]))["nvme"]["nvme_random_gbps"]
f = sorted(float(x) for x in sys.argv[2:])
fm = statistics.median(f)
print(f"deep reads: GET of 32 random 1 MiB NVMe pages {k['median']:.2f} GB/s [{k['min']:.2f}..{k['max']:.2f}]"
      f" | fio randread 1M QD32 {fm:.2f} GB/s [{f[0]:.2f}..{f[-1]:.2f}] ({len(f)} runs)"
      f" | kvtier/fio {k['median'] / fm:.2f} (target >= 0.9)")
PY
rm -f "$TMP/fio.dat"
[ "${NVME_BENCH_RESTART:-1}" = 0 ] && { echo "== load average after: $(cut -d' ' -f1-3 /proc/loadavg)"; exit 0; }

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
