# kvtier.integrations.sglang.KvtierStorage driven the way SGLang v0.5.x's
# HiCacheController drives a `dynamic` storage backend with interface_v1
# (backup: batch_set_v1; prefetch: batch_exists, then batch_get_v1), against
# its MHA host pool layouts and a real kvtierd. Without sglang installed the
# backend subclasses the local stand-in of HiCacheStorage: these tests check
# it against SGLang's interface, not against the engine (see the last test).
import hashlib
import importlib
import signal

import pytest

torch = pytest.importorskip("torch", reason="the SGLang backend needs torch")

import kvtier  # noqa: E402
from kvtier.integrations import sglang as kv_sglang  # noqa: E402
from kvtier.integrations._sglang_standin import (HiCacheStorageConfig,  # noqa: E402
                                                 HiCacheStorageExtraInfo, MHATokenToKVPoolHost)

PAGE, LAYERS, HEADS, DIM = 16, 4, 2, 64
BATCH = 128  # STORAGE_BATCH_SIZE: pages per storage call


def get_hash_str(token_ids, prior_hash=None):
    """SGLang's page hash (mem_cache/utils get_hash_str): chained SHA-256, hex."""
    h = hashlib.sha256()
    if prior_hash:
        h.update(bytes.fromhex(prior_hash))
    for t in token_ids:
        h.update(t.to_bytes(4, byteorder="little", signed=False))
    return h.hexdigest()


def page_hashes(tokens):
    out, prior = [], None
    for i in range(len(tokens) // PAGE):
        prior = get_hash_str(tokens[i * PAGE:(i + 1) * PAGE], prior)
        out.append(prior)
    return out


def make_pool(layout="page_first", dtype=torch.float16, shm=True, pages=32):
    alloc = kv_sglang.alloc_shm_host_buffer if shm else None
    kw = {"alloc_func": alloc} if alloc else {}
    pool = MHATokenToKVPoolHost(pages * PAGE, PAGE, LAYERS, HEADS, DIM, dtype, layout, **kw)
    pool.kv_buffer.copy_(torch.randn(pool.kv_buffer.shape).to(dtype))
    return pool


def create_backend(d, pool, **extra):
    """StorageBackendFactory._create_dynamic_backend, then the controller's
    register_mem_pool_host."""
    extra = {"backend_name": "kvtier", "module_path": "kvtier.integrations.sglang",
             "class_name": "KvtierStorage", "interface_v1": 1, "endpoint": d.endpoint, **extra}
    cfg = HiCacheStorageConfig(tp_rank=0, tp_size=1, pp_rank=0, pp_size=1, is_mla_model=False,
                               is_page_first_layout=pool.layout == "page_first",
                               model_name="sim/llama-gqa", extra_config=extra)
    cls = getattr(importlib.import_module(extra["module_path"]), extra["class_name"])
    assert issubclass(cls, kv_sglang.HiCacheStorage)
    backend = cls(cfg, {})
    backend.register_mem_pool_host(pool)
    return backend


def indices(pages):
    """Host indices of whole pages, as the host pool allocates them."""
    return torch.cat([torch.arange(p * PAGE, (p + 1) * PAGE) for p in pages]).to(torch.int64)


def backup(backend, hashes, host_idx):
    """HiCacheController._page_backup: batch by batch, stop at a failure."""
    done = 0
    for i in range(0, len(hashes), BATCH):
        batch = hashes[i:i + BATCH]
        info = HiCacheStorageExtraInfo(prefix_keys=hashes[:i] or None)
        if not all(backend.batch_set_v1(batch, host_idx[i * PAGE:(i + len(batch)) * PAGE], info)):
            break
        done += len(batch)
    return done


def prefetch(backend, hashes, host_idx):
    """_storage_hit_query (batch_exists) then _page_get_zero_copy: the leading
    pages that arrived."""
    hit = 0
    for i in range(0, len(hashes), BATCH):
        n = backend.batch_exists(hashes[i:i + BATCH])
        hit += n
        if n < len(hashes[i:i + BATCH]):
            break
    results = backend.batch_get_v1(hashes[:hit], host_idx[:hit * PAGE])
    return results.index(False) if False in results else len(results)


def page_bytes(pool, page):
    return pool.get_data_page(page * PAGE).clone()


@pytest.mark.parametrize("layout", ["page_first", "page_first_direct"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_backup_then_prefetch_restores_the_exact_bytes_zero_copy(kvtierd, layout, dtype):
    pool = make_pool(layout, dtype)
    backend = create_backend(kvtierd, pool)
    assert backend.zero_copy
    hashes = page_hashes(list(range(100, 100 + 6 * PAGE)))
    src = [2, 5, 7, 8, 20, 21]
    want = [page_bytes(pool, p) for p in src]
    assert backup(backend, hashes, indices(src)) == 6
    dst = [0, 1, 3, 30, 31, 12]
    assert prefetch(backend, hashes, indices(dst)) == 6
    for w, p in zip(want, dst):
        assert torch.equal(page_bytes(pool, p), w)


def test_a_torch_host_pool_works_through_staging(kvtierd):
    pool = make_pool(shm=False)
    backend = create_backend(kvtierd, pool, staging_pages=2)  # 5 pages: several chunks
    assert not backend.zero_copy
    hashes = page_hashes(list(range(5 * PAGE)))
    want = [page_bytes(pool, p) for p in range(5)]
    assert backup(backend, hashes, indices(range(5))) == 5
    assert prefetch(backend, hashes, indices(range(10, 15))) == 5
    assert all(torch.equal(page_bytes(pool, 10 + i), w) for i, w in enumerate(want))


def test_batch_exists_counts_leading_pages_and_leases_them(kvtierd):
    pool = make_pool()
    backend = create_backend(kvtierd, pool, lease_ms=60000)
    hashes = page_hashes(list(range(8 * PAGE)))
    backup(backend, hashes[:3], indices([0, 1, 2]))
    backup(backend, hashes[4:6], indices([4, 5]))  # a hole at page 3
    assert backend.batch_exists(hashes) == 3
    assert backend.batch_exists(hashes[4:]) == 2
    assert backend.batch_exists([]) == 0
    admin = kvtier.Client(kvtierd.endpoint)
    assert admin.evict()["remaining"] == 10  # the five leased pages, K and V each
    want = [page_bytes(pool, p) for p in range(3)]
    assert backend.batch_get_v1(hashes[:3], indices([9, 10, 11])) == [True] * 3
    assert all(torch.equal(page_bytes(pool, 9 + i), w) for i, w in enumerate(want))


def test_clear_drops_the_tenants_pages_or_says_why_not(kvtierd):
    """/clear_hicache_storage_backend calls clear(): the pages are gone after
    it, or it raises; never a success that cleared nothing."""
    pool = make_pool()
    backend = create_backend(kvtierd, pool)
    hashes = page_hashes(list(range(4 * PAGE)))
    assert backup(backend, hashes, indices(range(4))) == 4
    backend.clear()
    assert backend.batch_exists(hashes) == 0
    # Pages leased by batch_exists (until their GET) cannot be dropped:
    # clear() says so instead of succeeding.
    assert backup(backend, hashes, indices(range(4))) == 4
    leasing = create_backend(kvtierd, pool, lease_ms=60000)
    assert leasing.batch_exists(hashes[:2]) == 2
    with pytest.raises(RuntimeError, match="pinned"):
        leasing.clear()
    assert leasing.batch_exists(hashes[:2]) == 2  # what stays is intact


def test_a_page_missing_a_part_is_reported_and_not_counted(kvtierd):
    pool = make_pool()
    backend = create_backend(kvtierd, pool)
    hashes = page_hashes(list(range(4 * PAGE)))
    backup(backend, hashes, indices(range(4)))
    v_part_of_page_1 = backend._part_keys([hashes[1]])[1]
    kvtier.Client(kvtierd.endpoint).delete([v_part_of_page_1])
    assert backend.batch_exists(hashes) == 1
    assert backend.batch_get_v1(hashes, indices(range(10, 14))) == [True, False, True, True]
    assert prefetch(backend, hashes, indices(range(20, 24))) == 1


def test_a_dead_daemon_reports_misses_without_raising(kvtierd):
    pool = make_pool()
    backend = create_backend(kvtierd, pool, timeout_ms=1000)
    hashes = page_hashes(list(range(3 * PAGE)))
    backup(backend, hashes, indices(range(3)))
    kvtierd._proc.send_signal(signal.SIGSTOP)  # a GET in flight, then the daemon dies
    kvtierd.kill()
    assert backend.batch_get_v1(hashes, indices(range(10, 13))) == [False] * 3
    assert backend.batch_set_v1(hashes, indices(range(3))) == [False] * 3
    assert backend.batch_exists(hashes) == 0
    assert backend.batch_get(hashes) == [None] * 3 and not backend.exists(hashes[0])


@pytest.mark.parametrize("layout", ["layer_first", "page_first"])
def test_v0_copies_whole_pages_and_shares_objects_with_v1(kvtierd, layout):
    pool = make_pool(layout)
    # layer_first: SGLang then runs the v0 interface (interface_v1 needs a page-first pool).
    backend = create_backend(kvtierd, pool, interface_v1=int(layout != "layer_first"))
    hashes = page_hashes(list(range(3 * PAGE)))
    values = [pool.get_data_page(p * PAGE) for p in range(3)]
    assert backend.batch_set(hashes, values)
    got = backend.batch_get(hashes + ["f" * 64], [pool.get_dummy_flat_data_page()
                                                   for _ in range(4)])
    assert got[3] is None and all(torch.equal(g, v) for g, v in zip(got, values))
    pool.set_from_flat_data_page(20 * PAGE, got[1])
    assert torch.equal(page_bytes(pool, 20), values[1])
    assert backend.exists(hashes[2]) and not backend.exists("0" * 64)
    assert torch.equal(backend.get(hashes[0]), values[0])
    if layout == "page_first":  # v0 pages and v1 parts are the same objects
        assert backend.batch_get_v1(hashes, indices([25, 26, 27])) == [True] * 3
        assert torch.equal(page_bytes(pool, 26), values[1])


def test_hostile_inputs_give_clear_exceptions(kvtierd):
    pool = make_pool()
    backend = create_backend(kvtierd, pool)
    h = page_hashes(list(range(2 * PAGE)))
    with pytest.raises(ValueError, match="host indices"):
        backend.batch_get_v1(h, indices([0]))
    with pytest.raises(ValueError, match="does not start a page"):
        backend.batch_set_v1(h, indices([0, 1]) + 3)
    with pytest.raises(ValueError, match="does not start a page"):
        backend.batch_get_v1(h[:1], indices([40]))
    with pytest.raises(TypeError, match="integer"):
        backend.batch_get_v1(h[:1], indices([0]).float())
    with pytest.raises(TypeError, match="str page hashes"):
        backend.batch_exists([b"\x00" * 32])
    with pytest.raises(TypeError, match="host pool holds"):
        backend.batch_set(h[:1], [pool.get_data_page(0).float()])
    with pytest.raises(ValueError, match="bytes; a page has"):
        backend.batch_set(h[:1], [pool.get_data_page(0)[:-1]])
    with pytest.raises(ValueError, match="contiguous"):
        n = pool.get_dummy_flat_data_page().numel()
        backend.batch_get(h[:1], [torch.zeros(2 * n, dtype=torch.float16)[::2]])
    with pytest.raises(ValueError, match="page_first"):
        create_backend(kvtierd, make_pool("layer_first"))  # with interface_v1
    v0_only = create_backend(kvtierd, make_pool("layer_first"), interface_v1=0)
    with pytest.raises(ValueError, match="page_first"):
        v0_only.batch_get_v1(h[:1], indices([0]))
    with pytest.raises(ValueError, match="staging_pages"):
        create_backend(kvtierd, pool, staging_pages=0)
    with pytest.raises(ValueError, match="unknown extra_config"):
        create_backend(kvtierd, pool, endpont="x")
    mla = HiCacheStorageConfig(0, 1, 0, 1, True, True, "m", extra_config={})
    with pytest.raises(NotImplementedError, match="MLA"):
        kv_sglang.KvtierStorage(mla, {})


def test_with_the_real_sglang():
    try:
        from sglang.srt.mem_cache.hicache_storage import HiCacheStorage
    except ImportError:
        pytest.skip("sglang is not installed: KvtierStorage was tested only against the local "
                    "stand-in of SGLang v0.5.x's HiCacheStorage and host pool, not the engine")
    assert kv_sglang.SGLANG_AVAILABLE and issubclass(kv_sglang.KvtierStorage, HiCacheStorage)
