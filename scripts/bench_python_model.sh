#!/usr/bin/env bash
# The Python model's benchmark (issue 13, docs/BENCHMARKS.md), with its own
# kvtierd on a private ipc socket under a temp dir, stopped at the end:
#  1. TTFT of a 2,048-token prompt (124m random weights, 256-token pages)
#     restored from the daemon vs recomputed: medians over --repeats (5),
#     the same tokens checked; restored with a whole-page and a layer-wise GET.
#  2. The C++ <-> Python cross-restore on the same daemon and tenant: pages
#     kvtier-generate stored are found under the Python keys, restored, give the
#     C++ tokens (page bytes compared: layer 0 equal bits, later layers counted);
#     pages the Python model stored are restored by kvtier-generate, same tokens.
# Exits non-zero when a check fails. Extra arguments go to the driver
# (scripts/lib/bench_python_model.py: --prompt_tokens, --repeats, --threads, ...).
# Env: KVTIER_BUILD_DIR (binaries, default as scripts/lib/bench_build.sh picks), KVTIER_PY_BUILD_DIR (where
# python/kvtier/_native*.so is, default KVTIER_BUILD_DIR), KVTIER_NO_BUILD=1 to
# use what is built, BENCH_MODEL=DIR to reuse a checkpoint (else a 124m one is made).
set -euo pipefail
# shellcheck source=lib/usage.sh
. "$(dirname "$0")/lib/usage.sh"
cd "$(dirname "$0")/.."
# shellcheck source=lib/bench_build.sh
. scripts/lib/bench_build.sh
BUILD_DIR="$(bench_build_dir)"
PY_BUILD_DIR="${KVTIER_PY_BUILD_DIR:-$BUILD_DIR}"
if [ -z "${KVTIER_NO_BUILD:-}" ]; then
  cmake --build "$BUILD_DIR" -j2 --target kvtierd kvtierctl kvtier-generate \
    kvtier-make-checkpoint kvtier_python_package >/dev/null
fi
KVTIERD="$BUILD_DIR/daemon/kvtierd"
CTL="$BUILD_DIR/tools/kvtierctl"
TMP="$(mktemp -d /tmp/kvtier-pymodel-bench.XXXXXX)"
# shellcheck source=lib/kvtierd.sh
. scripts/lib/kvtierd.sh
cleanup() {
  kvtier_stop_all
  rm -rf "$TMP"
}
trap cleanup EXIT

MODEL="${BENCH_MODEL:-$TMP/ckpt-124m}"
if [ -z "${BENCH_MODEL:-}" ]; then
  "$BUILD_DIR/client/decoder/kvtier-make-checkpoint" --size=124m --out="$MODEL"
fi
echo "== load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
# Room for several 2,048-token prompts of 124m pages (9 MiB each) in RAM; no NVMe.
kvtier_start host --host_bytes=1GiB --nvme_bytes=0
PYTHONPATH="$PY_BUILD_DIR/python${PYTHONPATH:+:$PYTHONPATH}" \
  /usr/bin/python3 scripts/lib/bench_python_model.py --model="$MODEL" \
  --endpoint="ipc://$TMP/host.sock" --generate="$BUILD_DIR/client/decoder/kvtier-generate" "$@"
echo "== load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
