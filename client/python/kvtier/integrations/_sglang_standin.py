# STAND-IN for SGLang's HiCache storage interface, used only when `sglang` is
# not importable (it cannot be installed on kvtier's build machines). It copies
# SGLang v0.5.x: python/sglang/srt/mem_cache/hicache_storage.py (HiCacheStorage,
# HiCacheStorageConfig, HiCacheStorageExtraInfo) and the host pool the backend
# reads, memory_pool_host.py MHATokenToKVPoolHost (its three layouts and
# get_page_buffer_meta). It is not SGLang: nothing here ran against the engine.
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, List, Optional

import torch

SGLANG_VERSION_FOLLOWED = "0.5.x"


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
    SGLang's ALLOC_MEMORY_FUNCS entry (torch memory unless told otherwise)."""

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
