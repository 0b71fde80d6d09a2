# Helpers for the Python-model tests: the C++ decoder's binaries from
# $KVTIER_BUILD_DIR (kvtier-make-checkpoint, kvtier-generate), run as
# subprocesses, and a parser for the run lines kvtier-generate and
# `python3 -m kvtier.model.generate` both print.
import os
import re
import subprocess

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD_DIR = os.path.abspath(os.environ.get("KVTIER_BUILD_DIR") or os.path.join(REPO, "build"))
MAKE_CHECKPOINT = os.path.join(BUILD_DIR, "client", "decoder", "kvtier-make-checkpoint")
GENERATE = os.path.join(BUILD_DIR, "client", "decoder", "kvtier-generate")

_STATS = re.compile(r"prompt (\d+) tokens: restored (\d+) \(([^)]*)\), computed (\d+); "
                    r"TTFT ([\d.]+) ms")
_PUT = re.compile(r"(\d+) new tokens, .*pages put (\d+), deduplicated (\d+), not stored (\d+)")


def make_checkpoint(out_dir, size="tiny", dtype="bf16", seed=1):
    subprocess.run([MAKE_CHECKPOINT, f"--size={size}", f"--out={out_dir}", f"--dtype={dtype}",
                    f"--seed={seed}"], check=True, capture_output=True, timeout=300)
    return str(out_dir)


def parse_runs(stdout):
    """{run: {tokens, prompt, restored, tiers, computed, ttft_ms, pages_put, ...}} from
    the `run N: ...` lines (printed with --print_ids)."""
    runs = {}
    for line in stdout.splitlines():
        m = re.match(r"run (\d+): (.*)$", line)
        if not m:
            continue
        run, rest = int(m.group(1)), m.group(2)
        r = runs.setdefault(run, {})
        if "tokens" not in r:
            r["tokens"] = [int(x) for x in rest.split(",")] if rest else []
        elif s := _STATS.match(rest):
            r.update(prompt=int(s[1]), restored=int(s[2]),
                     tiers=[] if s[3] == "none" else s[3].split(","), computed=int(s[4]),
                     ttft_ms=float(s[5]))
        elif p := _PUT.match(rest):
            r.update(new_tokens=int(p[1]), pages_put=int(p[2]), deduplicated=int(p[3]),
                     not_stored=int(p[4]))
        elif rest.startswith("reuse: "):
            r["reuse_note"] = rest[len("reuse: "):]
    return runs


def run_cpp_generate(model_dir, *flags, endpoint=None, timeout=600):
    """Runs kvtier-generate with --print_ids (and --endpoint, or --no_daemon when
    None); returns parse_runs of its output. Fails with its output on exit != 0."""
    args = [GENERATE, f"--model={model_dir}", "--print_ids"] + list(flags)
    args.append(f"--endpoint={endpoint}" if endpoint else "--no_daemon")
    p = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, f"{args} exited {p.returncode}:\n{p.stdout}\n{p.stderr}"
    return parse_runs(p.stdout)
