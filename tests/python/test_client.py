# kvtier.Client against a real kvtierd: pages round-trip through numpy views
# of a registered ShmBuffer and inline, lookups (plain, leased, async), delete,
# prefetch, evict, stats, ping, layer-wise GET, and the GIL released while a
# call waits on the daemon.
import os
import signal
import sys
import threading

import numpy as np
import pytest

import kvtier

LAYOUT = kvtier.Layout(layers=2, kv_heads=2, head_dim=64, tokens_per_page=64)  # 64 KiB pages
PB = LAYOUT.page_bytes


def chain(n, seed=0):
    tokens = [(seed * 1000003 + i * 7919) % (1 << 31) for i in range(n * LAYOUT.tokens_per_page)]
    return kvtier.page_keys(LAYOUT, tokens)


def random_pages(n, seed):
    return np.random.default_rng(seed).integers(0, 256, size=(n, PB), dtype=np.uint8)


@pytest.fixture
def client(kvtierd):
    with kvtier.Client(kvtierd.endpoint, layout=LAYOUT, client_name="pytest") as c:
        yield c


@pytest.fixture
def arena(client):
    """A registered ShmBuffer of 16 pages and its numpy view, one row per page."""
    buf = kvtier.ShmBuffer(16 * PB)
    view = np.frombuffer(buf, dtype=np.uint8).reshape(16, PB)
    return client.register(buf), buf, view


def offsets(first, n):
    return [(first + i) * PB for i in range(n)]


def test_session_properties(kvtierd):
    with kvtier.Client(kvtierd.endpoint, layout=LAYOUT) as c:
        assert c.namespace == "default"
        assert c.page_bytes == PB
        assert c.layout_id == LAYOUT.layout_id
        assert not c.closed
    assert c.closed
    with pytest.raises(kvtier.FailedPrecondition, match="closed"):
        c.lookup(chain(1))
    c.close()  # idempotent
    # Without a layout: LOOKUP and STATS work, page_bytes is 0.
    with kvtier.Client(kvtierd.endpoint) as c:
        assert c.page_bytes == 0
        assert c.lookup(chain(2)).hits == 0


def test_put_get_round_trip_through_numpy_views(client, arena):
    buffer_id, _, view = arena
    keys = chain(4, seed=1)
    view[0:4] = random_pages(4, seed=1)  # written through the view: what the daemon PUTs
    r = client.put(keys, buffer_id, offsets(0, 4))
    assert (r.stored, r.deduplicated, r.not_stored) == (4, 0, 0)
    hit = client.lookup(keys)
    assert hit.hits == 4 and hit.tiers == ["host"] * 4
    view[8:12] = 0
    assert client.get(keys, buffer_id, offsets(8, 4)) == ["host"] * 4
    assert np.array_equal(view[8:12], view[0:4])
    again = client.put(keys, buffer_id, offsets(0, 4))
    assert (again.stored, again.deduplicated) == (0, 4)


def test_get_reports_misses_and_leaves_their_bytes(client, arena):
    buffer_id, _, view = arena
    keys = chain(3, seed=2)
    view[0] = random_pages(1, seed=2)[0]
    client.put(keys[:1], buffer_id, offsets(0, 1))
    view[4:7] = 0xAB
    assert client.get(keys, buffer_id, offsets(4, 3)) == ["host", None, None]
    assert np.array_equal(view[4], view[0])
    assert (view[5:7] == 0xAB).all()


def test_put_with_parent_and_packed_keys(client, arena):
    buffer_id, _, view = arena
    keys = chain(4, seed=3)
    view[0:4] = random_pages(4, seed=3)
    client.put(keys[:2], buffer_id, offsets(0, 2))
    r = client.put(b"".join(keys[2:]), buffer_id, offsets(2, 2), parent=keys[1])
    assert r.stored == 2
    assert client.lookup(b"".join(keys)).hits == 4


def test_inline_round_trip(client):
    keys = chain(3, seed=4)
    pages = [bytes(p) for p in random_pages(2, seed=4)]
    r = client.put_inline(keys[:2], pages)
    assert r.stored == 2
    got = client.get_inline(keys)
    assert got[:2] == pages and got[2] is None
    # Any bytes-like page: numpy rows and memoryviews.
    more = random_pages(1, seed=5)
    assert client.put_inline(keys[2:], [more[0]], parent=keys[1]).stored == 1
    assert client.get_inline(keys[2:])[0] == more[0].tobytes()


def test_lookup_async_result_poll_and_done(client, arena):
    buffer_id, _, view = arena
    keys = chain(5, seed=6)
    view[0:3] = random_pages(3, seed=6)
    client.put(keys[:3], buffer_id, offsets(0, 3))
    fut = client.lookup_async(keys)
    r = fut.result(timeout=30)
    assert r.hits == 3 and r.tiers == ["host"] * 3
    assert fut.done()
    assert fut.poll().hits == 3
    # Many in flight at once: each future gets its own answer.
    futs = [client.lookup_async(keys[:i]) for i in range(1, 6)]
    assert [f.result(timeout=30).hits for f in futs] == [1, 2, 3, 3, 3]


def test_lookup_with_lease_pins_the_hits(client, arena):
    buffer_id, _, view = arena
    keys = chain(4, seed=7)
    view[0:4] = random_pages(4, seed=7)
    client.put(keys, buffer_id, offsets(0, 4))
    r = client.lookup(keys, lease_ms=5000)
    assert (r.hits, r.leased) == (4, 4)
    r = client.lookup_async(keys[:2], lease_ms=5000).result(timeout=30)
    assert (r.hits, r.leased) == (2, 2)
    assert client.lookup(keys).leased == 0  # no lease asked, none reported
    with pytest.raises(ValueError, match="lease_ms"):
        client.lookup(keys, lease_ms=-1)


def test_delete_stats_ping(client, arena):
    buffer_id, _, view = arena
    keys = chain(4, seed=8)
    view[0:4] = random_pages(4, seed=8)
    client.put(keys, buffer_id, offsets(0, 4))
    stats = client.stats()
    ns = {n["name"]: n for n in stats["namespaces"]}
    assert ns["default"]["pages"] == 4 and ns["default"]["bytes"] == 4 * PB
    assert ns["default"]["tier_bytes"]["host"] == 4 * PB
    tiers = {t["name"]: t for t in stats["tiers"]}
    assert tiers["host"]["capacity_bytes"] == 256 << 20  # conftest's --host_bytes
    assert tiers["host"]["pages"] == 4
    assert client.delete(keys[2:]) == 2
    assert client.lookup(keys).hits == 2
    assert client.delete(keys) == 2  # only the two still there
    ping = client.ping()
    assert ping["namespace"] == "default" and ping["admin"] is True and ping["version"]


def test_prefetch_and_evict(client, arena):
    buffer_id, _, view = arena
    keys = chain(4, seed=9)
    view[0:4] = random_pages(4, seed=9)
    client.put(keys[:3], buffer_id, offsets(0, 3))
    p = client.prefetch(keys)
    assert (p.resident, p.missing) == (3, 1)
    e = client.evict()
    assert e["evicted"] == 3 and e["remaining"] == 0
    assert client.lookup(keys).hits == 0
    with pytest.raises(kvtier.NotFound, match="no namespace 'nope'"):
        client.evict("nope")


def test_get_policies(client, arena):
    buffer_id, _, view = arena
    keys = chain(2, seed=10)
    view[0:2] = random_pages(2, seed=10)
    client.put(keys, buffer_id, offsets(0, 2))
    assert client.get(keys, buffer_id, offsets(4, 2), policy="best_effort") == ["host"] * 2
    assert client.get(keys, buffer_id, offsets(4, 2), policy="timeout", timeout_ms=100) == ["host"] * 2
    assert np.array_equal(view[4:6], view[0:2])


def test_get_layers_calls_back_per_layer(client):
    buf = kvtier.ShmBuffer(8 * PB + 64)  # pages, then an 8-byte progress counter
    buffer_id = client.register(buf)
    view = np.frombuffer(buf, dtype=np.uint8)
    pages = view[: 8 * PB].reshape(8, PB)
    keys = chain(3, seed=11)
    pages[0:3] = random_pages(3, seed=11)
    client.put(keys, buffer_id, offsets(0, 3))
    seen = []
    tiers = client.get_layers(keys, buffer_id, offsets(4, 3), buf, 8 * PB, seen.append)
    assert tiers == ["host"] * 3
    assert seen == list(range(LAYOUT.layers))
    assert np.array_equal(pages[4:7], pages[0:3])

    # An exception in the callback is raised after the GET, and the session lives on.
    def boom(layer):
        raise RuntimeError(f"layer {layer} refused")
    with pytest.raises(RuntimeError, match="layer 0 refused"):
        client.get_layers(keys, buffer_id, offsets(4, 3), buf, 8 * PB, boom)
    assert client.lookup(keys).hits == 3


def test_calls_release_the_gil(kvtierd, client):
    """A second thread must run while a call waits on the daemon. The daemon is
    stopped (SIGSTOP); only the other thread resumes it (SIGCONT), so the call
    can return in time only if the GIL was released while it waited. With a huge
    switch interval the interpreter never takes the GIL from us by itself."""
    keys = chain(2, seed=12)
    go = threading.Event()
    progress = []

    def helper():
        go.wait()
        for i in range(1000):
            progress.append(i)
        os.kill(kvtierd.pid, signal.SIGCONT)

    t = threading.Thread(target=helper)
    t.start()
    old = sys.getswitchinterval()
    os.kill(kvtierd.pid, signal.SIGSTOP)
    try:
        sys.setswitchinterval(1000.0)
        go.set()
        r = client.lookup(keys)  # blocks until the helper resumes the daemon
    finally:
        sys.setswitchinterval(old)
        os.kill(kvtierd.pid, signal.SIGCONT)
        t.join()
    assert r.hits == 0
    assert len(progress) == 1000


def test_threads_share_one_client(client, arena):
    """Calls from several threads are serialised by the client, not corrupted."""
    buffer_id, _, view = arena
    keys = [chain(1, seed=100 + i) for i in range(4)]
    view[0:4] = random_pages(4, seed=13)
    errors, results = [], {}

    def worker(i):
        try:
            for _ in range(20):
                client.put(keys[i], buffer_id, offsets(i, 1))
                results[i] = client.lookup(keys[i]).hits
        except Exception as e:  # noqa: BLE001 -- reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert results == {0: 1, 1: 1, 2: 1, 3: 1}
    for i in range(4):
        assert client.get(keys[i], buffer_id, offsets(8 + i, 1)) == ["host"]
        assert np.array_equal(view[8 + i], view[i])


def test_put_reports_each_page(client):
    """PutResult.page_status and leading_kept (PutReply, docs/PROTOCOL.md)."""
    keys = chain(4, seed=9)
    pages = [bytes(p) for p in random_pages(4, seed=9)]
    first = client.put_inline(keys[:2], pages[:2])
    assert first.page_status == ["stored", "stored"] and first.leading_kept == 2
    again = client.put_inline(keys, pages)
    assert again.page_status == ["deduplicated", "deduplicated", "stored", "stored"]
    assert again.leading_kept == 4 and "leading_kept=4" in repr(again)
