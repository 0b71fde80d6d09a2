#!/usr/bin/env bash
# The store at scale (kvtier-scale-bench, tiers/store/bench/): two sweeps over a
# TierManager of 16-byte host pages in 32-page chains with Zipf traffic. Each
# process also builds a reference store and measures it in alternation with
# the store under test, so every ratio compares the same machine load.
#  tenants: 1, 10, 100, 1000 namespaces at SCALE_TENANT_PAGES (1M) pages,
#           reference 1 namespace: eviction pages/s (EvictTo, the evictor's
#           loop), PUT pages/s into a full tier (inline eviction), LOOKUP.
#  scale:   1000 namespaces growing through SCALE_SIZES (1M,2M,5M,10M),
#           reference 1000 namespaces at the first size: LOOKUP p50/p99, RSS
#           per indexed page (VmRSS = RssAnon, the index, + RssShmem, the
#           host arena holding the page bytes), eviction at the last size.
# Then plots docs/scale_eviction.png, docs/scale_lookup.png and
# docs/scale_memory.png with gnuplot. ~4 minutes on 2 cores (~7 with
# SCALE_OLD_BENCH); ~2.6 GB of RAM.
#   scripts/bench_scale.sh
# Environment: KVTIER_BUILD_DIR (default: scripts/lib/bench_build.sh), SCALE_OUT (/tmp/kvtier-bench-scale:
#   scale.csv and the logs), SCALE_SIZES, SCALE_TENANTS, SCALE_TENANT_PAGES,
#   SCALE_EVICT_PAGES (50k per repeat), SCALE_PLOT_DIR (docs), SCALE_PLOT_ONLY=1
#   (plot the CSV of an earlier run again, measure nothing),
#   SCALE_OLD_BENCH: a kvtier-scale-bench built against an older store, run
#   through the tenants sweep too ("before" in the eviction plot), with
#   SCALE_OLD_EVICT_PAGES (500: there a victim search scans every namespace's
#   list in every shard, ~50 ms a page at 1000 namespaces).
set -euo pipefail
# shellcheck source=lib/usage.sh
. "$(dirname "$0")/lib/usage.sh"
cd "$(dirname "$0")/.."
# shellcheck source=lib/bench_build.sh
. scripts/lib/bench_build.sh
BUILD_DIR="$(bench_build_dir)"
OUT="${SCALE_OUT:-/tmp/kvtier-bench-scale}"
SIZES="${SCALE_SIZES:-1M,2M,5M,10M}"
TENANTS="${SCALE_TENANTS:-1 10 100 1000}"
TENANT_PAGES="${SCALE_TENANT_PAGES:-1M}"
EVICT="${SCALE_EVICT_PAGES:-50k}"
PLOTS="${SCALE_PLOT_DIR:-docs}"
OLD="${SCALE_OLD_BENCH:-}"
OLD_EVICT="${SCALE_OLD_EVICT_PAGES:-500}"

command -v gnuplot >/dev/null || { echo "bench_scale: gnuplot is not installed (scripts/setup.sh)" >&2; exit 1; }
if [ ! -x "$BUILD_DIR/tiers/store/bench/kvtier-scale-bench" ] || [ -n "${SCALE_REBUILD:-}" ]; then
  [ -f "$BUILD_DIR/CMakeCache.txt" ] ||
    cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
  ninja -C "$BUILD_DIR" kvtier-scale-bench >/dev/null
fi
BENCH="$BUILD_DIR/tiers/store/bench/kvtier-scale-bench"
mkdir -p "$OUT" "$PLOTS"
CSV="$OUT/scale.csv"
run() {  # label binary namespaces pages ref_namespaces [flags...]
  local label="$1" bin="$2" n="$3" pages="$4" ref="$5"
  shift 5
  echo "-- $label: $n namespaces, pages $pages (reference: $ref namespaces)"
  "$bin" --label="$label" --namespaces="$n" --pages="$pages" --ref_namespaces="$ref" \
    --ref_pages="${pages%%,*}" --csv="$CSV" "$@" | tee -a "$OUT/$label.log" | tail -n +2
}
measure() {
  rm -f "$CSV" "$OUT"/*.log
  echo "== $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)," \
       "$(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet 2>/dev/null || echo '+dirty')"
  for n in $TENANTS; do
    run current-tenants "$BENCH" "$n" "$TENANT_PAGES" 1 --evict_pages="$EVICT"
  done
  if [ -n "$OLD" ]; then
    for n in $TENANTS; do
      run old-tenants "$OLD" "$n" "$TENANT_PAGES" 1 --evict_pages="$OLD_EVICT" --repeats=3 \
        --lookup_rounds=4
    done
  fi
  run current-scale "$BENCH" 1000 "$SIZES" 1000 --evict_pages="$EVICT" --noevict_every_point
  echo "== load after: $(cut -d' ' -f1-3 /proc/loadavg)"
}
[ -n "${SCALE_PLOT_ONLY:-}" ] || measure

# The targets' ratios (issue 14), each against its row's reference store.
python3 - "$CSV" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
def f(r, k): return float(r[k])
def ratio(r, k): return f(r, k) / f(r, "ref_" + k) if f(r, "ref_" + k) > 0 else float("nan")
print("ratios against the reference store measured in alternation in the same process:")
for r in rows:
    if r["label"].endswith("-tenants"):
        print(f"  {r['label']:16} {r['namespaces']:>5} ns / 1 ns at {r['pages']} pages: eviction "
              f"{ratio(r, 'evict_pages_per_s'):.3f}, full-tier PUTs "
              f"{ratio(r, 'full_put_pages_per_s'):.3f}, LOOKUP p50 {ratio(r, 'lookup_p50_us'):.2f}")
for r in rows:
    if r["label"] == "current-scale":
        extra = ""
        if f(r, "evict_pages_per_s") > 0:
            extra = f", eviction {ratio(r, 'evict_pages_per_s'):.2f}"
        print(f"  current-scale    {r['pages']:>9} pages / {r['ref_pages']}: LOOKUP p50 "
              f"{ratio(r, 'lookup_p50_us'):.2f} p99 {ratio(r, 'lookup_p99_us'):.2f}{extra}; "
              f"RSS/page {f(r, 'rss_bytes_per_page'):.0f} B = index "
              f"{f(r, 'anon_bytes_per_page'):.0f} + page bytes {f(r, 'shmem_bytes_per_page'):.0f}")
print("targets: eviction at 1000 ns >= 0.8x 1 ns; LOOKUP p50 at 10M <= 1.2x 1M; "
      "RSS per page <= 200 B at 10M")
PY

# Columns: 1 label, 2 namespaces, 3 pages, 5 rss, 6 anon, 7 shmem, 8/9 LOOKUP
# p50/p99, 11 evict/s, 12 full-tier PUT/s, 15 reference LOOKUP p50.
gnuplot <<GP
set datafile separator ','
set terminal png size 800,500
set key center right
set grid
sel(l, v) = strcol(1) eq l ? v : NaN

set output '$PLOTS/scale_eviction.png'
set title 'Eviction vs namespaces ($TENANT_PAGES pages of 16 B in 32-page chains, Zipf)'
set xlabel 'namespaces'
set ylabel 'pages per second'
set logscale xy
plot '$CSV' using (sel('current-tenants', \$2)):11 with linespoints lw 2 title 'now: EvictTo', \
     '' using (sel('current-tenants', \$2)):12 with linespoints dt 2 title 'now: PUTs into a full tier', \
     '' using (sel('old-tenants', \$2)):11 with linespoints lw 2 title 'before: EvictTo', \
     '' using (sel('old-tenants', \$2)):12 with linespoints dt 2 title 'before: PUTs into a full tier'

unset logscale
set key bottom right
set output '$PLOTS/scale_lookup.png'
set title 'Store-level LOOKUP of a 32-key chain (1000 namespaces, Zipf)'
set xlabel 'indexed pages (millions)'
set ylabel 'microseconds per LOOKUP'
set yrange [0:*]
plot '$CSV' using (sel('current-scale', \$3/1e6)):8 with linespoints lw 2 title 'p50', \
     '' using (sel('current-scale', \$3/1e6)):9 with linespoints lw 2 title 'p99', \
     '' using (sel('current-scale', \$3/1e6)):15 with linespoints dt 2 title 'p50 of the 1M reference, same rounds'

set output '$PLOTS/scale_memory.png'
set title 'Memory per indexed page (1000 namespaces, 16 B pages in 64 B slots)'
set ylabel 'bytes per indexed page'
plot '$CSV' using (sel('current-scale', \$3/1e6)):5 with linespoints lw 2 title 'VmRSS', \
     '' using (sel('current-scale', \$3/1e6)):6 with linespoints lw 2 title 'RssAnon (the index)', \
     '' using (sel('current-scale', \$3/1e6)):7 with linespoints lw 2 title 'RssShmem (page bytes)', \
     200 with lines dt 2 title '200 B'
GP
echo "== $CSV; plots: $PLOTS/scale_eviction.png $PLOTS/scale_lookup.png $PLOTS/scale_memory.png"
