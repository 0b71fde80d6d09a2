# STAND-IN for vLLM v0.11.0 (tag v0.11.0 of vllm-project/vllm), the parts a KV
# connector touches, built from that version's
#   vllm/distributed/kv_transfer/kv_connector/v1/base.py   KVConnectorBase_V1: constructor
#       (vllm_config, role) -- no kv_cache_config -- and NO get_block_ids_with_load_errors
#       (PR #19330 merged 2025-09-30, after the v0.11.0 branch)
#   vllm/v1/outputs.py             KVConnectorOutput: NO invalid_block_ids
#   vllm/v1/worker/kv_connector_model_runner_mixin.py   after a step the model runner asks
#       only get_finished: a connector's failed loads are read by nobody
# The rest (scheduler output, backends, parallel state) is as in v0.11.1 and
# is taken from vllm_v0_11_1.py. How it was read: see vllm_v0_11_1.py. Not
# vLLM: nothing here ran inside the engine.
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Optional

from standins.vllm_v0_11_1 import (Attention, CachedRequestData, FlashAttentionBackend,  # noqa: F401
                                   FlashInferBackend, KVCacheBlocks, KVConnectorMetadata,
                                   KVConnectorRole, NewRequestData, SchedulerOutput, TP_RANK,
                                   get_tensor_model_parallel_rank)

__version__ = "0.11.0"


class KVConnectorBase_V1(ABC):
    def __init__(self, vllm_config, role):  # no kv_cache_config before v0.11.1
        self._connector_metadata: Optional[KVConnectorMetadata] = None
        self._vllm_config = vllm_config
        if vllm_config.kv_transfer_config is None:
            raise ValueError("kv_transfer_config must be set for KVConnectorBase_V1")
        self._kv_transfer_config = vllm_config.kv_transfer_config
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


@dataclass
class KVConnectorOutput:
    finished_sending: Optional[set] = None
    finished_recving: Optional[set] = None
    kv_connector_stats: Optional[Any] = None


def kv_connector_output(connector, finished_req_ids):
    """The v0.11.0 model runner after the forward pass: finished transfers
    only; it never asks which loads failed."""
    out = KVConnectorOutput()
    out.finished_sending, out.finished_recving = connector.get_finished(finished_req_ids)
    out.kv_connector_stats = connector.get_kv_connector_stats()
    return out


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
