#!/usr/bin/env bash
# Checks the lock annotations (ABSL_GUARDED_BY, ABSL_EXCLUSIVE_LOCKS_REQUIRED,
# ...) of api/, tiers/, prefetch/ and daemon/ with clang's thread-safety
# analysis, as an error: without it the annotations are comments (gcc ignores
# them). Builds only those libraries, with clang and no CUDA, in build-tsa/
# (TSA_BUILD_DIR). Every finding is printed (-k 0, no error limit).
# Usage: scripts/check_thread_safety.sh   (scripts/test.sh runs it)
set -euo pipefail
# shellcheck source=lib/usage.sh
. "$(dirname "$0")/lib/usage.sh"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${TSA_BUILD_DIR:-$root/build-tsa}"
jobs="${TSA_JOBS:-$(nproc)}"

if ! command -v clang++ >/dev/null; then
  echo "check_thread_safety.sh: clang++ not found (apt-get install clang)" >&2
  exit 2
fi
GEN=(-G "Unix Makefiles")
command -v ninja >/dev/null && GEN=(-G Ninja)
# Hooks on: the sync points are code the analysis should see too.
CC=clang CXX=clang++ cmake -S "$root" -B "$build" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Debug \
  -DKVTIER_CUDA=OFF -DKVTIER_TEST_HOOKS=ON -DKVTIER_THREAD_SAFETY=ON >/dev/null
targets=(kvtier_api kvtier_tier kvtier_host kvtier_store kvtier_nvme_device kvtier_nvme kvtier_hbm kvtier_prefetch
         kvtier_daemon kvtier_remote kvtier_seal kvtier_shared_cache kvtier_memory_shared_cache)
log="$build/thread-safety.log"
start=$(date +%s)
set +e
# -k 0: every translation unit is compiled, so one run reports every finding.
cmake --build "$build" -j "$jobs" --target "${targets[@]}" -- -k 0 >"$log" 2>&1
rc=$?
set -e
findings=$(grep -cE "\[(-Werror,)?-Wthread-safety[a-z-]*\]" "$log" || true)
if [ "$rc" -ne 0 ]; then
  grep -E "error:|FAILED:" "$log" >&2 || tail -40 "$log" >&2
  echo "check_thread_safety.sh: FAILED ($findings thread-safety findings; full log: $log)" >&2
  exit 1
fi
echo "check_thread_safety.sh: OK, ${#targets[@]} libraries clean under -Werror=thread-safety" \
     "($(( $(date +%s) - start )) s)"
