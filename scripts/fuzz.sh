#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan+UBSan) in build-fuzz/ and runs
# each one for SECONDS, then prints per target: executions, exec/s, coverage
# (libFuzzer's cov: and ft:), corpus size and crashes.
# Usage: scripts/fuzz.sh [SECONDS] [TARGET...]
#   SECONDS  default $FUZZ_SECONDS or 30
#   TARGET   request_decoder_fuzz (one decoded message) and/or conversation_fuzz
#            (multi-peer sessions against an in-process daemon); default both
# Env: FUZZ_JOBS (parallel workers per target, default 1), FUZZ_ARGS (extra
# libFuzzer flags, e.g. "-seed=1"), FUZZ_BUILD_DIR (default build-fuzz),
# FUZZ_BUILD_JOBS (ninja -j, default nproc). conversation_fuzz's own knobs
# (KVTIER_FUZZ_TRACE, ...): tests/fuzz/conversation_fuzz.cc.
# Each target starts from a copy of its committed seeds (tests/fuzz/corpus,
# tests/fuzz/conversation_corpus); FUZZ_CORPUS_DIR=DIR keeps the corpus in
# DIR/TARGET across runs instead. Fails on any crash, leak, timeout or
# sanitizer report; the reproducer is left in build-fuzz/fuzz-artifacts/TARGET/
# (replay it: build-fuzz/tests/fuzz/TARGET FILE, or build/tests/fuzz/TARGET FILE).
set -euo pipefail
# shellcheck source=lib/usage.sh
. "$(dirname "$0")/lib/usage.sh"

seconds="${1:-${FUZZ_SECONDS:-30}}"
shift || true
targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=(request_decoder_fuzz conversation_fuzz)
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${FUZZ_BUILD_DIR:-$root/build-fuzz}"
jobs="${FUZZ_JOBS:-1}"

if ! command -v clang++ >/dev/null; then
  echo "fuzz.sh: clang++ not found (apt-get install clang)" >&2
  exit 2
fi
declare -A seeds=([request_decoder_fuzz]=corpus [conversation_fuzz]=conversation_corpus)
declare -A flags=([request_decoder_fuzz]="-max_len=131072 -rss_limit_mb=2048"
                  [conversation_fuzz]="-max_len=8192 -rss_limit_mb=4096")
for t in "${targets[@]}"; do
  [[ -n ${seeds[$t]:-} ]] || { echo "fuzz.sh: unknown target $t (have: ${!seeds[*]})" >&2; exit 2; }
done

# Only the fuzz targets and what they link get built.
CC=clang CXX=clang++ cmake -S "$root" -B "$build" -G Ninja \
  -DKVTIER_FUZZ=ON -DKVTIER_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
ninja -C "$build" -j "${FUZZ_BUILD_JOBS:-$(nproc)}" "${targets[@]}"

work="$(mktemp -d "${TMPDIR:-/tmp}/kvtier-fuzz-XXXXXX")"
trap 'rm -rf "$work"' EXIT
summary=()
failed=0

# The figures of one finished run, from its log(s): the final stats
# (-print_final_stats=1) and the last status line ("#N ... cov: C ft: F ...").
report() {
  local t=$1 corpus=$2 artifacts=$3; shift 3
  awk -v t="$t" -v corp="$(find "$corpus" -type f | wc -l)" \
      -v crashes="$(find "$artifacts" -type f -newer "$work/start-$t" | wc -l)" '
    /^stat::number_of_executed_units:/ { execs += $2 }
    /^stat::average_exec_per_sec:/ { eps += $2 }
    /^#[0-9]+/ { for (i = 1; i < NF; ++i) {
        if ($i == "cov:" && $(i + 1) + 0 > cov) cov = $(i + 1) + 0
        if ($i == "ft:" && $(i + 1) + 0 > ft) ft = $(i + 1) + 0 } }
    END { printf "%-22s %10d %8d %7d %7d %7d %8d\n", t, execs, eps, cov, ft, corp, crashes }' "$@"
}

for t in "${targets[@]}"; do
  corpus="${FUZZ_CORPUS_DIR:-$work/corpus}/$t"
  artifacts="$build/fuzz-artifacts/$t"
  mkdir -p "$corpus" "$artifacts" "$work/$t"
  cp -n "$root/tests/fuzz/${seeds[$t]}"/* "$corpus"/ 2>/dev/null || true
  touch "$work/start-$t"
  parallel=()
  # libFuzzer's -jobs mode writes fuzz-N.log into the working directory.
  [[ $jobs -gt 1 ]] && parallel=(-jobs="$jobs" -workers="$jobs")
  # A conversation that kills the process outright (SIGBUS in the daemon)
  # leaves no libFuzzer artifact: the harness writes each input here first.
  save=()
  [[ $t == conversation_fuzz && $jobs -eq 1 ]] && save=(KVTIER_FUZZ_SAVE_INPUT="$work/$t/last-input")
  echo "fuzz.sh: fuzzing $t for ${seconds}s ($jobs job(s))"
  set +e
  (cd "$work/$t" &&
   env "${save[@]}" \
   UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" \
   ASAN_OPTIONS="detect_leaks=1:abort_on_error=1" \
   "$build/tests/fuzz/$t" \
     -max_total_time="$seconds" -timeout=20 ${flags[$t]} \
     -print_final_stats=1 -artifact_prefix="$artifacts/" \
     "${parallel[@]}" ${FUZZ_ARGS:-} "$corpus") >"$work/$t/fuzz.log" 2>&1
  rc=$?
  set -e
  grep -hE "^(#[0-9]+[[:space:]]+(INITED|DONE)|==[0-9]+==|SUMMARY|.*runtime error|conversation_fuzz: )" \
    "$work/$t"/*.log || true
  summary+=("$(report "$t" "$corpus" "$artifacts" "$work/$t"/*.log)")
  if [[ $rc -ne 0 ]]; then
    failed=1
    if [[ -f $work/$t/last-input && -z $(find "$artifacts" -type f -newer "$work/start-$t") ]]; then
      cp "$work/$t/last-input" "$artifacts/killed-$(date +%Y%m%d-%H%M%S)"
    fi
    echo "fuzz.sh: $t FAILED (exit $rc); last lines of the log:" >&2
    tail -40 "$work/$t/fuzz.log" >&2
    find "$artifacts" -type f -newer "$work/start-$t" >&2
  fi
done

echo
echo "fuzz.sh: ${seconds}s per target"
printf "%-22s %10s %8s %7s %7s %7s %8s\n" target execs exec/s cov ft corpus crashes
printf "%s\n" "${summary[@]}"
if [[ $failed -ne 0 ]]; then
  echo "fuzz.sh: FAILED (reproducers listed above)" >&2
  exit 1
fi
echo "fuzz.sh: OK, no crash"
