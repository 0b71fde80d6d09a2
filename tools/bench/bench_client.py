#!/usr/bin/python3
# Python client vs C++ client against one running kvtierd, interleaved in one
# run: GET/PUT of 1 MiB pages, 32 per call, into a numpy view of a registered
# ShmBuffer (vs kvtier-bench `throughput` with the same sizes), and LOOKUP of
# a 64-key chain (vs kvtier-bench `lookup`). Prints medians and ratios.
#   bench_client.py --endpoint=ipc://... --bench=build/tools/bench/kvtier-bench
# scripts/bench_python.sh builds everything, starts the daemon and runs this.
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# <build>/python holds the whole package (extension and linked sources).
sys.path[:0] = [os.path.join(os.path.abspath(os.environ.get("KVTIER_BUILD_DIR", "build")), "python")]
import kvtier  # noqa: E402

MiB = 1 << 20


def layout_for_page_bytes(page_bytes):
    # tools/bench/bench_util.cc LayoutForPageBytes: {1 layer, 1 head, 128 dim, fp16}.
    return kvtier.Layout(1, 1, 128, page_bytes // 512, "fp16")


def synthetic_chain(layout, seed, pages):
    rng = np.random.default_rng(seed)
    return kvtier.page_keys(layout, rng.integers(0, 128000, pages * layout.tokens_per_page))


class PyRig:
    """One session, a registered ShmBuffer and its numpy view (one row per page)."""

    def __init__(self, endpoint, page_bytes, pages):
        self.layout = layout_for_page_bytes(page_bytes)
        self.client = kvtier.Client(endpoint, layout=self.layout, timeout_ms=60000,
                                    client_name="bench_client.py")
        self.buf = kvtier.ShmBuffer(pages * page_bytes)
        self.view = np.frombuffer(self.buf, dtype=np.uint8).reshape(pages, page_bytes)
        self.view[:] = 0  # fault the arena in, as kvtier-bench does
        self.bid = self.client.register(self.buf)
        self.page_bytes, self.pages = page_bytes, pages
        self.offsets = [i * page_bytes for i in range(pages)]

    def get_all(self, keys, batch):
        for b in range(0, len(keys), batch):
            tiers = self.client.get(keys[b:b + batch], self.bid, self.offsets[b:b + batch])
            if None in tiers:
                raise RuntimeError(f"GET missed a page in batch at {b}")

    def put_all(self, keys, batch):
        for b in range(0, len(keys), batch):
            parent = keys[b - 1] if b else None
            r = self.client.put(keys[b:b + batch], self.bid, self.offsets[b:b + batch], parent)
            if r.stored != len(keys[b:b + batch]):
                raise RuntimeError(f"PUT stored {r.stored} of {len(keys[b:b + batch])}: {r}")

    def delete_all(self, keys):
        for b in range(0, len(keys), 4096):
            self.client.delete(keys[b:b + 4096])


def timed_gbps(nbytes, fn):
    t0 = time.perf_counter()
    fn()
    return nbytes / (time.perf_counter() - t0) / 1e9


def put_repeat(rig, seed, batch):
    """PUT of fresh keys (so every page is stored; bytes written untimed),
    deleted after so the host tier never fills: kvtier-bench's PutRepeat."""
    keys = synthetic_chain(rig.layout, seed, rig.pages)
    rig.view[:, :8] = np.arange(rig.pages, dtype=np.uint64).view(np.uint8).reshape(rig.pages, 8)
    put = timed_gbps(rig.pages * rig.page_bytes, lambda: rig.put_all(keys, batch))
    rig.delete_all(keys)
    return put


def py_throughput_repeat(rig, get_keys, seed, batch, inner):
    """(GET GB/s, PUT GB/s), medians of `inner` passes over the working set.
    Each kvtier-bench run warms up (a GET and a PUT pass) right before it
    times; so does this, untimed, so neither client is timed cold after the
    other one's run."""
    rig.get_all(get_keys, batch)
    put_repeat(rig, seed * 100, batch)
    gets, puts = [], []
    for i in range(inner):
        gets.append(timed_gbps(rig.pages * rig.page_bytes, lambda: rig.get_all(get_keys, batch)))
        puts.append(put_repeat(rig, seed * 100 + 1 + i, batch))
    return statistics.median(gets), statistics.median(puts)


def py_lookup_p50(client, keys, calls, n):
    for _ in range(1000):
        client.lookup(keys)
    us = []
    clock = time.perf_counter_ns
    for _ in range(calls):
        t0 = clock()
        r = client.lookup(keys)
        us.append((clock() - t0) / 1e3)
        if r.hits != n:
            raise RuntimeError(f"LOOKUP found {r.hits} of {n}")
    return statistics.median(us)


def run_cpp(bench, args, section_flags, repeats):
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        cmd = [bench] + section_flags + [f"--endpoint={args.endpoint}", f"--repeats={repeats}",
                                         f"--json={f.name}"]
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if p.returncode != 0:
            sys.exit(f"bench_client: {' '.join(cmd)} failed:\n{p.stdout}")
        return json.load(open(f.name))


def summary(v):
    return {"median": statistics.median(v), "min": min(v), "max": max(v), "all": v}


def main():
    ap = argparse.ArgumentParser(
        description="Python vs C++ kvtier client, interleaved against one daemon")
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--bench", required=True, help="path to kvtier-bench")
    ap.add_argument("--repeats", type=int, default=7, help="alternations of the two clients")
    ap.add_argument("--inner", type=int, default=3,
                    help="GET/PUT passes per repeat and client (their median is the repeat's)")
    ap.add_argument("--page_mib", type=int, default=1)
    ap.add_argument("--batch_pages", type=int, default=32)
    ap.add_argument("--working_set_mib", type=int, default=128)
    ap.add_argument("--lookup_chain", type=int, default=64)
    ap.add_argument("--lookup_calls", type=int, default=5000)
    ap.add_argument("--json", default="")
    args = ap.parse_args()

    pb = args.page_mib * MiB
    pages = args.working_set_mib * MiB // pb
    rig = PyRig(args.endpoint, pb, pages)
    get_keys = synthetic_chain(rig.layout, os.getpid(), pages)
    rig.put_all(get_keys, args.batch_pages)
    rig.get_all(get_keys, args.batch_pages)  # warm: the daemon maps and touches our buffer
    lookup_keys = synthetic_chain(layout_for_page_bytes(1024), os.getpid() + 1, args.lookup_chain)
    lk = kvtier.Client(args.endpoint, layout=layout_for_page_bytes(1024),
                       client_name="bench_client.py/lookup")
    lk.put_inline(lookup_keys, [bytes(1024)] * len(lookup_keys))
    packed = kvtier.pack_keys(lookup_keys)

    tp_flags = ["throughput", f"--page_sizes={args.page_mib}MiB",
                f"--batch_bytes={args.batch_pages * args.page_mib}MiB",
                f"--working_set={args.working_set_mib}MiB"]
    lk_flags = ["lookup", f"--lookup_chain={args.lookup_chain}",
                f"--lookup_calls={args.lookup_calls}", "--lookup_threads=1",
                "--lookup_seconds=0.05"]
    s = {k: [] for k in ("cpp_get", "cpp_put", "py_get", "py_put", "cpp_lookup_p50",
                         "py_lookup_p50", "py_lookup_packed_p50")}

    def cpp():
        c = run_cpp(args.bench, args, tp_flags, args.inner)["throughput"][0]
        s["cpp_get"].append(c["get_batch"]["gbps"]["median"])
        s["cpp_put"].append(c["put_batch"]["gbps"]["median"])
        c = run_cpp(args.bench, args, lk_flags, 1)["lookup"]
        s["cpp_lookup_p50"].append(c["latency_us"]["p50"])

    def python(r):
        g, p = py_throughput_repeat(rig, get_keys, os.getpid() * 1000 + r, args.batch_pages,
                                    args.inner)
        s["py_get"].append(g)
        s["py_put"].append(p)
        s["py_lookup_p50"].append(py_lookup_p50(lk, lookup_keys, args.lookup_calls, args.lookup_chain))
        s["py_lookup_packed_p50"].append(py_lookup_p50(lk, packed, args.lookup_calls, args.lookup_chain))

    for r in range(args.repeats):
        # Interleaved, first one client then the other, so drift on a shared
        # machine (and the wake of the previous run) hits both alike.
        if r % 2 == 0:
            cpp()
            python(r)
        else:
            python(r)
            cpp()
        g, p = s["py_get"][-1], s["py_put"][-1]
        print(f"repeat {r + 1}/{args.repeats}: GET py {g:.2f} / c++ {s['cpp_get'][-1]:.2f} GB/s, "
              f"PUT py {p:.2f} / c++ {s['cpp_put'][-1]:.2f} GB/s, LOOKUP p50 py "
              f"{s['py_lookup_p50'][-1]:.1f} (packed {s['py_lookup_packed_p50'][-1]:.1f}) / "
              f"c++ {s['cpp_lookup_p50'][-1]:.1f} us", flush=True)

    # Bytes check outside the timed region: zero the view, GET, compare samples
    # with the daemon's copy read inline (not through our buffer).
    rig.view[:] = 0
    rig.get_all(get_keys, args.batch_pages)
    sample = [0, pages // 2, pages - 1]
    with kvtier.Client(args.endpoint, layout=rig.layout) as inline:
        got = inline.get_inline([get_keys[i] for i in sample])
    if any(got[j] != rig.view[i].tobytes() for j, i in enumerate(sample)):
        sys.exit("bench_client: GET through the numpy view returned wrong bytes")
    rig.delete_all(get_keys)
    lk.delete(lookup_keys)

    m = {k: statistics.median(v) for k, v in s.items()}
    ratios = {"get": m["py_get"] / m["cpp_get"], "put": m["py_put"] / m["cpp_put"],
              "lookup_p50": m["py_lookup_p50"] / m["cpp_lookup_p50"],
              "lookup_packed_p50": m["py_lookup_packed_p50"] / m["cpp_lookup_p50"]}
    print(f"\nmedians of {args.repeats} repeats ({args.page_mib} MiB pages, {args.batch_pages} per "
          f"call, {args.working_set_mib} MiB per pass, median of {args.inner} passes per repeat; LOOKUP {args.lookup_chain}-key chain, "
          f"{args.lookup_calls} calls per repeat):")
    print(f"  GET     python {m['py_get']:6.2f} GB/s   c++ {m['cpp_get']:6.2f} GB/s   "
          f"ratio {ratios['get']:.2f}  (target >= 0.9)")
    print(f"  PUT     python {m['py_put']:6.2f} GB/s   c++ {m['cpp_put']:6.2f} GB/s   "
          f"ratio {ratios['put']:.2f}  (target >= 0.9)")
    print(f"  LOOKUP  python p50 {m['py_lookup_p50']:6.1f} us (list of keys), "
          f"{m['py_lookup_packed_p50']:.1f} us (packed bytes)   c++ p50 {m['cpp_lookup_p50']:6.1f} us"
          f"   ratio {ratios['lookup_p50']:.2f} / {ratios['lookup_packed_p50']:.2f}  (target <= 1.2)")
    targets = {"get": ratios["get"] >= 0.9, "put": ratios["put"] >= 0.9,
               "lookup_p50": ratios["lookup_p50"] <= 1.2}
    print("targets: " + ", ".join(f"{k} {'PASS' if v else 'MISS'}" for k, v in targets.items()))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"options": vars(args), "series": {k: summary(v) for k, v in s.items()},
                       "ratios": ratios, "targets": targets}, f, indent=2)


if __name__ == "__main__":
    main()
