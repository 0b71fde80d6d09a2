# Shared fixtures for the Python tests: a REAL kvtierd (the binary from
# $KVTIER_BUILD_DIR, default <repo>/build) on a private ipc socket under a fresh
# short temp dir, started per test and stopped after it. Mirrors the C++
# harness in tests/integration/daemon_process.cc (same default flags).
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD_DIR = os.path.abspath(os.environ.get("KVTIER_BUILD_DIR") or os.path.join(REPO, "build"))

# A bare `/usr/bin/python3 -m pytest tests/python` finds the package in the
# build tree (<build>/python: the extension and the linked sources) without
# PYTHONPATH. KVTIER_TEST_INSTALLED=1: test the package the interpreter has
# installed instead (tests/python/package_test.sh, a wheel in a venv).
if os.environ.get("KVTIER_TEST_INSTALLED") != "1":
    _p = os.path.join(BUILD_DIR, "python")
    if _p not in sys.path:
        sys.path.insert(0, _p)

# $KVTIERD overrides the daemon binary (e.g. a sanitizer build's).
KVTIERD = os.environ.get("KVTIERD") or os.path.join(BUILD_DIR, "daemon", "kvtierd")

# Flags every daemon gets (later flags win, so a test's own override these).
# --nvme_bytes=0: host-only eviction drops pages, and no test writes a 4 GiB file.
DEFAULT_FLAGS = ["--host_bytes=256MiB", "--host_slab_bytes=4MiB", "--hugepages=off",
                 "--copy_threads=2"]


try:  # looked up here, not in the forked child (no dlopen after fork)
    import ctypes
    _PRCTL = ctypes.CDLL("libc.so.6", use_errno=True).prctl
except (OSError, AttributeError):
    _PRCTL = None


def _die_with_parent():
    """Runs in the child before exec: SIGKILL the daemon if pytest dies (a crash
    in a test must not leave daemons behind)."""
    if _PRCTL is not None:
        _PRCTL(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG


class DaemonProcess:
    """One kvtierd child process; its socket, state and log live in `dir`."""

    def __init__(self, flags=(), tenants=None, nvme=False, probe_tenant="default",
                 probe_token="", ready_timeout=15.0):
        if not os.access(KVTIERD, os.X_OK):
            raise RuntimeError(f"kvtierd not found at {KVTIERD} (set KVTIER_BUILD_DIR to a build dir)")
        # Short: an ipc socket path must stay under ~100 bytes.
        self.dir = tempfile.mkdtemp(prefix="kvt-py-", dir="/tmp")
        self.socket = os.path.join(self.dir, "kvtierd.sock")
        self.endpoint = "ipc://" + self.socket
        self.log_path = os.path.join(self.dir, "kvtierd.log")
        self.pid = None
        self._proc = None
        self._spawned_pids = []
        self.probe_tenant, self.probe_token = probe_tenant, probe_token
        self.ready_timeout = ready_timeout
        args = [f"--state_dir={os.path.join(self.dir, 'state')}", f"--socket={self.socket}",
                "--nvme_bytes=64MiB" if nvme else "--nvme_bytes=0"] + DEFAULT_FLAGS
        if tenants is not None:
            path = os.path.join(self.dir, "tenants.json")
            with open(path, "w") as f:
                f.write(tenants if isinstance(tenants, str) else json.dumps(tenants))
            args.append(f"--tenants_file={path}")
        self.args = args + list(flags)
        try:
            self.start()
        except BaseException:
            self.close()
            raise

    # -- lifecycle ---------------------------------------------------------
    def start(self):
        log = open(self.log_path, "ab")
        try:
            self._proc = subprocess.Popen([KVTIERD] + self.args, stdin=subprocess.DEVNULL,
                                          stdout=log, stderr=subprocess.STDOUT,
                                          preexec_fn=_die_with_parent)
        finally:
            log.close()
        self.pid = self._proc.pid
        self._spawned_pids.append(self.pid)
        self._wait_ready()

    def alive(self):
        return self._proc is not None and self._proc.poll() is None

    def stop(self, sig=signal.SIGTERM, timeout=10.0):
        """Signals the daemon and waits; returns its exit code (negative: a signal).
        Kills it when it does not exit within `timeout`."""
        if self._proc is None:
            return None
        proc, self._proc = self._proc, None
        if proc.poll() is None:
            proc.send_signal(sig)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.pid = None
        return proc.returncode

    def kill(self):
        return self.stop(signal.SIGKILL)

    def send_signal(self, sig):
        """e.g. SIGSTOP / SIGCONT to freeze the daemon while a call is in flight."""
        if self._proc is None:
            raise RuntimeError("kvtierd is not running")
        self._proc.send_signal(sig)

    def restart(self, sig=signal.SIGTERM):
        """Stops (SIGTERM: must exit 0) and starts again on the same socket and state dir."""
        code = self.stop(sig)
        if sig == signal.SIGTERM and code != 0:
            raise RuntimeError(f"kvtierd exited with {code} on SIGTERM; log:\n{self.log()}")
        self.start()

    def close(self):
        self.stop()
        # A daemon that did not exit cleanly leaves its host arena behind.
        for pid in self._spawned_pids:
            try:
                os.unlink(f"/dev/shm/kvtier-host-{pid}")
            except OSError:
                pass
        shutil.rmtree(self.dir, ignore_errors=True)

    def log(self):
        try:
            with open(self.log_path, "r", errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    # -- readiness ---------------------------------------------------------
    def _wait_ready(self):
        deadline = time.monotonic() + self.ready_timeout
        last = "not probed"
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                code = self._proc.returncode
                self._proc, self.pid = None, None
                raise RuntimeError(f"kvtierd exited ({code}) during startup; log:\n{self.log()}")
            ok, last = self._probe()
            if ok:
                return
            time.sleep(0.02)
        raise RuntimeError(f"kvtierd did not answer within {self.ready_timeout} s ({last}); "
                           f"log:\n{self.log()}")

    def _probe(self):
        """A HELLO through kvtier when the package imports; else the socket file."""
        try:
            import kvtier
        except ImportError:
            kvtier = None
        if kvtier is None:
            if os.path.exists(self.socket):
                time.sleep(0.1)  # bound, about to accept
                return True, ""
            return False, "no socket yet"
        try:
            kvtier.Client(self.endpoint, tenant=self.probe_tenant, token=self.probe_token,
                          timeout_ms=200, client_name="pytest-probe").close()
            return True, ""
        except (kvtier.Unavailable, kvtier.DeadlineExceeded) as e:
            return False, f"{type(e).__name__}: {e}"
        except kvtier.Error:
            return True, ""  # it answered (e.g. the probe tenant is not in its tenants file)

    def __repr__(self):
        return f"<kvtierd pid={self.pid} endpoint={self.endpoint}>"


@pytest.fixture
def kvtierd_factory():
    """Starts daemons with custom flags: factory(flags=[...], tenants=dict|None, nvme=False,
    probe_tenant=..., probe_token=...). All are stopped at the end of the test."""
    started = []

    def factory(flags=(), tenants=None, nvme=False, **kw):
        d = DaemonProcess(flags=flags, tenants=tenants, nvme=nvme, **kw)
        started.append(d)
        return d

    yield factory
    for d in reversed(started):
        d.close()


@pytest.fixture
def kvtierd(kvtierd_factory):
    """A default daemon: one token-less admin tenant `default`, host tier only."""
    return kvtierd_factory()


@pytest.fixture
def engine(request):
    """An engine stand-in (tests/python/standins/<request.param>.py, e.g.
    "vllm_v0_11_1") installed in sys.modules for one test, with the kvtier
    connectors imported afresh against it; parametrize with indirect=True."""
    from standins import installed
    with installed(request.param) as standin:
        yield standin
