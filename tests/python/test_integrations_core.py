# The engine-agnostic core of kvtier's connectors (kvtier.integrations.core
# and .paging): block tables <-> block-major engine pages checked against the
# format written out element by element (paging.py's header), keys from engine hashes, leased lookups, and
# page moves against a real kvtierd, including a daemon that stops or dies.
import signal
import threading

import pytest

torch = pytest.importorskip("torch", reason="the integrations need torch")

import kvtier  # noqa: E402
from kvtier.integrations.core import (Job, LeasedLookups, LoadTracker, PageTask,  # noqa: E402
                                      TransferWorker, keys_for_hashes)
from kvtier.integrations.paging import (PagedKv, PageMover, StagingBuffer,  # noqa: E402
                                        _chain_runs)

BS, H, D = 16, 2, 8  # vLLM block_size 16, GQA kv heads, head dim


def layers(n=3, blocks=12, dtype=torch.float16, seed=0):
    """Per-layer KV tensors as vLLM's FlashAttention backend shapes them:
    (2, num_blocks, block_size, num_kv_heads, head_size)."""
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(2, blocks, BS, H, D, generator=g).to(dtype) for _ in range(n)]


def reference_page(tensors, blocks):
    """paging.py's engine page, element by element: layer | block | K,V |
    token | head | dim, from (2, num_blocks, block_size, heads, dim) tensors."""
    page = torch.empty(len(tensors), len(blocks), 2, BS, H, D, dtype=tensors[0].dtype)
    for l, t in enumerate(tensors):
        for j, b in enumerate(blocks):
            for kv in range(2):
                for tok in range(BS):
                    for h in range(H):
                        page[l, j, kv, tok, h] = t[kv, b, tok, h]
    return page


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("k", [1, 2])
def test_gather_matches_the_page_layout_and_scatter_inverts_it(dtype, k):
    src = layers(dtype=dtype)
    kv = PagedKv(src, "2BTHD", blocks_per_page=k)
    assert kv.layout == kvtier.Layout(3, H, D, BS * k, {torch.float16: "fp16"}.get(dtype, "bf16"))
    pages = [[7, 2][:k], [0, 11][:k], [5, 9][:k]]
    staging = torch.zeros(4, *kv.page_shape, dtype=dtype)
    kv.gather(pages, staging, [3, 0, 1])
    for page, slot in zip(pages, [3, 0, 1]):
        assert torch.equal(staging[slot], reference_page(src, page))
    assert staging[3].numel() * staging.element_size() == kv.layout.page_bytes
    dst = layers(dtype=dtype, seed=1)
    before = [t.clone() for t in dst]
    PagedKv(dst, "2BTHD", k).scatter(staging, [3, 0, 1], pages)
    written = {b for p in pages for b in p}
    for s, d, b in zip(src, dst, before):
        for blk in range(12):
            assert torch.equal(d[:, blk], s[:, blk] if blk in written else b[:, blk])


def test_scatter_skips_leading_blocks_and_short_pages():
    src, dst = layers(), layers(seed=1)
    before = [t.clone() for t in dst]
    staging = torch.zeros(2, 3, 2, 2, BS, H, D, dtype=torch.float16)
    PagedKv(src, blocks_per_page=2).gather([[1, 2], [3, 4]], staging, [0, 1])
    # page 0: block 1 already computed (skip 1); page 1: only its first block allocated
    PagedKv(dst, blocks_per_page=2).scatter(staging, [0, 1], [[5, 6], [7]], skips=[1, 0])
    for s, d, b in zip(src, dst, before):
        assert torch.equal(d[:, 5], b[:, 5]) and torch.equal(d[:, 6], s[:, 2])
        assert torch.equal(d[:, 7], s[:, 3]) and torch.equal(d[:, 8], b[:, 8])


def test_other_dim_orders_give_the_same_pages():
    src = layers()
    hnd = [t.permute(0, 1, 3, 2, 4).contiguous() for t in src]  # (2, blocks, heads, block, dim)
    a, b = torch.zeros(1, 3, 1, 2, BS, H, D).half(), torch.zeros(1, 3, 1, 2, BS, H, D).half()
    PagedKv(src, "2BTHD").gather([[4]], a, [0])
    PagedKv(hnd, "2BHTD").gather([[4]], b, [0])
    assert torch.equal(a, b)


def test_hostile_tensors_and_block_ids():
    good = layers()
    with pytest.raises(TypeError, match="dtype"):
        PagedKv([t.to(torch.int8) for t in good])
    with pytest.raises(TypeError, match="dtype"):
        PagedKv([t.double() for t in good])
    with pytest.raises(ValueError, match="not contiguous"):
        PagedKv([t.transpose(2, 3) for t in good])
    with pytest.raises(ValueError, match="must match"):
        PagedKv([good[0], good[1][:, :6].contiguous()])
    with pytest.raises(ValueError, match="dims"):
        PagedKv(good, "2BTXD")
    with pytest.raises(TypeError, match="torch.Tensor"):
        PagedKv([good[0], "layer"])
    with pytest.raises(ValueError, match="size 2"):
        PagedKv([torch.zeros(3, 4, BS, H, D).half()])
    kv, staging = PagedKv(good), torch.zeros(2, 3, 1, 2, BS, H, D).half()
    for bad in ([[12]], [[-1]], [[True]], [[1.0]], [[1, 2]]):
        with pytest.raises(ValueError):
            kv.gather(bad, staging, [0])
    with pytest.raises(ValueError, match="twice"):
        kv.scatter(staging, [0, 1], [[3], [3]])


def test_page_keys_are_the_last_block_hash_with_the_model_folded_in():
    layout = kvtier.Layout(3, H, D, 2 * BS, "fp16")
    hashes = [bytes([i]) * 32 for i in range(7)]
    keys = keys_for_hashes(hashes, "m", layout, blocks_per_page=2)
    assert keys == kvtier.external_keys([hashes[1], hashes[3], hashes[5]], "m", layout)
    assert not set(keys) & set(keys_for_hashes(hashes, "other", layout, 2))
    assert all(len(k) == 16 for k in keys)


def test_chain_runs_split_where_the_parent_changes():
    p = [PageTask(b"a", [0]), PageTask(b"b", [1], parent=b"a"), PageTask(b"c", [2], parent=b"x"),
         PageTask(b"d", [3], parent=b"c")]
    assert _chain_runs(p) == [(0, 2), (2, 4)]


# -- against a real daemon ------------------------------------------------------
def mover(endpoint, tensors, staging_pages=4, timeout_ms=10000):
    kv = PagedKv(tensors)
    client = kvtier.Client(endpoint, layout=kv.layout, timeout_ms=timeout_ms)
    return PageMover(client, kv, staging_pages), client


def tasks(keys, blocks):
    out = [PageTask(k, [b]) for k, b in zip(keys, blocks)]
    for prev, t in zip(out, out[1:]):
        t.parent = prev.key
    return out


def load(m, pages):
    worker = TransferWorker()
    try:
        job = worker.submit(Job("load", "t", pages, m.load))
        assert job.wait(30)
        return job
    finally:
        worker.close()


def save(m, pages):
    """As the connector saves: stage a chunk, queue its PUT, stage the next.
    Returns the indices of the pages the store did not take."""
    worker, jobs = TransferWorker(), []
    try:
        for chunk, slots in m.stage(pages):
            jobs.append(worker.submit(Job("save", "t", chunk,
                                          lambda j, c=chunk, s=slots: m.put_staged(c, s))))
        assert all(j.wait(30) for j in jobs)
    finally:
        worker.close()
    failed, base = set(), 0
    for j in jobs:
        failed |= {base + i for i in j.failed}
        base += len(j.pages)
    return failed


# Staging of 1 page: no overlap; 2: GETs of one page, the next one in flight
# while a page is written; 5: chunks of 2, the last one short.
@pytest.mark.parametrize("staging", [1, 2, 5])
def test_pages_round_trip_through_the_daemon_and_a_miss_stays_untouched(kvtierd, staging):
    src = layers()
    m, _ = mover(kvtierd.endpoint, src, staging_pages=staging)  # 5 pages: several chunks
    keys = kvtier.external_keys([bytes([i]) * 32 for i in range(6)], "m", m.kv.layout)
    assert save(m, tasks(keys[:5], [0, 3, 4, 8, 11])) == set()
    dst = layers(seed=1)
    before = [t.clone() for t in dst]
    m2, _ = mover(kvtierd.endpoint, dst, staging_pages=staging)
    # keys[5] was never stored: its block must keep its old bytes.
    job = load(m2, tasks(keys, [1, 2, 5, 6, 7, 9]))
    assert job.failed == {5} and job.failed_blocks() == {9}
    for s, d, b in zip(src, dst, before):
        for s_blk, d_blk in zip([0, 3, 4, 8, 11], [1, 2, 5, 6, 7]):
            assert torch.equal(d[:, d_blk], s[:, s_blk])
        assert torch.equal(d[:, 9], b[:, 9]) and torch.equal(d[:, 0], b[:, 0])


def test_a_dead_daemon_fails_every_page_and_writes_nothing(kvtierd):
    src = layers()
    m, _ = mover(kvtierd.endpoint, src, timeout_ms=1000)
    keys = kvtier.external_keys([bytes([i]) * 32 for i in range(3)], "m", m.kv.layout)
    save(m, tasks(keys, [0, 1, 2]))
    dst = layers(seed=1)
    before = [t.clone() for t in dst]
    m2, _ = mover(kvtierd.endpoint, dst, timeout_ms=1000)
    kvtierd.kill()
    job = load(m2, tasks(keys, [3, 4, 5]))
    assert job.failed == {0, 1, 2} and job.failed_blocks() == {3, 4, 5}
    assert all(torch.equal(d, b) for d, b in zip(dst, before))
    assert save(m, tasks(keys, [0, 1, 2])) == {0, 1, 2}  # PUTs fail quietly too


def test_a_load_cancelled_while_its_get_hangs_writes_nothing_later(kvtierd):
    src = layers()
    m, _ = mover(kvtierd.endpoint, src)
    keys = kvtier.external_keys([bytes([i]) * 32 for i in range(2)], "m", m.kv.layout)
    save(m, tasks(keys, [0, 1]))
    dst = layers(seed=1)
    before = [t.clone() for t in dst]
    m2, _ = mover(kvtierd.endpoint, dst)
    worker, tracker = TransferWorker(), LoadTracker()
    kvtierd._proc.send_signal(signal.SIGSTOP)  # the GET hangs
    try:
        job = worker.submit(Job("load", "r1", tasks(keys, [6, 7]), m2.load))
        tracker.settle(job, timeout_s=0.2)  # gives up: the pages count as failed
        assert tracker.take_failed_blocks() == {6, 7}
    finally:
        kvtierd._proc.send_signal(signal.SIGCONT)
    assert job.wait(30) and job.failed == {0, 1}  # the GET then succeeded: still not written
    worker.close()
    assert all(torch.equal(d, b) for d, b in zip(dst, before))


def test_load_tracker_reports_a_finished_load_once_with_its_failures():
    tracker, worker = LoadTracker(), TransferWorker()
    gate = threading.Event()
    ok = worker.submit(Job("load", "a", [PageTask(b"k", [1])], lambda j: gate.wait(10) and ()))
    bad = worker.submit(Job("load", "b", [PageTask(b"k", [2, 3], skip=1)],
                            lambda j: 1 / 0))
    tracker.track(ok)
    tracker.track(bad)
    assert tracker.take_finished() == [] and tracker.take_failed_blocks() == set()
    gate.set()
    assert bad.wait(10) and ok.wait(10)
    assert sorted(tracker.take_finished()) == ["a", "b"]
    assert bad.error.startswith("ZeroDivisionError")
    assert tracker.take_failed_blocks() == {3}  # block 2 was skipped: not the load's to write
    assert tracker.take_finished() == [] and tracker.in_flight() == 0
    worker.close()


def test_staging_slots_are_lent_once(kvtierd):
    client = kvtier.Client(kvtierd.endpoint)
    s = StagingBuffer(client, 4096, 3)
    a = s.acquire(3)
    assert sorted(a) == [0, 1, 2] and s.offsets([2]) == [8192]
    with pytest.raises(TimeoutError):
        s.acquire(1, timeout_s=0.05)
    with pytest.raises(ValueError):
        s.acquire(4)
    s.release(a[:1])
    assert s.acquire(1) == a[:1]


def test_leased_lookup_is_pending_then_counts_pinned_pages(kvtierd):
    src = layers()
    m, client = mover(kvtierd.endpoint, src)
    keys = kvtier.external_keys([bytes([i]) * 32 for i in range(4)], "m", m.kv.layout)
    save(m, tasks(keys[:3], [0, 1, 2]))
    lookups = LeasedLookups(kvtier.Client(kvtierd.endpoint), lease_ms=30000)
    assert lookups.poll("r", [keys]) is None  # asked, not answered yet
    assert lookups.wait_pending()
    assert lookups.poll("r", [keys]) == 3
    assert lookups.poll("r", [keys]) == 3  # answered from memory while the lease is young
    # Eviction pressure: everything evictable goes, the leased pages stay.
    assert client.evict()["remaining"] == 3
    assert client.lookup(keys).hits == 3
    assert lookups.poll("r", [keys[:2], keys]) is None  # another question: asked again
    lookups.wait_pending()
    assert lookups.poll("r", [keys[:2], keys]) == 2  # the smaller shard count


def test_leased_lookup_counts_nothing_when_the_daemon_is_gone(kvtierd):
    lookups = LeasedLookups(kvtier.Client(kvtierd.endpoint, timeout_ms=300), lease_ms=1000,
                            timeout_ms=60000)
    key = [b"\x01" * 16]
    kvtierd.kill()
    assert lookups.poll("r", [key]) is None
    assert lookups.wait_pending(30)
    assert lookups.poll("r", [key]) == 0
