# kvtier as a vLLM V1 KV connector. Interface followed: vLLM v0.11.1,
# vllm/distributed/kv_transfer/kv_connector/v1/base.py (KVConnectorBase_V1),
# the first release whose workers ask a connector for the blocks it failed to
# load (get_block_ids_with_load_errors -> KVConnectorOutput.invalid_block_ids).
# Older vLLM is refused at start: there a failed load would go unreported and
# the model would attend over KV that never arrived. Load it with
#   --kv-transfer-config '{"kv_connector":"KvtierConnector",
#     "kv_connector_module_path":"kvtier.integrations.vllm","kv_role":"kv_both",
#     "kv_connector_extra_config":{"endpoint":"ipc:///run/kvtier/kvtierd.sock",
#                                  "tenant":"default","token":""}}'
# See docs/INTEGRATIONS.md for the versions this was checked against.
import hashlib
import json
from dataclasses import dataclass, fields
from typing import Optional

import torch

import kvtier

from ._vllm_layout import AUTO, resolve_kv_dims
from ._vllm_scheduler import PageSpec, SchedulerSide
from ._vllm_worker import WorkerSide
from .paging import DTYPES, PAGE_FORMAT

VLLM_MIN_VERSION = "0.11.1"
VLLM_VERSIONS_SUPPORTED = "v0.11.1 (v0.11.0 and older are refused: they never ask for load errors)"

try:
    from vllm.distributed.kv_transfer.kv_connector.v1.base import (
        KVConnectorBase_V1, KVConnectorMetadata, KVConnectorRole)
except ImportError as e:
    raise ImportError(
        f"kvtier.integrations.vllm is a vLLM KV connector and needs vLLM installed "
        f"(supported: {VLLM_VERSIONS_SUPPORTED}); importing vLLM failed: {e}") from e

__all__ = ["KvtierConnector", "KvtierConnectorMetadata", "KvtierConfig", "PageSpec",
           "VLLM_MIN_VERSION", "VLLM_VERSIONS_SUPPORTED"]


def check_vllm_version(base=KVConnectorBase_V1):
    """Refuses a vLLM whose workers never report load errors (v0.11.0 and
    older: KVConnectorBase_V1 has no get_block_ids_with_load_errors, and the
    model runner never asks). There a page that does not arrive leaves its
    blocks as they were while the scheduler counts their tokens computed: the
    model would attend over stale KV, silently."""
    if not callable(getattr(base, "get_block_ids_with_load_errors", None)):
        import vllm  # noqa: F401 -- only for the version in the message
        version = getattr(vllm, "__version__", "unknown")
        raise RuntimeError(
            f"KvtierConnector needs vLLM >= v{VLLM_MIN_VERSION}: this vLLM ({version}) has no "
            "KVConnectorBase_V1.get_block_ids_with_load_errors, so a page that fails to load "
            "could not be reported and the model would attend over KV that never arrived. "
            f"Upgrade vLLM to v{VLLM_MIN_VERSION} or later, or run without the kvtier connector")


@dataclass
class KvtierConfig:
    """kv_connector_extra_config keys (all optional)."""
    endpoint: Optional[str] = None  # None: kvtier's default socket
    tenant: str = "default"
    token: str = ""
    timeout_ms: int = 10000  # one daemon call (GET/PUT) at most
    lease_ms: int = 10000  # lookups pin their hits this long awaiting the load
    lookup_timeout_ms: int = 5000  # a lookup unanswered this long counts no hits
    blocks_per_page: int = 1  # vLLM blocks per kvtier page
    staging_pages: int = 64  # host staging buffer, in pages
    load_async: bool = False  # load between steps (WAITING_FOR_REMOTE_KVS) or in the step
    model_id: Optional[str] = None  # default: the model's name; name its weights if they vary
    # Per-layer KV tensor dims, "auto": asked of the attention backend
    # (FlashAttention "2BTHD", FlashInfer "B2THD"); set it for other backends.
    kv_dims: str = AUTO
    # CPU KV caches: registered with the daemon where they are, so pages move
    # in one copy (docs/PROTOCOL.md, "Scattered pages"); False: always through
    # the staging buffers.
    direct: bool = True

    @classmethod
    def from_extra(cls, extra):
        extra = dict(extra or {})
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(extra) - set(known))
        if unknown:
            raise ValueError(f"unknown kv_connector_extra_config keys {unknown}; "
                             f"known: {sorted(known)}")
        cfg = cls(**extra)
        for name in ("timeout_ms", "lease_ms", "lookup_timeout_ms", "blocks_per_page",
                     "staging_pages"):
            v = getattr(cfg, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < (1 if name in (
                    "blocks_per_page", "staging_pages", "timeout_ms") else 0):
                raise ValueError(f"kv_connector_extra_config[{name!r}] = {v!r} is not valid")
        for name in ("load_async", "direct"):
            if not isinstance(getattr(cfg, name), bool):
                raise ValueError(f"kv_connector_extra_config[{name!r}] = {getattr(cfg, name)!r}: "
                                 "true or false")
        return cfg


# Model settings that change the KV a page holds but not vLLM's block hashes
# (those cover tokens, LoRA, multimodal inputs and cache_salt): folded into
# the model identity, so two deployments of one model name that compute
# different KV never share a page. Getattr'd: a version without one is None.
_KV_MODEL_SETTINGS = ("dtype", "quantization", "revision", "code_revision", "rope_scaling",
                      "rope_theta", "disable_sliding_window", "hf_overrides", "model_impl")


def model_identity(model_id, vllm_config):
    """`model_id` with a digest of the model settings that change KV bytes:
    _KV_MODEL_SETTINGS, the model's HF config as vLLM resolved it (layers,
    heads, RoPE, window...), and the KV cache dtype."""
    mc = vllm_config.model_config
    factors = {name: repr(getattr(mc, name, None)) for name in _KV_MODEL_SETTINGS}
    hf = getattr(mc, "hf_config", None)
    if hf is not None:
        try:
            factors["hf_config"] = hf.to_json_string(use_diff=False)
        except (AttributeError, TypeError):
            factors["hf_config"] = repr(hf)
    factors["cache_dtype"] = repr(getattr(vllm_config.cache_config, "cache_dtype", None))
    digest = hashlib.sha256(json.dumps(factors, sort_keys=True).encode()).hexdigest()[:32]
    return f"{model_id}|{digest}"


class KeySpace:
    """Page keys of this deployment: the engine's block hash with the model,
    the page layout and the tensor-parallel rank folded in (each rank stores
    its own heads)."""

    def __init__(self, model_id, layout, tp_size):
        self.model_id, self.layout, self.tp_size = model_id, layout, tp_size

    def keys(self, page_hashes, rank):
        # The page format is named too: an engine page is block-major
        # (paging.py), never to be read as a head-major kvtier-decoder page.
        return kvtier.external_keys(
            page_hashes, f"{self.model_id}|vllm|{PAGE_FORMAT}|tp{rank}of{self.tp_size}",
            self.layout)


@dataclass
class KvtierConnectorMetadata(KVConnectorMetadata):
    """One step's work: loads and saves as (request id, [PageSpec])."""
    loads: list
    saves: list
    load_async: bool = False


_CACHE_DTYPES = {"half": torch.float16, "float16": torch.float16, "bfloat16": torch.bfloat16,
                 "float": torch.float32, "float32": torch.float32}


def layout_from_config(vllm_config, blocks_per_page):
    """The kvtier page layout the model's KV cache makes (both sides need it:
    the scheduler to derive keys, the worker to check its tensors)."""
    mc, pc, cc = vllm_config.model_config, vllm_config.parallel_config, vllm_config.cache_config
    if getattr(pc, "pipeline_parallel_size", 1) != 1:
        raise NotImplementedError("KvtierConnector: pipeline parallelism is not supported")
    cache_dtype = getattr(cc, "cache_dtype", "auto")
    dtype = mc.dtype if cache_dtype == "auto" else _CACHE_DTYPES.get(cache_dtype)
    if dtype not in DTYPES:
        raise NotImplementedError(f"KvtierConnector stores fp16/bf16/fp32 KV caches, not "
                                  f"cache_dtype={cache_dtype!r} (model dtype {mc.dtype})")
    return kvtier.Layout(mc.get_num_layers(pc), mc.get_num_kv_heads(pc), mc.get_head_size(),
                         cc.block_size * blocks_per_page, DTYPES[dtype])


def _tp_rank():
    from vllm.distributed.parallel_state import get_tensor_model_parallel_rank
    return get_tensor_model_parallel_rank()


class KvtierConnector(KVConnectorBase_V1):
    """vLLM V1 KV connector over kvtierd (kv_role "kv_both": loads prefixes
    kvtier holds, saves every full page the engine computes)."""

    def __init__(self, vllm_config, role, kv_cache_config=None):
        check_vllm_version()
        super().__init__(vllm_config, role, kv_cache_config)
        tc = vllm_config.kv_transfer_config
        self.cfg = KvtierConfig.from_extra(getattr(tc, "kv_connector_extra_config", None))
        layout = layout_from_config(vllm_config, self.cfg.blocks_per_page)
        mc = vllm_config.model_config
        model_id = self.cfg.model_id or str(getattr(mc, "model", "") or "")
        if not model_id:
            raise ValueError("KvtierConnector: set kv_connector_extra_config.model_id")
        tp = getattr(vllm_config.parallel_config, "tensor_parallel_size", 1)
        self.keyspace = KeySpace(model_identity(model_id, vllm_config), layout, tp)
        self.scheduler = self.worker = None
        if role == KVConnectorRole.SCHEDULER:
            self._lookup_client = kvtier.Client(self.cfg.endpoint, tenant=self.cfg.tenant,
                                                token=self.cfg.token, client_name="vllm-scheduler",
                                                timeout_ms=self.cfg.lookup_timeout_ms)
            self.scheduler = SchedulerSide(self.cfg, self.keyspace,
                                           vllm_config.cache_config.block_size,
                                           self._lookup_client, KvtierConnectorMetadata)
        else:
            def kv_dims(layer_name, shape):
                return resolve_kv_dims(self.cfg.kv_dims, vllm_config, layer_name, shape,
                                       vllm_config.cache_config.block_size, layout.kv_heads,
                                       layout.head_dim)
            self.worker = WorkerSide(self.cfg, self.keyspace, _tp_rank(), layout, kv_dims)

    # -- scheduler side ------------------------------------------------------
    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        return self.scheduler.get_num_new_matched_tokens(request, num_computed_tokens)

    def update_state_after_alloc(self, request, blocks, num_external_tokens):
        self.scheduler.update_state_after_alloc(request, blocks, num_external_tokens)

    def build_connector_meta(self, scheduler_output):
        return self.scheduler.build_connector_meta(scheduler_output)

    def update_connector_output(self, connector_output):
        self.scheduler.update_connector_output(connector_output)

    def request_finished(self, request, block_ids):
        return self.scheduler.request_finished(request, block_ids)

    # -- worker side ---------------------------------------------------------
    def register_kv_caches(self, kv_caches):
        self.worker.register(kv_caches)

    def bind_connector_metadata(self, connector_metadata):
        if not isinstance(connector_metadata, KvtierConnectorMetadata):
            raise TypeError(f"KvtierConnector got metadata of type "
                            f"{type(connector_metadata).__name__}")
        super().bind_connector_metadata(connector_metadata)

    def start_load_kv(self, forward_context, **kwargs):
        self.worker.start_load(self._get_connector_metadata())

    def wait_for_layer_load(self, layer_name):
        self.worker.settle()  # the whole step's load: kvtier GETs pages, not layers

    def save_kv_layer(self, layer_name, kv_layer, attn_metadata, **kwargs):
        self.worker.check_layer(layer_name, kv_layer)  # copied out in wait_for_save

    def wait_for_save(self):
        self.worker.save(self._get_connector_metadata())

    def get_finished(self, finished_req_ids):
        sending, recving = self.worker.finished(finished_req_ids)
        return (sending or None), (recving or None)

    def get_block_ids_with_load_errors(self):
        return self.worker.failed_blocks()

    def get_kv_connector_stats(self):
        return None  # vLLM expects a KVConnectorStats object; ours: .worker.stats

    def shutdown(self):
        if self.worker is not None:
            self.worker.close()
        if self.scheduler is not None:
            self._lookup_client.close()
