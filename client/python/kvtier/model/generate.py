# `python3 -m kvtier.model.generate`: the Python twin of kvtier-generate. Loads
# a checkpoint, reuses the prompt's cached prefix pages through kvtierd when one
# answers (and stores the pages it computes), and prints the new tokens, TTFT
# and tokens restored vs computed in kvtier-generate's line format (plus one
# "json:" line per run with --json). Flags keep kvtier-generate's names.
import argparse
import json
import os
import sys

import kvtier
import torch

from .generator import Generator, bytes_to_text
from .llama import ATTENTION, LlamaModel
from .paged_kv import KV_DTYPES, PagedKvCache
from .prefix_store import PrefixStore
from .weights import load_checkpoint, model_fingerprint

__all__ = ["Session", "mt19937", "main"]


def mt19937(seed, n):
    """The first n outputs of std::mt19937(seed) (for --random_prompt_tokens)."""
    mt = [seed & 0xFFFFFFFF]
    for i in range(1, 624):
        mt.append((1812433253 * (mt[-1] ^ (mt[-1] >> 30)) + i) & 0xFFFFFFFF)
    out, idx = [], 624
    for _ in range(n):
        if idx == 624:
            for i in range(624):
                y = (mt[i] & 0x80000000) | (mt[(i + 1) % 624] & 0x7FFFFFFF)
                mt[i] = mt[(i + 397) % 624] ^ (y >> 1) ^ (0x9908B0DF if y & 1 else 0)
            idx = 0
        y = mt[idx]
        idx += 1
        y ^= y >> 11
        y ^= (y << 7) & 0x9D2C5680
        y ^= (y << 15) & 0xEFC60000
        out.append(y ^ (y >> 18))
    return out


class Session:
    """Weights, KV cache (in a kvtier.ShmBuffer), model and — when a daemon
    answers — the PrefixStore, as the C++ DecoderSession builds them."""

    def __init__(self, model_dir, tokens_per_page=256, kv_dtype="fp16", kv_pages=64,
                 use_daemon=True, endpoint=None, tenant="default", token="", timeout_ms=10000,
                 sliding_window=None, attention="kernel"):
        self.weights = load_checkpoint(model_dir)
        c = self.weights.config
        # A window given here changes every page's KV past it, so it goes into
        # the config the fingerprint hashes, as the C++ DecoderSession does:
        # pages stored under one window are never restored under another.
        if sliding_window is not None:
            c.sliding_window = int(sliding_window)
        if kv_dtype not in KV_DTYPES:
            raise ValueError(f"kv_dtype {kv_dtype!r}: the Python model runs {', '.join(KV_DTYPES)}")
        self.layout = kvtier.Layout(c.num_hidden_layers, c.num_key_value_heads, c.head_dim,
                                    tokens_per_page=tokens_per_page, dtype=kv_dtype)
        self.arena = kvtier.ShmBuffer(PagedKvCache.arena_bytes(self.layout.page_bytes, kv_pages))
        self.cache = PagedKvCache(c.num_hidden_layers, c.num_key_value_heads, c.head_dim,
                                  tokens_per_page, kv_dtype, kv_pages, self.arena)
        self.model = LlamaModel(self.weights, self.cache, sliding_window,  # None: config's
                                attention=attention)
        self.store, self.daemon_note = None, ""
        self.fingerprint = model_fingerprint(self.weights)
        if not use_daemon:
            self.daemon_note = "daemon disabled (--no_daemon)"
            return
        ep = endpoint or kvtier.default_endpoint()
        # ZeroMQ connects lazily: a missing ipc socket would only show as a timeout.
        if ep.startswith("ipc://") and not os.path.exists(ep[len("ipc://"):]):
            self.daemon_note = f"no daemon (no socket at {ep}): running without reuse"
            return
        try:
            self.store = PrefixStore(self.cache, self.fingerprint, endpoint=endpoint,
                                     tenant=tenant, token=token, timeout_ms=timeout_ms)
        except kvtier.Error as e:
            self.daemon_note = f"no daemon ({e}): running without reuse"

    def generator(self):
        return Generator(self.model, self.store)

    def close(self):
        if self.store is not None:
            self.store.close()


def _bool(v):
    if isinstance(v, bool):
        return v
    if v.lower() in ("1", "true", "yes", "on"):
        return True
    if v.lower() in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"not a boolean: {v!r}")


def _parser():
    p = argparse.ArgumentParser(
        prog="python3 -m kvtier.model.generate",
        description="Runs the Python Llama model on a prompt, reusing its cached prefix pages "
                    "through kvtierd (pages are interchangeable with kvtier-generate's).")
    a = p.add_argument
    a("--model", required=True, help="checkpoint directory (config.json + *.safetensors)")
    a("--prompt", default="", help="prompt text (byte-level tokens)")
    a("--prompt_file", default="", help="file whose bytes are the prompt")
    a("--prompt_ids", default="", help="prompt as comma-separated token ids")
    a("--random_prompt_tokens", type=int, default=0,
      help="prompt of N pseudo-random token ids (--prompt_seed), as kvtier-generate's")
    a("--prompt_seed", type=int, default=7, help="seed of --random_prompt_tokens")
    a("--max_new_tokens", type=int, default=32, help="tokens to generate (greedy)")
    a("--tokens_per_page", type=int, default=256, help="tokens per KV page (= daemon page)")
    a("--kv_dtype", default="fp16", choices=sorted(KV_DTYPES), help="KV page dtype")
    a("--kv_pages", type=int, default=0,
      help="KV arena pages (0: enough for the prompt and new tokens)")
    a("--sliding_window", type=int, default=-1,
      help="attention window in tokens (0: full; -1: config.json's sliding_window, full when "
           "it has none)")
    a("--attention", default="kernel", choices=ATTENTION,
      help="kernel: kvtier's paged-attention kernels (kvtier-generate's) read the page dtype in "
           "place; torch: gather the pages to fp32 and attend with torch ops")
    a("--runs", type=int, default=1, help="serve the prompt this many times (reuse shows from run 2)")
    a("--no_daemon", type=_bool, nargs="?", const=True, default=False,
      help="do not contact kvtierd")
    a("--layerwise", type=_bool, nargs="?", const=True, default=False,
      help="restore the prefix layer by layer (prefill overlaps the copy; same output)")
    a("--endpoint", default="", help="kvtierd endpoint (default: the default ipc socket)")
    a("--tenant", default="default", help="tenant")
    a("--token", default="", help="tenant token")
    a("--print_ids", type=_bool, nargs="?", const=True, default=False,
      help="print new token ids instead of text")
    a("--json", type=_bool, nargs="?", const=True, default=False,
      help='also print one "json: {...}" line per run')
    a("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    return p


def _prompt(args):
    if args.prompt_ids:
        try:
            return [int(x) for x in args.prompt_ids.split(",")]
        except ValueError:
            raise SystemExit(f"--prompt_ids: {args.prompt_ids!r} is not a list of token ids")
    if args.random_prompt_tokens > 0:
        return [x % 256 for x in mt19937(args.prompt_seed, args.random_prompt_tokens)]
    text = args.prompt.encode()
    if args.prompt_file:
        with open(args.prompt_file, "rb") as f:
            text = f.read()
    if not text:
        raise SystemExit("give a prompt: --prompt, --prompt_file, --prompt_ids or "
                         "--random_prompt_tokens")
    return list(text)


def _report(run, r, print_ids, as_json):
    text = ",".join(map(str, r.tokens)) if print_ids else bytes_to_text(r.tokens)
    st = r.stats
    tiers = ",".join(st.restored_from) or "none"
    lw = f", layer-wise, prefill waited {st.layer_wait_ms:.1f} ms" if st.layerwise else ""
    print(f"run {run}: {text}")
    print(f"run {run}: prompt {st.prompt_tokens} tokens: restored {st.restored_tokens} ({tiers}), "
          f"computed {st.computed_tokens}; TTFT {st.ttft_ms:.1f} ms (restore {st.restore_ms:.1f} ms{lw})")
    print(f"run {run}: {st.new_tokens} new tokens, decode {st.decode_tokens_per_s():.1f} tokens/s; "
          f"pages put {st.pages_put}, deduplicated {st.pages_deduplicated}, not stored "
          f"{st.pages_not_stored} (PUT {st.put_ms:.1f} ms)")
    if st.reuse_note:
        print(f"run {run}: reuse: {st.reuse_note}")
    if st.stop_note:  # a normal stop, like EOS, but one the user should hear about
        print(f"kvtier.model.generate: run {run}: {st.stop_note}", file=sys.stderr)
    if as_json:
        d = dict(vars(st), run=run, tokens=r.tokens)
        print("json: " + json.dumps(d, sort_keys=True))


def main(argv=None):
    args = _parser().parse_args(argv)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    prompt = _prompt(args)
    tpp = max(1, args.tokens_per_page)
    pages = args.kv_pages or (len(prompt) + args.max_new_tokens + tpp - 1) // tpp + 1
    try:
        s = Session(args.model, args.tokens_per_page, args.kv_dtype, pages,
                    use_daemon=not args.no_daemon, endpoint=args.endpoint or None,
                    tenant=args.tenant, token=args.token,
                    sliding_window=None if args.sliding_window < 0 else args.sliding_window,
                    attention=args.attention)
    except (OSError, ValueError, RuntimeError, kvtier.Error) as e:
        print(f"kvtier.model.generate: {e}", file=sys.stderr)
        return 1
    c = s.weights.config
    print(f"model: {c.num_hidden_layers} layers x {c.hidden_size} hidden, "
          f"{c.num_attention_heads} heads ({c.num_key_value_heads} KV), vocab {c.vocab_size}, "
          f"{s.weights.parameter_count() / 1e6:.1f}M parameters; KV page "
          f"{{layers={c.num_hidden_layers} kv_heads={c.num_key_value_heads} head_dim={c.head_dim} "
          f"tokens_per_page={args.tokens_per_page} dtype={args.kv_dtype}}}")
    print(f"daemon: {'connected, prefix reuse on' if s.store else s.daemon_note}")
    print(f"fingerprint: {s.fingerprint.hex()} layout_id: {s.layout.layout_id:016x}")
    try:
        g = s.generator()
        for run in range(1, args.runs + 1):
            try:
                r = g.generate(prompt, args.max_new_tokens, layerwise=args.layerwise)
            except (ValueError, RuntimeError, kvtier.Error) as e:
                print(f"kvtier.model.generate: {e}", file=sys.stderr)
                return 1
            _report(run, r, args.print_ids, args.json)
            sys.stdout.flush()
    finally:
        s.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
