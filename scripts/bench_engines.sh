#!/usr/bin/env bash
# The engine paths' benchmark (issue 25, docs/BENCHMARKS.md "Engine paths"),
# with its own kvtierd on a private ipc socket under a temp dir, stopped at
# the end. Each ratio comes from one run, the connector's and the baseline's
# repeats interleaved, medians over --repeats (5), first repeat a warm-up:
#  1. vLLM: KvtierConnector (v0.11.1 stand-in, driven by tests/python/engine_sim.py)
#     loading / saving a 4,096-token prompt of Llama-3.1-8B-shaped KV in CPU
#     tensors, timed from the engine's side, vs kvtier.Client get/put of the
#     same pages through a registered ShmBuffer (target >= 0.8).
#  2. SGLang: KvtierStorage (v0.5.6 stand-in) batch_get_v1 / batch_set_v1 over
#     a zero-copy host pool vs kvtier.Client get/put of the same parts (>= 0.8).
#  3. The Python model's restored TTFT of a 2,048-token prompt vs kvtier-generate's
#     (attention by the paged kernels, as shipped; torch attention printed beside it),
#     same 124m checkpoint, prompt and daemon (Python / C++ <= 1.5).
# Prints every figure, its baseline, the ratio and PASS/MISS; exits non-zero
# only when a correctness check fails. Extra arguments go to the driver
# (scripts/lib/bench_engines.py: --repeats, --threads, ...), once per section
# (BENCH_SECTIONS, default "vllm sglang model"), each in its own process.
# Env: KVTIER_BUILD_DIR (binaries, default as scripts/lib/bench_build.sh picks), KVTIER_PY_DIR (a directory
# holding the kvtier package with its extension, default $KVTIER_BUILD_DIR/python),
# KVTIER_NO_BUILD=1 to use what is built, BENCH_MODEL=DIR to reuse a checkpoint.
set -euo pipefail
# shellcheck source=lib/usage.sh
. "$(dirname "$0")/lib/usage.sh"
cd "$(dirname "$0")/.."
# shellcheck source=lib/bench_build.sh
. scripts/lib/bench_build.sh
BUILD_DIR="$(bench_build_dir)"
PY_DIR="${KVTIER_PY_DIR:-$BUILD_DIR/python}"
if [ -z "${KVTIER_NO_BUILD:-}" ]; then
  cmake --build "$BUILD_DIR" -j2 --target kvtierd kvtierctl kvtier-generate \
    kvtier-make-checkpoint kvtier_python_package >/dev/null
fi
KVTIERD="$BUILD_DIR/daemon/kvtierd"
CTL="$BUILD_DIR/tools/kvtierctl"
TMP="$(mktemp -d /tmp/kvtier-engines-bench.XXXXXX)"
# shellcheck source=lib/kvtierd.sh
. scripts/lib/kvtierd.sh
cleanup() {
  kvtier_stop_all
  rm -rf "$TMP"
}
trap cleanup EXIT

MODEL="${BENCH_MODEL:-$TMP/ckpt-124m}"
if [ -z "${BENCH_MODEL:-}" ]; then
  "$BUILD_DIR/client/decoder/kvtier-make-checkpoint" --size=124m --out="$MODEL" >/dev/null
fi
echo "== load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
# Room for the vLLM prompt (512 MiB) and its raw twin, one save and its raw
# twin at a time; leases for a whole 4,096-token prompt of 2 MiB pages
# (512 MiB: the default lease budget, half of a quarter of the host tier per
# tenant, would lease only 192 of its 256 pages with 3 GiB).
kvtier_start engines --host_bytes=4GiB --nvme_bytes=0 --prefetch_max_pinned=2GiB
# One process per section: none runs in the memory, threads or thread pools
# another one left behind.
rc=0
for section in ${BENCH_SECTIONS:-vllm sglang model}; do
  PYTHONPATH="$PY_DIR${PYTHONPATH:+:$PYTHONPATH}" \
    /usr/bin/python3 scripts/lib/bench_engines.py --endpoint="ipc://$TMP/engines.sock" \
    --model="$MODEL" --generate="$BUILD_DIR/client/decoder/kvtier-generate" \
    --sections="$section" "$@" || rc=1
done
echo "== load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
exit $rc
