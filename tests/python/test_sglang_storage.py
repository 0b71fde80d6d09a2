# kvtier.integrations.sglang.KvtierStorage driven the way SGLang's
# HiCacheController drives a `dynamic` storage backend (backup: batch_set_v1 /
# batch_set; prefetch: batch_exists, then batch_get_v1 / batch_get), against
# its MHA host pool layouts and a real kvtierd, once per SGLang version: each
# test runs against that version's stand-in (tests/python/standins/sglang_v*.py,
# built from its source). These check the backend against SGLang's interface,
# not inside the engine.
import hashlib
import logging
import signal
import sys

import pytest

torch = pytest.importorskip("torch", reason="the SGLang backend needs torch")

import kvtier  # noqa: E402
from standins import installed  # noqa: E402

# Versions whose controller calls the v1 (zero-copy) methods: every test runs
# against each. v0.5.5 (v0 only) has its own tests at the end.
V1_VERSIONS = ["sglang_v0_5_6", "sglang_v0_5_6_post1"]

# Set by the `sglang` fixture for the version under test.
kv_sglang = ENGINE = HiCacheStorageConfig = HiCacheStorageExtraInfo = MHATokenToKVPoolHost = None


def _use(standin):
    global kv_sglang, ENGINE, HiCacheStorageConfig, HiCacheStorageExtraInfo, MHATokenToKVPoolHost
    from kvtier.integrations import sglang as module
    kv_sglang, ENGINE = module, standin
    HiCacheStorageConfig = standin.HiCacheStorageConfig
    HiCacheStorageExtraInfo = standin.HiCacheStorageExtraInfo
    MHATokenToKVPoolHost = standin.MHATokenToKVPoolHost


@pytest.fixture(autouse=True, params=V1_VERSIONS)
def sglang(request):
    with installed(request.param) as standin:
        _use(standin)
        # As SGLang's ModelRunner does before the backend is built (v0.5.4 on).
        standin.set_global_server_args_for_scheduler(standin.ServerArgs(MODEL))
        try:
            yield standin
        finally:
            standin.set_global_server_args_for_scheduler(None)
    _use_none()


def _use_none():
    global kv_sglang, ENGINE
    kv_sglang = ENGINE = None


PAGE, LAYERS, HEADS, DIM = 16, 4, 2, 64
MODEL = "sim/llama-gqa"
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
                               model_name=MODEL, extra_config=extra)
    backend = ENGINE.create_dynamic_backend(cfg)
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




# -- what differs between SGLang versions, and parents ------------------------------

@pytest.mark.parametrize("layout", ["layer_first", "page_first"])
def test_v0_5_5_runs_v0_even_with_interface_v1_and_accepts_layer_first(kvtierd, layout, caplog):
    """SGLang v0.5.5's controller calls a dynamic backend's v0 methods whatever
    interface_v1 says. The backend says so at start, accepts the layouts v0
    takes (layer_first too), and a backup then a prefetch through that
    controller restore the exact bytes."""
    with installed("sglang_v0_5_5") as v055:
        _use(v055)
        pool = make_pool(layout)
        with caplog.at_level(logging.WARNING, logger="kvtier.integrations.sglang"):
            backend = create_backend(kvtierd, pool)  # asks for interface_v1
        assert "calls the v0 interface" in caplog.text and "0.5.5" in caplog.text
        assert backend.interface_v1 is False
        ctl = v055.HiCacheController(backend, pool, backend_extra(kvtierd))
        assert ctl.interface == "v0"
        hashes = page_hashes(list(range(4 * PAGE)))
        want = [page_bytes(pool, p) for p in range(4)]
        assert ctl.write_storage(indices(range(4)), hashes) == 4 * PAGE
        assert ctl.prefetch(hashes, indices(range(10, 14))) == 4
        assert all(torch.equal(page_bytes(pool, 10 + i), w) for i, w in enumerate(want))


def backend_extra(d, **extra):
    return {"backend_name": "kvtier", "module_path": "kvtier.integrations.sglang",
            "class_name": "KvtierStorage", "interface_v1": 1, "endpoint": d.endpoint, **extra}


def test_v0_5_6_calls_v1_through_its_controller(kvtierd):
    pool = make_pool()
    backend = create_backend(kvtierd, pool)
    ctl = ENGINE.HiCacheController(backend, pool, backend_extra(kvtierd))
    assert ctl.interface == "v1" and backend.zero_copy
    hashes = page_hashes(list(range(3 * PAGE)))
    want = [page_bytes(pool, p) for p in range(3)]
    assert ctl.write_storage(indices(range(3)), hashes) == 3 * PAGE
    assert ctl.prefetch(hashes, indices(range(20, 23))) == 3
    assert all(torch.equal(page_bytes(pool, 20 + i), w) for i, w in enumerate(want))


class ParentSpy:
    """Records the parent of each PUT the backend sends (put_chain's)."""

    def __init__(self, monkeypatch):
        self.parents = []
        real = kv_sglang.put_chain

        def spy(client, keys, buffer_id, offsets, parent=None):
            self.parents.append(parent)
            return real(client, keys, buffer_id, offsets, parent)
        monkeypatch.setattr(kv_sglang, "put_chain", spy)


def v_part(backend, page_hash):
    return backend._part_keys([page_hash])[1]


def test_pages_get_the_right_parent_with_and_without_prefix_keys(kvtierd, monkeypatch):
    """Backups in batches of 2 pages through the controller. With
    hicache_storage_pass_prefix_keys SGLang passes the pages before: a batch's
    first page hangs under the last of them. From the root it passes [] to
    every batch: only the first batch is a prompt's start, the next ones hang
    under the batch before. Without the flag (None) the parent is not known:
    never stored as a prompt's first page, but under a key no page has."""
    pool = make_pool()
    backend = create_backend(kvtierd, pool)
    spy = ParentSpy(monkeypatch)
    ctl = ENGINE.HiCacheController(backend, pool, backend_extra(kvtierd), storage_batch_size=2)
    h = page_hashes(list(range(8 * PAGE)))

    ctl.write_storage(indices(range(5)), h[:5], prefix_keys=[])  # a root node, flag on
    assert spy.parents == [None, v_part(backend, h[1]), v_part(backend, h[3])]

    spy.parents.clear()
    ctl.write_storage(indices(range(5, 8)), h[5:8], prefix_keys=list(h[:5]))  # a child node
    assert spy.parents == [v_part(backend, h[4]), v_part(backend, h[6])]

    spy.parents.clear()
    ctl.write_storage(indices(range(3)), h[:3], prefix_keys=None)  # flag off
    unknown = backend._unknown_parent
    assert spy.parents == [unknown, unknown] and unknown is not None
    assert unknown not in backend._part_keys(h)

    spy.parents.clear()  # a new root backup after another one: a prompt's start again
    ctl.write_storage(indices(range(2)), h[:2], prefix_keys=[])
    assert spy.parents == [None]
    # Whatever the parents, the pages are all there and load.
    assert ctl.prefetch(h, indices(range(10, 18))) == 8


def test_v0_batch_set_never_stores_a_prompt_start_it_cannot_know(kvtierd, monkeypatch):
    with installed("sglang_v0_5_5") as v055:
        _use(v055)
        pool = make_pool("layer_first")
        backend = create_backend(kvtierd, pool, interface_v1=0)
        spy = ParentSpy(monkeypatch)
        ctl = v055.HiCacheController(backend, pool, backend_extra(kvtierd, interface_v1=0))
        h = page_hashes(list(range(2 * PAGE)))
        ctl.write_storage(indices(range(2)), h, prefix_keys=[])  # v0 gets no prefix keys
        assert spy.parents == [backend._unknown_parent]


def test_importing_the_backend_without_sglang_names_sglang_and_its_versions():
    with installed("no_engine"):
        with pytest.raises(ImportError, match=r"needs SGLang installed.*v0\.5\.6"):
            from kvtier.integrations import sglang  # noqa: F401


# -- keys that change when the KV changes ----------------------------------------------

def start_engine(d, pool, server_args=None, **extra):
    """One SGLang server's backend: its ServerArgs published as ModelRunner
    publishes them (None: not readable), then the dynamic backend."""
    ENGINE.set_global_server_args_for_scheduler(server_args)
    return create_backend(d, pool, **extra)


def stores_then_shares(writer, reader, pool, first_token=7, pages=3):
    """Whether `reader` finds (and loads byte for byte) the prompt from
    first_token that `writer` stored; both over `pool`."""
    hashes = page_hashes(list(range(first_token, first_token + pages * PAGE)))
    want = [page_bytes(pool, p) for p in range(pages)]
    assert backup(writer, hashes, indices(range(pages))) == pages
    if reader.batch_exists(hashes) == 0:
        return False
    assert prefetch(reader, hashes, indices(range(10, 10 + pages))) == pages
    assert all(torch.equal(page_bytes(pool, 10 + i), w) for i, w in enumerate(want))
    return True


def server_args(**changes):
    """The ServerArgs of a server started with --model-path MODEL (and
    --served-model-name MODEL, which HiCacheStorageConfig.model_name is)."""
    return ENGINE.ServerArgs(**{"model_path": MODEL, "served_model_name": MODEL, **changes})


def lora(*names):
    return [ENGINE.LoRARef(lora_name=n, lora_path=f"/adapters/{n}") for n in names]


# One KV-changing setting each: (ServerArgs changes, extra_config changes).
KV_CHANGES = {
    "quantization": ({"quantization": "fp8"}, {}),
    "kv_cache_dtype": ({"kv_cache_dtype": "fp8_e5m2"}, {}),
    "revision": ({"revision": "0123abcd"}, {}),
    "dtype": ({"dtype": "bfloat16"}, {}),
    "model_path": ({"model_path": "/models/llama-gqa-finetuned"}, {}),
    "load_format": ({"load_format": "dummy"}, {}),
    "rope_override": ({"json_model_override_args":
                       '{"rope_scaling": {"rope_type": "linear", "factor": 2.0}}'}, {}),
    "lora": ({"enable_lora": True, "lora_paths": ["a"]}, {}),  # adapter names
    "model_config": ({}, {"model_config": {"adapter": "support-bot-v2"}}),
}


@pytest.mark.parametrize("change", sorted(KV_CHANGES))
def test_two_engine_configurations_that_change_the_kv_never_share_pages(kvtierd, change):
    """Two SGLang servers of one model name that differ in one setting that
    changes the KV bytes: what one stores is a miss for the other, both ways.
    A third with the first's settings (a new process: fresh ServerArgs,
    fresh LoRA ids) loads the first's pages."""
    args, extra = KV_CHANGES[change]
    if "lora_paths" in args:
        args = dict(args, lora_paths=lora(*args["lora_paths"]))
    pool = make_pool()
    a = start_engine(kvtierd, pool, server_args())
    b = start_engine(kvtierd, pool, server_args(**args), **extra)
    assert a._model != b._model
    assert not stores_then_shares(a, b, pool, first_token=7)
    assert not stores_then_shares(b, a, pool, first_token=5000)
    again = start_engine(kvtierd, pool, server_args())
    assert stores_then_shares(a, again, pool, first_token=7)


def test_equal_settings_written_differently_share_pages(kvtierd):
    """Canonical forms: JSON overrides and model_config by value (key order,
    spacing), LoRA adapters by name and path (not order, not their per-process
    ids)."""
    pool = make_pool()
    a = start_engine(kvtierd, pool, server_args(
        enable_lora=True, lora_paths=lora("a", "b"),
        json_model_override_args='{"rope_theta": 500000, "sliding_window": 4096}'),
        model_config={"adapter": "x", "steps": [1, 2]})
    b = start_engine(kvtierd, pool, server_args(
        enable_lora=True, lora_paths=lora("b", "a"),
        json_model_override_args='{ "sliding_window":4096, "rope_theta":500000 }'),
        model_config={"steps": [1, 2], "adapter": "x"})
    assert a._model == b._model
    assert stores_then_shares(a, b, pool)


def test_unreadable_server_args_warn_and_are_never_taken_for_read_ones(kvtierd, caplog,
                                                                        monkeypatch):
    """Not published (SGLang did not set them in this process), or an SGLang
    without get_global_server_args (v0.5.3 and before): the backend says at
    start which settings it cannot fold and how to name them; its pages are a
    miss for a backend that read them."""
    pool = make_pool()
    with caplog.at_level(logging.WARNING, logger="kvtier.integrations.sglang"):
        blind = start_engine(kvtierd, pool, None)
    assert "not set in this process" in caplog.text and "NOT folded" in caplog.text
    assert "kv_cache_dtype" in caplog.text and "model_config" in caplog.text
    seeing = start_engine(kvtierd, pool, server_args())
    assert not stores_then_shares(blind, seeing, pool)

    caplog.clear()
    monkeypatch.delattr(sys.modules["sglang.srt.server_args"], "get_global_server_args")
    with caplog.at_level(logging.WARNING, logger="kvtier.integrations.sglang"):
        old = start_engine(kvtierd, pool, server_args(), model_config="w-2025-06")
    assert "no get_global_server_args" in caplog.text and "v0.5.4" in caplog.text
    assert old._model != blind._model  # model_config still folds in
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="kvtier.integrations.sglang"):
        start_engine(kvtierd, pool, None)
    assert len(caplog.records) == 1  # once per backend, at start


@pytest.mark.parametrize("bad", [5, "", True, {"x": float("nan")}, {"x": object()}])
def test_a_model_config_that_is_not_json_is_refused(kvtierd, bad):
    with pytest.raises(ValueError, match="model_config"):
        create_backend(kvtierd, make_pool(), model_config=bad)


def test_v0_5_5_folds_the_server_args_into_v0_pages_too(kvtierd):
    """v0.5.5 publishes the same ServerArgs (from v0.5.4); its v0 pages are
    keyed the same way."""
    with installed("sglang_v0_5_5") as v055:
        _use(v055)
        pool = make_pool("layer_first")
        a = start_engine(kvtierd, pool, server_args(), interface_v1=0)
        b = start_engine(kvtierd, pool, server_args(kv_cache_dtype="fp8_e4m3"), interface_v1=0)
        again = start_engine(kvtierd, pool, server_args(), interface_v1=0)
        hashes = page_hashes(list(range(2 * PAGE)))
        assert a.batch_set(hashes, [pool.get_data_page(p * PAGE) for p in range(2)])
        assert not b.exists(hashes[0]) and b.batch_get(hashes) == [None, None]
        assert again.exists(hashes[0])
        assert torch.equal(again.get(hashes[1]), pool.get_data_page(PAGE))
