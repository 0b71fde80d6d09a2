# Block tables <-> kvtier pages. Views an engine's per-layer paged KV tensors
# in kvtier's page-first layout (docs/PROTOCOL.md: page = layer 0 | layer 1 |
# ...; layer = K half | V half; half = [kv_heads][tokens_per_page][head_dim])
# and moves whole pages between them and kvtierd through registered staging
# ShmBuffers (gather before a PUT, scatter after a GET).
import threading
import time

import torch

import kvtier

from .core import get_pages, put_chain

# Engine dtypes kvtier stores as they are. fp8 KV caches are refused: vLLM's
# carry one scale per tensor, kvtier's fp8 pages one per token and head.
DTYPES = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}
CANONICAL = "2BHTD"  # K/V, block, kv head, token in block, head dim


def _check_dims(dims):
    if sorted(dims) != sorted(CANONICAL):
        raise ValueError(f"dims must order the letters {CANONICAL!r} (2: K/V, B: block, T: token, "
                         f"H: kv head, D: head dim), got {dims!r}")
    return [dims.index(c) for c in CANONICAL]


class PagedKv:
    """An engine's paged KV cache, one tensor per layer, seen as kvtier pages.

    `layers`: per-layer tensors of one shape whose dims are named by `dims`
    (vLLM's FlashAttention backend: "2BTHD" = (2, num_blocks, block_size,
    num_kv_heads, head_size)). A kvtier page is `blocks_per_page` blocks of one
    request, in order. Tensors must be contiguous, of one dtype and device.
    """

    def __init__(self, layers, dims="2BTHD", blocks_per_page=1):
        perm = _check_dims(dims)
        layers = list(layers)
        if not layers:
            raise ValueError("PagedKv needs at least one layer tensor")
        first = layers[0]
        for i, t in enumerate(layers):
            self._check_layer(i, t, first)
        if first.shape[dims.index("2")] != 2:
            raise ValueError(f"dim '2' (K/V) of the KV tensors must have size 2, got shape "
                             f"{tuple(first.shape)} for dims {dims!r}")
        if not isinstance(blocks_per_page, int) or blocks_per_page < 1:
            raise ValueError(f"blocks_per_page must be an int >= 1, got {blocks_per_page!r}")
        self._views = [t.permute(perm) for t in layers]  # each (2, B, H, T, D), no copy
        _, self.num_blocks, self.kv_heads, self.block_size, self.head_dim = self._views[0].shape
        self.blocks_per_page = blocks_per_page
        self.dtype, self.device = first.dtype, first.device
        self.layout = kvtier.Layout(len(layers), self.kv_heads, self.head_dim,
                                    self.block_size * blocks_per_page, DTYPES[self.dtype])
        self.page_shape = (len(layers), 2, self.kv_heads, self.layout.tokens_per_page,
                           self.head_dim)

    @staticmethod
    def _check_layer(i, t, first):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"KV layer {i} is a {type(t).__name__}, not a torch.Tensor")
        if t.dtype not in DTYPES:
            raise TypeError(f"KV layer {i} has dtype {t.dtype}; kvtier stores "
                            f"{', '.join(map(str, DTYPES))} KV caches")
        if t.dim() != 5:
            raise ValueError(f"KV layer {i} has shape {tuple(t.shape)}; expected 5 dims")
        if not t.is_contiguous():
            raise ValueError(f"KV layer {i} is not contiguous (stride {t.stride()}); register "
                             "the engine's own KV cache tensors, not views of them")
        if t.shape != first.shape or t.dtype != first.dtype or t.device != first.device:
            raise ValueError(f"KV layer {i} is {tuple(t.shape)} {t.dtype} on {t.device}, "
                             f"layer 0 {tuple(first.shape)} {first.dtype} on {first.device}: "
                             "they must match")

    @property
    def tokens_per_page(self):
        return self.layout.tokens_per_page

    def check_pages(self, pages, unique=False, allow_short=False):
        """The block ids of `pages` (each a sequence of blocks_per_page ints;
        fewer with allow_short) as a flat list; ValueError naming the first bad one."""
        flat = []
        for i, blocks in enumerate(pages):
            n = len(blocks)
            if n > self.blocks_per_page or (n < self.blocks_per_page and not allow_short):
                raise ValueError(f"page {i} has {n} blocks; a page is {self.blocks_per_page}")
            for b in blocks:
                if isinstance(b, bool) or not isinstance(b, int) or not 0 <= b < self.num_blocks:
                    raise ValueError(f"page {i}: block id {b!r} is not in [0, {self.num_blocks})")
                flat.append(b)
        if unique and len(set(flat)) != len(flat):
            raise ValueError("a block id appears twice among the pages to load")
        return flat

    def gather(self, pages, staging, slots):
        """Copies the blocks of pages[i] into staging page slots[i] (all layers)."""
        ids = torch.tensor(self.check_pages(pages), dtype=torch.long, device=self.device)
        slot_t = torch.tensor(slots, dtype=torch.long)
        n, k = len(pages), self.blocks_per_page
        for l, v in enumerate(self._views):
            x = v.index_select(1, ids).view(2, n, k, self.kv_heads, self.block_size, self.head_dim)
            x = x.permute(1, 0, 3, 2, 4, 5).reshape(n, *self.page_shape[1:])
            staging[slot_t, l] = x.to(staging.device)

    def scatter(self, staging, slots, pages, skips=None):
        """Writes staging page slots[i] into the blocks of pages[i], except its
        first skips[i] blocks (already computed by the engine). A page may list
        fewer blocks than it holds: its last ones are then not written."""
        self.check_pages(pages, unique=True, allow_short=True)
        skips = skips or [0] * len(pages)
        sel = [(i, j, pages[i][j]) for i in range(len(pages)) for j in range(skips[i],
                                                                         len(pages[i]))]
        if not sel:
            return
        slot_of = torch.tensor([slots[i] for i, _, _ in sel], dtype=torch.long)
        in_page = torch.tensor([j for _, j, _ in sel], dtype=torch.long)
        ids = torch.tensor([b for _, _, b in sel], dtype=torch.long, device=self.device)
        rows = torch.arange(len(sel))
        shape6 = (len(sel), 2, self.kv_heads, self.blocks_per_page, self.block_size, self.head_dim)
        for l, v in enumerate(self._views):
            x = staging[slot_of, l].view(shape6)[rows, :, :, in_page]  # (N, 2, H, T, D)
            v[:, ids] = x.permute(1, 0, 2, 3, 4).to(self.device)
        if self.device.type == "cuda":  # the caller reports the load done after this
            torch.cuda.current_stream(self.device).synchronize()


class StagingBuffer:
    """`capacity` page slots in one ShmBuffer registered with the daemon, lent
    to one transfer at a time (acquire/release). Thread-safe."""

    def __init__(self, client, page_bytes, capacity):
        if capacity < 1:
            raise ValueError(f"staging capacity must be >= 1 page, got {capacity}")
        self.page_bytes, self.capacity = page_bytes, capacity
        self.buf = kvtier.ShmBuffer(page_bytes * capacity)
        self.buffer_id = client.register(self.buf)
        self.bytes = torch.frombuffer(self.buf, dtype=torch.uint8)  # the same memory
        self._free = list(range(capacity))
        self._cv = threading.Condition()

    def pages(self, dtype, page_shape):
        """All slots as one typed tensor (capacity, *page_shape) over the buffer."""
        return self.bytes.view(dtype).view(self.capacity, *page_shape)

    def offsets(self, slots):
        return [s * self.page_bytes for s in slots]

    def acquire(self, n, timeout_s=30.0):
        """n free slots (n <= capacity); TimeoutError when none free up in time."""
        if not 1 <= n <= self.capacity:
            raise ValueError(f"cannot lend {n} slots from a staging buffer of {self.capacity}")
        deadline = time.monotonic() + timeout_s
        with self._cv:
            while len(self._free) < n:
                left = deadline - time.monotonic()
                if left <= 0 or not self._cv.wait(left):
                    if len(self._free) >= n:
                        break
                    raise TimeoutError(f"no {n} free staging slots within {timeout_s} s")
            slots, self._free = self._free[:n], self._free[n:]
            return slots

    def release(self, slots):
        with self._cv:
            self._free.extend(slots)
            self._cv.notify_all()


def chunks(items, size):
    """items in consecutive lists of at most `size`."""
    return [items[i:i + size] for i in range(0, len(items), size)]


class PageMover:
    """Batched GETs and PUTs between an engine's PagedKv and kvtierd through
    registered staging buffers (the engine's blocks are not page-contiguous).
    Loads and saves have a buffer each, so a save waiting for slots never
    waits on a load queued before its PUTs, nor the other way round."""

    def __init__(self, client, kv, staging_pages=64, get_timeout_ms=0):
        self.client, self.kv, self.get_timeout_ms = client, kv, get_timeout_ms
        self.load_staging = StagingBuffer(client, kv.layout.page_bytes, staging_pages)
        self.save_staging = StagingBuffer(client, kv.layout.page_bytes, staging_pages)
        self._load_pages = self.load_staging.pages(kv.dtype, kv.page_shape)
        self._save_pages = self.save_staging.pages(kv.dtype, kv.page_shape)

    def load(self, job):
        """GETs job.pages chunk by chunk and writes the pages that arrived into
        their blocks; returns the indices of the others (blocks untouched)."""
        failed, pages, st = set(), job.pages, self.load_staging
        for start, chunk in zip(range(0, len(pages), st.capacity), chunks(pages, st.capacity)):
            slots = st.acquire(len(chunk))
            try:
                ok = get_pages(self.client, [p.key for p in chunk], st.buffer_id,
                               st.offsets(slots), self.get_timeout_ms)
                if ok is None:  # the daemon is gone: stop asking, use nothing staged
                    return failed | set(range(start, len(pages)))
                hit = [i for i, good in enumerate(ok) if good]
                with job.write_lock:
                    if job.cancelled:
                        return range(len(pages))
                    self.kv.scatter(self._load_pages, [slots[i] for i in hit],
                                    [chunk[i].blocks for i in hit], [chunk[i].skip for i in hit])
            finally:
                st.release(slots)
            failed.update(start + i for i, good in enumerate(ok) if not good)
        return failed

    def stage(self, pages, timeout_s=30.0):
        """Caller's thread: yields (pages, slots) chunks whose blocks are now
        copied out, so the engine may reuse them. The caller hands each chunk
        to put_staged (on the transfer thread) before taking the next: that
        PUT is what frees the slots a later chunk may wait for (TimeoutError
        after timeout_s)."""
        st = self.save_staging
        for chunk in chunks(list(pages), st.capacity):
            slots = st.acquire(len(chunk), timeout_s)
            try:
                self.kv.gather([p.blocks for p in chunk], self._save_pages, slots)
            except Exception:
                st.release(slots)
                raise
            yield chunk, slots

    def put_staged(self, chunk, slots):
        """Transfer thread: PUTs a staged chunk (one chain per run of pages
        whose parent is the page before) and frees its slots; returns the
        indices of the pages the store did not take."""
        lost = set()
        try:
            offsets = self.save_staging.offsets(slots)
            for lo, hi in _chain_runs(chunk):
                kept = put_chain(self.client, [p.key for p in chunk[lo:hi]],
                                 self.save_staging.buffer_id, offsets[lo:hi], chunk[lo].parent)
                lost.update(range(lo + kept, hi))
        finally:
            self.save_staging.release(slots)
        return lost


def _chain_runs(pages):
    """[lo, hi) runs of pages where each page's parent is the page before."""
    runs, lo = [], 0
    for i in range(1, len(pages) + 1):
        if i == len(pages) or pages[i].parent != pages[i - 1].key:
            runs.append((lo, i))
            lo = i
    return runs
