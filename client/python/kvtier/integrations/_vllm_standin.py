# STAND-IN for vLLM's KV connector interface, used only when `vllm` is not
# importable (it cannot be installed on kvtier's build machines). It copies the
# shapes of vLLM v0.11.x (vllm/distributed/kv_transfer/kv_connector/v1/base.py,
# vllm/v1/core/sched/output.py, vllm/v1/outputs.py) so KvtierConnector can be
# exercised with the calls vLLM makes. It is not vLLM: nothing here is tested
# against the real engine.
import enum
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Optional

VLLM_VERSION_FOLLOWED = "0.11.1"


class KVConnectorRole(enum.Enum):
    SCHEDULER = 0  # the connector in the scheduler process
    WORKER = 1  # the connector in each worker process


class KVConnectorMetadata(ABC):  # noqa: B024 -- scheduler -> worker, per step
    pass


class KVConnectorBase_V1(ABC):
    """vLLM v0.11's base: the constructor takes (vllm_config, role) and, from
    v0.11.1, an optional kv_cache_config; the factory passes it when accepted."""

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
    resumed_from_preemption: list = field(default_factory=list)
    new_token_ids: list = field(default_factory=list)
    new_block_ids: list = field(default_factory=list)  # per request: tuple of lists, or None
    num_computed_tokens: list = field(default_factory=list)


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
    kv_connector_stats: Optional[dict] = None
    invalid_block_ids: set = field(default_factory=set)  # blocks that failed to load


@dataclass
class KVCacheBlocks:
    """What update_state_after_alloc receives: get_block_ids() is a tuple with
    one list per KV cache group (one group for a plain decoder)."""
    block_ids: Any

    def get_block_ids(self):
        return (list(self.block_ids),)
