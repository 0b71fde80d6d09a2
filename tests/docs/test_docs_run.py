# Docs that run (issue 25 item 6): every ```python and ```cpp block of
# README.md, docs/PYTHON.md and docs/INTEGRATIONS.md runs exactly as printed
# against a real kvtierd started with its default flags (docs_util.py), twice:
# a cold cache, then a warm one, so a restore-or-compute example takes the
# other branch the second time and must report it. A fragment on purpose is
# marked `<!-- not run: reason -->` before its fence: counted, reported, and
# at most MAX_SKIPPED of them.
import os
import re
import sys
import subprocess

import pytest

from docs_util import BUILD_DIR, DOCS, REPO, RUN_BLOCKS, RUN_LANGS, parse_blocks

MAX_SKIPPED = 3  # "a handful"
RUN_TIMEOUT_S = 120


def test_the_docs_have_blocks_to_run_and_few_skipped():
    found = {lang: [b.where for b in RUN_BLOCKS if b.lang == lang] for lang in RUN_LANGS}
    skipped = [b for b in RUN_BLOCKS if b.skip]
    print(f"\ndocs blocks: {len(RUN_BLOCKS)} to consider, {len(skipped)} skipped")
    for doc in DOCS:
        mine = [b for b in RUN_BLOCKS if b.doc == doc]
        print(f"  {doc}: " + ", ".join(f"{b.lang} at line {b.line}" +
                                      (f" SKIPPED ({b.skip})" if b.skip else "") for b in mine))
    assert found["python"] and found["cpp"], f"no python or no cpp block found: {found}"
    assert len(skipped) <= MAX_SKIPPED, (
        f"{len(skipped)} blocks are marked `not run` (at most {MAX_SKIPPED}): " +
        "; ".join(f"{b.where}: {b.skip}" for b in skipped))
    for b in skipped:
        assert b.skip.strip(), f"{b.where}: `<!-- not run: -->` must give a reason"


def test_markers_are_read_from_the_line_before_the_fence():
    text = """intro

<!-- not run: a fragment of the loop above -->
```python
x = 1
```
<!-- kvtierd: --host_slab_bytes=32MiB --nvme_bytes=0 -->

```cpp
int main() {}
```
- item:

  ```python
  print("indented")
  ```
"""
    a, b, c = parse_blocks("t.md", text)
    assert (a.line, a.lang, a.code, a.skip, a.daemon_flags) == (
        4, "python", "x = 1\n", "a fragment of the loop above", ())
    assert (b.line, b.lang, b.skip, b.daemon_flags) == (
        9, "cpp", "", ("--host_slab_bytes=32MiB", "--nvme_bytes=0"))
    assert (c.line, c.code, c.skip) == (14, 'print("indented")\n', "")


def _run(block, argv, daemon, cwd, attempt):
    try:
        p = subprocess.run(argv, cwd=cwd, env=daemon.env, capture_output=True, text=True,
                           timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{block.where}, {attempt} run: still running after {RUN_TIMEOUT_S} s")
    if p.returncode != 0:
        pytest.fail(f"{block.where}, {attempt} run, exactly as printed, failed "
                    f"(exit {p.returncode}) against kvtierd {' '.join(daemon.flags) or '(defaults)'}"
                    f"\n--- stdout\n{p.stdout}--- stderr\n{p.stderr}"
                    f"--- kvtierd log (tail)\n{daemon.log()[-3000:]}")
    return p.stdout


def _compile_cpp(block, src, exe):
    """g++ -std=c++20 against the source tree's public headers and the build's
    libkvtier-client.so (the flags `pkg-config --cflags --libs kvtier-client`
    give an installed tree: its headers, the library, Abseil)."""
    try:
        absl = subprocess.run(["pkg-config", "--libs", "absl_status", "absl_statusor",
                               "absl_strings"], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError) as e:
        pytest.fail(f"pkg-config cannot give Abseil's flags for {block.where}: {e}")
    libdir = os.path.join(BUILD_DIR, "client")
    argv = ["g++", "-std=c++20", "-O1", "-I", os.path.join(REPO, "client", "include"),
            "-I", os.path.join(REPO, "api", "include"), src, "-o", exe, f"-L{libdir}",
            "-lkvtier-client", f"-Wl,-rpath,{libdir}"] + absl.stdout.split()
    p = subprocess.run(argv, capture_output=True, text=True)
    if p.returncode != 0:
        pytest.fail(f"{block.where} does not compile as printed:\n{' '.join(argv)}\n{p.stderr}")


RESULT = re.compile(r"restored (\d+) pages?, computed (\d+)")


def _check_cold_then_warm(block, cold, warm):
    """A restore-or-compute example: the first run computes every page, the
    second restores them all and computes none."""
    c, w = RESULT.search(cold), RESULT.search(warm)
    if not c and not w:
        return
    assert c and w, f"{block.where}: only one run printed its result: {cold!r} / {warm!r}"
    restored, computed = int(c.group(1)), int(c.group(2))
    assert restored == 0 and computed > 0, f"{block.where}, cold cache: {c.group(0)}"
    assert (int(w.group(1)), int(w.group(2))) == (computed, 0), (
        f"{block.where}, warm cache after computing {computed}: {w.group(0)}")


@pytest.mark.parametrize("block", [b for b in RUN_BLOCKS if not b.skip],
                         ids=lambda b: f"{b.doc}:{b.line}:{b.lang}")
def test_block_runs_as_printed(block, default_daemon, tmp_path):
    daemon = default_daemon(block.daemon_flags)
    if block.lang == "python":
        src = tmp_path / "example.py"
        src.write_text(block.code)
        argv = [sys.executable, str(src)]  # the interpreter the package was built for
    else:
        src, exe = tmp_path / "example.cc", tmp_path / "example"
        src.write_text(block.code)
        _compile_cpp(block, str(src), str(exe))
        argv = [str(exe)]
    cold = _run(block, argv, daemon, tmp_path, "first (cold cache)")
    warm = _run(block, argv, daemon, tmp_path, "second (warm cache)")
    print(f"{block.where}:\n  cold: {cold.strip()}\n  warm: {warm.strip()}")
    _check_cold_then_warm(block, cold, warm)
