#!/usr/bin/env bash
# Configures and builds kvtier (Release) into ./build. Extra arguments go to
# cmake, e.g. scripts/build.sh -DKVTIER_SANITIZE=address.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${KVTIER_BUILD_DIR:-build}"
GEN=()
command -v ninja >/dev/null 2>&1 && GEN=(-G Ninja)
if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
  cmake -S . -B "$BUILD_DIR" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release "$@"
elif [ $# -gt 0 ]; then
  cmake -S . -B "$BUILD_DIR" "$@"
fi
cmake --build "$BUILD_DIR" -j "$(nproc)"
