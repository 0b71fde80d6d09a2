# kvtier.integrations.vllm.KvtierConnector driven with vLLM's call sequence
# (tests/python/engine_sim.py) over KV tensors shaped as FlashAttention and
# FlashInfer shape them, against a real kvtierd, once per vLLM version the
# connector supports: each test runs against that version's stand-in
# (tests/python/standins/vllm_v*.py, built from its source). These check the
# connector against vLLM's interface, not inside the engine (see the last test).
import signal
import threading
import warnings

import pytest

torch = pytest.importorskip("torch", reason="the vLLM connector needs torch")

import kvtier  # noqa: E402
from engine_sim import SimRequest, VllmSim, sim_vllm_config  # noqa: E402
from kvtier.integrations._vllm_scheduler import PageSpec  # noqa: E402
from standins import installed  # noqa: E402

# The stand-ins of the vLLM versions the connector supports; every test runs
# against each. v0.11.0 is refused (test_vllm_v0_11_0_is_refused_at_start).
SUPPORTED = ["vllm_v0_11_1"]

# Set by the `vllm` fixture for the version under test: the connector module
# imported against that version's stand-in, the stand-in, and its roles.
kv_vllm = ENGINE = KVConnectorRole = None


@pytest.fixture(autouse=True, params=SUPPORTED)
def vllm(request):
    global kv_vllm, ENGINE, KVConnectorRole
    with installed(request.param) as standin:
        from kvtier.integrations import vllm as module
        kv_vllm, ENGINE, KVConnectorRole = module, standin, standin.KVConnectorRole
        standin.TP_RANK[0] = 0
        yield standin
    kv_vllm = ENGINE = KVConnectorRole = None


BS = 16
PROMPT = list(range(1000, 1100))  # 100 tokens: 6 full blocks
SHARED = PROMPT[:80] + list(range(5000, 5030))  # shares 5 blocks with PROMPT


def make_sim(d, dtype=torch.float16, k=1, load_async=False, backend=None, registered=False,
             num_blocks=64, **extra):
    """A simulated engine over `backend`'s KV shape (default FlashAttention);
    `registered`: its Attention layers are in static_forward_context, so the
    connector can ask the backend for the layout (else it reads the shape)."""
    backend = backend or ENGINE.FlashAttentionBackend
    cfg = sim_vllm_config(dtype=dtype, extra=dict(endpoint=d.endpoint, blocks_per_page=k,
                                                  load_async=load_async, **extra),
                          engine=ENGINE, backend=backend if registered else None)
    return VllmSim(cfg, ENGINE, num_blocks=num_blocks, backend=backend)


def run_until_scheduled(sim, req_id, steps=6):
    """Steps the engine until the request has run (a pending lookup makes the
    scheduler skip it; an async load parks it until get_finished)."""
    outs = []
    for _ in range(steps):
        outs.append(sim.step())
        sim.wait_lookups()
        sim.work.worker.drain()
        if req_id in sim.computed and req_id not in sim.loading:
            return outs
    raise AssertionError(f"{req_id} never ran: {outs}")


def run_prompt(sim, req_id, tokens):
    sim.add(SimRequest(req_id, tokens, BS))
    return run_until_scheduled(sim, req_id)


@pytest.mark.parametrize("dtype,k,load_async", [(torch.float16, 1, False),
                                                (torch.bfloat16, 1, True),
                                                (torch.float16, 2, True),
                                                (torch.bfloat16, 2, False)])
def test_shared_prefix_loads_the_exact_bytes_the_first_request_saved(kvtierd, dtype, k,
                                                                      load_async):
    sim = make_sim(kvtierd, dtype, k, load_async)
    try:
        outs = run_prompt(sim, "A", PROMPT)
        assert outs[0]["matched"]["A"] is None and outs[-1]["matched"]["A"] == 0
        a_kv = [sim.tokens_kv("A", layer, 0, 80) for layer in range(4)]
        assert sim.work.worker.stats["pages_saved"] == 6 // k
        outs = run_prompt(sim, "B", SHARED)
        matched = 80 if k == 1 else 64  # whole pages only: 5 blocks, or 2 pages of 2 blocks
        assert outs[0]["matched"]["B"] is None
        assert [o["matched"].get("B") for o in outs if o["matched"].get("B")] == [matched]
        if load_async:
            assert any("B" in o["recving"] for o in outs)
        assert min(sim.computed["B"]) == matched  # the prefix was loaded, not recomputed
        for layer in range(4):
            assert torch.equal(sim.tokens_kv("B", layer, 0, matched), a_kv[layer][:matched])
            assert torch.equal(sim.tokens_kv("B", layer, 0, 110),
                               sim.expected_kv("B", layer, 0, 110))
        assert all(not o["errors"] for o in outs)
        assert sim.work.worker.stats["pages_load_failed"] == 0
    finally:
        sim.close()


@pytest.mark.parametrize("save_direct,load_direct", [(True, True), (True, False),
                                                     (False, True)])
def test_cpu_kv_caches_move_in_place_and_make_the_same_pages_as_staging(kvtierd, save_direct,
                                                                        load_direct):
    """CPU KV caches are shared with the daemon where they are (direct): pages
    move between the daemon and the blocks in one copy (docs/PROTOCOL.md,
    "Scattered pages"), and are the very pages the staging path makes, so
    engines of either kind share them."""
    saver = make_sim(kvtierd, direct=save_direct)
    try:
        assert (saver.work.worker.mover.direct is not None) == save_direct
        run_prompt(saver, "A", PROMPT)
        assert saver.work.worker.stats["pages_saved"] == 6
        assert (saver.work.worker.mover.direct_moved > 0) == save_direct
    finally:
        saver.close()
    loader = make_sim(kvtierd, direct=load_direct)
    try:
        outs = run_prompt(loader, "B", SHARED)
        assert [o["matched"].get("B") for o in outs if o["matched"].get("B")] == [80]
        assert min(loader.computed["B"]) == 80
        for layer in range(4):
            assert torch.equal(loader.tokens_kv("B", layer, 0, 110),
                               loader.expected_kv("B", layer, 0, 110))
        assert loader.work.worker.stats["pages_load_failed"] == 0
        assert (loader.work.worker.mover.direct_moved > 0) == load_direct
    finally:
        loader.close()


def test_pending_lookup_is_none_then_a_count_that_leaves_one_token(kvtierd):
    sim = make_sim(kvtierd)
    try:
        run_prompt(sim, "A", PROMPT[:96])  # exactly 6 blocks
        conn = sim.sched
        req = SimRequest("B", PROMPT[:96], BS)
        assert conn.get_num_new_matched_tokens(req, 0) == (None, False)
        sim.wait_lookups()
        # All 96 tokens are cached, but vLLM must compute the last one itself.
        assert conn.get_num_new_matched_tokens(req, 0) == (95, False)
        assert conn.get_num_new_matched_tokens(req, 0) == (95, False)  # same answer, no re-ask
        # Locally computed blocks are not counted again.
        other = SimRequest("C", PROMPT[:96], BS)
        assert conn.get_num_new_matched_tokens(other, 48) == (None, False)
        sim.wait_lookups()
        assert conn.get_num_new_matched_tokens(other, 48) == (47, False)
        miss = SimRequest("D", list(range(9000, 9100)), BS)
        conn.get_num_new_matched_tokens(miss, 0)
        sim.wait_lookups()
        assert conn.get_num_new_matched_tokens(miss, 0) == (0, False)
    finally:
        sim.close()


@pytest.mark.parametrize("load_async", [False, True])
def test_a_fully_cached_prompt_computes_only_its_last_token(kvtierd, load_async):
    sim = make_sim(kvtierd, load_async=load_async)
    try:
        run_prompt(sim, "A", PROMPT[:96])
        outs = run_prompt(sim, "B", PROMPT[:96])
        assert [o["matched"]["B"] for o in outs if o["matched"].get("B")] == [95]
        assert sim.computed["B"] == {95}
        for layer in range(4):
            assert torch.equal(sim.tokens_kv("B", layer, 0, 96), sim.expected_kv("B", layer, 0, 96))
    finally:
        sim.close()


def test_a_lease_keeps_counted_pages_loadable_under_eviction(kvtierd_factory):
    d = kvtierd_factory(flags=["--host_bytes=16MiB"])
    sim = make_sim(d, lease_ms=60000)
    try:
        run_prompt(sim, "A", PROMPT)
        run_prompt(sim, "X", list(range(7000, 7100)))  # pages nobody will lease
        req = SimRequest("B", SHARED, BS)
        sim.add(req)
        sim.step()
        sim.wait_lookups()  # B's lookup has leased its 5 pages
        admin = kvtier.Client(d.endpoint)
        assert admin.evict()["remaining"] == 5  # everything else is gone
        x_keys = sim.sched.keyspace.keys(SimRequest("X", list(range(7000, 7100)), BS)
                                         .block_hashes, 0)
        assert admin.lookup(x_keys).hits == 0
        outs = run_until_scheduled(sim, "B")
        assert outs[0]["matched"]["B"] == 80 and not outs[0]["errors"]
        assert min(sim.computed["B"]) == 80
        for layer in range(4):
            assert torch.equal(sim.tokens_kv("B", layer, 0, 110),
                               sim.expected_kv("B", layer, 0, 110))
    finally:
        sim.close()


@pytest.mark.parametrize("load_async", [False, True])
def test_daemon_killed_mid_load_reports_the_blocks_and_the_engine_recomputes(kvtierd_factory,
                                                                             load_async):
    d = kvtierd_factory()
    sim = make_sim(d, load_async=load_async, timeout_ms=1500, lookup_timeout_ms=1500)
    try:
        run_prompt(sim, "A", PROMPT)
        sim.add(SimRequest("B", SHARED, BS))
        sim.step()
        sim.wait_lookups()

        def freeze_then_kill():  # the GET goes out to a frozen daemon, which then dies
            d._proc.send_signal(signal.SIGSTOP)
            threading.Timer(0.3, d.kill).start()

        out = sim.step(on_worker_start=freeze_then_kill)
        assert out["matched"]["B"] == 80
        if load_async:  # reported no later than the step that says the load finished
            for _ in range(20):
                if out["recving"]:
                    break
                sim.work.worker.drain()
                out = sim.step()
            assert out["recving"] == {"B"}
            sim.step()  # B runs, from its first failed block
        failed = set(sim.blocks["B"][:5])
        assert out["errors"] == failed
        assert sim.work.worker.stats["pages_loaded"] == 0
        assert sim.computed["B"] == set(range(110))  # everything recomputed
        for layer in range(4):
            assert torch.equal(sim.tokens_kv("B", layer, 0, 110),
                               sim.expected_kv("B", layer, 0, 110))
        # The engine carries on without its cache: no hits, saves fail quietly.
        run_prompt(sim, "C", list(range(3000, 3040)))
        assert sim.work.worker.stats["pages_not_saved"] >= 2
    finally:
        sim.close()


def test_a_stuck_daemon_costs_saves_not_the_step(kvtierd):
    # One staging page: every further page of the step waits for a PUT that hangs.
    sim = make_sim(kvtierd, staging_pages=1, timeout_ms=500, lookup_timeout_ms=500)
    kvtierd._proc.send_signal(signal.SIGSTOP)
    try:
        outs = run_prompt(sim, "A", PROMPT)  # no exception reaches the engine
        assert outs[-1]["matched"]["A"] == 0  # the lookup timed out: no hits
        sim.work.worker.drain()
        stats = sim.work.worker.stats
        assert stats["pages_saved"] == 0 and stats["pages_not_saved"] == 6
    finally:
        kvtierd._proc.send_signal(signal.SIGCONT)
        sim.close()


def test_a_request_aborted_during_its_load_keeps_its_blocks_until_the_load_ends(kvtierd):
    sim = make_sim(kvtierd, load_async=True)
    try:
        run_prompt(sim, "A", PROMPT)
        sim.add(SimRequest("B", SHARED, BS))
        sim.step()
        sim.wait_lookups()
        kvtierd._proc.send_signal(signal.SIGSTOP)  # B's GET will hang
        try:
            out = sim.step()
            assert out["matched"]["B"] == 80 and "B" in sim.loading
            assert sim.finish("B") is True  # vLLM must not free blocks a load may write
            out = sim.step()
            assert not out["sending"] and not out["recving"] and "B" in sim.held
        finally:
            kvtierd._proc.send_signal(signal.SIGCONT)
        for _ in range(20):
            sim.work.worker.drain()
            out = sim.step()
            if out["sending"]:
                break
        assert out["sending"] == {"B"} and not out["recving"] and "B" not in sim.held
        assert sim.finish("A") is False  # nothing in flight: freed at once
    finally:
        sim.close()


def test_tensor_parallel_ranks_store_their_own_pages_and_count_together(kvtierd):
    def config():
        cfg = sim_vllm_config(extra={"endpoint": kvtierd.endpoint})
        cfg.parallel_config.tensor_parallel_size = 2
        return cfg

    def worker(rank):  # vLLM's get_tensor_model_parallel_rank() in that worker
        ENGINE.TP_RANK[0] = rank
        return kv_vllm.KvtierConnector(config(), KVConnectorRole.WORKER)

    sched = kv_vllm.KvtierConnector(config(), KVConnectorRole.SCHEDULER)
    workers = [worker(r) for r in (0, 1)]
    req = SimRequest("A", PROMPT, BS)
    saves = [("A", [PageSpec(h, req.block_hashes[i - 1] if i else None, [i])
                    for i, h in enumerate(req.block_hashes)])]
    try:
        for r, w in enumerate(workers):  # each rank holds its own heads
            w.register_kv_caches({f"model.layers.{i}.self_attn.attn":
                                  torch.full((2, 8, BS, 2, 64), float(r)).half()
                                  for i in range(4)})
        assert workers[0].worker.keyspace.keys(req.block_hashes[:1], 0) != \
            workers[0].worker.keyspace.keys(req.block_hashes[:1], 1)

        def count():
            assert sched.get_num_new_matched_tokens(req, 0) == (None, False)
            sched.scheduler._lookups.wait_pending()
            return sched.get_num_new_matched_tokens(req, 0)[0]

        workers[0].bind_connector_metadata(kv_vllm.KvtierConnectorMetadata([], saves))
        workers[0].wait_for_save()
        workers[0].worker.drain()
        assert count() == 0  # rank 1 has nothing yet: nothing can be loaded
        sched.request_finished(req, [])
        workers[1].bind_connector_metadata(kv_vllm.KvtierConnectorMetadata([], saves))
        workers[1].wait_for_save()
        workers[1].worker.drain()
        assert count() == 96
    finally:
        for c in workers + [sched]:
            c.shutdown()


def test_hostile_inputs_give_clear_exceptions(kvtierd):
    cfg = sim_vllm_config(extra={"endpoint": kvtierd.endpoint})
    kv = {f"model.layers.{i}.self_attn.attn": torch.zeros(2, 8, BS, 2, 64, dtype=torch.float16)
          for i in range(4)}

    def worker():
        return kv_vllm.KvtierConnector(cfg, KVConnectorRole.WORKER)

    with pytest.raises(TypeError, match="dtype"):
        worker().register_kv_caches({n: t.to(torch.int8) for n, t in kv.items()})
    with pytest.raises(ValueError, match="not contiguous"):  # vLLM's HND stride order
        worker().register_kv_caches({n: torch.zeros(2, 8, 2, BS, 64).half().transpose(2, 3)
                                     for n in kv})
    with pytest.raises(ValueError, match="model config"):  # 4 kv heads, the model has 2
        worker().register_kv_caches({n: torch.zeros(2, 8, BS, 4, 32).half() for n in kv})
    with pytest.raises(ValueError, match="unknown kv_connector_extra_config"):
        kv_vllm.KvtierConnector(sim_vllm_config(extra={"endpont": "x"}), KVConnectorRole.WORKER)
    fp8 = sim_vllm_config(extra={"endpoint": kvtierd.endpoint})
    fp8.cache_config.cache_dtype = "fp8"
    with pytest.raises(NotImplementedError, match="fp8"):
        kv_vllm.KvtierConnector(fp8, KVConnectorRole.WORKER)
    w = worker()
    w.register_kv_caches(kv)
    with pytest.raises(TypeError, match="metadata"):
        w.bind_connector_metadata({"loads": []})
    for blocks in ([8], [-1], [3, 3]):
        specs = [PageSpec(bytes(32), None, [b]) for b in blocks]
        w.bind_connector_metadata(kv_vllm.KvtierConnectorMetadata([("r", specs)], []))
        with pytest.raises(ValueError):
            w.start_load_kv(None)
    w.bind_connector_metadata(kv_vllm.KvtierConnectorMetadata([], []))
    with pytest.raises(ValueError, match="not the KV cache"):
        w.save_kv_layer("model.layers.0.self_attn.attn", torch.zeros(2, 8, BS, 2, 64).half(), None)
    with pytest.raises(ValueError, match="unknown layer"):
        w.save_kv_layer("model.layers.9.self_attn.attn", None, None)
    assert w.get_block_ids_with_load_errors() == set()  # nothing was loaded, nothing failed
    w.shutdown()




# -- what differs between vLLM versions ------------------------------------------

def test_vllm_v0_11_0_is_refused_at_start(kvtierd):
    """v0.11.0's workers never ask a connector which loads failed (no
    get_block_ids_with_load_errors, no KVConnectorOutput.invalid_block_ids):
    a failed load would leave stale KV under tokens the scheduler counts as
    computed. The connector refuses to start there, naming the version."""
    with installed("vllm_v0_11_0") as v0110:
        from kvtier.integrations import vllm as conn
        cfg = sim_vllm_config(extra={"endpoint": kvtierd.endpoint})
        for role in v0110.KVConnectorRole:
            with pytest.raises(RuntimeError, match=r"vLLM >= v0\.11\.1.*0\.11\.0"):
                conn.KvtierConnector(cfg, role)


def test_a_failed_load_reaches_the_scheduler_as_invalid_block_ids(kvtierd):
    """v0.11.1: a page that does not arrive (here: deleted between the lookup
    and the load) is reported by get_block_ids_with_load_errors, vLLM's model
    runner puts it in KVConnectorOutput.invalid_block_ids, and the engine
    recomputes from that block: the model never attends over a block whose
    load failed."""
    sim = make_sim(kvtierd, lease_ms=0)  # no lease: a DELETE can take a counted page
    try:
        run_prompt(sim, "A", PROMPT)
        sim.add(SimRequest("B", SHARED, BS))
        sim.step()
        sim.wait_lookups()  # B's 5 pages counted
        page3 = sim.sched.keyspace.keys([sim.reqs["B"].block_hashes[3]], 0)
        assert kvtier.Client(kvtierd.endpoint).delete(page3) == 1
        out = sim.step()
        assert out["matched"]["B"] == 80
        assert out["errors"] == {sim.blocks["B"][3]}  # invalid_block_ids of this step
        assert sim.work.worker.stats["pages_load_failed"] == 1
        assert min(sim.computed["B"]) == 48  # recomputed from the failed block on
        for layer in range(4):
            assert torch.equal(sim.tokens_kv("B", layer, 0, 110),
                               sim.expected_kv("B", layer, 0, 110))
    finally:
        sim.close()


@pytest.mark.parametrize("registered", [True, False])
def test_flashinfer_layout_is_detected_and_pages_match_flash_attention(kvtierd, registered):
    """FlashInfer's KV tensor is (num_blocks, 2, block_size, heads, head_size).
    The connector asks the backend (registered: its Attention layers are in
    static_forward_context) or reads the shape; either way a page saved from
    a FlashInfer engine is the same object, byte for byte, as one saved from
    a FlashAttention engine."""
    fi = make_sim(kvtierd, backend=ENGINE.FlashInferBackend, registered=registered)
    try:
        assert tuple(fi.kv[fi.names[0]].shape) == (64, 2, BS, 2, 64)
        run_prompt(fi, "A", PROMPT)
        assert fi.work.worker.stats["pages_saved"] == 6
    finally:
        fi.close()
    fa = make_sim(kvtierd, registered=registered)  # FlashAttention loads what FlashInfer saved
    try:
        outs = run_prompt(fa, "B", SHARED)
        assert [o["matched"].get("B") for o in outs if o["matched"].get("B")] == [80]
        for layer in range(4):
            assert torch.equal(fa.tokens_kv("B", layer, 0, 110),
                               fa.expected_kv("B", layer, 0, 110))
    finally:
        fa.close()


def test_an_ambiguous_kv_shape_is_refused_naming_kv_dims(kvtierd):
    """Two blocks make FlashAttention's and FlashInfer's shapes alike; with no
    backend to ask, the connector refuses instead of guessing, and kv_dims
    settles it."""
    with pytest.raises(ValueError, match="kv_dims"):
        make_sim(kvtierd, backend=ENGINE.FlashInferBackend, num_blocks=2)
    sim = make_sim(kvtierd, backend=ENGINE.FlashInferBackend, num_blocks=2, kv_dims="B2THD")
    sim.close()
    with pytest.raises(ValueError, match="dims must order"):
        make_sim(kvtierd, kv_dims="2BTXD")


class ResumedIdsCachedRequestData:
    """CachedRequestData of vLLM after v0.11.1: `resumed_req_ids` (a set) is
    the field (vllm/v1/core/sched/output.py on main, read at commit
    00e8f1fd0936), and for a while the old list stayed as a property that
    warns on every read. No vLLM tag with it was a stand-in here."""

    def __init__(self, req_ids, resumed_req_ids, new_block_ids, num_computed_tokens):
        self.req_ids, self.resumed_req_ids = list(req_ids), set(resumed_req_ids)
        self.new_token_ids, self.new_block_ids = [], list(new_block_ids)
        self.num_computed_tokens = list(num_computed_tokens)

    @property
    def resumed_from_preemption(self):
        warnings.warn("use resumed_req_ids field", DeprecationWarning, stacklevel=2)
        return [r in self.resumed_req_ids for r in self.req_ids]


@pytest.mark.parametrize("cached_type", ["v0_11_1", "resumed_req_ids"])
def test_a_resumed_request_takes_its_new_blocks_without_a_deprecation_warning(kvtierd,
                                                                              cached_type):
    sim = make_sim(kvtierd)
    try:
        run_prompt(sim, "A", PROMPT)
        # A (all 100 tokens computed, 6 pages saved) is preempted and resumes
        # on other blocks, from token 0: its pages are already in kvtier, so
        # nothing is saved again, and the connector's view of its blocks is
        # replaced, not extended.
        new_blocks = list(range(40, 47))
        make = (ENGINE.CachedRequestData.of if cached_type == "v0_11_1"
                else ResumedIdsCachedRequestData)
        cached = make(["A"], {"A"}, [(new_blocks,)], [0])
        so = ENGINE.SchedulerOutput([], cached, {"A": 100}, 100)
        with warnings.catch_warnings():
            warnings.simplefilter("error", DeprecationWarning)
            sim.sched.build_connector_meta(so)
        assert sim.sched.scheduler._reqs["A"].block_ids == new_blocks
    finally:
        sim.close()


def test_importing_the_connector_without_vllm_names_vllm_and_its_versions():
    with installed("no_engine"):  # neither vllm nor sglang importable
        with pytest.raises(ImportError, match=r"needs vLLM installed.*v0\.11\.1"):
            from kvtier.integrations import vllm  # noqa: F401


@pytest.mark.parametrize("setting,value", [("rope_theta", 500000.0), ("revision", "other-rev"),
                                           ("quantization", "awq")])
def test_two_model_configurations_never_share_pages(kvtierd, setting, value):
    """Same model name, layout and prompt (so the same vLLM block hashes); a
    model setting that changes the KV differs: no page crosses."""
    def sim_with(**model):
        cfg = sim_vllm_config(extra=dict(endpoint=kvtierd.endpoint))
        for k, v in model.items():
            setattr(cfg.model_config, k, v)
        return VllmSim(cfg, ENGINE)

    def matched(sim, req_id):
        outs = run_prompt(sim, req_id, PROMPT)
        return max(o["matched"].get(req_id) or 0 for o in outs)

    a = sim_with()
    try:
        assert matched(a, "A") == 0 and a.work.worker.stats["pages_saved"] == 6
    finally:
        a.close()
    b = sim_with(**{setting: value})
    try:
        assert matched(b, "B") == 0, f"{setting}={value!r} loaded pages of the default model"
    finally:
        b.close()
    c = sim_with()
    try:
        assert matched(c, "C") == 96  # the same configuration finds its pages
    finally:
        c.close()
