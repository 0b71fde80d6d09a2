# STAND-IN for SGLang v0.5.6.post1 (tag v0.5.6.post1 of sgl-project/sglang),
# as a HiCache storage backend meets it; the common parts are in
# _sglang_v0_5.py (files and how they were read listed there). As v0.5.6, plus:
#   python/sglang/srt/mem_cache/memory_pool_host.py: ALLOC_MEMORY_FUNCS, the table of
#       host-pool allocators by device an engine patch can point at
#       kvtier.integrations.sglang.alloc_shm_host_buffer (its entries' signature:
#       (dims, dtype, device, pin_memory, allocator))
# Not SGLang: nothing here ran inside the engine.
from standins._sglang_v0_5 import (HiCacheController as _Controller,  # noqa: F401
                                  HiCacheStorage, HiCacheStorageConfig, HiCacheStorageExtraInfo,
                                  MHATokenToKVPoolHost, create_dynamic_backend,
                                  parse_storage_backend_extra_config, torch_alloc,
                                  LoRARef, ServerArgs, get_global_server_args,
                                  set_global_server_args_for_scheduler)

__version__ = "0.5.6.post1"
V1_FOR_DYNAMIC = True  # does the dynamic backend get batch_get_v1/batch_set_v1?


def HiCacheController(backend, mem_pool_host, extra_config, **kw):
    """This version's cache controller over a dynamic backend."""
    return _Controller(backend, mem_pool_host, extra_config, V1_FOR_DYNAMIC, **kw)


ALLOC_MEMORY_FUNCS = {"cpu": torch_alloc, "cuda": torch_alloc}

MODULES = {
    "sglang": ["__version__"],
    "sglang.srt.mem_cache.hicache_storage": ["HiCacheStorage", "HiCacheStorageConfig",
                                             "HiCacheStorageExtraInfo"],
    "sglang.srt.mem_cache.memory_pool_host": ["MHATokenToKVPoolHost", "ALLOC_MEMORY_FUNCS"],
    "sglang.srt.managers.cache_controller": ["HiCacheController"],
    "sglang.srt.server_args": ["ServerArgs", "get_global_server_args",
                               "set_global_server_args_for_scheduler"],
    "sglang.srt.lora.lora_registry": ["LoRARef"],
}
