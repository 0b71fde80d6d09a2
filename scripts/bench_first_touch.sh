#!/usr/bin/env bash
# The first touch (issue 28): the demo's restore in a fresh process against a
# warm GET of the same pages, in one run. Two private kvtierd instances with
# the demo's defaults (1 GiB host tier; no NVMe, so the pages restore from
# RAM as in the demo): "fd" as shipped, and "mapping" with
# --buffer_write_fd=false (the copy into a cold buffer faults the daemon's
# mapping in, racing the registration warm-up: the demo before the fix).
# kvtier-first-restore-bench stores the demo's prompt (124m, 2,048 tokens)
# once per daemon, then starts one fresh process per repeat.
#   scripts/bench_first_touch.sh [kvtier-first-restore-bench flags, e.g. --repeats=11]
# KVTIER_BUILD_DIR picks the build (default build/); KVTIER_NO_BUILD=1 skips building.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${KVTIER_BUILD_DIR:-build}"
if [ -z "${KVTIER_NO_BUILD:-}" ]; then
  cmake --build "$BUILD_DIR" -j2 --target kvtierd kvtierctl kvtier-first-restore-bench >/dev/null
fi
KVTIERD="$BUILD_DIR/daemon/kvtierd"
CTL="$BUILD_DIR/tools/kvtierctl"
BENCH="$BUILD_DIR/client/decoder/kvtier-first-restore-bench"
TMP="$(mktemp -d /tmp/kvtier-first-touch.XXXXXX)"
# shellcheck source=lib/kvtierd.sh
. scripts/lib/kvtierd.sh
cleanup() {
  kvtier_stop_all
  rm -rf "$TMP"
}
trap cleanup EXIT

echo "== load average before: $(cut -d' ' -f1-3 /proc/loadavg) ($(nproc) CPUs)"
kvtier_start fd --nvme_bytes=0
kvtier_start mapping --nvme_bytes=0 --buffer_write_fd=false
for d in fd mapping; do
  echo "== kvtierd $d"
  OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-1}" "$BENCH" --endpoint="ipc://$TMP/$d.sock" "$@"
  "$CTL" --endpoint="ipc://$TMP/$d.sock" stats | grep -iE '^ *get|stage|warm' || true
done
echo "== load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
