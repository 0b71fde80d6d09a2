# Driver of scripts/bench_engines.sh (run it through that script, which starts
# and stops the daemon): the engine paths of issue 25 against the raw Python
# client, each ratio from one run, connector and baseline repeats interleaved.
#  vllm:   KvtierConnector (vLLM v0.11.1 stand-in) loading and saving one
#          4,096-token prompt of Llama-3.1-8B-shaped KV (fp16, block 16, 32
#          layers, 8 KV heads, head dim 128: 256 pages of 2 MiB) in CPU tensors,
#          driven by tests/python/engine_sim.py's VllmSim (the scheduler and
#          model-runner calls of vLLM), timed from the engine's side, vs
#          kvtier.Client get/put of the same pages through a registered ShmBuffer.
#  sglang: KvtierStorage (SGLang v0.5.6 stand-in) batch_get_v1 / batch_set_v1
#          over a zero-copy host pool (page_first, page size 64, the same model:
#          64 pages = 128 parts of 4 MiB) vs kvtier.Client get/put of the parts.
#  model:  the Python model's restored TTFT of a 2,048-token prompt vs
#          kvtier-generate's, same checkpoint, prompt and daemon.
# Prints each figure with its baseline, the ratio and PASS/MISS; exits 1 when a
# correctness check fails (never for a MISS).
import argparse
import os
import re
import statistics
import subprocess
import sys
import time

import numpy as np
import torch

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.append(os.path.join(REPO, "tests", "python"))  # the engine stand-ins and VllmSim

import kvtier  # noqa: E402

MiB = 1 << 20
FAILED = []


def med(xs):
    return statistics.median(xs)


def check(cond, what):
    if not cond:
        print(f"check: FAIL {what}")
        FAILED.append(what)


def report(name, value, base, unit, target, higher_is_better=True, note=""):
    """One figure: medians of the connector and the baseline, their ratio as
    'connector speed / baseline speed' (so >= target passes)."""
    ratio = value / base if higher_is_better else base / value
    ok = ratio >= target
    print(f"RESULT {name}: {value:.3f} {unit} vs baseline {base:.3f} {unit}: ratio {ratio:.3f} "
          f"(target >= {target}) {'PASS' if ok else 'MISS'}{note}")
    return ratio


def bits(t):
    """fp16 as int16: compare bit patterns (random bits hold NaNs)."""
    return t.view(torch.int16)


def spread(xs, unit):
    return f"median {med(xs):.3f} {unit} (min {min(xs):.3f}, max {max(xs):.3f}, n={len(xs)})"


class RawRig:
    """kvtier.Client with `layout`, one registered ShmBuffer of `pages` pages
    (faulted in), keys of a fresh synthetic chain per use."""

    def __init__(self, endpoint, layout, pages):
        self.layout, self.pages = layout, pages
        self.client = kvtier.Client(endpoint, layout=layout, timeout_ms=60000,
                                    client_name="bench_engines raw")
        self.buf = kvtier.ShmBuffer(pages * layout.page_bytes)
        view = np.frombuffer(self.buf, dtype=np.uint8)
        view[:] = np.random.default_rng(1).integers(0, 255, view.size, dtype=np.uint8)
        self.bid = self.client.register(self.buf)
        self.offsets = [i * layout.page_bytes for i in range(pages)]
        self.seed = 0

    def fresh_keys(self):
        self.seed += 1
        rng = np.random.default_rng(1000 + self.seed)
        toks = rng.integers(0, 128000, self.pages * self.layout.tokens_per_page)
        return kvtier.page_keys(self.layout, toks)

    def put(self, keys):
        t0 = time.perf_counter()
        r = self.client.put(keys, self.bid, self.offsets)
        dt = time.perf_counter() - t0
        check(r.stored == len(keys), f"raw PUT stored {r.stored} of {len(keys)}")
        return dt

    def get(self, keys):
        t0 = time.perf_counter()
        tiers = self.client.get(keys, self.bid, self.offsets)
        dt = time.perf_counter() - t0
        check(None not in tiers, "raw GET: every page hit")
        return dt

    def delete(self, keys):
        self.client.delete(keys)

    def close(self):
        self.client.close()


# -- vLLM ------------------------------------------------------------------------
def bench_vllm(args):
    from engine_sim import SimRequest, VllmSim, sim_vllm_config
    from standins import installed

    L, H, D, BS, N = 32, 8, 128, 16, args.vllm_tokens
    if args.vllm_threads:
        torch.set_num_threads(args.vllm_threads)
    blocks = N // BS
    with installed("vllm_v0_11_1") as engine:
        class Sim(VllmSim):
            """The engine with its model's KV already in the blocks (the
            benchmark times kvtier, not a forward pass)."""

            def _forward(self, layer, name, req_id, start, end):
                self.computed.setdefault(req_id, set()).update(range(start, end))

        cfg = sim_vllm_config(layers=L, kv_heads=H, head_dim=D, block_size=BS,
                              dtype=torch.float16,
                              extra=dict(endpoint=args.endpoint, timeout_ms=60000,
                                         direct=bool(args.vllm_direct)))
        sim = Sim(cfg, engine, num_blocks=blocks)
        page_bytes = sim.work.worker.mover.kv.layout.page_bytes
        nbytes = blocks * page_bytes
        mover = sim.work.worker.mover
        print(f"vllm: {N} tokens = {blocks} pages of {page_bytes / MiB:.0f} MiB "
              f"({nbytes / MiB:.0f} MiB), KV tensors {tuple(next(iter(sim.kv.values())).shape)} "
              f"x {L} layers, staging_pages {sim.work.worker.cfg.staging_pages}, "
              f"torch threads {torch.get_num_threads()}, "
              f"{'in place (' + str(len(mover.direct.runs)) + ' runs a page)' if mover.direct else 'staged'}")
        g = torch.Generator().manual_seed(5)
        for t in sim.kv.values():
            t.view(torch.int16).copy_(torch.randint(-30000, 30000, t.shape, generator=g,
                                                    dtype=torch.int16))
        want = {n: t.clone() for n, t in sim.kv.items()}

        # Engine-side timing: start_load_kv .. the last wait_for_layer_load;
        # the first save_kv_layer .. wait_for_save's return (the step's view).
        marks = {}
        w = sim.work
        orig = {m: getattr(w, m) for m in ("start_load_kv", "wait_for_layer_load",
                                           "save_kv_layer", "wait_for_save")}

        def start_load_kv(*a, **k):
            marks["load0"] = time.perf_counter()
            return orig["start_load_kv"](*a, **k)

        def wait_for_layer_load(*a, **k):
            r = orig["wait_for_layer_load"](*a, **k)
            marks["load1"] = time.perf_counter()
            return r

        def save_kv_layer(*a, **k):
            marks.setdefault("save0", time.perf_counter())
            return orig["save_kv_layer"](*a, **k)

        def wait_for_save(*a, **k):
            r = orig["wait_for_save"](*a, **k)
            marks["save1"] = time.perf_counter()
            return r

        w.start_load_kv, w.wait_for_layer_load = start_load_kv, wait_for_layer_load
        w.save_kv_layer, w.wait_for_save = save_kv_layer, wait_for_save

        def run_request(req_id, tokens):
            """Steps until the request ran (lookup pending first), then
            finishes it; returns (marks, outputs)."""
            marks.clear()
            sim.add(SimRequest(req_id, tokens, BS))
            outs = []
            for _ in range(6):
                outs.append(sim.step())
                sim.wait_lookups()
                if req_id in sim.computed:
                    break
            check(req_id in sim.computed, f"vllm: {req_id} ran")
            m = dict(marks)
            t0 = time.perf_counter()
            sim.work.worker.drain(120.0)
            m["drained"] = time.perf_counter()
            m["drain_s"] = m["drained"] - t0
            sim.finish(req_id)
            sim.step()  # the step that reports it finished
            return m, outs

        def tokens_of(seed):
            return [(seed * 7919 + i * 31) % 32000 for i in range(N)]

        rig = RawRig(args.endpoint, kvtier.Layout(L, H, D, BS, "fp16"), blocks)
        # Stored once: the prompt the loads read, and the raw GET's pages.
        m, _ = run_request("store", tokens_of(1))
        check(w.worker.stats["pages_saved"] == blocks, f"vllm: stored {w.worker.stats}")
        get_keys = rig.fresh_keys()
        rig.put(get_keys)
        loads, raw_gets, saves, saves_stored, raw_puts = [], [], [], [], []
        for r in range(args.repeats + 1):  # repeat 0: warm-up, not counted
            for t in sim.kv.values():
                t.zero_()
            before = dict(w.worker.stats)
            m, outs = run_request(f"load{r}", tokens_of(1))
            got = w.worker.stats["pages_loaded"] - before["pages_loaded"]
            check(got >= blocks - 1, f"vllm: load {r} loaded {got} pages")
            check(not any(o["errors"] for o in outs), "vllm: no load errors")
            if r == 0 or r == args.repeats:
                same = all(torch.equal(bits(sim.kv[n]), bits(want[n]))
                           for n in sim.names)
                if not same:
                    bad = [(l, b) for l, n in enumerate(sim.names) for b in range(blocks)
                           if not torch.equal(bits(sim.kv[n][:, b]), bits(want[n][:, b]))]
                    print(f"  differing (layer, block): {len(bad)}, first {bad[:8]}")
                check(same, f"vllm: load {r}: loaded blocks equal the saved bytes")
            dt = m["load1"] - m["load0"]
            rg = rig.get(get_keys)
            if r:
                loads.append(got * page_bytes / dt / 1e9)
                raw_gets.append(nbytes / rg / 1e9)
            print(f"  vllm load {r}: {got} pages in {dt * 1e3:.1f} ms; raw GET {blocks} pages "
                  f"in {rg * 1e3:.1f} ms")
        rig.delete(get_keys)
        for r in range(args.repeats + 1):
            before = dict(w.worker.stats)
            m, _ = run_request(f"save{r}", tokens_of(100 + r))
            saved = w.worker.stats["pages_saved"] - before["pages_saved"]
            check(saved == blocks, f"vllm: save {r} stored {saved} of {blocks} pages")
            dt, dt_stored = m["save1"] - m["save0"], m["drained"] - m["save0"]
            sim.work.worker.client.evict("", None, 0)  # room for the next repeat
            keys = rig.fresh_keys()
            rp = rig.put(keys)
            rig.delete(keys)
            if r:
                saves.append(nbytes / dt / 1e9)
                saves_stored.append(nbytes / dt_stored / 1e9)
                raw_puts.append(nbytes / rp / 1e9)
            print(f"  vllm save {r}: engine waited {dt * 1e3:.1f} ms, all stored after "
                  f"{dt_stored * 1e3:.1f} ms; raw PUT {rp * 1e3:.1f} ms")
        sim.close()
        rig.close()
    print(f"vllm load GB/s {spread(loads, '')}; raw GET {spread(raw_gets, '')}")
    print(f"vllm save GB/s (engine's wait) {spread(saves, '')}; until stored "
          f"{spread(saves_stored, '')}; raw PUT {spread(raw_puts, '')}")
    report("vllm load (start_load_kv..last wait_for_layer_load) vs raw GET", med(loads),
           med(raw_gets), "GB/s", 0.8)
    report("vllm save (first save_kv_layer..wait_for_save) vs raw PUT", med(saves),
           med(raw_puts), "GB/s", 0.8)
    report("vllm save until every PUT is done (not the engine's wait) vs raw PUT",
           med(saves_stored), med(raw_puts), "GB/s", 0.8)


# -- SGLang ------------------------------------------------------------------------
def bench_sglang(args):
    from standins import installed

    L, H, D, PAGE, N, BATCH = 32, 8, 128, args.sglang_page, args.sglang_tokens, 128
    pages = N // PAGE
    with installed("sglang_v0_5_6") as engine:
        from kvtier.integrations import sglang as kv_sglang
        pool = engine.MHATokenToKVPoolHost(2 * N, PAGE, L, H, D, torch.float16, "page_first",
                                           alloc_func=kv_sglang.alloc_shm_host_buffer)
        g = torch.Generator().manual_seed(6)
        pool.kv_buffer.view(torch.int16).copy_(torch.randint(
            -30000, 30000, pool.kv_buffer.shape, generator=g, dtype=torch.int16))
        extra = {"backend_name": "kvtier", "module_path": "kvtier.integrations.sglang",
                 "class_name": "KvtierStorage", "interface_v1": 1, "endpoint": args.endpoint,
                 "timeout_ms": 60000}
        cfg = engine.HiCacheStorageConfig(tp_rank=0, tp_size=1, pp_rank=0, pp_size=1,
                                          is_mla_model=False, is_page_first_layout=True,
                                          model_name="bench/llama-3.1-8b-shape",
                                          extra_config=extra)
        # (SGLang pops its own hicache_storage_pass_prefix_keys before the
        # backend sees the config; batches below pass prefix_keys as it then does.)
        backend = engine.create_dynamic_backend(cfg)
        backend.register_mem_pool_host(pool)
        check(backend.zero_copy, "sglang: the host pool is zero copy")
        parts = 2 * pages
        part_bytes = backend.part_bytes
        nbytes = parts * part_bytes
        print(f"sglang: {N} tokens = {pages} pages of {PAGE} tokens = {parts} parts of "
              f"{part_bytes / MiB:.0f} MiB ({nbytes / MiB:.0f} MiB), host pool "
              f"{tuple(pool.kv_buffer.shape)}, one storage call (batch {BATCH})")

        def hashes_of(seed):
            import hashlib
            out, prior = [], b""
            for i in range(pages):
                prior = hashlib.sha256(prior + f"{seed}/{i}".encode()).digest()
                out.append(prior.hex())
            return out

        src = torch.arange(0, N, dtype=torch.int64)          # pages 0 .. pages-1
        dst = torch.arange(N, 2 * N, dtype=torch.int64)      # the other half of the pool
        info = engine.HiCacheStorageExtraInfo(prefix_keys=[])
        rig = RawRig(args.endpoint, backend.layout, parts)
        get_hashes = hashes_of(0)
        check(all(backend.batch_set_v1(get_hashes, src, info)), "sglang: stored the get set")
        get_keys = rig.fresh_keys()
        rig.put(get_keys)
        want = pool.kv_buffer[:, :N].clone()
        gets, raw_gets, sets, raw_puts = [], [], [], []
        for r in range(args.repeats + 1):
            pool.kv_buffer[:, N:].zero_()
            hit = backend.batch_exists(get_hashes)  # takes the lease, as the prefetch does
            check(hit == pages, f"sglang: batch_exists {hit} of {pages}")
            t0 = time.perf_counter()
            ok = backend.batch_get_v1(get_hashes, dst)
            dt = time.perf_counter() - t0
            check(all(ok), "sglang: batch_get_v1 loaded every page")
            if r in (0, args.repeats):
                check(torch.equal(bits(pool.kv_buffer[:, N:]), bits(want)), "sglang: loaded bytes equal")
            rg = rig.get(get_keys)
            if r:
                gets.append(nbytes / dt / 1e9)
                raw_gets.append(nbytes / rg / 1e9)
            print(f"  sglang get {r}: {dt * 1e3:.1f} ms; raw GET {rg * 1e3:.1f} ms")
        for r in range(args.repeats + 1):
            hs = hashes_of(100 + r)
            t0 = time.perf_counter()
            ok = backend.batch_set_v1(hs, src, engine.HiCacheStorageExtraInfo(prefix_keys=[]))
            dt = time.perf_counter() - t0
            check(all(ok), f"sglang: batch_set_v1 stored every page ({sum(ok)} of {pages})")
            backend.client.delete(backend._part_keys(hs))
            keys = rig.fresh_keys()
            rp = rig.put(keys)
            rig.delete(keys)
            if r:
                sets.append(nbytes / dt / 1e9)
                raw_puts.append(nbytes / rp / 1e9)
            print(f"  sglang set {r}: {dt * 1e3:.1f} ms; raw PUT {rp * 1e3:.1f} ms")
        rig.delete(get_keys)
        backend.close()
        rig.close()
    print(f"sglang batch_get_v1 GB/s {spread(gets, '')}; raw GET {spread(raw_gets, '')}")
    print(f"sglang batch_set_v1 GB/s {spread(sets, '')}; raw PUT {spread(raw_puts, '')}")
    report("sglang batch_get_v1 vs raw GET", med(gets), med(raw_gets), "GB/s", 0.8)
    report("sglang batch_set_v1 vs raw PUT", med(sets), med(raw_puts), "GB/s", 0.8)


# -- the Python model --------------------------------------------------------------
def bench_model(args):
    from kvtier.model.generate import Session, mt19937

    n, tpp, runs = args.model_tokens, 256, args.repeats + 1
    prompt = [x % 256 for x in mt19937(args.prompt_seed, n)]
    cmd = [args.generate, f"--model={args.model}", f"--random_prompt_tokens={n}",
           f"--prompt_seed={args.prompt_seed}", "--max_new_tokens=1", f"--runs={runs}",
           "--print_ids", f"--endpoint={args.endpoint}"]
    print("model: C++: " + " ".join(cmd))
    # The C++ process first: its run 1 computes and stores the prompt (or
    # restores it, if stored before); runs 2.. restore. Run 1 is not counted.
    cpp, cpp_tokens = [], None
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    for line in out.splitlines():
        m = re.match(r"run (\d+): prompt \d+ tokens: restored (\d+) .*TTFT ([\d.]+) ms", line)
        if m and int(m[1]) > 1:
            check(int(m[2]) == n - 1, f"C++ run {m[1]} restored {m[2]}")
            cpp.append(float(m[3]))
        m = re.match(r"run 2: ([\d,]+)$", line)
        if m:
            cpp_tokens = [int(x) for x in m[1].split(",")]
    torch.set_num_threads(args.threads)
    # The judged figure runs the model as shipped (attention="kernel": the
    # decoder's paged kernels over the pages); attention="torch" (pages gathered
    # to fp32, torch's softmax) is printed beside it from the same run.
    py = {}
    for attention in ("kernel", "torch"):
        s = Session(args.model, tpp, "fp16", n // tpp + 2, endpoint=args.endpoint,
                    attention=attention)
        gen, py[attention] = s.generator(), []
        for r in range(runs):
            res = gen.generate(prompt, 1)
            check(res.stats.restored_tokens == n - 1, f"Python ({attention}) run {r} restored "
                  f"{res.stats.restored_tokens}")
            check(res.tokens == cpp_tokens,
                  f"Python ({attention}) token {res.tokens} == C++ {cpp_tokens}")
            if r:
                py[attention].append(res.stats.ttft_ms)
            print(f"  python ({attention} attention) restored run {r}: TTFT "
                  f"{res.stats.ttft_ms:.1f} ms (restore {res.stats.restore_ms:.1f} ms)")
        s.close()
    print(f"model C++ restored TTFT ms {spread(cpp, 'ms')}")
    for attention, v in py.items():
        print(f"model Python ({attention} attention) restored TTFT ms {spread(v, 'ms')} "
              f"(torch threads {args.threads})")
    print(f"model Python (torch attention) / C++: {med(py['torch']) / med(cpp):.3f} (not judged)")
    ratio = med(py["kernel"]) / med(cpp)
    print(f"RESULT model restore TTFT, {n} tokens: Python {med(py['kernel']):.1f} ms vs C++ "
          f"{med(cpp):.1f} ms: ratio {ratio:.3f} (target <= 1.5) "
          f"{'PASS' if ratio <= 1.5 else 'MISS'}")

def main():
    p = argparse.ArgumentParser()
    p.add_argument("--endpoint", required=True)
    p.add_argument("--sections", default="vllm,sglang,model")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--vllm_tokens", type=int, default=4096)
    p.add_argument("--vllm_threads", type=int, default=0,
                   help="torch threads of the vllm section (0: torch's default)")
    p.add_argument("--vllm_direct", type=int, default=1,
                   help="1: the connector's default, KV caches shared in place (one copy); "
                        "0: through the staging buffers")
    p.add_argument("--sglang_tokens", type=int, default=4096)
    p.add_argument("--sglang_page", type=int, default=64)
    p.add_argument("--model", help="checkpoint directory (model section)")
    p.add_argument("--generate", help="the kvtier-generate binary (model section)")
    p.add_argument("--model_tokens", type=int, default=2048)
    p.add_argument("--prompt_seed", type=int, default=7)
    # 1: torch's own ops single-threaded, BLAS threaded by OpenBLAS (its
    # pthreads, nproc of them), as kvtier-generate runs. More torch (OpenMP)
    # threads fight OpenBLAS's for the 2 cores: restored TTFT 100 -> 170-960 ms.
    p.add_argument("--threads", type=int, default=1, help="model section: torch threads")
    args = p.parse_args()
    for section in args.sections.split(","):
        t0 = time.monotonic()
        {"vllm": bench_vllm, "sglang": bench_sglang, "model": bench_model}[section](args)
        print(f"== {section}: {time.monotonic() - t0:.0f} s; load average "
              f"{' '.join(open('/proc/loadavg').read().split()[:3])}")
        sys.stdout.flush()
    print(f"checks failed: {len(FAILED)}")
    sys.exit(1 if FAILED else 0)


if __name__ == "__main__":
    main()
