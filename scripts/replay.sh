#!/usr/bin/env bash
# Full trace replay benchmark (docs/BENCHMARKS.md): starts a private kvtierd
# with host + NVMe tiers sized below the trace's working set, replays
# tests/data/synthetic_trace.jsonl with kvtier-stress as fast as possible
# (1 MiB pages, one page per 512-token block), prints the report, stops the
# daemon. Extra arguments go to kvtier-stress (e.g. --concurrency=2).
#
# Environment: KVTIER_BUILD_DIR (default: scripts/lib/bench_build.sh), KVTIER_BENCH_DIR (where the
# NVMe file goes; a real disk, not tmpfs; default /tmp), HOST_BYTES (4GiB),
# NVME_BYTES (16GiB), TRACE (the trace spec), KVTIERD_FLAGS (daemon policy
# flags, see below), KVTIERD (the daemon binary; default $KVTIER_BUILD_DIR/daemon/kvtierd),
# NO_BUILD=1 to skip building.
set -euo pipefail
# shellcheck source=lib/usage.sh
. "$(dirname "$0")/lib/usage.sh"
cd "$(dirname "$0")/.."
# shellcheck source=lib/bench_build.sh
. scripts/lib/bench_build.sh
BUILD_DIR="$(bench_build_dir)"
HOST_BYTES="${HOST_BYTES:-4GiB}"
NVME_BYTES="${NVME_BYTES:-16GiB}"
TRACE="${TRACE:-tests/data/synthetic_trace.jsonl}"
# The daemon's default policy (promotion on GET and LOOKUP lookahead on). The
# NVMe tier is inclusive, so a promoted page keeps its NVMe copy and is not
# written again when RAM evicts it; KVTIERD_FLAGS adds policy flags (e.g.
# "--promote_on_get=false --prefetch_lookahead=false", "--eviction=2q": the
# sim then replays the same policy).
KVTIERD_FLAGS="${KVTIERD_FLAGS-}"
KVTIERD="${KVTIERD:-$BUILD_DIR/daemon/kvtierd}"
STRESS="$BUILD_DIR/tools/stress/kvtier-stress"

if [ "${NO_BUILD:-0}" != 1 ]; then
  [ -f "$BUILD_DIR/CMakeCache.txt" ] || cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$BUILD_DIR" -j "$(nproc)" --target kvtierd kvtier-stress kvtierctl >/dev/null
fi

TMP="$(mktemp -d "${KVTIER_BENCH_DIR:-/tmp}/kvtier-replay.XXXXXX")"
PID=""
cleanup() {
  if [ -n "$PID" ]; then
    kill -TERM "$PID" 2>/dev/null || true
    wait "$PID" 2>/dev/null || true
  fi
  rm -rf "$TMP"
}
trap cleanup EXIT

# shellcheck disable=SC2086
"$KVTIERD" --socket="$TMP/kvtierd.sock" --state_dir="$TMP/state" --nvme_dir="$TMP/nvme" \
  --host_bytes="$HOST_BYTES" --nvme_bytes="$NVME_BYTES" --log_level=warn ${KVTIERD_FLAGS} \
  >"$TMP/kvtierd.log" 2>&1 &
PID=$!
for _ in $(seq 3000); do
  [ -S "$TMP/kvtierd.sock" ] && break
  kill -0 "$PID" 2>/dev/null || { cat "$TMP/kvtierd.log" >&2; exit 1; }
  sleep 0.01
done
[ -S "$TMP/kvtierd.sock" ] || { echo "replay.sh: kvtierd did not start" >&2; exit 1; }

# The daemon populates its host arena in the background; wait for it (up to
# 60 s) so the replay measures copies, not first-touch page faults.
want_kb=$(python3 -c "import re,sys; s=sys.argv[1]; m=re.fullmatch(r'(\d+)(GiB|MiB|KiB)?',s); \
print(int(m.group(1))*{'GiB':1<<20,'MiB':1<<10,'KiB':1,None:1/1024}[m.group(2)]*95//100)" "$HOST_BYTES")
for _ in $(seq 600); do
  have_kb=$(awk '/^RssShmem:/ {print $2}' "/proc/$PID/status" 2>/dev/null || echo 0)
  [ "${have_kb:-0}" -ge "$want_kb" ] && break
  sleep 0.1
done

echo "== kvtierd: host $HOST_BYTES, NVMe $NVME_BYTES in $TMP/nvme ${KVTIERD_FLAGS}"
echo "== load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
mkdir -p "$BUILD_DIR"
set +e
/usr/bin/time -f "== wall %e s, user %U s, sys %S s (kvtier-stress)" \
  "$STRESS" --trace="$TRACE" --endpoint="ipc://$TMP/kvtierd.sock" \
  --json_out="$BUILD_DIR/replay.json" --csv_out="$BUILD_DIR/replay.csv" "$@"
rc=$?
set -e
echo "== load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== report: $BUILD_DIR/replay.json, time series: $BUILD_DIR/replay.csv"
# The daemon's own counters (prefetch among them) for scripts/bench_prefetch.sh.
"$BUILD_DIR/tools/kvtierctl" stats --json --endpoint="ipc://$TMP/kvtierd.sock" \
  > "$BUILD_DIR/replay_daemon.json" 2>/dev/null || true
python3 - "$BUILD_DIR/replay_daemon.json" <<'PY' || true
import json, sys
d = json.load(open(sys.argv[1]))
tiers = {t["name"]: t for t in d.get("tiers", d.get("stats", {}).get("tiers", []))}
n, h = tiers.get("nvme", {}), tiers.get("host", {})
print(f"== NVMe bytes written {int(n.get('bytes_in', 0))/1e9:.2f} GB, read {int(n.get('bytes_out', 0))/1e9:.2f} GB; "
      f"host demotions {h.get('demotions', 0)}, promotions {h.get('promotions', 0)}, cleaned {h.get('cleaned', 0)}, "
      f"frontend I/O {sum(int(t.get('frontend_io', 0)) for t in tiers.values())}")
PY
kill -TERM "$PID" 2>/dev/null || true
wait "$PID" 2>/dev/null || true
PID=""

# The same trace through kvtier-sim (the daemon's policy code, no bytes) at
# the same capacities and policy flags, when it is built.
SIM="$BUILD_DIR/tools/sim/kvtier-sim"
if [ -x "$SIM" ] && [ "${NO_SIM:-0}" != 1 ]; then
  SIM_ARGS=()
  POLICY=lru  # the daemon's --eviction (one policy for every tier), compared with the sim's
  for f in ${KVTIERD_FLAGS}; do
    case "$f" in
      --nvme_admission=*|--promote_on_get=*|--write_policy=*|--high_watermark=*|--low_watermark=*) SIM_ARGS+=("$f") ;;
      --eviction=*) SIM_ARGS+=("$f"); POLICY="${f#--eviction=}" ;;
    esac
  done
  for a in "$@"; do
    case "$a" in --max_requests=*|--pages_per_block=*|--decode=*|--batch_pages=*) SIM_ARGS+=("$a") ;; esac
  done
  page_bytes=$(python3 -c "import json; print(json.load(open('$BUILD_DIR/replay.json'))['mapping']['page_bytes'])")
  echo "== kvtier-sim at the same capacities: host $HOST_BYTES, NVMe $NVME_BYTES"
  "$SIM" --trace="$TRACE" --host_pages="$HOST_BYTES" --nvme_pages="$NVME_BYTES" \
    --page_bytes="$page_bytes" --capacities= --json_out="$BUILD_DIR/replay_sim.json" \
    "${SIM_ARGS[@]}" >/dev/null && python3 - "$BUILD_DIR/replay.json" "$BUILD_DIR/replay_sim.json" "$POLICY" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
tt, policy = json.load(open(sys.argv[2])).get("two_tier", {}), sys.argv[3]
s = tt.get("lru", {}) if policy == "lru" else tt.get("policies", {}).get(policy, {})
if "hit_rate" not in s:
    sys.exit(f"kvtier-sim wrote no two-tier hit rate for eviction policy {policy}")
print(f"  eviction policy {policy}")
mt, st = m["hit_rate"]["by_tier"], s.get("tier_hit_rate", {})
print(f"  measured  {100*m['hit_rate']['overall']:.2f}%  (host {100*mt['host']:.2f}%, nvme {100*mt['nvme']:.2f}%)")
print(f"  kvtier-sim {100*s['hit_rate']:.2f}%  (host {100*st.get('host', 0):.2f}%, nvme {100*st.get('nvme', 0):.2f}%)")
print(f"  difference {100*(m['hit_rate']['overall'] - s['hit_rate']):+.2f} percentage points (target: within 1)")
PY
fi
exit $rc
