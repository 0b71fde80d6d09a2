# What the docs tests share: the fenced blocks of the user docs (with their
# markers) and a kvtierd started with its default flags.
#
# The daemon and the examples find each other the way the docs say users do:
# the default socket under $XDG_RUNTIME_DIR, no endpoint anywhere. A block that
# is a fragment on purpose carries `<!-- not run: reason -->` on the line
# before its fence; a block that needs daemon flags says so with
# `<!-- kvtierd: --flag=value ... -->` (the daemon then gets exactly those).
# The default daemon preallocates its 4 GiB NVMe file: the state directory is
# made under the build directory (tmpfs is refused by the daemon).
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD_DIR = os.path.abspath(os.environ.get("KVTIER_BUILD_DIR") or os.path.join(REPO, "build"))
KVTIERD = os.environ.get("KVTIERD") or os.path.join(BUILD_DIR, "daemon", "kvtierd")
PYTHON_PACKAGE = os.path.join(BUILD_DIR, "python")
for p in (PYTHON_PACKAGE, os.path.join(REPO, "tests", "python")):  # kvtier; standins, engine_sim
    if p not in sys.path:
        sys.path.insert(0, p)

DOCS = ["README.md", "docs/PYTHON.md", "docs/INTEGRATIONS.md"]
RUN_LANGS = ("python", "cpp")


@dataclass
class Block:
    doc: str  # relative to the repository
    line: int  # of the opening fence
    lang: str
    code: str
    skip: str = ""  # the reason, from <!-- not run: ... -->
    daemon_flags: tuple = ()  # from <!-- kvtierd: ... -->

    @property
    def where(self):
        return f"{self.doc}:{self.line} ({self.lang} block)"


def extract_blocks(doc):
    """Every fenced block of `doc` (relative to the repository)."""
    with open(os.path.join(REPO, doc), encoding="utf-8") as f:
        return parse_blocks(doc, f.read())


def parse_blocks(doc, text):
    """Every fenced block of markdown `text`, with its language, text and markers."""
    lines = text.split("\n")
    blocks, i = [], 0
    while i < len(lines):
        m = re.match(r"^(\s*)```(\S*)\s*$", lines[i])
        if not m:
            i += 1
            continue
        indent, lang, start = m.group(1), m.group(2), i
        body = []
        i += 1
        while i < len(lines) and lines[i].strip() != "```":
            body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i])
            i += 1
        if i == len(lines):
            raise AssertionError(f"{doc}:{start + 1}: a ``` fence that never closes")
        prev = next((lines[j].strip() for j in range(start - 1, -1, -1) if lines[j].strip()), "")
        skip = re.match(r"^<!--\s*not run:\s*(.*?)\s*-->$", prev)
        flags = re.match(r"^<!--\s*kvtierd:\s*(.*?)\s*-->$", prev)
        blocks.append(Block(doc, start + 1, lang, "\n".join(body) + "\n",
                            skip.group(1) if skip else "",
                            tuple(shlex.split(flags.group(1))) if flags else ()))
        i += 1
    return blocks


ALL_BLOCKS = [b for d in DOCS for b in extract_blocks(d)]
RUN_BLOCKS = [b for b in ALL_BLOCKS if b.lang in RUN_LANGS]


# -- a kvtierd with its default flags -------------------------------------------
class DefaultDaemon:
    """kvtierd with no flags but the doc's own, in a private environment: its
    default socket under a fresh $XDG_RUNTIME_DIR and state under a fresh
    $XDG_STATE_HOME. `env` is what a user's shell would have."""

    def __init__(self, flags=()):
        if not os.access(KVTIERD, os.X_OK):
            raise RuntimeError(f"kvtierd not found at {KVTIERD} (set KVTIER_BUILD_DIR)")
        self.dir = tempfile.mkdtemp(prefix="kvt-docs-", dir="/tmp")  # short: ipc path limit
        self.state = tempfile.mkdtemp(prefix="kvt-docs-state-", dir=BUILD_DIR)
        run = os.path.join(self.dir, "run")
        os.mkdir(run, 0o700)
        self.socket = os.path.join(run, "kvtier", "kvtierd.sock")
        self.endpoint = "ipc://" + self.socket
        self.env = {k: v for k, v in os.environ.items() if k != "KVTIER_ENDPOINT"}
        self.env.update(XDG_RUNTIME_DIR=run, XDG_STATE_HOME=self.state,
                        PYTHONPATH=PYTHON_PACKAGE, PYTHONDONTWRITEBYTECODE="1")
        self.flags = list(flags)
        self.log_path = os.path.join(self.dir, "kvtierd.log")
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen([KVTIERD] + self.flags, env=self.env, stdout=log,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            self._wait_ready()
        except BaseException:
            self.close()
            raise

    def _wait_ready(self, timeout=60.0):
        import kvtier
        deadline, last = time.monotonic() + timeout, "no socket yet"
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"kvtierd {' '.join(self.flags)} exited "
                                   f"({self.proc.returncode}) at start; log:\n{self.log()}")
            if os.path.exists(self.socket):
                try:
                    kvtier.Client(self.endpoint, timeout_ms=500).close()
                    return
                except kvtier.Error as e:
                    last = f"{type(e).__name__}: {e}"
            time.sleep(0.05)
        raise RuntimeError(f"kvtierd did not answer within {timeout} s ({last}); log:\n{self.log()}")

    def log(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def close(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        try:
            os.unlink(f"/dev/shm/kvtier-host-{self.proc.pid}")  # left behind by an unclean exit
        except OSError:
            pass
        shutil.rmtree(self.dir, ignore_errors=True)
        shutil.rmtree(self.state, ignore_errors=True)
