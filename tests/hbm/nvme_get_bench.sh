#!/usr/bin/env bash
# First and second GET of NVMe pages into a device buffer: the kvtierd of
# KVTIER_BUILD_DIR (default build/) against BASELINE_KVTIERD (e.g. a build of
# the commit before), both with an HBM tier (HBM_DEVICE, default emulated),
# host RAM and NVMe, rounds interleaved in one run by
# kvtier-nvme-device-get-bench. Without BASELINE_KVTIERD only this one.
# KVTIERD_FLAGS: more flags for both daemons (e.g. --hbm_bytes=0).
#   BASELINE_KVTIERD=/path/to/kvtierd tests/hbm/nvme_get_bench.sh [bench flags]
set -euo pipefail
if [[ "${1:-}" == --help || "${1:-}" == -h ]]; then sed -n '2,8p' "$0" | cut -c3-; exit 0; fi
cd "$(dirname "$0")/../.."
BUILD_DIR="${KVTIER_BUILD_DIR:-build}"
KVTIERD="$BUILD_DIR/daemon/kvtierd"
CTL="$BUILD_DIR/tools/kvtierctl"
BENCH="$BUILD_DIR/tests/hbm/kvtier-nvme-device-get-bench"
TMP="$(mktemp -d /tmp/kvtier-nvme-dev-get.XXXXXX)"
# shellcheck source=../../scripts/lib/kvtierd.sh
. scripts/lib/kvtierd.sh
cleanup() {
  kvtier_stop_all
  rm -rf "$TMP"
}
trap cleanup EXIT

FLAGS=(--hbm_device="${HBM_DEVICE:-emulated}" --hbm_bytes=128MiB --host_bytes=128MiB
       --nvme_bytes=512MiB --prefetch_lookahead=false)
# shellcheck disable=SC2206
FLAGS+=(${KVTIERD_FLAGS:-})
echo "== load average before: $(cut -d' ' -f1-3 /proc/loadavg) ($(nproc) CPUs)"
kvtier_start this "${FLAGS[@]}"
ARGS=(--endpoint="ipc://$TMP/this.sock")
if [[ -n "${BASELINE_KVTIERD:-}" ]]; then
  KVTIERD="$BASELINE_KVTIERD" kvtier_start base "${FLAGS[@]}"
  ARGS+=(--baseline_endpoint="ipc://$TMP/base.sock")
fi
"$BENCH" "${ARGS[@]}" "$@"
echo "== load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
