# kvtier as a vLLM V1 KV connector. Interface followed: vLLM v0.11.x,
# vllm/distributed/kv_transfer/kv_connector/v1/base.py (KVConnectorBase_V1;
# the v0.11.1 constructor with its optional kv_cache_config). Load it with
#   --kv-transfer-config '{"kv_connector":"KvtierConnector",
#     "kv_connector_module_path":"kvtier.integrations.vllm","kv_role":"kv_both",
#     "kv_connector_extra_config":{"endpoint":"ipc:///run/kvtier/kvtierd.sock",
#                                  "tenant":"default","token":""}}'
# Without vllm installed it subclasses a local stand-in (_vllm_standin.py).
import inspect
from dataclasses import dataclass, fields
from typing import Optional

import torch

import kvtier

from ._vllm_scheduler import PageSpec, SchedulerSide
from ._vllm_worker import WorkerSide
from .paging import DTYPES

try:
    from vllm.distributed.kv_transfer.kv_connector.v1.base import (  # noqa: F401
        KVConnectorBase_V1, KVConnectorMetadata, KVConnectorRole)
    VLLM_AVAILABLE = True
except ImportError:
    from ._vllm_standin import KVConnectorBase_V1, KVConnectorMetadata, KVConnectorRole  # noqa
    VLLM_AVAILABLE = False

VLLM_VERSION_FOLLOWED = "0.11.x"
__all__ = ["KvtierConnector", "KvtierConnectorMetadata", "KvtierConfig", "PageSpec",
           "VLLM_AVAILABLE", "VLLM_VERSION_FOLLOWED"]


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
    kv_dims: str = "2BTHD"  # per-layer tensor dims: FlashAttention (2, blocks, block, heads, dim)

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
        return cfg


class KeySpace:
    """Page keys of this deployment: the engine's block hash with the model,
    the page layout and the tensor-parallel rank folded in (each rank stores
    its own heads)."""

    def __init__(self, model_id, layout, tp_size):
        self.model_id, self.layout, self.tp_size = model_id, layout, tp_size

    def keys(self, page_hashes, rank):
        return kvtier.external_keys(page_hashes, f"{self.model_id}|vllm|tp{rank}of{self.tp_size}",
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


def _tp_rank(vllm_config):
    if VLLM_AVAILABLE:
        from vllm.distributed.parallel_state import get_tensor_model_parallel_rank
        return get_tensor_model_parallel_rank()
    pc = vllm_config.parallel_config
    return getattr(pc, "rank", 0) % max(1, getattr(pc, "tensor_parallel_size", 1))


class KvtierConnector(KVConnectorBase_V1):
    """vLLM V1 KV connector over kvtierd (kv_role "kv_both": loads prefixes
    kvtier holds, saves every full page the engine computes)."""

    def __init__(self, vllm_config, role, kv_cache_config=None):
        if "kv_cache_config" in inspect.signature(KVConnectorBase_V1.__init__).parameters:
            super().__init__(vllm_config, role, kv_cache_config)
        else:  # vLLM v0.11.0
            super().__init__(vllm_config, role)
        tc = vllm_config.kv_transfer_config
        self.cfg = KvtierConfig.from_extra(getattr(tc, "kv_connector_extra_config", None))
        layout = layout_from_config(vllm_config, self.cfg.blocks_per_page)
        mc = vllm_config.model_config
        model_id = self.cfg.model_id or str(getattr(mc, "model", "") or "")
        if not model_id:
            raise ValueError("KvtierConnector: set kv_connector_extra_config.model_id")
        tp = getattr(vllm_config.parallel_config, "tensor_parallel_size", 1)
        self.keyspace = KeySpace(model_id, layout, tp)
        self.scheduler = self.worker = None
        if role == KVConnectorRole.SCHEDULER:
            self._lookup_client = kvtier.Client(self.cfg.endpoint, tenant=self.cfg.tenant,
                                                token=self.cfg.token, client_name="vllm-scheduler",
                                                timeout_ms=self.cfg.lookup_timeout_ms)
            self.scheduler = SchedulerSide(self.cfg, self.keyspace,
                                           vllm_config.cache_config.block_size,
                                           self._lookup_client, KvtierConnectorMetadata)
        else:
            self.worker = WorkerSide(self.cfg, self.keyspace, _tp_rank(vllm_config), layout)

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
        return None  # vLLM v0.11 expects a KVConnectorStats object; ours: .worker.stats

    def shutdown(self):
        if self.worker is not None:
            self.worker.close()
        if self.scheduler is not None:
            self._lookup_client.close()
