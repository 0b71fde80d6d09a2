#!/usr/bin/env python3
"""docs/TOOLS.md: every program's usage and flags, generated from its --help,
so the reference cannot drift from the programs.

    scripts/flags_reference.py [--check] OUT.md PROGRAM...
Writes OUT.md (one section per program, in the order given), or with --check
compares each given program's section with OUT.md and exits 1 naming the
programs whose section differs (a program not given is not checked: a build
without CUDA has no GPU benchmark). Regenerate with:
    scripts/flags_reference.py docs/TOOLS.md $(scripts/flags_reference.py --programs build)
"""
import os
import re
import subprocess
import sys

HEADER = """# Programs and flags

Generated from each program's `--help` by `scripts/flags_reference.py`; a test
(`docs_flags_test`) fails when a program's flags and this file differ. Every
program also takes `--flagfile=FILE`, `--version` and `--helpfull`. The .deb
installs the same text as man pages (`man kvtierd`). How to use the daemon's
flags: [OPERATIONS.md](OPERATIONS.md); the tools: [README.md](../README.md).
"""
# The installed and the developer programs, in the order of the file.
PROGRAMS = ["daemon/kvtierd", "tools/kvtierctl", "tools/stress/kvtier-stress", "tools/sim/kvtier-sim",
            "client/decoder/kvtier-generate", "client/decoder/kvtier-make-checkpoint",
            "tools/kvtier-demo", "tools/bench/kvtier-bench", "tools/bench/kvtier-hbm-bench",
            "kernels/kvtier-kernels-bench", "tiers/nvme/bench/kvtier-nvme-bench",
            "tiers/store/bench/kvtier-scale-bench", "tiers/nvme/bench/kvtier-io-class-bench",
            "tiers/store/bench/kvtier-layer-read-bench", "tiers/remote/bench/kvtier-remote-bench",
            "tests/hbm/kvtier-nvme-device-get-bench", "client/decoder/kvtier-decoder-bench",
            "client/decoder/kvtier-gpu-decoder-bench", "client/decoder/kvtier-remote-ttft-bench",
            "client/decoder/kvtier-first-restore-bench",
            "tiers/shared_cache/kvtier-seal-bench"]
FLAG = re.compile(r"^  --(\[no\])?([A-Za-z0-9_]+)(=(\S+))?(?: \(default: (.*)\))?$")


SOURCE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def build_root(path):
    """The build directory a program path lies in (PROGRAMS names it relative)."""
    path = os.path.abspath(path)
    for rel in PROGRAMS:
        if path.endswith("/" + rel):
            return path[:-len(rel) - 1]
    return os.path.dirname(path)


def section(path):
    name = os.path.basename(path)
    out = subprocess.run([path, "--help"], capture_output=True, text=True, timeout=30).stdout
    # Defaults that name this checkout (a build's own kvtierd, say) would make
    # the file differ per clone: written as {build} and {source}.
    out = out.replace(build_root(path), "{build}").replace(SOURCE, "{source}")
    lines = out.splitlines()
    usage, flags, i = [], [], 0
    while i < len(lines) and lines[i].strip() != "Flags:":
        usage.append(lines[i])
        i += 1
    i += 1
    while i < len(lines):
        m = FLAG.match(lines[i])
        i += 1
        if not m:
            continue
        desc = []
        while i < len(lines) and lines[i].startswith("      "):
            desc.append(lines[i].strip())
            i += 1
        neg, flag, typ, default = m.group(1), m.group(2), m.group(4), m.group(5)
        shown = f"--[no]{flag}" if neg else (f"--{flag}={typ}" if typ else f"--{flag}")
        flags.append((shown, "" if default is None else default, " ".join(desc)))
    text = [f"## {name}", "", "```", *[u for u in usage if u.strip()], "```", ""]
    text += ["| flag | default | meaning |", "|---|---|---|"]
    for shown, default, desc in flags:
        cell = lambda s: s.replace("|", "\\|")  # noqa: E731
        text.append(f"| `{shown}` | {cell(default) if default else ''} | {cell(desc)} |")
    return name, "\n".join(text) + "\n"


def split_sections(text):
    found = {}
    for block in re.split(r"(?m)^(?=## )", text):
        m = re.match(r"## (\S+)", block)
        if m:
            found[m.group(1)] = block.rstrip("\n") + "\n"
    return found


def main(argv):
    if argv[:1] in (["-h"], ["--help"]):  # not an output path
        print(__doc__.strip())
        return 0
    if argv[:1] == ["--programs"]:
        build = argv[1]
        print(" ".join(os.path.join(build, p) for p in PROGRAMS
                       if os.access(os.path.join(build, p), os.X_OK)))
        return 0
    check = argv[:1] == ["--check"]
    if check:
        argv = argv[1:]
    out, programs = argv[0], argv[1:]
    sections = [section(p) for p in programs]
    if not check:
        with open(out, "w") as f:
            f.write(HEADER + "\n" + "\n".join(s for _, s in sections))
        return 0
    with open(out) as f:
        have = split_sections(f.read())
    stale = [name for name, s in sections if have.get(name) != s]
    for name in stale:
        print(f"{out}: the section of {name} differs from its --help", file=sys.stderr)
    if stale:
        print("regenerate: scripts/flags_reference.py docs/TOOLS.md "
              "$(scripts/flags_reference.py --programs build)", file=sys.stderr)
        return 1
    print(f"{out}: {len(sections)} programs match their --help")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
