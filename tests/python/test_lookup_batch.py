# kvtier.Client.lookup_batch against a real kvtierd: one round trip answers
# every chain as lookup() would (hits, tiers, leases), empty chains and long
# lists (split over several requests) work, bad input raises before anything
# is sent, and lookup_batch_async hands back the same list.
import os

import numpy as np
import pytest

import kvtier

LAYOUT = kvtier.Layout(layers=1, kv_heads=1, head_dim=64, tokens_per_page=16)  # 4 KiB pages
PB = LAYOUT.page_bytes


def chain(n, seed):
    tokens = [(seed * 1000003 + i * 7919) % (1 << 31) for i in range(n * LAYOUT.tokens_per_page)]
    return kvtier.page_keys(LAYOUT, tokens)


@pytest.fixture
def client(kvtierd):
    with kvtier.Client(kvtierd.endpoint, layout=LAYOUT, client_name="pytest-batch") as c:
        yield c


@pytest.fixture
def stored(client):
    """Three chains of 6 keys; the first 6, 3 and 0 of them stored."""
    buf = kvtier.ShmBuffer(8 * PB)
    view = np.frombuffer(buf, dtype=np.uint8).reshape(8, PB)
    bid = client.register(buf)
    chains = [chain(6, seed) for seed in (11, 12, 13)]
    for c, n in zip(chains, (6, 3, 0)):
        if n:
            view[:n] = np.random.default_rng(n).integers(0, 256, size=(n, PB), dtype=np.uint8)
            assert client.put(c[:n], bid, [i * PB for i in range(n)]).stored == n
    return chains


def as_tuple(r):
    return (r.hits, list(r.tiers), r.prefetching, r.leased)


def test_each_chain_answered_as_lookup_would(client, stored):
    got = client.lookup_batch(stored)
    assert [r.hits for r in got] == [6, 3, 0]
    assert [r.tiers for r in got] == [["host"] * 6, ["host"] * 3, []]
    assert [as_tuple(r) for r in got] == [as_tuple(client.lookup(c)) for c in stored]
    # Packed bytes and key lists mix; order is kept; a repeated chain repeats.
    mixed = client.lookup_batch([b"".join(stored[1]), stored[0], stored[1]])
    assert [r.hits for r in mixed] == [3, 6, 3]


def test_empty_chains_and_empty_batch(client, stored):
    got = client.lookup_batch([[], stored[0], b"", stored[2]])
    assert [r.hits for r in got] == [0, 6, 0, 0]
    assert got[0].tiers == [] and got[2].tiers == []
    assert client.lookup_batch([]) == []
    assert [r.hits for r in client.lookup_batch([[], []])] == [0, 0]


def test_leases_per_chain(client, stored):
    got = client.lookup_batch(stored, lease_ms=5000)
    assert [(r.hits, r.leased) for r in got] == [(6, 6), (3, 3), (0, 0)]
    stats = client.stats()
    # 9 distinct pages held by this batch (the same keys leased twice count once).
    assert int(stats["prefetch"]["lookup_leased"]) == 9
    again = client.lookup_batch([stored[0], stored[0]], lease_ms=5000)
    assert [(r.hits, r.leased) for r in again] == [(6, 6), (6, 6)]
    assert int(client.stats()["prefetch"]["lookup_leased"]) == 9  # renewed, not new
    plain = client.lookup_batch(stored)
    assert [r.leased for r in plain] == [0, 0, 0]


def lookups_served(client):
    """LOOKUP requests the daemon has answered (STATS latency, admin sessions)."""
    return sum(int(t["count"]) for t in client.stats()["latency"] if t["request"] == "LOOKUP")


def test_more_chains_and_keys_than_one_request_holds(client, stored):
    # 5000 one-key chains (over 4096 chains) and 9 x 4000 keys (over 32768 keys)
    # go as two requests each; the stored chains among them are still found.
    singles = [os.urandom(16) for _ in range(5000)]
    singles[4500] = stored[0][0]
    before = lookups_served(client)
    got = client.lookup_batch(singles)
    assert lookups_served(client) == before + 2
    assert len(got) == 5000
    assert [i for i, r in enumerate(got) if r.hits] == [4500]
    long = [os.urandom(16 * 4000) for _ in range(9)]
    long[8] = b"".join(stored[0]) + os.urandom(16 * 3994)
    before = lookups_served(client)
    got = client.lookup_batch(long)
    assert lookups_served(client) == before + 2
    assert [r.hits for r in got] == [0] * 8 + [6]


def test_bad_input_raises_and_sends_nothing(client, stored):
    with pytest.raises(TypeError, match="sequence of key chains"):
        client.lookup_batch(b"".join(stored[0]))
    with pytest.raises(TypeError, match="sequence of key chains"):
        client.lookup_batch(42)
    with pytest.raises(ValueError, match=r"chains\[1\].*multiple of 16"):
        client.lookup_batch([stored[0], b"x" * 17])
    with pytest.raises(ValueError, match=r"chains\[2\]: keys\[0\] must be 16 bytes"):
        client.lookup_batch([stored[0], stored[1], [b"short"]])
    with pytest.raises(TypeError, match=r"chains\[0\]"):
        client.lookup_batch([[1, 2, 3]])
    with pytest.raises(ValueError, match="lease_ms"):
        client.lookup_batch(stored, lease_ms=-1)
    before = int(client.stats()["prefetch"]["lookup_leased"])
    with pytest.raises(kvtier.InvalidArgument, match="chain 1 has 4097 keys, at most 4096"):
        client.lookup_batch([stored[0], os.urandom(16 * 4097)], lease_ms=5000)
    assert int(client.stats()["prefetch"]["lookup_leased"]) == before  # chain 0 was not sent


def test_async_batch_matches_the_blocking_one(client, stored):
    fut = client.lookup_batch_async(stored)
    got = fut.result(timeout=30)
    assert fut.done()
    assert [as_tuple(r) for r in got] == [as_tuple(r) for r in client.lookup_batch(stored)]
    assert [r.hits for r in fut.poll()] == [6, 3, 0]
    leased = client.lookup_batch_async(stored[:2], lease_ms=5000).result(timeout=30)
    assert [(r.hits, r.leased) for r in leased] == [(6, 6), (3, 3)]
    # Single and batched futures share one worker and keep their own answers.
    futs = [client.lookup_async(stored[0]), client.lookup_batch_async([stored[1]])]
    assert futs[0].result(timeout=30).hits == 6
    assert [r.hits for r in futs[1].result(timeout=30)] == [3]
    bad = client.lookup_batch_async([os.urandom(16 * 4097)])
    with pytest.raises(kvtier.InvalidArgument, match="at most 4096"):
        bad.result(timeout=30)
    with pytest.raises(ValueError, match=r"chains\[0\]"):
        client.lookup_batch_async([b"x" * 3])


def test_closed_client(kvtierd):
    c = kvtier.Client(kvtierd.endpoint)
    c.close()
    with pytest.raises(kvtier.FailedPrecondition, match="closed"):
        c.lookup_batch([chain(1, 1)])
