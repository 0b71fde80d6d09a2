#!/usr/bin/env bash
# Prefetch benchmark (docs/BENCHMARKS.md): replays the Mooncake trace twice
# through scripts/replay.sh with RAM smaller than the working set and an NVMe
# tier, once without prefetch (--prefetch_lookahead=false, no hints) and once
# with it (LOOKUP lookahead on, and kvtier-stress sending PREFETCH hints for
# the request PREFETCH_AHEAD places ahead, as a scheduler with that many
# queued requests would). Prints, for each: the share of GET hit bytes served
# from RAM, GET latency p50/p99, and wasted prefetch bytes.
# Requests arrive at the trace's times, five times faster
# (PREFETCH_TIME_SCALE=0.2, kvtier-stress --time_scale): an engine receives
# its requests when users send them, and at that pace the replay moves about
# half of what the virtio disk of docs/BENCHMARKS.md can. PREFETCH_TIME_SCALE=0
# replays as fast as possible instead: the request rate then rises until the
# disk is saturated, and a prefetch can only add reads to a full queue
# (BENCHMARKS, "prefetch at the trace's pace").
# Environment: as scripts/replay.sh, plus PREFETCH_AHEAD (default 8),
# PREFETCH_TIME_SCALE (default 0.2) and
# PREFETCH_DAEMON_FLAGS (daemon flags for both runs, e.g.
# "--nvme_admission=reused" to take most write-back off the disk); extra
# arguments go to kvtier-stress (e.g. --max_requests=2000).
set -euo pipefail
# shellcheck source=lib/usage.sh
. "$(dirname "$0")/lib/usage.sh"
cd "$(dirname "$0")/.."
# shellcheck source=lib/bench_build.sh
. scripts/lib/bench_build.sh
BUILD_DIR="$(bench_build_dir)"
export KVTIER_BUILD_DIR="$BUILD_DIR"  # replay.sh measures the same build
AHEAD="${PREFETCH_AHEAD:-8}"
BOTH="${PREFETCH_DAEMON_FLAGS:-}"
SCALE="${PREFETCH_TIME_SCALE:-0.2}"
OUT="$(mktemp -d "${TMPDIR:-/tmp}/kvtier-prefetch-bench.XXXXXX")"
trap 'rm -rf "$OUT"' EXIT

run() {  # name, daemon flags, stress args...
  local name="$1" flags="$2"; shift 2
  echo "=== $name: KVTIERD_FLAGS='$flags' $*"
  KVTIERD_FLAGS="$flags" NO_SIM=1 bash scripts/replay.sh --progress=off "$@" | grep -E "^==|hit rate|latency"
  cp "$BUILD_DIR/replay.json" "$OUT/$name.json"
  cp "$BUILD_DIR/replay_daemon.json" "$OUT/$name.daemon.json"
  NO_BUILD=1
  export NO_BUILD
}

run without "--prefetch_lookahead=false${BOTH:+ $BOTH}" --time_scale="$SCALE" "$@"
run with "--prefetch_lookahead=true${BOTH:+ $BOTH}" --time_scale="$SCALE" --prefetch_ahead="$AHEAD" "$@"

python3 - "$OUT" <<'PY'
import json, os, sys
d = sys.argv[1]
rows = {}
for name in ("without", "with"):
    m = json.load(open(os.path.join(d, name + ".json")))
    s = json.load(open(os.path.join(d, name + ".daemon.json")))
    b = m["bytes"]["get_by_tier"]
    total = sum(b.values()) or 1
    ram = b.get("host", 0) + b.get("hbm", 0)
    g = m["latency_us"]["get"]
    p = s.get("prefetch", {})
    promoted = int(p.get("promoted_bytes", 0))
    wasted_pages = int(p.get("wasted", 0)); promoted_pages = int(p.get("promoted_pages", 0)) or 1
    rows[name] = (ram / total, g["p50"], g["p99"], m["hit_rate"]["overall"], promoted,
                  wasted_pages / promoted_pages if promoted else 0.0, m["wall_s"] if "wall_s" in m else 0)
    print(f"{name:8s} hit rate {100*m['hit_rate']['overall']:.2f}%  hit bytes from RAM {100*ram/total:.1f}%  "
          f"GET p50 {g['p50']:.0f} us  p99 {g['p99']:.0f} us  prefetched {promoted/1e9:.1f} GB, "
          f"wasted {100*rows[name][5]:.1f}% of prefetched pages")
# What the slowest GETs waited on (the daemon's GET stages by total time):
# the buckets holding the slowest 1% of GETs, and their mean per stage.
for name in ("without", "with"):
    s = json.load(open(os.path.join(d, name + ".daemon.json")))
    # kvtierctl --json keeps the proto's field names.
    buckets = sorted(s.get("get_stages", []), key=lambda b: float(b.get("le_us", 0)) or 1e18)
    total = sum(int(b.get("count", 0)) for b in buckets)
    if not total:
        continue
    tail, n = [], 0
    for b in reversed(buckets):
        tail.append(b)
        n += int(b.get("count", 0))
        if n >= 0.01 * total:
            break
    def mean(key):
        return sum(float(b.get(key, 0)) * int(b.get("count", 0)) for b in tail) / max(n, 1) / 1e3
    lo = float(tail[-1].get("le_us", 0)) / 2e3
    print(f"{name:8s} slowest {n} GETs (> {lo:.0f} ms, {100*n/total:.1f}%): mean waiting for promotions "
          f"{mean('prefetch_wait_us'):.1f} ms, queued for a copy worker {mean('copy_queue_us'):.1f} ms, "
          f"reading + copying {mean('copy_us'):.1f} ms")
w, o = rows["with"], rows["without"]
print(f"with/without: RAM share {100*w[0]:.1f}% vs {100*o[0]:.1f}% (target >= 95%), "
      f"GET p99 with / without {w[2]/max(o[2],1):.2f} (target <= 0.5), "
      f"wasted {100*w[5]:.1f}% (target <= 10%)")
PY
