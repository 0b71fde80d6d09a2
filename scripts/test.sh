#!/usr/bin/env bash
# Quick start, command 2: installs what kvtier needs, builds it and runs every
# test (unit, integration against a real daemon, fuzz-corpus replay), then,
# when clang is available, the thread-safety analysis of the store and daemon
# libraries (scripts/check_thread_safety.sh) and a short libFuzzer run of the
# request decoder.
set -euo pipefail
# shellcheck source=lib/usage.sh
. "$(dirname "$0")/lib/usage.sh"
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# Tests build with the named kill/sync points (off in a default, release build).
KVTIER_TEST_HOOKS=1 bash scripts/build.sh
(cd build && ctest --output-on-failure -j "$(nproc)" --label-exclude slow "$@")
if command -v clang++ >/dev/null 2>&1; then
  bash scripts/check_thread_safety.sh
fi
if [ -f scripts/fuzz.sh ] && command -v clang++ >/dev/null 2>&1; then
  FUZZ_SECONDS="${FUZZ_SECONDS:-30}" bash scripts/fuzz.sh
fi
echo "test: all tests passed"
