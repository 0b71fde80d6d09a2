# STAND-IN for SGLang v0.5.5 (tag v0.5.5 of sgl-project/sglang), as a HiCache
# storage backend meets it; the common parts are in _sglang_v0_5.py (files and
# how they were read listed there). What v0.5.5 (and v0.5.3, v0.5.4; v0.5.2 and older have no `dynamic`
# backend, storage/backend_factory.py) does:
#   python/sglang/srt/managers/cache_controller.py: only built-in backends get the
#       zero-copy page functions; a `dynamic` backend always gets the v0 ones
#       (_generic_page_get / _generic_page_set -> batch_get / batch_set), whatever
#       extra_config["interface_v1"] says
#   python/sglang/srt/mem_cache/memory_pool_host.py: no ALLOC_MEMORY_FUNCS (the pool
#       allocates its buffer itself)
#   python/sglang/srt/server_args.py: get_global_server_args() as in v0.5.6, from v0.5.4
#       only; v0.5.3 has none (the backend then warns that it cannot fold
#       the server settings into its keys; tests remove it to check that)
# Not SGLang: nothing here ran inside the engine.
from standins._sglang_v0_5 import (HiCacheController as _Controller,  # noqa: F401
                                  HiCacheStorage, HiCacheStorageConfig, HiCacheStorageExtraInfo,
                                  MHATokenToKVPoolHost, create_dynamic_backend,
                                  parse_storage_backend_extra_config, torch_alloc,
                                  LoRARef, ServerArgs, get_global_server_args,
                                  set_global_server_args_for_scheduler)

__version__ = "0.5.5"
V1_FOR_DYNAMIC = False  # does the dynamic backend get batch_get_v1/batch_set_v1?


def HiCacheController(backend, mem_pool_host, extra_config, **kw):
    """This version's cache controller over a dynamic backend."""
    return _Controller(backend, mem_pool_host, extra_config, V1_FOR_DYNAMIC, **kw)


MODULES = {
    "sglang": ["__version__"],
    "sglang.srt.mem_cache.hicache_storage": ["HiCacheStorage", "HiCacheStorageConfig",
                                             "HiCacheStorageExtraInfo"],
    "sglang.srt.mem_cache.memory_pool_host": ["MHATokenToKVPoolHost"],
    "sglang.srt.managers.cache_controller": ["HiCacheController"],
    "sglang.srt.server_args": ["ServerArgs", "get_global_server_args",
                               "set_global_server_args_for_scheduler"],
    "sglang.srt.lora.lora_registry": ["LoRARef"],
}
