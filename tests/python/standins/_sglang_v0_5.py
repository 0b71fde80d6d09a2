# SGLang v0.5.x as a HiCache storage backend meets it, the parts common to
# the versions kvtier names (sglang_v0_5_5.py, sglang_v0_5_6.py,
# sglang_v0_5_6_post1.py say which they are and what differs), built from
#   python/sglang/srt/mem_cache/hicache_storage.py   HiCacheStorage, HiCacheStorageConfig,
#       HiCacheStorageExtraInfo
#   python/sglang/srt/mem_cache/memory_pool_host.py  MHATokenToKVPoolHost: its three layouts,
#       get_page_buffer_meta, get_data_page / set_from_flat_data_page
#   python/sglang/srt/managers/cache_controller.py   HiCacheController: which interface it
#       calls (page_get_func / page_set_func), _page_backup (batch by batch, one
#       prefix_keys list for every batch, extended only when not empty), the
#       prefetch's _storage_hit_query then page get
#   python/sglang/srt/mem_cache/storage/backend_factory.py   _create_dynamic_backend
#   python/sglang/srt/mem_cache/hiradix_cache.py   _parse_storage_backend_extra_config: the
#       JSON of --hicache-storage-backend-extra-config, with SGLang's own keys taken out
#   python/sglang/srt/server_args.py   ServerArgs (the fields that change a page's KV, and
#       what a storage backend needs, with their defaults), _global_server_args with
#       set_global_server_args_for_scheduler / get_global_server_args: from v0.5.4 (PR
#       #11528; v0.5.3 and before have only managers/schedule_batch.py
#       global_server_args_dict). model_executor/model_runner.py sets it in the scheduler
#       process (ModelRunner.__init__), before scheduler.py builds HiRadixCache and with
#       it the storage backend. Read at the commits bumping main to 0.5.4, 0.5.5, 0.5.6,
#       0.5.6.post1 (1053e1be1, 0c006b880, 7ae368efd, 9a327bdfc); the fields are the same
#       in all four
# How it was read: the tags' snapshots are over the size the source store hands
# out; these were checked against the stored newest versions of those files
# and the reviewer's reproduction on the tags (issue 25). Not SGLang: nothing
# here ran inside the engine.
import importlib
import json
import uuid
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Union

import torch

@dataclass
class HiCacheStorageConfig:
    # Fields vary within v0.5.x (pp_* and enable_storage_metrics came later);
    # KvtierStorage reads them by name with defaults.
    tp_rank: int
    tp_size: int
    pp_rank: int
    pp_size: int
    is_mla_model: bool
    is_page_first_layout: bool
    model_name: Optional[str]
    enable_storage_metrics: bool = False
    extra_config: Optional[dict] = None


@dataclass
class ServerArgs:
    """The ServerArgs fields a storage backend may read, with SGLang's defaults
    (the real one has some 300 more)."""
    model_path: str
    load_format: str = "auto"
    context_length: Optional[int] = None
    revision: Optional[str] = None
    model_impl: str = "auto"
    dtype: str = "auto"
    quantization: Optional[str] = None
    quantization_param_path: Optional[str] = None
    kv_cache_dtype: str = "auto"
    modelopt_quant: Optional[Union[str, Dict]] = None
    page_size: Optional[int] = None
    tp_size: int = 1
    served_model_name: Optional[str] = None
    weight_version: str = "default"
    json_model_override_args: str = "{}"
    enable_lora: Optional[bool] = None
    lora_paths: Optional[Any] = None  # LoRARef list after __post_init__ (see LoRARef)
    hicache_mem_layout: str = "layer_first"
    hicache_storage_backend: Optional[str] = None
    hicache_storage_backend_extra_config: Optional[str] = None
    torchao_config: str = ""

    def __post_init__(self):
        if self.served_model_name is None:
            self.served_model_name = self.model_path


@dataclass
class LoRARef:
    """lora/lora_registry.py: what ServerArgs.__post_init__ turns each
    --lora-paths entry into; lora_id is a fresh uuid4 in every process."""
    lora_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    lora_name: Optional[str] = None
    lora_path: Optional[str] = None
    pinned: Optional[bool] = None


_global_server_args: Optional[ServerArgs] = None


def set_global_server_args_for_scheduler(server_args):
    global _global_server_args
    _global_server_args = server_args


def get_global_server_args():
    if _global_server_args is None:
        raise ValueError("Global server args is not set yet!")
    return _global_server_args


@dataclass
class HiCacheStorageExtraInfo:
    prefix_keys: Optional[List[str]] = None  # hashes of the pages before this batch
    extra_info: Optional[dict] = None


class HiCacheStorage(ABC):
    """SGLang's L3 storage interface. With the `dynamic` backend the factory
    builds it as backend_class(storage_config, kwargs) and then calls
    register_mem_pool_host(host_pool); extra_config["interface_v1"] makes the
    cache controller call batch_get_v1/batch_set_v1 (zero copy) instead of the
    v0 batch_get/batch_set."""

    def register_mem_pool_host(self, mem_pool_host):
        self.mem_pool_host = mem_pool_host

    def batch_get_v1(self, keys: List[str], host_indices: torch.Tensor,
                     extra_info: Optional[HiCacheStorageExtraInfo] = None) -> List[bool]:
        pass

    def batch_set_v1(self, keys: List[str], host_indices: torch.Tensor,
                     extra_info: Optional[HiCacheStorageExtraInfo] = None) -> List[bool]:
        pass

    @abstractmethod
    def get(self, key, target_location=None, target_sizes=None) -> Optional[torch.Tensor]:
        pass

    @abstractmethod
    def batch_get(self, keys, target_locations=None, target_sizes=None):
        pass

    @abstractmethod
    def set(self, key, value=None, target_location=None, target_sizes=None) -> bool:
        pass

    @abstractmethod
    def batch_set(self, keys, values=None, target_locations=None, target_sizes=None) -> bool:
        pass

    @abstractmethod
    def exists(self, key) -> bool:
        pass

    def batch_exists(self, keys, extra_info=None) -> int:
        """How many leading keys exist."""
        for i, k in enumerate(keys):
            if not self.exists(k):
                return i
        return len(keys)

    def clear(self) -> None:
        pass

    def get_stats(self):
        return None


def itemsize(dtype):
    """Bytes per element (torch.dtype.itemsize needs torch >= 2.1)."""
    return torch.empty((), dtype=dtype).element_size()


def torch_alloc(dims, dtype, device="cpu", pin_memory=False, allocator=None):
    """SGLang's default host allocation (torch.empty; pinned on GPU hosts)."""
    return torch.empty(dims, dtype=dtype, device=device)


class MHATokenToKVPoolHost:
    """The MHA host KV pool as v0.5.x lays it out. `alloc_func` stands for
    how the pool's memory is allocated: torch memory in a stock SGLang; a
    patched allocator (v0.5.6.post1: an ALLOC_MEMORY_FUNCS entry; before: the
    pool's own allocation) for zero copy."""

    def __init__(self, size, page_size, layer_num, head_num, head_dim, dtype=torch.float16,
                 layout="page_first", alloc_func: Any = torch_alloc):
        assert size % page_size == 0
        self.size, self.page_size, self.page_num = size, page_size, size // page_size
        self.layer_num, self.head_num, self.head_dim = layer_num, head_num, head_dim
        self.dtype, self.layout, self.device = dtype, layout, "cpu"
        self.kv_buffer = alloc_func(self._dims(), dtype=dtype, device="cpu", pin_memory=False,
                                    allocator=None)

    def _dims(self):
        if self.layout == "layer_first":
            return (2, self.layer_num, self.size, self.head_num, self.head_dim)
        if self.layout == "page_first":
            return (2, self.size, self.layer_num, self.head_num, self.head_dim)
        if self.layout == "page_first_direct":
            return (2, self.page_num, self.layer_num, self.page_size, self.head_num, self.head_dim)
        raise ValueError(f"Unsupported layout: {self.layout}")

    @property
    def k_buffer(self):
        return self.kv_buffer[0]

    @property
    def v_buffer(self):
        return self.kv_buffer[1]

    def get_size_per_token(self):
        return self.head_dim * self.head_num * self.layer_num * itemsize(self.dtype) * 2

    def get_ksize_per_token(self):
        return self.get_size_per_token() // 2

    def get_data_page(self, index, flat=True):
        if self.layout == "layer_first":
            page = self.kv_buffer[:, :, index:index + self.page_size]
        elif self.layout == "page_first":
            page = self.kv_buffer[:, index:index + self.page_size]
        else:
            page = self.kv_buffer[:, index // self.page_size:index // self.page_size + 1]
        return page.flatten() if flat else page

    def get_dummy_flat_data_page(self):
        return torch.zeros((2, self.layer_num, self.page_size, self.head_num, self.head_dim),
                           dtype=self.dtype).flatten()

    def set_from_flat_data_page(self, index, data_page):
        dst = self.get_data_page(index, flat=False)
        dst.copy_(data_page.reshape(dst.shape))

    def get_page_buffer_meta(self, indices):
        """(pointers, sizes) of each page's parts for zero-copy backends: one K
        and one V pointer per page for the page-first layouts, one K and one V
        per layer and page for layer_first."""
        assert len(indices) % self.page_size == 0
        ptrs, base, e = [], self.kv_buffer.data_ptr(), itemsize(self.dtype)
        token_bytes = self.head_num * self.head_dim * e
        v_offset = self.layer_num * self.size * token_bytes
        indices = indices.tolist()
        for i in range(0, len(indices), self.page_size):
            if self.layout == "layer_first":
                for layer in range(self.layer_num):
                    k = base + indices[i] * token_bytes + layer * self.size * token_bytes
                    ptrs += [k, k + v_offset]
                size = self.page_size * token_bytes
            else:
                k = base + indices[i] * self.layer_num * token_bytes
                ptrs += [k, k + v_offset]
                size = self.layer_num * self.page_size * token_bytes
        return ptrs, [size] * len(ptrs)


# -- backend_factory.StorageBackendFactory._create_dynamic_backend -------------
def create_dynamic_backend(storage_config):
    """Imports extra_config's module_path.class_name, checks it is a
    HiCacheStorage, builds it as backend_class(storage_config, kwargs)."""
    cfg = storage_config.extra_config
    for field in ("backend_name", "module_path", "class_name"):
        if field not in cfg:
            raise ValueError(f"Missing required field '{field}' in backend config for "
                             "'dynamic' backend")
    cls = getattr(importlib.import_module(cfg["module_path"]), cfg["class_name"])
    if not issubclass(cls, HiCacheStorage):
        raise TypeError(f"Backend class {cfg['class_name']} must inherit from HiCacheStorage")
    return cls(storage_config, {})


# -- hiradix_cache.HiRadixCache._parse_storage_backend_extra_config ---------------
def parse_storage_backend_extra_config(raw):
    """--hicache-storage-backend-extra-config as HiRadixCache reads it: the JSON,
    with the keys SGLang itself uses popped (they never reach the backend).
    Returns (extra_config for the backend, {SGLang's keys and values})."""
    extra_config = json.loads(raw) if raw else {}
    own = {"prefetch_threshold": extra_config.pop("prefetch_threshold", 256),
           "prefetch_timeout_base": extra_config.pop("prefetch_timeout_base", 1),
           "prefetch_timeout_per_ki_token": extra_config.pop("prefetch_timeout_per_ki_token", 0.25),
           "hicache_storage_pass_prefix_keys":
               extra_config.pop("hicache_storage_pass_prefix_keys", False)}
    if not isinstance(own["prefetch_threshold"], int):
        raise ValueError(f"prefetch_threshold must be int, got "
                         f"{type(own['prefetch_threshold']).__name__}")
    for k in ("prefetch_timeout_base", "prefetch_timeout_per_ki_token"):
        if not isinstance(own[k], (int, float)):
            raise ValueError(f"{k} must be number, got {type(own[k]).__name__}")
    return extra_config, own


# -- cache_controller.HiCacheController, the storage side -------------------------
class HiCacheController:
    """How the cache controller drives an L3 backend. `v1_for_dynamic`: the
    version calls batch_get_v1/batch_set_v1 of a dynamic backend that set
    interface_v1 (v0.5.6 on); otherwise the v0 batch_get/batch_set."""
    STORAGE_BATCH_SIZE = 128  # pages per storage call

    def __init__(self, backend, mem_pool_host, extra_config, v1_for_dynamic,
                 storage_batch_size=None):
        self.storage_backend, self.mem_pool_host = backend, mem_pool_host
        self.page_size = mem_pool_host.page_size
        self.storage_batch_size = storage_batch_size or self.STORAGE_BATCH_SIZE
        if v1_for_dynamic and (extra_config or {}).get("interface_v1"):
            self.page_get_func, self.page_set_func = self._page_get_zero_copy, self._page_set_zero_copy
            self.interface = "v1"
        else:
            self.page_get_func, self.page_set_func = self._generic_page_get, self._generic_page_set
            self.interface = "v0"

    # backup: write_storage -> _page_backup
    def write_storage(self, host_indices, hash_values, prefix_keys=None):
        """prefix_keys: None unless hicache_storage_pass_prefix_keys; then the
        hashes of the node's ancestors (node.get_prefix_hash_values: [] for a
        child of the root). Returns the tokens backed up."""
        completed = 0
        for i in range(0, len(hash_values), self.storage_batch_size):
            batch = hash_values[i:i + self.storage_batch_size]
            idx = host_indices[i * self.page_size:(i + len(batch)) * self.page_size]
            info = HiCacheStorageExtraInfo(prefix_keys=prefix_keys)
            if not self.page_set_func(batch, idx, info):
                break
            if prefix_keys and len(prefix_keys) > 0:  # so a root backup keeps passing []
                prefix_keys += batch
            completed += self.page_size * len(batch)
        return completed

    def _page_set_zero_copy(self, hash_values, host_indices, extra_info=None):
        return all(self.storage_backend.batch_set_v1(hash_values, host_indices, extra_info))

    def _generic_page_set(self, hash_values, host_indices, extra_info=None):
        data = [self.mem_pool_host.get_data_page(host_indices[i * self.page_size])
                for i in range(len(hash_values))]
        return self.storage_backend.batch_set(hash_values, data)

    # prefetch: _storage_hit_query -> page get
    def prefetch(self, hash_values, host_indices):
        """The leading pages found (batch_exists, batch by batch) and then
        read into host_indices; returns how many pages arrived in order."""
        hit = 0
        for i in range(0, len(hash_values), self.storage_batch_size):
            batch = hash_values[i:i + self.storage_batch_size]
            n = self.storage_backend.batch_exists(batch)
            hit += n
            if n < len(batch):
                break
        return self.page_get_func(hash_values[:hit], host_indices[:hit * self.page_size])

    def _page_get_zero_copy(self, hash_values, host_indices):
        results = self.storage_backend.batch_get_v1(hash_values, host_indices)
        return results.index(False) if False in results else len(results)

    def _generic_page_get(self, hash_values, host_indices):
        dummy = [self.mem_pool_host.get_dummy_flat_data_page() for _ in hash_values]
        pages = self.storage_backend.batch_get(hash_values, dummy)
        for i, page in enumerate(pages):
            if page is None:
                return i
            self.mem_pool_host.set_from_flat_data_page(host_indices[i * self.page_size], page)
        return len(pages)
