# STAND-IN for vLLM v0.11.1 (tag v0.11.1 of vllm-project/vllm), the parts a KV
# connector touches, built from that version's:
#   vllm/distributed/kv_transfer/kv_connector/v1/base.py   KVConnectorBase_V1, KVConnectorRole,
#       KVConnectorMetadata: constructor (vllm_config, role, kv_cache_config=None);
#       get_block_ids_with_load_errors (added by PR #19330, merged 2025-09-30, after the
#       v0.11.0 branch: first released in v0.11.1)
#   vllm/v1/core/sched/output.py   NewRequestData, CachedRequestData (resumed_from_preemption:
#       one bool per request), SchedulerOutput
#   vllm/v1/outputs.py             KVConnectorOutput (with invalid_block_ids)
#   vllm/v1/worker/kv_connector_model_runner_mixin.py   what the model runner asks the
#       connector after each step (get_finished, then get_block_ids_with_load_errors)
#   vllm/v1/attention/backends/flash_attn.py, flashinfer.py   get_kv_cache_shape
#   vllm/distributed/parallel_state.py   get_tensor_model_parallel_rank
#   vllm/config/kv_transfer.py     KVTransferConfig, what --kv-transfer-config's JSON becomes
#       (its fields and __post_init__ checks; read from the stored newest version of the
#       file, which has no field the v0.11.1 docs do not list)
#   vllm/distributed/kv_transfer/kv_connector/factory.py   KVConnectorFactory: a connector
#       not in vLLM's registry is kv_connector_module_path's attribute kv_connector
# How it was read: the tag's snapshot is over the size the source store hands
# out, so these were checked against the tag's rendered API pages
# (docs.vllm.ai/en/v0.11.x/api/...) and PR #19330; fields the connector does not
# read are left out. Not vLLM: nothing here ran inside the engine.
import enum
import importlib
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Optional

__version__ = "0.11.1"


class KVConnectorRole(enum.Enum):
    SCHEDULER = 0  # the connector in the scheduler process
    WORKER = 1  # the connector in each worker process


class KVConnectorMetadata(ABC):  # noqa: B024 -- scheduler -> worker, per step
    pass


class KVConnectorBase_V1(ABC):
    def __init__(self, vllm_config, role, kv_cache_config=None):
        self._connector_metadata: Optional[KVConnectorMetadata] = None
        self._vllm_config = vllm_config
        if vllm_config.kv_transfer_config is None:
            raise ValueError("kv_transfer_config must be set for KVConnectorBase_V1")
        self._kv_transfer_config = vllm_config.kv_transfer_config
        self._kv_cache_config = kv_cache_config
        self._role = role

    @property
    def role(self):
        return self._role

    # -- worker side ---------------------------------------------------------
    def bind_connector_metadata(self, connector_metadata):
        self._connector_metadata = connector_metadata

    def clear_connector_metadata(self):
        self._connector_metadata = None

    def _get_connector_metadata(self):
        assert self._connector_metadata is not None
        return self._connector_metadata

    def has_connector_metadata(self):
        return self._connector_metadata is not None

    def register_kv_caches(self, kv_caches):
        return

    def set_host_xfer_buffer_ops(self, copy_operation):
        return

    @abstractmethod
    def start_load_kv(self, forward_context, **kwargs):
        pass

    @abstractmethod
    def wait_for_layer_load(self, layer_name):
        pass

    @abstractmethod
    def save_kv_layer(self, layer_name, kv_layer, attn_metadata, **kwargs):
        pass

    @abstractmethod
    def wait_for_save(self):
        pass

    def get_finished(self, finished_req_ids):
        return None, None

    def get_block_ids_with_load_errors(self):
        return set()

    def shutdown(self):
        return None

    def get_kv_connector_stats(self):
        return None

    # -- scheduler side ------------------------------------------------------
    @abstractmethod
    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        pass

    @abstractmethod
    def update_state_after_alloc(self, request, blocks, num_external_tokens):
        pass

    @abstractmethod
    def build_connector_meta(self, scheduler_output):
        pass

    def update_connector_output(self, connector_output):
        return

    def request_finished(self, request, block_ids):
        return False, None

    def take_events(self):
        return ()

    @classmethod
    def get_required_kvcache_layout(cls, vllm_config):
        return None


# -- the scheduler's step output as the connector reads it -------------------
@dataclass
class NewRequestData:
    req_id: str
    prompt_token_ids: list
    block_ids: tuple  # one list of block ids per KV cache group
    num_computed_tokens: int


@dataclass
class CachedRequestData:
    req_ids: list = field(default_factory=list)
    # True: new_block_ids replace the request's blocks (it was preempted).
    resumed_from_preemption: list = field(default_factory=list)
    new_token_ids: list = field(default_factory=list)
    new_block_ids: list = field(default_factory=list)  # per request: tuple of lists, or None
    num_computed_tokens: list = field(default_factory=list)

    @classmethod
    def of(cls, req_ids, resumed_ids, new_block_ids, num_computed_tokens):
        """This version's form of 'these requests, these resumed'."""
        return cls(list(req_ids), [r in resumed_ids for r in req_ids], [[] for _ in req_ids],
                   list(new_block_ids), list(num_computed_tokens))


@dataclass
class SchedulerOutput:
    scheduled_new_reqs: list
    scheduled_cached_reqs: CachedRequestData
    num_scheduled_tokens: dict
    total_num_scheduled_tokens: int = 0
    finished_req_ids: set = field(default_factory=set)
    kv_connector_metadata: Optional[KVConnectorMetadata] = None


@dataclass
class KVConnectorOutput:
    finished_sending: Optional[set] = None
    finished_recving: Optional[set] = None
    kv_connector_stats: Optional[Any] = None
    invalid_block_ids: set = field(default_factory=set)  # blocks whose load failed


def kv_connector_output(connector, finished_req_ids):
    """KVConnectorModelRunnerMixin._get_kv_connector_output after the forward
    pass: the connector's finished transfers, then its load errors."""
    out = KVConnectorOutput()
    out.finished_sending, out.finished_recving = connector.get_finished(finished_req_ids)
    out.invalid_block_ids = connector.get_block_ids_with_load_errors()
    out.kv_connector_stats = connector.get_kv_connector_stats()
    return out


@dataclass
class KVCacheBlocks:
    """What update_state_after_alloc receives: get_block_ids() is a tuple with
    one list per KV cache group (one group for a plain decoder)."""
    block_ids: Any

    def get_block_ids(self):
        return (list(self.block_ids),)


# -- attention backends: the per-layer KV tensor each one allocates ----------
class FlashAttentionBackend:
    @staticmethod
    def get_name():
        return "FLASH_ATTN"

    @staticmethod
    def get_kv_cache_shape(num_blocks, block_size, num_kv_heads, head_size,
                           cache_dtype_str="auto"):
        if block_size % 16 != 0:
            raise ValueError("Block size must be a multiple of 16.")
        return (2, num_blocks, block_size, num_kv_heads, head_size)


class FlashInferBackend:
    @staticmethod
    def get_name():
        return "FLASHINFER"

    @staticmethod
    def get_kv_cache_shape(num_blocks, block_size, num_kv_heads, head_size,
                           cache_dtype_str="auto"):
        return (num_blocks, 2, block_size, num_kv_heads, head_size)


class Attention:
    """An attention layer as vLLM registers it in
    compilation_config.static_forward_context[layer_name]."""

    def __init__(self, attn_backend):
        self.attn_backend = attn_backend

    def get_attn_backend(self):
        return self.attn_backend


# -- vllm/config/kv_transfer.py, the factory --------------------------------------
KVRole = ("kv_producer", "kv_consumer", "kv_both")


@dataclass
class KVTransferConfig:
    """--kv-transfer-config '<json>' as vLLM builds it from the JSON's keys. A
    key that is not a field is a TypeError here (stricter than vLLM, whose
    pydantic dataclass may ignore it): a misspelt option fails loudly."""
    kv_connector: Optional[str] = None
    engine_id: Optional[str] = None
    kv_buffer_device: Optional[str] = "cuda"
    kv_buffer_size: float = 1e9
    kv_role: Optional[str] = None
    kv_rank: Optional[int] = None
    kv_parallel_size: int = 1
    kv_ip: str = "127.0.0.1"
    kv_port: int = 14579
    kv_connector_extra_config: dict = field(default_factory=dict)
    kv_connector_module_path: Optional[str] = None

    def __post_init__(self):
        if self.kv_role is not None and self.kv_role not in KVRole:
            raise ValueError(f"Unsupported kv_role: {self.kv_role}. Supported roles are {KVRole}")
        if self.kv_connector is not None and self.kv_role is None:
            raise ValueError("Please specify kv_disagg_role when kv_connector is set, supported "
                             f"roles are {KVRole}")


def get_connector_class(kv_transfer_config):
    """KVConnectorFactory.get_connector_class for a connector outside vLLM's
    registry (kvtier's): import kv_connector_module_path, take kv_connector."""
    name, path = kv_transfer_config.kv_connector, kv_transfer_config.kv_connector_module_path
    if path is None:
        raise ValueError(f"Unsupported connector type: {name}")
    return getattr(importlib.import_module(path), name)


# -- parallel state ----------------------------------------------------------
TP_RANK = [0]  # tests set it: the rank get_tensor_model_parallel_rank reports


def get_tensor_model_parallel_rank():
    return TP_RANK[0]


MODULES = {
    "vllm": ["__version__"],
    "vllm.distributed.kv_transfer.kv_connector.v1.base": [
        "KVConnectorBase_V1", "KVConnectorMetadata", "KVConnectorRole"],
    "vllm.distributed.parallel_state": ["get_tensor_model_parallel_rank"],
    "vllm.v1.core.sched.output": ["NewRequestData", "CachedRequestData", "SchedulerOutput"],
    "vllm.v1.outputs": ["KVConnectorOutput"],
    "vllm.v1.attention.backends.flash_attn": ["FlashAttentionBackend"],
    "vllm.v1.attention.backends.flashinfer": ["FlashInferBackend"],
}
