#!/usr/bin/env bash
# Configures and builds kvtier (Release) into ./build. Extra arguments go to
# cmake, e.g. scripts/build.sh -DKVTIER_SANITIZE=address.
# KVTIER_TEST_HOOKS=1 in the environment (scripts/test.sh sets it) builds the
# named kill/sync points the crash and interleaving tests need. Without it the
# build keeps what its cache says: a fresh ./build gets the default (OFF, a
# release kvtierd), and an existing one is not flipped back and forth (which
# would recompile everything), so the demo simply runs on whatever ./build the
# test command left, hooks compiled in but never armed (nothing sets
# KVTIER_KILL_POINT for it). Build packages in a fresh directory.
set -euo pipefail
# shellcheck source=lib/usage.sh
. "$(dirname "$0")/lib/usage.sh"
cd "$(dirname "$0")/.."
BUILD_DIR="${KVTIER_BUILD_DIR:-build}"
GEN=()
command -v ninja >/dev/null 2>&1 && GEN=(-G Ninja)
ARGS=("$@")
# The test build must have the Python package (its tests would otherwise
# vanish quietly from CTest).
if [ "${KVTIER_TEST_HOOKS:-}" = 1 ]; then ARGS+=(-DKVTIER_TEST_HOOKS=ON -DKVTIER_PYTHON=ON); fi
if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
  cmake -S . -B "$BUILD_DIR" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release "${ARGS[@]}"
elif [ ${#ARGS[@]} -gt 0 ]; then
  cmake -S . -B "$BUILD_DIR" "${ARGS[@]}"
fi
cmake --build "$BUILD_DIR" -j "$(nproc)"
