#!/usr/bin/env bash
# NVMe tier device vs fio: runs kvtier-nvme-bench (random reads/writes through
# tiers/nvme's io_uring file device) and fio (ioengine=io_uring, direct=1) on
# the same file with the same block sizes, depths, duration and repeats, and
# prints kvtier/fio per case. Takes ~3 minutes; wants an idle disk.
# "ratio" is the median over repeats of kvtier/fio of back-to-back runs (the
# pair sees the same disk state); the MiB/s columns are each tool's median.
#   scripts/bench_nvme.sh [DIR]    DIR: a directory on the disk to measure
#                                  (default /var/tmp/kvtier-nvme-bench)
# A DIR on tmpfs (e.g. /dev/shm/x) is allowed here: there the disk drops out
# and both tools measure their own per-I/O overhead (memory-copy bound).
# Environment: NVME_BENCH_SIZE (2GiB), NVME_BENCH_SECONDS (1 per run),
#   NVME_BENCH_REPEATS (5), NVME_BENCH_BS (256KiB,1MiB,4MiB), NVME_BENCH_QD (1,32),
#   KVTIER_BUILD_DIR (default: scripts/lib/bench_build.sh). Every run's JSON and summary.json: $DIR/results/.
set -euo pipefail
# shellcheck source=lib/usage.sh
. "$(dirname "$0")/lib/usage.sh"
cd "$(dirname "$0")/.."
# shellcheck source=lib/bench_build.sh
. scripts/lib/bench_build.sh
BUILD_DIR="$(bench_build_dir)"
DIR="${1:-/var/tmp/kvtier-nvme-bench}"
SIZE="${NVME_BENCH_SIZE:-2GiB}"
SECS="${NVME_BENCH_SECONDS:-1}"
REPEATS="${NVME_BENCH_REPEATS:-5}"
BS_LIST="${NVME_BENCH_BS:-256KiB,1MiB,4MiB}"
QD_LIST="${NVME_BENCH_QD:-1,32}"

command -v fio >/dev/null || { echo "bench_nvme: fio is not installed" >&2; exit 1; }
if [ ! -x "$BUILD_DIR/tiers/nvme/bench/kvtier-nvme-bench" ] || [ -n "${NVME_BENCH_REBUILD:-}" ]; then
  [ -f "$BUILD_DIR/CMakeCache.txt" ] ||
    cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
  ninja -C "$BUILD_DIR" kvtier-nvme-bench >/dev/null
fi
BENCH="$BUILD_DIR/tiers/nvme/bench/kvtier-nvme-bench"

mkdir -p "$DIR/results"
rm -f "$DIR"/results/*.json
FILE="$DIR/kvtier-nvme-bench.dat"
trap 'rm -f "$FILE"' EXIT
echo "== $DIR on $(findmnt -n -o SOURCE,FSTYPE,OPTIONS -T "$DIR" 2>/dev/null || echo '?')"
df -h "$DIR" | tail -1

# kvtier-nvme-bench creates, preallocates and fills the file once (it checks
# free space first); every later run of either tool reuses it.
TMPFS_FLAG=()
if [ "$(stat -f -c %T "$DIR")" = tmpfs ]; then
  TMPFS_FLAG=(--allow_tmpfs)
  echo "== tmpfs: no disk in the way; this compares the engines' own overhead"
fi
"$BENCH" --dir="$DIR" --file_size="$SIZE" --ops= --keep_file "${TMPFS_FLAG[@]}" | grep '^#'
sleep 3  # let the fill's write-back settle before the first timed run
bytes() { numfmt --from=iec "${1%iB}"; }
FILE_BYTES=$(stat -c %s "$FILE")
MS=$(python3 -c "print(int(float('$SECS') * 1000))")

run_kvtier() {  # rw bs qd repeat
  "$BENCH" --dir="$DIR" --file_size="$FILE_BYTES" --nofill --keep_file --ops="$1" \
    --block_sizes="$2" --depths="$3" --seconds="$SECS" --repeats=1 \
    --json="$DIR/results/kvtier-$1-$2-$3-$4.json" "${TMPFS_FLAG[@]}" >/dev/null
}
run_fio() {  # rw bs qd repeat
  fio --name=nvme --filename="$FILE" --size="$FILE_BYTES" --ioengine=io_uring --direct=1 \
    --rw="$1" --bs="$2" --iodepth="$3" --numjobs=1 --time_based --runtime="${MS}ms" \
    --norandommap --randrepeat=0 --output-format=json >"$DIR/results/fio-$1-$2-$3-$4.json"
}

# The disk's speed drifts (burst credits, host caching), so the tools run
# interleaved case by case, alternating which goes first.
for r in $(seq "$REPEATS"); do
  for bs_h in ${BS_LIST//,/ }; do
    bs=$(bytes "$bs_h")
    for qd in ${QD_LIST//,/ }; do
      for rw in randread randwrite; do
        if ((r % 2)); then
          run_kvtier "$rw" "$bs" "$qd" "$r"
          run_fio "$rw" "$bs" "$qd" "$r"
        else
          run_fio "$rw" "$bs" "$qd" "$r"
          run_kvtier "$rw" "$bs" "$qd" "$r"
        fi
      done
    done
  done
  echo "repeat $r/$REPEATS done"
done

python3 - "$DIR/results" "$REPEATS" "$BS_LIST" "$QD_LIST" <<'PY'
import json, os, statistics, subprocess, sys
res, repeats = sys.argv[1], int(sys.argv[2])

def to_bytes(h):
    return int(subprocess.check_output(["numfmt", "--from=iec", h.removesuffix("iB")]))

def human(b):
    return f"{b >> 20}MiB" if b >= 1 << 20 else f"{b >> 10}KiB"

print(f"\n{'op':<10} {'bs':>7} {'qd':>3} {'kvtier MiB/s':>13} {'fio MiB/s':>10} {'ratio':>6}"
      "   samples kvtier / fio")
worst, summary = None, []
for bs in map(to_bytes, sys.argv[3].split(",")):
    for qd in map(int, sys.argv[4].split(",")):
        for op in ("randread", "randwrite"):
            kv, fio = [], []
            for r in range(1, repeats + 1):
                name = f"{op}-{bs}-{qd}-{r}.json"
                kv.append(json.load(open(os.path.join(res, "kvtier-" + name)))["results"][0]["mib_s"])
                job = json.load(open(os.path.join(res, "fio-" + name)))["jobs"][0]
                fio.append(job["read" if op == "randread" else "write"]["bw_bytes"] / (1 << 20))
            k, f = statistics.median(kv), statistics.median(fio)
            ratio = statistics.median(a / b for a, b in zip(kv, fio) if b)
            worst = ratio if worst is None else min(worst, ratio)
            summary.append({"op": op, "bs": bs, "qd": qd, "kvtier_mib_s": k, "fio_mib_s": f,
                            "ratio": ratio, "kvtier_samples": kv, "fio_samples": fio})
            print(f"{op:<10} {human(bs):>7} {qd:>3} {k:>13.0f} {f:>10.0f} {ratio:>6.2f}   "
                  + " ".join(f"{v:.0f}" for v in kv) + " / " + " ".join(f"{v:.0f}" for v in fio))
json.dump(summary, open(os.path.join(res, "summary.json"), "w"), indent=2)
geo = statistics.geometric_mean(s["ratio"] for s in summary)
print(f"\nkvtier/fio: geometric mean {geo:.2f}, worst case {worst:.2f} (target >= 0.90)")
print(f"JSON: {res}/summary.json")
PY
