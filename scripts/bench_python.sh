#!/usr/bin/env bash
# The Python client against the C++ client, in one run against one private
# kvtierd: GET/PUT of 1 MiB pages, 32 per call, into a numpy view of a
# registered ShmBuffer, and LOOKUP p50 of a 64-key chain, interleaved and
# reported as medians and ratios (tools/bench/bench_client.py). Not a test.
#   scripts/bench_python.sh [bench_client.py flags...]   e.g. --repeats=9 --inner=5
# Builds kvtierd, kvtierctl, kvtier-bench and the Python extension in
# $KVTIER_BUILD_DIR (default: scripts/lib/bench_build.sh) unless KVTIER_NO_BUILD=1. JSON of every
# figure: $BENCH_JSON (default $KVTIER_BUILD_DIR/bench_python.json).
set -euo pipefail
# shellcheck source=lib/usage.sh
. "$(dirname "$0")/lib/usage.sh"
cd "$(dirname "$0")/.."
# shellcheck source=lib/bench_build.sh
. scripts/lib/bench_build.sh
BUILD_DIR="$(bench_build_dir)"
BENCH_JSON="${BENCH_JSON:-$BUILD_DIR/bench_python.json}"
PYTHON=/usr/bin/python3  # Debian's: the one with numpy, and the one the extension is built for

if [ "${KVTIER_NO_BUILD:-0}" != 1 ]; then
  BUILD_LOG="$(mktemp -t kvtier-bench-python-build.XXXXXX.log)"
  GEN=()
  command -v ninja >/dev/null 2>&1 && GEN=(-G Ninja)
  if ! { [ -f "$BUILD_DIR/CMakeCache.txt" ] ||
         cmake -S . -B "$BUILD_DIR" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release; } >"$BUILD_LOG" 2>&1 ||
     ! cmake --build "$BUILD_DIR" -j "$(nproc)" \
         --target kvtierd kvtierctl kvtier-bench kvtier_python >>"$BUILD_LOG" 2>&1; then
    tail -30 "$BUILD_LOG" >&2
    echo "bench_python: build failed (full log: $BUILD_LOG)" >&2
    exit 1
  fi
  rm -f "$BUILD_LOG"
fi
KVTIERD="${KVTIERD:-$BUILD_DIR/daemon/kvtierd}"
CTL="${KVTIERCTL:-$BUILD_DIR/tools/kvtierctl}"
BENCH="${KVTIER_BENCH:-$BUILD_DIR/tools/bench/kvtier-bench}"

TMP="$(mktemp -d /tmp/kvtier-bench-py.XXXXXX)"
source scripts/lib/kvtierd.sh
trap 'kvtier_stop_all; rm -rf "$TMP"' EXIT

# Room for both clients' working sets (GET set + PUT set each) without eviction.
kvtier_start main --host_bytes=2GiB --nvme_bytes=0

PYTHONPATH="$BUILD_DIR/python${PYTHONPATH:+:$PYTHONPATH}" \
  "$PYTHON" tools/bench/bench_client.py --endpoint="ipc://$TMP/main.sock" --bench="$BENCH" \
  --json="$BENCH_JSON" "$@"
echo "bench_python: JSON in $BENCH_JSON"
