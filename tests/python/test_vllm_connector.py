# kvtier.integrations.vllm.KvtierConnector driven with vLLM v0.11.x's call
# sequence (tests/python/engine_sim.py) over FlashAttention-shaped KV tensors,
# against a real kvtierd. Without vllm installed the connector subclasses the
# local stand-in of KVConnectorBase_V1: these tests check the connector against
# vLLM's interface, not against the engine itself (see the last test).
import signal
import threading

import pytest

torch = pytest.importorskip("torch", reason="the vLLM connector needs torch")

import kvtier  # noqa: E402
from engine_sim import SimRequest, VllmSim, sim_vllm_config  # noqa: E402
from kvtier.integrations import vllm as kv_vllm  # noqa: E402
from kvtier.integrations._vllm_scheduler import PageSpec  # noqa: E402
from kvtier.integrations._vllm_standin import KVConnectorRole  # noqa: E402

BS = 16
PROMPT = list(range(1000, 1100))  # 100 tokens: 6 full blocks
SHARED = PROMPT[:80] + list(range(5000, 5030))  # shares 5 blocks with PROMPT


def make_sim(d, dtype=torch.float16, k=1, load_async=False, **extra):
    cfg = sim_vllm_config(dtype=dtype, extra=dict(endpoint=d.endpoint, blocks_per_page=k,
                                                  load_async=load_async, **extra))
    return VllmSim(cfg)


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
    def config(rank):
        cfg = sim_vllm_config(extra={"endpoint": kvtierd.endpoint})
        cfg.parallel_config.tensor_parallel_size, cfg.parallel_config.rank = 2, rank
        return cfg

    sched = kv_vllm.KvtierConnector(config(0), KVConnectorRole.SCHEDULER)
    workers = [kv_vllm.KvtierConnector(config(r), KVConnectorRole.WORKER) for r in (0, 1)]
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
    with pytest.raises(ValueError, match="not contiguous"):
        worker().register_kv_caches({n: t.transpose(2, 3) for n, t in kv.items()})
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


def test_with_the_real_vllm():
    try:
        from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorBase_V1
    except ImportError:
        pytest.skip("vllm is not installed: KvtierConnector was tested only against the "
                    "local stand-in of vLLM v0.11.x's KVConnectorBase_V1, not the engine")
    assert kv_vllm.VLLM_AVAILABLE and issubclass(kv_vllm.KvtierConnector, KVConnectorBase_V1)
