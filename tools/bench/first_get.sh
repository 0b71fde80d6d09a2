#!/usr/bin/env bash
# First GET into a freshly registered buffer vs a warm GET (issue 14 target:
# <= 1.5x): two private daemons, registration warm-up on (the default) and
# off (the baseline), measured in one run by `kvtier-bench first_get`.
#   tools/bench/first_get.sh [kvtier-bench flags, e.g. --repeats=7 --json=FILE]
# KVTIER_BUILD_DIR picks the build (default build/).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR="${KVTIER_BUILD_DIR:-build}"
KVTIERD="$BUILD_DIR/daemon/kvtierd"
CTL="$BUILD_DIR/tools/kvtierctl"
BENCH="$BUILD_DIR/tools/bench/kvtier-bench"
TMP="$(mktemp -d /tmp/kvtier-first-get.XXXXXX)"
# shellcheck source=../../scripts/lib/kvtierd.sh
. scripts/lib/kvtierd.sh
cleanup() {
  kvtier_stop_all
  rm -rf "$TMP"
}
trap cleanup EXIT

echo "== load average before: $(cut -d' ' -f1-3 /proc/loadavg) ($(nproc) CPUs)"
kvtier_start warm --host_bytes=1GiB --nvme_bytes=0
kvtier_start cold --host_bytes=1GiB --nvme_bytes=0 --buffer_warmup=false
"$BENCH" first_get --endpoint="ipc://$TMP/warm.sock" \
  --first_get_baseline_endpoint="ipc://$TMP/cold.sock" "$@"
echo "== load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
