# kvtier as a SGLang HiCache L3 storage backend. Interface followed: SGLang
# v0.5.3 ... v0.5.6.post1, python/sglang/srt/mem_cache/hicache_storage.py
# (HiCacheStorage), loaded by the `dynamic` backend (storage/backend_factory.py,
# which v0.5.2 and older do not have: they cannot load a backend by module). Start SGLang with
#   --enable-hierarchical-cache --hicache-mem-layout page_first
#   --hicache-storage-backend dynamic --hicache-storage-backend-extra-config
#   '{"backend_name":"kvtier","module_path":"kvtier.integrations.sglang",
#     "class_name":"KvtierStorage","interface_v1":1,
#     "hicache_storage_pass_prefix_keys":true,"endpoint":"ipc:///run/kvtier/kvtierd.sock"}'
# SGLang's cache controller calls the zero-copy v1 methods (batch_get_v1 /
# batch_set_v1) of a dynamic backend only from v0.5.6; before, it calls the v0
# methods (batch_get / batch_set) whatever interface_v1 says.
# Each SGLang page is two kvtier objects, its K part and its V part: that is
# how the host pool lays a page out (get_page_buffer_meta gives one pointer
# each), so the daemon copies straight between them and the pool.
import logging
import re
from typing import List

import torch

import kvtier

from ._sglang_model import check_model_config, model_identity
from .core import get_pages, put_chain
from .paging import DTYPES, StagingBuffer, chunks

SGLANG_VERSIONS_SUPPORTED = ("v0.5.3 ... v0.5.6.post1 (zero copy, interface_v1, from v0.5.6; "
                             "older versions run the v0 interface)")
V1_FROM = (0, 5, 6)  # the first SGLang whose dynamic backend honours interface_v1

try:
    from sglang.srt.mem_cache.hicache_storage import HiCacheStorage
except ImportError as e:
    raise ImportError(
        f"kvtier.integrations.sglang is a SGLang HiCache storage backend and needs SGLang "
        f"installed (supported: {SGLANG_VERSIONS_SUPPORTED}); importing SGLang failed: {e}"
    ) from e

log = logging.getLogger("kvtier.integrations.sglang")
# Keys the dynamic loader reads from extra_config (ours are the rest).
_LOADER_KEYS = {"backend_name", "module_path", "class_name", "interface_v1"}
_OPTIONS = {"endpoint": None, "tenant": "default", "token": "", "timeout_ms": 10000,
            "lease_ms": 10000, "staging_pages": 64, "model_id": None, "model_config": None}


def sglang_version():
    """SGLang's version as a tuple of ints (0, 5, 6); None when unknown."""
    import sglang
    m = re.match(r"(\d+)\.(\d+)\.(\d+)", str(getattr(sglang, "__version__", "")))
    return tuple(int(x) for x in m.groups()) if m else None


def alloc_shm_host_buffer(dims, dtype, device="cpu", pin_memory=True, allocator=None):
    """What the integration needs from SGLang: its host KV pool must live where
    kvtierd can reach it. The daemon maps only shared memory (and CUDA IPC
    handles), while SGLang allocates the pool with torch (pinned). Allocated
    with this function (in place of SGLang's ALLOC_MEMORY_FUNCS entry, which
    exists from v0.5.6.post1; earlier versions allocate in the pool's
    constructor, with no table to patch), the pool is a view of
    a kvtier.ShmBuffer, KvtierStorage registers it, and batch_get_v1 /
    batch_set_v1 copy nothing in Python. A stock pool still works, through a
    staging buffer (one more copy)."""
    numel = 1
    for d in dims:
        numel *= d
    nbytes = numel * torch.empty((), dtype=dtype).element_size()
    buf = kvtier.ShmBuffer(max(nbytes, 1))  # /dev/shm must be able to hold the pool
    t = torch.frombuffer(buf, dtype=dtype, count=numel).view(*dims)  # keeps `buf` alive
    if pin_memory and torch.cuda.is_available():  # page-locked for the pool's (process's) life
        torch.cuda.cudart().cudaHostRegister(t.data_ptr(), nbytes, 0)
    return t


def _part_layout(layers, heads, head_dim, page_size, dtype_name):
    """A kvtier layout whose page_bytes is one K (or V) part of an SGLang page,
    layers * page_size * heads * head_dim elements. The daemon treats objects
    as opaque bytes; this layout only sizes them and keys them apart."""
    for h, d, t in ((heads, head_dim // 2, page_size), (heads, head_dim, page_size // 2),
                    (heads // 2, head_dim, page_size)):
        if h and d and t and 2 * h * d * t == heads * head_dim * page_size:
            return kvtier.Layout(layers, h, d, t, dtype_name)
    raise ValueError(f"cannot size a kvtier object for a part of {layers} layers x {page_size} "
                     f"tokens x {heads} heads x {head_dim}: all are odd")


class KvtierStorage(HiCacheStorage):
    """HiCache L3 backend over kvtierd. v1 (zero copy) needs the page_first or
    page_first_direct host layout; v0 works with any."""

    def __init__(self, storage_config, kwargs=None):
        extra = dict(getattr(storage_config, "extra_config", None) or {})
        unknown = sorted(set(extra) - _LOADER_KEYS - set(_OPTIONS))
        if unknown:
            raise ValueError(f"unknown extra_config keys {unknown}; known: {sorted(_OPTIONS)}")
        self.opts = {k: extra.get(k, v) for k, v in _OPTIONS.items()}
        for name, low in (("timeout_ms", 1), ("lease_ms", 0), ("staging_pages", 1)):
            v = self.opts[name]
            if isinstance(v, bool) or not isinstance(v, int) or v < low:
                raise ValueError(f"extra_config[{name!r}] = {v!r}: an int >= {low}")
        self.interface_v1 = self._interface_v1(bool(extra.get("interface_v1", 0)))
        if getattr(storage_config, "is_mla_model", False):
            raise NotImplementedError("KvtierStorage stores MHA host pools; MLA is not supported")
        model = self.opts["model_id"] or getattr(storage_config, "model_name", None)
        if not model:
            raise ValueError("KvtierStorage: no model name; set extra_config.model_id")
        # The model name with the server settings that change the KV bytes
        # (SGLang's page hashes cover only the tokens); see _sglang_model.
        model = model_identity(model, check_model_config(self.opts["model_config"]))
        self._deployment = (f"{model}|sglang|tp{storage_config.tp_rank}of"
                            f"{storage_config.tp_size}|pp{getattr(storage_config, 'pp_rank', 0)}")
        self.client = None
        # The last full chain this backend stored: (the prefix_keys list it
        # came with, the V part of its last page). See _parent.
        self._last_set = None

    @staticmethod
    def _interface_v1(requested):
        """Whether SGLang will call the v1 methods: only where its dynamic
        backend honours interface_v1 (>= v0.5.6). Elsewhere it calls v0 and
        the host layout need not be page-first."""
        version = sglang_version()
        if not requested or version is None or version >= V1_FROM:
            if requested and version is None:
                log.info("kvtier: SGLang's version is unknown; assuming it honours interface_v1")
            return requested
        log.warning("kvtier: SGLang %s calls the v0 interface of a dynamic backend whatever "
                    "interface_v1 says (v1, zero copy, from v0.5.6): pages are copied through "
                    "a staging buffer", ".".join(map(str, version)))
        return False

    def register_mem_pool_host(self, mem_pool_host):
        if self.client is not None:
            raise RuntimeError("KvtierStorage: register_mem_pool_host was called twice")
        super().register_mem_pool_host(mem_pool_host)
        pool = mem_pool_host
        if pool.layout not in ("layer_first", "page_first", "page_first_direct"):
            raise ValueError(f"KvtierStorage: unsupported host pool layout {pool.layout!r}")
        if self.interface_v1 and pool.layout == "layer_first":
            raise ValueError("KvtierStorage: interface_v1 (zero copy) needs the page_first or "
                             "page_first_direct host layout (--hicache-mem-layout)")
        if pool.dtype not in DTYPES or not pool.kv_buffer.is_contiguous():
            raise TypeError(f"KvtierStorage: host pool must be a contiguous fp16/bf16/fp32 "
                            f"buffer, got {pool.dtype}")
        self.page_size = pool.page_size
        self.layout = _part_layout(pool.layer_num, pool.head_num, pool.head_dim, pool.page_size,
                                   DTYPES[pool.dtype])
        self.part_bytes = self.layout.page_bytes
        # page_first and page_first_direct order a part's bytes differently.
        self._model = f"{self._deployment}|{pool.layout}"
        # The parent of pages whose parent SGLang did not say: a key no page
        # has (see _parent).
        self._unknown_parent = kvtier.external_keys(["unknown parent"],
                                                    self._model + "|none", self.layout)[0]
        self.client = kvtier.Client(self.opts["endpoint"], tenant=self.opts["tenant"],
                                    token=self.opts["token"], layout=self.layout,
                                    timeout_ms=self.opts["timeout_ms"], client_name="sglang")
        self.pool_bytes = pool.kv_buffer.view(-1).view(torch.uint8)
        self.staging = StagingBuffer(self.client, self.part_bytes, 2 * self.opts["staging_pages"])
        self.slots = self.staging.bytes.view(self.staging.capacity, self.part_bytes)
        try:
            region = self.client.register_tensor(pool.kv_buffer)
            self.pool_region = (region.buffer_id, region.offset)
        except TypeError:
            self.pool_region = None
            log.warning("KvtierStorage: the host pool is not in a kvtier.ShmBuffer, so "
                        "batch_get_v1/batch_set_v1 copy through a staging buffer; allocate it "
                        "with kvtier.integrations.sglang.alloc_shm_host_buffer for zero copy")

    @property
    def zero_copy(self):
        return self.pool_region is not None

    # -- keys and places ---------------------------------------------------------
    def _part_keys(self, keys):
        """[K0, V0, K1, V1, ...]: the two objects of each SGLang page hash."""
        if isinstance(keys, str) or not all(isinstance(k, str) and k for k in keys):
            raise TypeError("KvtierStorage keys must be a list of non-empty str page hashes")
        ks = kvtier.external_keys(keys, self._model + "|k", self.layout)
        vs = kvtier.external_keys(keys, self._model + "|v", self.layout)
        return [x for kv in zip(ks, vs) for x in kv]

    def _part_offsets(self, host_indices, n_pages):
        """Byte offsets in the pool of each page's K and V parts, checked."""
        if self.client is None:
            raise RuntimeError("KvtierStorage: register_mem_pool_host was not called")
        pool = self.mem_pool_host
        if pool.layout == "layer_first":
            raise ValueError("zero-copy batch_get_v1/batch_set_v1 need the page_first or "
                             "page_first_direct host layout (--hicache-mem-layout)")
        if not isinstance(host_indices, torch.Tensor) or host_indices.dtype.is_floating_point:
            raise TypeError("host_indices must be an integer torch.Tensor")
        if host_indices.numel() != n_pages * self.page_size:
            raise ValueError(f"{host_indices.numel()} host indices for {n_pages} pages of "
                             f"{self.page_size} tokens")
        starts = host_indices.reshape(-1)[::self.page_size] if n_pages else host_indices[:0]
        bad = (starts < 0) | (starts >= pool.size) | (starts % self.page_size != 0)
        if bool(bad.any()):
            raise ValueError(f"host index {int(starts[bad][0])} does not start a page of the "
                             f"host pool (size {pool.size}, page {self.page_size})")
        ptrs, _ = pool.get_page_buffer_meta(host_indices.reshape(-1).cpu())
        base = pool.kv_buffer.data_ptr()
        return [p - base for p in ptrs]

    @staticmethod
    def _pages_ok(parts_ok):
        return [bool(parts_ok[2 * i] and parts_ok[2 * i + 1]) for i in range(len(parts_ok) // 2)]

    def _parent(self, extra_info):
        """The kvtier parent of a batch's first page (its V part object, the
        last object of the page before). SGLang says which page came before
        only with hicache_storage_pass_prefix_keys (extra_info.prefix_keys:
        the hashes of every page before the batch):
        - a non-empty list: its last page;
        - an empty list: the batch starts a prompt -- unless it continues the
          batch this backend stored last with the same list: SGLang (v0.5.x
          HiCacheController._page_backup) passes one list to every batch of a
          backup and extends it only when it was not empty, so every batch of
          a backup from the root comes with [];
        - None (the flag unset, and every v0 batch_set): not known. The pages
          are then stored under UNKNOWN_PARENT, a key no page has, never as a
          prompt's first page. The daemon then cannot evict that chain's
          ancestors after it (a suffix may outlive its prefix until LRU drops
          it: space, never wrong bytes: a LOOKUP counts leading pages only)."""
        prefix = getattr(extra_info, "prefix_keys", None) if extra_info is not None else None
        if prefix:
            return self._part_keys([prefix[-1]])[-1]
        if prefix is None:
            return self._unknown_parent
        last = self._last_set
        if last is not None and last[0] is prefix:
            return last[1]
        return None

    def _stored(self, extra_info, part_keys, kept):
        """Remembers a whole batch stored with an empty prefix_keys list (for
        the next batch of the same backup, see _parent)."""
        prefix = getattr(extra_info, "prefix_keys", None) if extra_info is not None else None
        whole = bool(part_keys) and kept == len(part_keys)
        self._last_set = (prefix, part_keys[-1]) if whole and prefix == [] else None

    # -- v1: zero copy against the host pool ---------------------------------------
    def batch_exists(self, keys, extra_info=None) -> int:
        """Leading pages kvtier holds, K and V both; with lease_ms they stay
        pinned until batch_get_v1 reads them (or the lease ends)."""
        if not keys:
            return 0
        lease = self.opts["lease_ms"]
        try:
            r = self.client.lookup(self._part_keys(keys), lease_ms=lease)
        except kvtier.Error as e:
            log.warning("kvtier LOOKUP failed, reporting no hits: %s", e)
            return 0
        return (r.leased if lease else r.hits) // 2

    def batch_get_v1(self, keys: List[str], host_indices: torch.Tensor,
                     extra_info=None) -> List[bool]:
        offsets = self._part_offsets(host_indices, len(keys))
        pk = self._part_keys(keys)
        if self.zero_copy:
            bid, off0 = self.pool_region
            ok = get_pages(self.client, pk, bid, [off0 + o for o in offsets])
            return self._pages_ok(ok or [False] * len(pk))
        return self._pages_ok(self._get_via_staging(pk, self._pool_parts(offsets)))

    def batch_set_v1(self, keys: List[str], host_indices: torch.Tensor,
                     extra_info=None) -> List[bool]:
        offsets = self._part_offsets(host_indices, len(keys))
        pk, parent = self._part_keys(keys), self._parent(extra_info)
        if self.zero_copy:
            bid, off0 = self.pool_region
            kept = put_chain(self.client, pk, bid, [off0 + o for o in offsets], parent)
        else:
            kept = self._put_via_staging(pk, self._pool_parts(offsets), parent)
        self._stored(extra_info, pk, kept)
        return [2 * i + 1 < kept for i in range(len(keys))]

    # -- staging (a pool outside shared memory, and the v0 methods) ----------------
    def _pool_parts(self, offsets):
        return [self.pool_bytes[o:o + self.part_bytes] for o in offsets]

    def _get_via_staging(self, part_keys, dsts):
        """GETs parts into staging and copies each one that arrived into its
        dsts[i] (a uint8 tensor of part_bytes); one bool per part."""
        out = []
        for chunk, views in zip(chunks(part_keys, self.staging.capacity),
                                chunks(dsts, self.staging.capacity)):
            slots = self.staging.acquire(len(chunk))
            try:
                ok = get_pages(self.client, chunk, self.staging.buffer_id,
                               self.staging.offsets(slots))
                ok = ok or [False] * len(chunk)
                for good, s, dst in zip(ok, slots, views):
                    if good:
                        dst.copy_(self.slots[s])
            finally:
                self.staging.release(slots)
            out += ok
        return out

    def _put_via_staging(self, part_keys, sources, parent):
        """Copies parts (uint8 tensors) into staging and PUTs them as one
        chain; how many leading parts the store holds."""
        kept = 0
        for chunk, srcs in zip(chunks(part_keys, self.staging.capacity),
                               chunks(sources, self.staging.capacity)):
            slots = self.staging.acquire(len(chunk))
            try:
                for s, src in zip(slots, srcs):
                    self.slots[s].copy_(src)
                n = put_chain(self.client, chunk, self.staging.buffer_id,
                              self.staging.offsets(slots), parent)
            finally:
                self.staging.release(slots)
            kept += n
            if n < len(chunk):
                break
            parent = chunk[-1]
        return kept

    # -- v0: copies of whole flat pages (K part then V part) ---------------------------
    def _flat_page(self, t, what):
        """The bytes of a flat page tensor as SGLang hands them (get_data_page /
        get_dummy_flat_data_page); TypeError/ValueError when it is not one."""
        if self.client is None:
            raise RuntimeError("KvtierStorage: register_mem_pool_host was not called")
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{what} must be a torch.Tensor, got {type(t).__name__}")
        if t.dtype != self.mem_pool_host.dtype:
            raise TypeError(f"{what} is {t.dtype}; the host pool holds {self.mem_pool_host.dtype}")
        if not t.is_contiguous() or t.device.type != "cpu":
            raise ValueError(f"{what} must be a contiguous CPU tensor")
        b = t.view(-1).view(torch.uint8)
        if b.numel() != 2 * self.part_bytes:
            raise ValueError(f"{what} has {b.numel()} bytes; a page has {2 * self.part_bytes}")
        return b

    def batch_get(self, keys, target_locations=None, target_sizes=None):
        pk = self._part_keys(keys)
        if target_locations is None:
            elems = 2 * self.part_bytes // torch.empty((), dtype=self.mem_pool_host.dtype
                                                       ).element_size()
            target_locations = [torch.empty(elems, dtype=self.mem_pool_host.dtype) for _ in keys]
        if len(target_locations) != len(keys):
            raise ValueError(f"{len(target_locations)} target locations for {len(keys)} keys")
        pages = [self._flat_page(t, f"target_locations[{i}]")
                 for i, t in enumerate(target_locations)]
        dsts = [half for b in pages for half in (b[:self.part_bytes], b[self.part_bytes:])]
        ok = self._pages_ok(self._get_via_staging(pk, dsts))
        return [t if good else None for t, good in zip(target_locations, ok)]

    def get(self, key, target_location=None, target_sizes=None):
        return self.batch_get([key], None if target_location is None else [target_location])[0]

    def batch_set(self, keys, values=None, target_locations=None, target_sizes=None) -> bool:
        pk = self._part_keys(keys)
        if values is None or len(values) != len(keys):
            raise ValueError(f"batch_set needs one value per key ({len(keys)})")
        pages = [self._flat_page(v, f"values[{i}]") for i, v in enumerate(values)]
        srcs = [half for b in pages for half in (b[:self.part_bytes], b[self.part_bytes:])]
        # v0 says nothing of the pages before: their parent is not known.
        return self._put_via_staging(pk, srcs, self._parent(None)) == len(pk)

    def set(self, key, value=None, target_location=None, target_sizes=None) -> bool:
        return self.batch_set([key], [value])

    def exists(self, key) -> bool:
        try:
            return self.client.lookup(self._part_keys([key])).hits == 2
        except kvtier.Error as e:
            log.warning("kvtier LOOKUP failed: %s", e)
            return False

    def clear(self) -> None:
        """SGLang's /clear_hicache_storage_backend: drops every page of this
        tenant from the daemon's store, in every tier (an EVICT of its own
        namespace out of the store). Raises when the daemon refuses or when
        pages stay (leased or being read: try again once their leases end),
        so the endpoint never reports success for nothing. Records the tenant
        published to a shared cache (--remote_seeds) are not removed: a
        DELETE by key does that, and the cluster evicts the rest."""
        r = self.client.evict("", None, 0)
        if r["remaining"]:
            raise RuntimeError(
                f"kvtier: {r['remaining']} page parts of tenant {self.client.namespace!r} are "
                f"pinned (leased or being read) and were not cleared ({r['evicted']} were); "
                "clear again once their leases end")
        log.info("kvtier: cleared %d page parts of tenant %r", r["evicted"], self.client.namespace)

    def close(self):
        if self.client is not None:
            self.client.close()
