#!/usr/bin/env python3
"""The soak's workload (scripts/soak.sh): one thread per tenant against one
kvtierd, until SIGTERM or --seconds. Each thread loops over prompts drawn from
a skewed (Zipf-like) set of shared prefixes plus a private tail: LOOKUP with a
lease, GET the leased hits into its buffer (every byte checked: a page's
bytes are a function of its key), PUT the rest, now and then a PREFETCH of a
prompt it will send soon and a DELETE of an old chain. Tenant `ledger` also
keeps a ledger: every page a PUT acknowledged as stored (the daemon runs
write-through, so that reply promises durability), which must all be found,
byte for byte, after any restart (SIGTERM or SIGKILL). An admin FLUSH every
`--flush_every` s races the traffic.

Writes one JSON line per tenant at exit: requests, failed, corrupt, and for
the ledger: pages checked and lost. Exit 0 unless it could not start.
    soak_driver.py --endpoint=E --tenants=a:tokA,b:tokB --admin=ops:tok \\
        --seconds=N --state=DIR [--check_ledger]
"""
import argparse
import json
import os
import random
import signal
import sys
import threading
import time
import zlib

import numpy as np

import kvtier

LAYOUT = kvtier.Layout(layers=2, kv_heads=2, head_dim=64, tokens_per_page=64)  # 64 KiB pages
PB = LAYOUT.page_bytes
PAGES_PER_PROMPT = 8
STOP = threading.Event()


def page_bytes(key):
    """The bytes of the page under `key`: a function of the key only."""
    seed = int.from_bytes(bytes(key)[:8], "little")
    return np.random.default_rng(seed).integers(0, 256, size=PB, dtype=np.uint8)


def prompt_tokens(tenant, prefix_id, tail_id, shared):
    """A prompt: a shared prefix (across tenants when `shared`: dedup within
    each namespace only, never across) then a private tail."""
    head = [(prefix_id * 7919 + i) % 50000 for i in range(4 * LAYOUT.tokens_per_page)]
    # zlib.crc32, not hash(): str hashes differ per process (PYTHONHASHSEED),
    # and the driver restarts with the daemon. With hash() each lifetime made
    # new private tails, so tenant ledger's set of pages grew past its NVMe
    # reserve (3,360 pages of 64 KiB in the first lifetime, 4,960 by the
    # second), and pages evicted past the reserve counted as "lost".
    tail_seed = zlib.crc32(f"{tenant}/{tail_id}".encode()) if not shared else tail_id
    tail = [(tail_seed * 104729 + i) % 50000 for i in range(4 * LAYOUT.tokens_per_page)]
    return head + tail


class Tenant(threading.Thread):
    def __init__(self, args, name, token, seed, ledger_path=None):
        super().__init__(daemon=True)
        self.args, self.name, self.token = args, name, token
        self.rng = random.Random(seed)
        self.stats = {"tenant": name, "requests": 0, "failed": 0, "refused": 0, "corrupt": 0,
                      "gets": 0,
                      "puts": 0, "deletes": 0, "prefetches": 0, "errors": []}
        self.ledger_path = ledger_path

    def err(self, what, e):
        self.stats["failed"] += 1
        if len(self.stats["errors"]) < 5:
            self.stats["errors"].append(f"{what}: {type(e).__name__}: {e}")

    def run(self):
        try:
            c = kvtier.Client(self.args.endpoint, tenant=self.name, token=self.token,
                              layout=LAYOUT, timeout_ms=30000, client_name="soak")
            buf = kvtier.ShmBuffer(PAGES_PER_PROMPT * PB)
            bid = c.register(buf)
            view = np.frombuffer(buf, dtype=np.uint8).reshape(PAGES_PER_PROMPT, PB)
        except Exception as e:  # noqa: BLE001 -- reported, the soak judges it
            self.err("connect", e)
            return
        recent = []
        # The ledger's pages must all stay (its NVMe reserve holds them): a
        # bounded set, and it never deletes.
        prefixes, tails = (40, 10) if self.ledger_path else (400, 2000)
        while not STOP.is_set():
            # Zipf-like: a few hot prefixes, a long tail of cold ones.
            prefix = int(self.rng.paretovariate(1.2)) % prefixes
            tail = self.rng.randrange(tails)
            keys = kvtier.page_keys(LAYOUT, prompt_tokens(self.name, prefix, tail,
                                                          self.rng.random() < 0.3))
            try:
                self.step(c, bid, view, keys)
                recent.append(keys)
                if len(recent) > 50:
                    old = recent.pop(0)
                    if self.ledger_path is None and self.rng.random() < 0.05:
                        self.delete(c, old[4:])  # a tail, never a shared prefix
                if self.rng.random() < 0.1:
                    nxt = kvtier.page_keys(LAYOUT, prompt_tokens(
                        self.name, int(self.rng.paretovariate(1.2)) % 400,
                        self.rng.randrange(2000), False))
                    c.prefetch(nxt, lease_ms=500)
                    self.stats["prefetches"] += 1
            except kvtier.ResourceExhausted:
                # Backpressure (a quota or a tier full of pinned pages): the
                # answer a PUT may get, which an engine meets by computing.
                self.stats["refused"] += 1
                time.sleep(0.05)
            except kvtier.Error as e:
                self.err("request", e)
                time.sleep(0.05)
            self.stats["requests"] += 1
        try:
            c.close()
        except kvtier.Error:
            pass

    def delete(self, c, keys):
        """DELETE as docs/PROTOCOL.md tells a client to: the local pages go at
        once; when the shared cache could not forget every record (a node
        slow or down: UNAVAILABLE), send it again. Only a DELETE that still
        fails after 5 tries (~3 s) counts as failed."""
        for attempt in range(5):
            try:
                c.delete(keys)
                self.stats["deletes"] += 1
                return
            except kvtier.Unavailable:
                self.stats["delete_retries"] = self.stats.get("delete_retries", 0) + 1
                if attempt == 4:
                    raise
                time.sleep(0.2 * 2 ** attempt)

    def step(self, c, bid, view, keys):
        hit = c.lookup(keys, lease_ms=2000)
        n = hit.hits
        if n:
            tiers = c.get(keys[:n], bid, [i * PB for i in range(n)])
            # A hit LOOKUP could not lease (over the lease budget) may be
            # evicted before the GET: a miss (None), its slot left as it was.
            got = [i for i in range(n) if tiers[i] is not None]
            self.stats["gets"] += len(got)
            self.stats["get_misses"] = self.stats.get("get_misses", 0) + n - len(got)
            for i in got:
                if not np.array_equal(view[i], page_bytes(keys[i])):
                    self.stats["corrupt"] += 1
            n = len(got) if len(got) == n else next(i for i in range(n) if tiers[i] is None)
        if n < len(keys):
            for i in range(n, len(keys)):
                view[i] = page_bytes(keys[i])
            r = c.put(keys[n:], bid, [i * PB for i in range(n, len(keys))],
                      keys[n - 1] if n else None)
            self.stats["puts"] += r.stored
            if self.ledger_path is not None:
                # Under write-through a stored (or deduplicated) page is
                # durable when the PUT is acknowledged: every one of them
                # must survive any restart.
                with open(self.ledger_path, "a") as f:
                    f.writelines(bytes(k).hex() + "\n" for k in keys[n:n + r.leading_kept])


def flush_loop(args, stats):
    """An admin FLUSH every --flush_every s (all RAM pages to NVMe, racing
    the tenants' traffic): part of the load, its errors counted."""
    name, token = args.admin.split(":", 1)
    admin = kvtier.Client(args.endpoint, tenant=name, token=token, timeout_ms=120000)
    while not STOP.wait(args.flush_every):
        try:
            admin.flush()
            stats["flushes"] += 1
        except kvtier.Error as e:
            stats["failed"] += 1
            stats["errors"].append(f"flush: {type(e).__name__}: {e}")
    admin.close()


def check_ledger(args, name, token):
    """Every page the ledger says was durable is found and byte-exact."""
    path = os.path.join(args.state, "ledger.keys")
    if not os.path.exists(path):
        return {"tenant": name, "ledger_checked": 0, "ledger_lost": 0}
    keys = sorted({bytes.fromhex(l.strip()) for l in open(path) if l.strip()})
    c = kvtier.Client(args.endpoint, tenant=name, token=token, layout=LAYOUT, timeout_ms=60000)
    buf = kvtier.ShmBuffer(PB)
    bid = c.register(buf)
    view = np.frombuffer(buf, dtype=np.uint8)
    lost = bad = 0
    for k in keys:
        tiers = c.get([k], bid, [0])
        if tiers[0] is None:
            lost += 1
        elif not np.array_equal(view, page_bytes(k)):
            bad += 1
    c.close()
    return {"tenant": name, "ledger_checked": len(keys), "ledger_lost": lost, "corrupt": bad}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--tenants", required=True, help="name:token,... (one thread each)")
    ap.add_argument("--admin", required=True, help="name:token of an admin tenant (FLUSH)")
    ap.add_argument("--ledger", default="ledger", help="the tenant that keeps the ledger")
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--flush_every", type=float, default=20)
    ap.add_argument("--state", required=True, help="directory of the ledger file")
    ap.add_argument("--check_ledger", action="store_true",
                    help="only check the ledger against the daemon, then exit")
    args = ap.parse_args()
    pairs = [t.split(":", 1) for t in args.tenants.split(",")]
    if args.check_ledger:
        token = dict(pairs)[args.ledger]
        print(json.dumps(check_ledger(args, args.ledger, token)), flush=True)
        return 0
    signal.signal(signal.SIGTERM, lambda *_: STOP.set())
    threads = []
    for i, (name, token) in enumerate(pairs):
        ledger = os.path.join(args.state, "ledger.keys") if name == args.ledger else None
        threads.append(Tenant(args, name, token, seed=os.getpid() * 31 + i, ledger_path=ledger))
    for t in threads:
        t.start()
    admin_stats = {"tenant": "admin", "requests": 0, "failed": 0, "corrupt": 0, "flushes": 0,
                   "errors": []}
    flusher = threading.Thread(target=flush_loop, args=(args, admin_stats), daemon=True)
    flusher.start()
    STOP.wait(args.seconds)
    STOP.set()
    for t in threads:
        t.join(60)
    flusher.join(120)
    for t in threads:
        print(json.dumps(t.stats), flush=True)
    print(json.dumps(admin_stats), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
