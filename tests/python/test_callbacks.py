# Calls into a kvtier.Client from inside its own get_layers on_layer callback
# (issue 24): the GET holds the client's mutex while the callback runs, so such
# a call is refused at once with FailedPrecondition instead of deadlocking.
# Every test body runs under a 10 s guard, so a regression fails, not hangs.
import ctypes
import threading
import time

import numpy as np
import pytest

import kvtier

LAYOUT = kvtier.Layout(layers=2, kv_heads=2, head_dim=64, tokens_per_page=64)  # 64 KiB pages
PB = LAYOUT.page_bytes
GUARD_S = 10.0


def chain(n, seed=0):
    tokens = [(seed * 1000003 + i * 7919) % (1 << 31) for i in range(n * LAYOUT.tokens_per_page)]
    return kvtier.page_keys(LAYOUT, tokens)


class Setup:
    """A client with 3 stored pages and a registered buffer to GET them into
    (pages 4-6), its progress counter after the 8 pages."""

    def __init__(self, endpoint):
        self.client = kvtier.Client(endpoint, layout=LAYOUT, client_name="pytest-callbacks")
        self.hung = False
        self.buf = kvtier.ShmBuffer(8 * PB + 64)
        self.buffer_id = self.client.register(self.buf)
        pages = np.frombuffer(self.buf, dtype=np.uint8)[: 8 * PB].reshape(8, PB)
        pages[0:3] = np.random.default_rng(24).integers(0, 256, size=(3, PB), dtype=np.uint8)
        self.keys = chain(3, seed=24)
        self.client.put(self.keys, self.buffer_id, [i * PB for i in range(3)])

    def get_layers(self, on_layer):
        return self.client.get_layers(self.keys, self.buffer_id, [(4 + i) * PB for i in range(3)],
                                      self.buf, 8 * PB, on_layer)

    def guarded(self, body):
        """Runs body() on a thread and returns its result (or raises its error);
        fails the test when it is not done within GUARD_S. A hung client is
        leaked: closing it would wait on the deadlocked mutex forever."""
        out = {}

        def run():
            try:
                out["value"] = body()
            except BaseException as e:  # noqa: BLE001 -- re-raised on the test's thread
                out["error"] = e

        t = threading.Thread(target=run, daemon=True)
        t.start()
        t.join(GUARD_S)
        if t.is_alive():
            self.hung = True
            ctypes.pythonapi.Py_IncRef(ctypes.py_object(self.client))  # never destroyed
            pytest.fail(f"the test body did not finish within {GUARD_S} s (client deadlocked)")
        if "error" in out:
            raise out["error"]
        return out.get("value")


@pytest.fixture
def s(kvtierd):
    setup = Setup(kvtierd.endpoint)
    yield setup
    if not setup.hung:
        setup.client.close()


def refused(method):
    return (rf"kvtier\.Client\.{method}\(\) called from inside an on_layer callback of the same "
            r"client: the client is busy with get_layers; call it after get_layers returns")


def test_ping_from_on_layer_is_refused(s):
    errors = []

    def on_layer(layer):
        try:
            s.client.ping()
        except kvtier.FailedPrecondition as e:
            errors.append(e)

    assert s.guarded(lambda: s.get_layers(on_layer)) == ["host"] * 3
    assert len(errors) == LAYOUT.layers  # refused every time; the callbacks went on
    for e in errors:
        assert e.code == "FAILED_PRECONDITION"
        assert isinstance(e, kvtier.Error)
    with pytest.raises(kvtier.FailedPrecondition, match=refused("ping")):
        raise errors[0]
    assert s.client.ping() is not None  # the session is fine afterwards


def test_close_from_on_layer_is_refused(s):
    # Not caught in the callback: raised by get_layers once the GET ends, like
    # any exception from on_layer; the client stays open and usable.
    with pytest.raises(kvtier.FailedPrecondition, match=refused("close")):
        s.guarded(lambda: s.get_layers(lambda layer: s.client.close()))
    assert not s.client.closed
    assert s.client.lookup(s.keys).hits == 3
    s.client.close()
    assert s.client.closed


@pytest.mark.parametrize("method", ["lookup", "get", "get_layers", "put", "lookup_batch",
                                    "delete", "stats", "register", "unregister"])
def test_data_calls_from_on_layer_are_refused(s, method):
    c, off = s.client, [(4 + i) * PB for i in range(3)]
    calls = {
        "lookup": lambda: c.lookup(s.keys),
        "get": lambda: c.get(s.keys, s.buffer_id, off),
        "get_layers": lambda: s.get_layers(None),
        "put": lambda: c.put(s.keys, s.buffer_id, off),
        "lookup_batch": lambda: c.lookup_batch([s.keys]),
        "delete": lambda: c.delete(s.keys),
        "stats": lambda: c.stats(),
        "register": lambda: c.register(kvtier.ShmBuffer(PB)),
        "unregister": lambda: c.unregister(s.buffer_id),
    }
    with pytest.raises(kvtier.FailedPrecondition, match=refused(method)):
        s.guarded(lambda: s.get_layers(lambda layer: calls[method]()))
    # Nothing was done: the pages and the registration are intact.
    assert c.lookup(s.keys).hits == 3
    assert c.get(s.keys, s.buffer_id, off) == ["host"] * 3


def test_lookup_async_and_other_clients_work_from_on_layer(s, kvtierd):
    # lookup_async runs on its own session, another client has its own mutex:
    # neither waits for this GET, so both are allowed.
    with kvtier.Client(kvtierd.endpoint, layout=LAYOUT) as other:
        futures, pings = [], []

        def on_layer(layer):
            futures.append(s.client.lookup_async(s.keys))
            pings.append(other.ping())

        assert s.guarded(lambda: s.get_layers(on_layer)) == ["host"] * 3
        assert len(pings) == LAYOUT.layers
        assert all(f.result(timeout=GUARD_S).hits == 3 for f in futures)


def test_other_threads_still_wait_for_get_layers(s):
    # Only the callback's own thread is refused: another thread's call waits
    # for the GET to end, as before.
    done = threading.Event()
    result, during = {}, []

    def pinger():
        result["ping"] = s.client.ping()
        done.set()

    def on_layer(layer):
        if layer == 0:
            threading.Thread(target=pinger, daemon=True).start()
            time.sleep(0.2)  # GIL released: the pinger reaches the mutex and waits
        during.append(done.is_set())

    assert s.guarded(lambda: s.get_layers(on_layer)) == ["host"] * 3
    assert during == [False] * LAYOUT.layers
    assert done.wait(GUARD_S) and result["ping"] is not None
