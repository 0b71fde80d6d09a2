"""Summary of scripts/bench_remote_replay.sh: reads the kvtier-stress reports
(a.json ... d.json), kvtierctl stats and the kill record in OUT_DIR and prints
the table, the differences in percentage points and the failover recovery.

Recovery (config d): the baseline is the page-weighted hit rate of the series
intervals in the BASELINE_S seconds before the kill; the hit rate is back at
the end of the first interval after the kill from which the next WINDOW
intervals together are within 2 pp of it (one interval alone is noisy)."""
import json
import os
import sys

BASELINE_S = 10.0
WINDOW = 3
TOLERANCE = 0.02
LABELS = {"a": "(a) 1 daemon, 2GiB+8GiB", "b": "(b) 2 daemons, 1GiB+4GiB each",
          "c": "(c) (b) + shared cache", "d": "(d) (c) + master killed",
          "e": "(e) (c) + master hung 10 s", "f": "(f) (a) + the same shared cache"}


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def remote_counters(out, label):
    """Sums the shared cache's kvtierctl counters over the config's daemons."""
    keys = ("published", "lookup_hits", "fetch_hits", "fetch_misses", "rejected", "oversized",
            "malformed", "io_errors", "node_down_events")
    total = {k: 0 for k in keys}
    found = False
    for i in (1, 2):
        d = load(os.path.join(out, f"{label}-stats{i}.json"))
        if d is None:
            continue
        c = d.get("shared_cache", d.get("stats", {}).get("shared_cache"))
        if c is not None:
            found = True
            for k in total:
                total[k] += int(c.get(k, 0))
    return total if found else None


def rate(points):
    pages = sum(p["pages"] for p in points)
    return sum(p["hit_pages"] for p in points) / pages if pages else None


def recovery(report, kill_unix_s):
    """(baseline rate, lowest interval rate after the kill, seconds from the
    kill until back within TOLERANCE or None, kill time in series seconds)."""
    pts = report["series"]["points"]
    kill_t = kill_unix_s - report["series"]["start_unix_s"]
    before = [p for p in pts if kill_t - BASELINE_S < p["t_s"] <= kill_t] or \
             [p for p in pts if p["t_s"] <= kill_t]
    after = [p for p in pts if p["t_s"] > kill_t and p["pages"] > 0]
    base = rate(before)
    if base is None or not after:
        return base, None, None, kill_t
    lowest = min(p["hit_pages"] / p["pages"] for p in after)
    for i, p in enumerate(after):
        r = rate(after[i:i + WINDOW])
        if r is not None and r >= base - TOLERANCE:
            return base, lowest, max(0.0, p["t_s"] - kill_t), kill_t
    return base, lowest, None, kill_t


def pct(x):
    return "-" if x is None else f"{100 * x:6.2f}%"


def main():
    if sys.argv[1:2] in (["-h"], ["--help"]) or len(sys.argv) != 3:
        print(__doc__.strip())
        print("usage: remote_replay_summary.py OUT_DIR SERIES_INTERVAL_MS")
        return 0 if sys.argv[1:2] in (["-h"], ["--help"]) else 2
    out, interval_s = sys.argv[1], int(sys.argv[2]) / 1000.0
    reports = {k: load(os.path.join(out, f"{k}.json")) for k in "abcdef"}
    print("\n== summary (hit rate of pages looked up, by the tier LOOKUP reported; remote hit:\n"
          "   share of hits LOOKUP found on the shared cache; remote GET: share of GET bytes the\n"
          "   daemon served from it, lower when LOOKUP lookahead promoted the page first)")
    print(f"{'config':32} {'requests':>8} {'hit rate':>8} {'host':>8} {'nvme':>8} {'remote':>8} "
          f"{'failed':>6} {'corrupt':>7} {'remote hit':>10} {'remote GET':>10} {'wall s':>7}")
    for k, r in reports.items():
        if r is None:
            continue
        t = r["hit_rate"]["by_tier"]
        print(f"{LABELS[k]:32} {r['requests']:8d} {pct(r['hit_rate']['overall']):>8} "
              f"{pct(t['host']):>8} {pct(t['nvme']):>8} {pct(t['remote']):>8} "
              f"{r['failed_requests']:6d} {r['corrupt_pages']:7d} "
              f"{pct(r.get('remote_hit_share')):>10} {pct(r['remote_get_share']):>10} "
              f"{r['wall_s']:7.1f}")
    hr = {k: r["hit_rate"]["overall"] for k, r in reports.items() if r is not None}
    if "c" in hr and "a" in hr:
        print(f"(c)-(a) {100 * (hr['c'] - hr['a']):+.2f} pp (target: within 2 pp)")
    if "c" in hr and "f" in hr:
        # The like-for-like split: one cache of both capacities against two
        # halves, the cluster beside both (it adds capacity to each alike).
        print(f"(c)-(f) {100 * (hr['c'] - hr['f']):+.2f} pp (target: within 2 pp)")
    if "c" in hr and "b" in hr:
        print(f"(c)-(b) {100 * (hr['c'] - hr['b']):+.2f} pp (target: >= +15 pp)")
    for k in "cdef":
        r = reports[k]
        if r is None:
            continue
        rc = remote_counters(out, k)
        rss = load_text(os.path.join(out, f"{k}-rss.txt"))
        print(f"{k}: shared cache (kvtierctl stats, both daemons): {rc}; "
              f"remote hits (LOOKUP tier) on pages PUT via the other daemon {r['remote_hits_other_endpoint']}; "
              f"{rss}")
    failover(out, reports.get("d"), interval_s)
    failover(out, reports.get("e"), interval_s, "e", "hung (SIGSTOP)")


def load_text(path):
    try:
        with open(path) as f:
            return f.read().strip().lstrip("= ")
    except OSError:
        return ""


def failover(out, report, interval_s, label="d", what="killed"):
    if report is None:
        return
    kill = load_text(os.path.join(out, f"{label}-kill.txt")).split()
    tag = f"({label})"
    if not kill:
        print(f"{tag} no master was {what} (the replay ended first?)")
        return
    base, lowest, rec, kill_t = recovery(report, float(kill[0]))
    print(f"{tag} master {kill[3]} {what} at request {kill[1]} of {kill[2]} "
          f"(t = {kill_t:.1f} s): failed requests {report['failed_requests']}, "
          f"corrupt pages {report['corrupt_pages']}")
    if base is None:
        print(f"{tag} no hit-rate samples before the fault: recovery not measured")
    elif rec is None:
        print(f"{tag} hit rate before the fault {pct(base)}, lowest interval after {pct(lowest)}: "
              f"NEVER back within 2 pp before the replay ended")
    else:
        print(f"{tag} hit rate before the fault {pct(base)}, lowest interval after {pct(lowest)}; "
              f"back within 2 pp {rec:.1f} s after the fault (resolution {interval_s:g} s, "
              f"{WINDOW}-interval window)")


if __name__ == "__main__":
    sys.exit(main())
