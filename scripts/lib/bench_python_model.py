# Driver of scripts/bench_python_model.sh (run it through that script, which
# starts and stops the daemon): the Python model's TTFT on a long prompt
# restored from kvtierd vs recomputed (medians, same tokens checked), and the
# C++ <-> Python cross-restore on the same daemon and tenant.
import argparse
import os
import re
import statistics
import subprocess
import sys
import time

import torch

from kvtier.model.generate import Session, mt19937
from kvtier.model.generator import Generator


def prompt_of(n, seed):
    return [x % 256 for x in mt19937(seed, n)]


def med(xs):
    return statistics.median(xs)


def check(cond, what):
    print(f"check: {'ok  ' if cond else 'FAIL'} {what}")
    if not cond:
        check.failed += 1


check.failed = 0


def cpp_generate(args, n, seed, runs):
    """kvtier-generate on the same daemon: [(tokens, restored, computed, ttft_ms)] per run."""
    cmd = [args.generate, f"--model={args.model}", f"--random_prompt_tokens={n}",
           f"--prompt_seed={seed}", f"--max_new_tokens={args.new_tokens}",
           f"--tokens_per_page={args.tokens_per_page}", f"--runs={runs}", "--print_ids",
           f"--endpoint={args.endpoint}"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    lines = [l for l in out.splitlines() if l.startswith("run ")]
    res = []
    for r in range(1, runs + 1):
        mine = [l.split(": ", 1)[1] for l in lines if l.startswith(f"run {r}: ")]
        m = re.match(r"prompt \d+ tokens: restored (\d+) \(([^)]*)\), computed (\d+); "
                     r"TTFT ([\d.]+) ms", mine[1])
        res.append(([int(x) for x in mine[0].split(",")], int(m[1]), int(m[3]), float(m[4])))
    return res


def timed_runs(g, prompt, args, label, **kw):
    """`repeats` generations; returns (TTFTs, tokens of the first, stats of the last)."""
    ttfts, outs, st = [], [], None
    for _ in range(args.repeats):
        r = g.generate(prompt, args.new_tokens, **kw)
        ttfts.append(r.stats.ttft_ms)
        outs.append(r.tokens)
        st = r.stats
    tokens = outs[0]
    check(all(o == tokens for o in outs), f"{label}: same tokens in every repeat")
    print(f"{label}: TTFT median {med(ttfts):.1f} ms over {len(ttfts)} "
          f"(min {min(ttfts):.1f}, max {max(ttfts):.1f}); restored {st.restored_tokens}, "
          f"prefill computed {st.prefill_forward_tokens}")
    return ttfts, tokens, st


def python_pages(s, prompt):
    """The pages the Python model computes for `prompt` (whole-prompt prefill), cloned."""
    seq = s.cache.add_sequence()
    s.model.forward(seq, prompt)
    pages = [s.cache.pages[p].clone() for p in s.cache.block_table(seq)]
    s.cache.remove_sequence(seq)
    return pages[:len(prompt) // s.cache.tokens_per_page]


def restored_pages(s, keys):
    seq = s.cache.add_sequence()
    s.cache.reserve(seq, len(keys) * s.cache.tokens_per_page)
    table = s.cache.block_table(seq)
    tiers = s.store.client.get(keys, s.store.buffer_id, [s.cache.page_offset(p) for p in table])
    pages = [s.cache.pages[p].clone() for p in table]
    s.cache.remove_sequence(seq)
    return tiers, pages


def compare_pages(mine, theirs):
    """Layer 0 equal bits? Later layers: differing fp16 elements and max |diff|."""
    layer0 = all(torch.equal(a[0], b[0]) for a, b in zip(mine, theirs))
    diff = total = 0
    worst = 0.0
    for a, b in zip(mine, theirs):
        ne = a[1:].view(torch.int16) != b[1:].view(torch.int16)
        diff, total = diff + int(ne.sum()), total + ne.numel()
        worst = max(worst, float((a[1:].float() - b[1:].float()).abs().max()))
    return layer0, diff, total, worst


def cross_restore(args, s, g):
    n, tpp = args.prompt_tokens, args.tokens_per_page
    full_pages = n // tpp
    # C++ stores (run 1 computes) and restores (runs 2..); Python then restores its pages.
    b = prompt_of(n, 11)
    cpp = cpp_generate(args, n, 11, args.repeats + 1)
    check(cpp[0][1] == 0 and all(r[1] == n - 1 for r in cpp[1:]),
          f"C++ run 1 computed, runs 2..{args.repeats + 1} restored {n - 1} tokens")
    print(f"C++ kvtier-generate: TTFT recomputed {cpp[0][3]:.1f} ms (1 run), restored median "
          f"{med([r[3] for r in cpp[1:]]):.1f} ms over {args.repeats}")
    keys = s.store.keys(b)
    check(s.store.client.lookup(keys).hits == full_pages,
          f"C++ pages found under the Python keys: {full_pages} of {full_pages}")
    mine = python_pages(s, b)
    tiers, theirs = restored_pages(s, keys)
    check(tiers == ["host"] * full_pages, "GET of the C++ pages: every page from host")
    layer0, diff, total, worst = compare_pages(mine, theirs)
    check(layer0, "page bytes, layer 0 (before any attention): equal bits")
    print(f"page bytes, layers 1..: {diff} of {total} fp16 elements differ "
          f"({100.0 * diff / total:.3f}%), max |diff| {worst:.3g}")
    r = g.generate(b, args.new_tokens)
    check(r.stats.restored_tokens == n - 1 and r.stats.prefill_forward_tokens == 1,
          f"Python restored the C++ prompt: {r.stats.restored_tokens} tokens, prefill computed "
          f"{r.stats.prefill_forward_tokens}")
    check(r.tokens == cpp[0][0], "Python tokens == C++ tokens (C++ -> Python)")
    # Python stores, C++ restores.
    c = prompt_of(n, 13)
    r = g.generate(c, args.new_tokens)
    check(r.stats.restored_tokens == 0 and r.stats.pages_put >= full_pages,
          f"Python computed and stored {r.stats.pages_put} pages")
    cpp = cpp_generate(args, n, 13, 1)
    check(cpp[0][1] == n - 1 and cpp[0][2] == 1,
          f"C++ restored the Python prompt: {cpp[0][1]} tokens, computed {cpp[0][2]}")
    check(cpp[0][0] == r.tokens, "C++ tokens == Python tokens (Python -> C++)")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--endpoint", required=True)
    p.add_argument("--generate", required=True, help="the kvtier-generate binary")
    p.add_argument("--prompt_tokens", type=int, default=2048)
    p.add_argument("--tokens_per_page", type=int, default=256)
    p.add_argument("--new_tokens", type=int, default=8)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    n, tpp = args.prompt_tokens, args.tokens_per_page
    t0 = time.monotonic()
    s = Session(args.model, tpp, "fp16", (n + args.new_tokens) // tpp + 2, endpoint=args.endpoint)
    c = s.weights.config
    print(f"model: {c.num_hidden_layers} layers x {c.hidden_size}, "
          f"{s.weights.parameter_count() / 1e6:.1f}M parameters, loaded + fingerprinted in "
          f"{time.monotonic() - t0:.1f} s; page {s.layout.page_bytes} bytes; torch threads "
          f"{torch.get_num_threads()}; daemon: {'connected' if s.store else s.daemon_note}")
    if s.store is None:
        sys.exit("no daemon")
    g, g_none = s.generator(), Generator(s.model, None)
    a = prompt_of(n, 7)
    rec, want, _ = timed_runs(g_none, a, args, f"Python, {n} tokens recomputed")
    first = g.generate(a, args.new_tokens)
    check(first.tokens == want and first.stats.pages_put == n // tpp,
          f"store run: same tokens, {first.stats.pages_put} pages put")
    res, got, st = timed_runs(g, a, args, f"Python, {n} tokens restored (whole-page GET)")
    check(got == want, "restored tokens == recomputed tokens")
    check(st.restored_tokens == n - 1 and st.prefill_forward_tokens == 1,
          "restore: prefill computed only the unrestored token")
    lw, got, _ = timed_runs(g, a, args, f"Python, {n} tokens restored (layer-wise GET)",
                            layerwise=True)
    check(got == want, "layer-wise restored tokens == recomputed tokens")
    print(f"TTFT restored / recomputed: {med(res) / med(rec):.4f} (whole-page), "
          f"{med(lw) / med(rec):.4f} (layer-wise); speedup {med(rec) / med(res):.1f}x")
    cross_restore(args, s, g)
    s.close()
    print(f"checks failed: {check.failed}")
    sys.exit(1 if check.failed else 0)


if __name__ == "__main__":
    main()
