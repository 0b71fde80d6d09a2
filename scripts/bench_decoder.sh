#!/usr/bin/env bash
# Decoder benchmarks (docs/BENCHMARKS.md), with their own kvtierd instances on
# temporary sockets and state directories, stopped at the end:
#  1. 124m random weights, 4-token prompt, 200 new tokens: cached decode vs
#     recomputing the whole sequence every step.
#  2. TTFT of an 8,192-token prompt: recompute vs restored from the host tier
#     (daemon "host": 2 GiB RAM, no NVMe) vs restored from the NVMe tier
#     (daemon "nvme": a 32 MiB RAM tier, so the prompt's pages are demoted to
#     NVMe, and --promote_on_get=false so every GET reads them from there).
#  3. The same prompt restored from each daemon with whole-page vs layer-wise
#     GET (the prefill of layer l starts once layer l of every page arrived):
#     TTFT medians; --suffix_tokens=N appends N new tokens to prefill.
#     `--mode=layerwise` runs only this one (plus the prefill that stores the pages).
# Needs a real disk for the NVMe directory: $NVME_BENCH_DIR (default /var/tmp).
# Extra arguments go to kvtier-decoder-bench (e.g. --mode=decode --repeats=3).
set -euo pipefail
# shellcheck source=lib/usage.sh
. "$(dirname "$0")/lib/usage.sh"
cd "$(dirname "$0")/.."
# shellcheck source=lib/bench_build.sh
. scripts/lib/bench_build.sh
BUILD_DIR="$(bench_build_dir)"
if [ -z "${KVTIER_NO_BUILD:-}" ]; then
  cmake --build "$BUILD_DIR" -j2 --target kvtierd kvtierctl kvtier-decoder-bench >/dev/null
fi
KVTIERD="$BUILD_DIR/daemon/kvtierd"
CTL="$BUILD_DIR/tools/kvtierctl"
BENCH="$BUILD_DIR/client/decoder/kvtier-decoder-bench"
TMP="$(mktemp -d "${NVME_BENCH_DIR:-/var/tmp}/kvtier-decoder-bench.XXXXXX")"
# shellcheck source=lib/kvtierd.sh
. scripts/lib/kvtierd.sh
cleanup() {
  kvtier_stop_all
  rm -rf "$TMP"
}
trap cleanup EXIT

echo "== load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
kvtier_start host --host_bytes=2GiB --nvme_bytes=0
kvtier_start nvme --host_bytes=32MiB --nvme_bytes=2GiB --promote_on_get=false
"$BENCH" --mode=all --endpoint="ipc://$TMP/host.sock" --nvme_endpoint="ipc://$TMP/nvme.sock" "$@"
echo "== daemon stats (nvme daemon)"
"$CTL" --endpoint="ipc://$TMP/nvme.sock" stats | sed -n '1,8p'
