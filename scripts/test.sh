#!/usr/bin/env bash
# Quick start, command 2: installs what kvtier needs, builds it and runs every
# test (unit, integration against a real daemon, fuzz-corpus replay), then a
# short libFuzzer run of the request decoder when clang is available.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
(cd build && ctest --output-on-failure -j "$(nproc)" --label-exclude slow "$@")
if [ -f scripts/fuzz.sh ] && command -v clang++ >/dev/null 2>&1; then
  FUZZ_SECONDS="${FUZZ_SECONDS:-30}" bash scripts/fuzz.sh
fi
echo "test: all tests passed"
