# Sourced by the benchmark scripts: the build folder a benchmark measures.
#
# A benchmark measures what ships: a Release build without test hooks. The
# test command (scripts/test.sh) configures ./build with KVTIER_TEST_HOOKS=ON,
# and a kvtierd built that way keeps Abseil's Mutex deadlock detection on (a
# lock-order graph update per lock, daemon/kvtierd.cc), which is what the
# tests want and a release daemon does not pay: a batched LOOKUP ran at
# 0.76-0.86x of a release daemon's rate (BENCHMARKS.md, "Which daemon the
# benchmarks measured"). So:
#   - KVTIER_BUILD_DIR set: that folder, refused if it is a test or
#     non-Release build (a copy of binaries with no CMakeCache.txt is taken
#     as it is);
#   - else ./build when it is a release build (or not configured yet);
#   - else ./build-release, configured here in Release on first use (one
#     more full build, once).
# bench_build_dir prints the folder; messages go to stderr.

# bench_build_problem DIR: why DIR's build cannot be measured, or nothing.
bench_build_problem() {
  local cache="$1/CMakeCache.txt"
  [ -f "$cache" ] || return 0
  if grep -q '^KVTIER_TEST_HOOKS:BOOL=ON$' "$cache"; then
    echo "it is a test build, whose kvtierd keeps Abseil's deadlock detection on (KVTIER_TEST_HOOKS=ON)"
  elif ! grep -q '^CMAKE_BUILD_TYPE:STRING=Release$' "$cache"; then
    echo "it is not a Release build"
  fi
}

bench_build_dir() {
  local dir problem
  if [ -n "${KVTIER_BUILD_DIR:-}" ]; then
    dir="$KVTIER_BUILD_DIR"
    problem="$(bench_build_problem "$dir")"
    if [ -n "$problem" ]; then
      echo "benchmark: KVTIER_BUILD_DIR=$dir cannot be measured: $problem;" \
        "unset KVTIER_BUILD_DIR to measure ./build-release" >&2
      return 1
    fi
    echo "$dir"
    return 0
  fi
  dir=build
  problem="$(bench_build_problem "$dir")"
  if [ -n "$problem" ]; then
    echo "benchmark: ./build is not measured ($problem); using ./build-release" >&2
    dir=build-release
  fi
  if [ ! -f "$dir/CMakeCache.txt" ]; then
    local gen=()
    command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)
    cmake -S . -B "$dir" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release >/dev/null || return 1
  fi
  echo "$dir"
}
