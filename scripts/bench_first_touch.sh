#!/usr/bin/env bash
# The first touch (issue 28): the demo's restore in a fresh process against a
# warm GET of the same pages, in one run. Two private kvtierd instances with
# the demo's defaults (1 GiB host tier; no NVMe, so the pages restore from
# RAM as in the demo; the host tier on 4 KiB pages so that it takes none of
# the hugetlb pages below): "fd" as shipped, and "mapping" with
# --buffer_write_fd=false (the copy into a cold buffer faults the daemon's
# mapping in, racing the registration warm-up: the demo before the fix).
# Against "fd" the fresh processes run twice: with their arena on 4 KiB shm
# pages, and on 2 MiB hugetlb pages (what kvtier-generate takes when the
# machine has them: KvCacheOptions::huge_pages). For that run the script
# reserves FIRST_TOUCH_HUGEPAGES (default 128) free hugetlb pages if fewer are
# free and it may (root), and gives them back at exit; else it says so and
# skips the run.
# kvtier-first-restore-bench stores the demo's prompt (124m, 2,048 tokens)
# once per daemon, then starts one fresh process per repeat, which starts as
# kvtier-generate does (DecoderSession::Create: the arena, then HELLO +
# REGISTER on a helper thread while the weights are drawn and hashed),
# restores the prompt, and GETs the same pages again once warm. The figure of
# issue 28: (Create's wait for the daemon link + the restore) / the warm GET,
# target <= 2; the link's own HELLO + REGISTER time is reported beside it.
# The control line: each fresh process then draws a second set of weights (as
# long a CPU- and memory-bound phase as the one before its restore) and GETs
# the same pages again into its warm arena; "first restore / that GET" near or
# below 1 says the restore pays for the seconds of idle before it, not for
# being a fresh process (BENCHMARKS, "the first touch against the idle").
#   scripts/bench_first_touch.sh [kvtier-first-restore-bench flags, e.g. --repeats=11]
# KVTIER_BUILD_DIR picks the build (default: scripts/lib/bench_build.sh); KVTIER_NO_BUILD=1 skips building.
set -euo pipefail
# shellcheck source=lib/usage.sh
. "$(dirname "$0")/lib/usage.sh"
cd "$(dirname "$0")/.."
# shellcheck source=lib/bench_build.sh
. scripts/lib/bench_build.sh
BUILD_DIR="$(bench_build_dir)"
if [ -z "${KVTIER_NO_BUILD:-}" ]; then
  cmake --build "$BUILD_DIR" -j2 --target kvtierd kvtierctl kvtier-first-restore-bench >/dev/null
fi
KVTIERD="$BUILD_DIR/daemon/kvtierd"
CTL="$BUILD_DIR/tools/kvtierctl"
BENCH="$BUILD_DIR/client/decoder/kvtier-first-restore-bench"
TMP="$(mktemp -d /tmp/kvtier-first-touch.XXXXXX)"
# shellcheck source=lib/kvtierd.sh
. scripts/lib/kvtierd.sh
HUGE_SYSCTL=/proc/sys/vm/nr_hugepages
HUGE_BEFORE=""
cleanup() {
  kvtier_stop_all
  [ -z "$HUGE_BEFORE" ] || echo "$HUGE_BEFORE" >"$HUGE_SYSCTL" 2>/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT

huge_free() { awk '/^HugePages_Free:/ {print $2}' /proc/meminfo; }
# Reserves hugetlb pages so that at least $1 are free; 0 when they are.
reserve_huge() {
  local want=$1 free total
  free=$(huge_free)
  [ "${free:-0}" -ge "$want" ] && return 0
  [ -w "$HUGE_SYSCTL" ] || return 1
  total=$(cat "$HUGE_SYSCTL")
  HUGE_BEFORE=${HUGE_BEFORE:-$total}
  echo $((total + want - free)) >"$HUGE_SYSCTL" 2>/dev/null || return 1
  [ "$(huge_free)" -ge "$want" ]
}

echo "== load average before: $(cut -d' ' -f1-3 /proc/loadavg) ($(nproc) CPUs)"
kvtier_start fd --nvme_bytes=0 --hugepages=off
kvtier_start mapping --nvme_bytes=0 --buffer_write_fd=false --hugepages=off
run() {  # run DAEMON ARENA_HUGEPAGES [flags]
  local d=$1 huge=$2; shift 2
  echo "== kvtierd $d, client arena hugepages=$huge"
  OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-1}" "$BENCH" --endpoint="ipc://$TMP/$d.sock" \
    --arena_hugepages="$huge" "$@"
  "$CTL" --endpoint="ipc://$TMP/$d.sock" stats | grep -iE '^ *get|stage|warm' || true
}
run fd off "$@"
if reserve_huge "${FIRST_TOUCH_HUGEPAGES:-128}"; then
  run fd on "$@"
else
  echo "== skipped the hugetlb run: $(huge_free) free hugetlb pages, ${FIRST_TOUCH_HUGEPAGES:-128} wanted, and $HUGE_SYSCTL not writable"
fi
run mapping off "$@"
echo "== load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
