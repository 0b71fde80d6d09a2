# Docs that run (issue 25 item 6), the engines' side: every vLLM
# `--kv-transfer-config` and SGLang `--hicache-storage-backend-extra-config`
# printed in a ```sh block of README.md or docs/INTEGRATIONS.md is split as the
# shell splits it, parsed as the engine parses it (the stand-ins of
# tests/python/standins: vLLM's KVTransferConfig and connector loading,
# SGLang's extra-config parsing and dynamic backend loading) and handed to the
# connector it names, which then stores and restores a prompt through a kvtierd
# with its default flags, found through the default socket as the docs say.
# A JSON that does not parse, or names an option neither the engine nor the
# connector knows, fails here naming the doc and line.
import json
import shlex

import pytest

torch = pytest.importorskip("torch", reason="the connectors need torch")

from docs_util import ALL_BLOCKS  # noqa: E402

CONFIG_FLAGS = {"--kv-transfer-config": "vllm", "--hicache-storage-backend-extra-config": "sglang"}


class EngineConfig:
    def __init__(self, block, engine, argv, raw):
        self.block, self.engine, self.argv, self.raw = block, engine, argv, raw

    @property
    def where(self):
        return f"{self.block.doc}:{self.block.line} ({self.engine} command)"

    def option(self, name):
        """The value of `name` in the printed command (--name value or --name=value)."""
        for i, a in enumerate(self.argv):
            if a == name and i + 1 < len(self.argv):
                return self.argv[i + 1]
            if a.startswith(name + "="):
                return a.split("=", 1)[1]
        return None

    def model(self):
        if self.engine == "vllm":
            return self.argv[self.argv.index("serve") + 1]
        return self.option("--model-path")

    def parsed(self):
        try:
            return json.loads(self.raw)
        except json.JSONDecodeError as e:
            pytest.fail(f"{self.where}: the printed JSON does not parse: {e}\n{self.raw}")


def shell_commands(block):
    """The block's commands as the shell splits them: a line continued with a
    backslash, or inside an open quote (a JSON over several lines), goes on."""
    commands, pending = [], ""
    for line in block.code.split("\n"):
        pending += line + "\n"
        if line.endswith("\\"):
            continue
        try:
            argv = shlex.split(pending, comments=True)
        except ValueError:  # no closing quotation yet
            continue
        if argv:
            commands.append(argv)
        pending = ""
    if pending.strip():
        raise AssertionError(f"{block.where}: a command that never ends: {pending!r}")
    return commands


def engine_configs():
    """Every printed engine command with a config flag, from every ```sh block."""
    configs = []
    for b in ALL_BLOCKS:
        if b.lang not in ("sh", "bash") or b.skip:
            continue
        for argv in shell_commands(b):
            for i, a in enumerate(argv):
                flag, eq, value = a.partition("=")
                if flag in CONFIG_FLAGS:
                    raw = value if eq else (argv[i + 1] if i + 1 < len(argv) else "")
                    configs.append(EngineConfig(b, CONFIG_FLAGS[flag], argv, raw))
    return configs


CONFIGS = engine_configs()

VLLM_VERSIONS = ["vllm_v0_11_1"]  # the versions the connector runs on (v0.11.0 is refused)
SGLANG_VERSIONS = ["sglang_v0_5_5", "sglang_v0_5_6", "sglang_v0_5_6_post1"]


def _ids(c):
    return f"{c.block.doc}:{c.block.line}:{c.engine}"


def test_the_docs_print_both_engines_configs():
    found = {(c.block.doc, c.engine) for c in CONFIGS}
    print("\nengine configs: " + ", ".join(c.where for c in CONFIGS))
    for doc in ("README.md", "docs/INTEGRATIONS.md"):
        for engine in ("vllm", "sglang"):
            assert (doc, engine) in found, f"no {engine} configuration found in {doc}'s sh blocks"


@pytest.fixture
def default_env(default_daemon, monkeypatch):
    """A daemon with its default flags, and this process's environment as a
    user's shell would have it: the default socket, no $KVTIER_ENDPOINT."""
    d = default_daemon()
    monkeypatch.delenv("KVTIER_ENDPOINT", raising=False)
    monkeypatch.setenv("XDG_RUNTIME_DIR", d.env["XDG_RUNTIME_DIR"])
    return d


# -- vLLM ---------------------------------------------------------------------------
BS = 16  # vLLM's default block size on GPUs


def _run_prompt(sim, req_id, tokens, SimRequest, steps=6):
    """Engine steps until the request ran (vLLM asks a pending lookup again
    next step); returns what the scheduler was told it could load."""
    sim.add(SimRequest(req_id, tokens, BS))
    matched = None
    for _ in range(steps):
        out = sim.step()
        matched = out["matched"].get(req_id, matched)
        assert not out["errors"], f"load errors: {out['errors']}"
        sim.wait_lookups()
        sim.work.worker.drain()
        if req_id in sim.computed and req_id not in sim.loading:
            return matched
    raise AssertionError(f"{req_id} never ran")


@pytest.mark.parametrize("version", VLLM_VERSIONS)
@pytest.mark.parametrize("cfg", [c for c in CONFIGS if c.engine == "vllm"], ids=_ids)
def test_vllm_kv_transfer_config_as_printed(cfg, version, default_env):
    from engine_sim import SimRequest, VllmSim, sim_vllm_config
    from standins import installed
    parsed = cfg.parsed()
    with installed(version) as engine:
        from kvtier.integrations import vllm as kv_vllm
        engine.TP_RANK[0] = 0
        try:
            tc = engine.KVTransferConfig(**parsed)
        except (TypeError, ValueError) as e:
            pytest.fail(f"{cfg.where}: vLLM {engine.__version__} refuses --kv-transfer-config: {e}")
        assert engine.get_connector_class(tc) is kv_vllm.KvtierConnector, cfg.where
        vc = sim_vllm_config(engine=engine)
        vc.kv_transfer_config = tc
        vc.model_config.model = cfg.model()
        prompt = list(range(1000, 1096))  # 6 full blocks
        sims = []
        try:
            try:
                sims.append(VllmSim(vc, engine))
            except ValueError as e:
                pytest.fail(f"{cfg.where}: KvtierConnector refuses kv_connector_extra_config: {e}")
            assert _run_prompt(sims[0], "A", prompt, SimRequest) == 0, f"{cfg.where}: a cold cache"
            assert sims[0].work.worker.stats["pages_saved"] == 6, cfg.where
            sims.append(VllmSim(vc, engine))  # another engine process, same config
            # Every block is cached; vLLM computes the last token itself.
            assert _run_prompt(sims[1], "B", prompt, SimRequest) == 95, cfg.where
            assert sims[1].computed["B"] == {95}, cfg.where
            for layer in range(len(sims[1].names)):
                assert torch.equal(sims[1].tokens_kv("B", layer, 0, 96),
                                   sims[1].expected_kv("B", layer, 0, 96)), cfg.where
        finally:
            for s in sims:
                s.close()


# -- SGLang --------------------------------------------------------------------------
def _sglang_page_hashes(tokens, page):
    """SGLang's page hashes (mem_cache/utils get_hash_str): chained SHA-256, hex."""
    import hashlib
    out, prior = [], None
    for i in range(len(tokens) // page):
        h = hashlib.sha256()
        if prior:
            h.update(bytes.fromhex(prior))
        for t in tokens[i * page:(i + 1) * page]:
            h.update(t.to_bytes(4, byteorder="little", signed=False))
        prior = h.hexdigest()
        out.append(prior)
    return out


@pytest.mark.parametrize("version", SGLANG_VERSIONS)
@pytest.mark.parametrize("cfg", [c for c in CONFIGS if c.engine == "sglang"], ids=_ids)
def test_sglang_extra_config_as_printed(cfg, version, default_env):
    from standins import installed
    page = int(cfg.option("--page-size") or 1)
    layout = cfg.option("--hicache-mem-layout") or "layer_first"
    pages = 4
    with installed(version) as engine:
        try:
            extra, own = engine.parse_storage_backend_extra_config(cfg.raw)
        except ValueError as e:  # json.JSONDecodeError is one
            pytest.fail(f"{cfg.where}: SGLang {engine.__version__} cannot parse the JSON: {e}")

        def start_engine():
            """What SGLang does at start with the printed flags: its server args
            published in the scheduler process (v0.5.4 on), the dynamic backend
            from the JSON, the host pool (the stock one), the controller."""
            engine.set_global_server_args_for_scheduler(engine.ServerArgs(
                model_path=cfg.model(), page_size=page, hicache_mem_layout=layout,
                hicache_storage_backend=cfg.option("--hicache-storage-backend"),
                hicache_storage_backend_extra_config=cfg.raw))
            storage_config = engine.HiCacheStorageConfig(
                tp_rank=0, tp_size=1, pp_rank=0, pp_size=1, is_mla_model=False,
                is_page_first_layout=layout.startswith("page_first"), model_name=cfg.model(),
                extra_config=extra)
            try:
                backend = engine.create_dynamic_backend(storage_config)
            except (ValueError, TypeError, ImportError) as e:
                pytest.fail(f"{cfg.where}: SGLang {engine.__version__} cannot load the backend: {e}")
            pool = engine.MHATokenToKVPoolHost(2 * pages * page, page, 4, 2, 64, torch.float16,
                                               layout)
            backend.register_mem_pool_host(pool)
            return backend, pool, engine.HiCacheController(backend, pool, extra)

        def idx(first):
            return torch.arange(first * page, (first + pages) * page, dtype=torch.int64)

        hashes = _sglang_page_hashes(list(range(100, 100 + pages * page)), page)
        backend, pool, ctl = start_engine()
        pool.kv_buffer.copy_(torch.randn(pool.kv_buffer.shape).to(pool.dtype))
        want = [pool.get_data_page(p * page).clone() for p in range(pages)]
        prefix_keys = [] if own["hicache_storage_pass_prefix_keys"] else None
        assert ctl.write_storage(idx(0), hashes, prefix_keys) == pages * page, cfg.where
        backend.close()
        backend, pool, ctl = start_engine()  # another SGLang process, same flags
        assert ctl.prefetch(hashes, idx(pages)) == pages, f"{cfg.where}: pages not restored"
        for p in range(pages):
            assert torch.equal(pool.get_data_page((pages + p) * page), want[p]), cfg.where
        backend.close()
        engine.set_global_server_args_for_scheduler(None)
