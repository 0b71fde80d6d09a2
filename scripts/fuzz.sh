#!/usr/bin/env bash
# Builds the request-decoder fuzzer (clang, libFuzzer, ASan+UBSan) in
# build-fuzz/ and runs it on a copy of tests/fuzz/corpus for N seconds.
# Usage: scripts/fuzz.sh [SECONDS]   (default $FUZZ_SECONDS or 30)
# Env: FUZZ_JOBS (parallel workers, default 1), FUZZ_ARGS (extra libFuzzer
# flags, e.g. "-seed=1"), FUZZ_BUILD_DIR (default build-fuzz).
# Fails on any crash, leak or sanitizer report; the reproducer is left in
# build-fuzz/fuzz-artifacts/ (replay it: build/tests/fuzz/request_decoder_fuzz FILE).
set -euo pipefail

seconds="${1:-${FUZZ_SECONDS:-30}}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${FUZZ_BUILD_DIR:-$root/build-fuzz}"
jobs="${FUZZ_JOBS:-1}"

if ! command -v clang++ >/dev/null; then
  echo "fuzz.sh: clang++ not found (apt-get install clang)" >&2
  exit 2
fi

# Only the fuzz target and what it links (proto, api, codec) get built.
CC=clang CXX=clang++ cmake -S "$root" -B "$build" -G Ninja \
  -DKVTIER_FUZZ=ON -DKVTIER_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
ninja -C "$build" request_decoder_fuzz

work="$(mktemp -d "${TMPDIR:-/tmp}/kvtier-fuzz-XXXXXX")"
trap 'rm -rf "$work"' EXIT
cp -r "$root/tests/fuzz/corpus" "$work/corpus"
artifacts="$build/fuzz-artifacts"
mkdir -p "$artifacts"

parallel=()
# libFuzzer's -jobs mode writes fuzz-N.log into the working directory.
if [[ $jobs -gt 1 ]]; then parallel=(-jobs="$jobs" -workers="$jobs"); cd "$work"; fi

echo "fuzz.sh: fuzzing the request decoder for ${seconds}s ($jobs job(s))"
set +e
UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" \
ASAN_OPTIONS="detect_leaks=1:abort_on_error=1" \
"$build/tests/fuzz/request_decoder_fuzz" \
  -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=131072 \
  -print_final_stats=1 -artifact_prefix="$artifacts/" \
  "${parallel[@]}" ${FUZZ_ARGS:-} "$work/corpus" 2>&1 | tee "$work/fuzz.log" |
  grep -E "^(#[0-9]+[[:space:]]+(INITED|DONE)|stat::|==[0-9]+==|SUMMARY|.*runtime error)"
rc=${PIPESTATUS[0]}
set -e
if [[ $rc -ne 0 ]]; then
  echo "fuzz.sh: FAILED (exit $rc); last lines of the log:" >&2
  tail -40 "$work/fuzz.log" >&2
  ls -1 "$artifacts" >&2 || true
  exit 1
fi
echo "fuzz.sh: OK, no crash in ${seconds}s"
