# Block tables <-> kvtier pages. Views an engine's per-layer paged KV tensors
# as kvtier pages and moves whole pages between them and kvtierd: in place
# where the daemon can reach the engine's memory (DirectKv: one copy), else
# through registered staging ShmBuffers (gather before a PUT, scatter after a
# GET). An engine page is block-major, as engines keep their blocks:
#   page = layer 0 | layer 1 | ...; layer = block 0 | block 1 | ... (of the
#   page); block = K | V; K, V = [tokens_per_block][kv_heads][head_dim]
# so each K or V block of each layer is one contiguous run of the page, and
# both FlashAttention's (2, B, T, H, D) and FlashInfer's (B, 2, T, H, D)
# tensors hold it as one or two runs per block: the daemon copies them
# straight (docs/PROTOCOL.md, "Scattered pages"). Its byte size is kvtier's
# page size for the layout; the keys name the format (KeySpace), so such a
# page is never read as a kvtier-decoder page (head-major, PROTOCOL.md).
import concurrent.futures
import logging
import threading
import time

import torch

import kvtier

from .core import get_pages, put_chain

log = logging.getLogger("kvtier.integrations")

# Engine dtypes kvtier stores as they are. fp8 KV caches are refused: vLLM's
# carry one scale per tensor, kvtier's fp8 pages one per token and head.
DTYPES = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}
BLOCK_ORDER = "B2THD"  # block, K/V, token in block, kv head, head dim: the page's order
PAGE_FORMAT = "engine-blocks-v1"  # folded into the keys of such pages


def _check_dims(dims):
    if sorted(dims) != sorted(BLOCK_ORDER):
        raise ValueError(f"dims must order the letters {BLOCK_ORDER!r} (2: K/V, B: block, "
                         f"T: token, H: kv head, D: head dim), got {dims!r}")
    return [dims.index(c) for c in BLOCK_ORDER]


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
        self._views = [t.permute(perm) for t in layers]  # each (B, 2, T, H, D), no copy
        self.num_blocks, _, self.block_size, self.kv_heads, self.head_dim = self._views[0].shape
        self.blocks_per_page = blocks_per_page
        self.dtype, self.device = first.dtype, first.device
        # Pages only move bytes: copy them as the widest integer words a head
        # row divides into (torch copies fp16/bf16 strided rows far slower).
        # (Only where the tensors' last dim is the head dim: a word view
        # shrinks the last dim.)
        self._word = (_word_dtype(self.head_dim * first.element_size(), True)
                      if dims[-1] == "D" else first.dtype)
        self._wviews = [t.view(self._word).permute(perm) for t in layers]
        self.layout = kvtier.Layout(len(layers), self.kv_heads, self.head_dim,
                                    self.block_size * blocks_per_page, DTYPES[self.dtype])
        self.page_shape = (len(layers), blocks_per_page, 2, self.block_size, self.kv_heads,
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

    def _segments(self, pages, slots, skips=None):
        """The copies that move pages[i] (minus its first skips[i] blocks) to
        or from staging slot slots[i]: ("run", slot0, block0, m) for m full,
        unskipped pages in consecutive slots whose blocks are consecutive ids
        (one copy per layer: the usual case, blocks allocated in order), else
        ("block", slot, j, block) per block."""
        k, segs = self.blocks_per_page, []
        for i, blocks in enumerate(pages):
            skip = skips[i] if skips else 0
            whole = (skip == 0 and len(blocks) == k and
                     all(blocks[j] == blocks[0] + j for j in range(k)))
            if whole:
                last = segs[-1] if segs else None
                if (last is not None and last[0] == "run" and last[1] + last[3] == slots[i] and
                        last[2] + last[3] * k == blocks[0]):
                    segs[-1] = ("run", last[1], last[2], last[3] + 1)
                else:
                    segs.append(("run", slots[i], blocks[0], 1))
            else:
                segs += [("block", slots[i], j, blocks[j]) for j in range(skip, len(blocks))]
        return segs

    def _pairs(self, staging, segs):
        """(page-side view, block-side view) of each segment and layer, as
        words, of equal shapes."""
        k, T, H = self.blocks_per_page, self.block_size, self.kv_heads
        st = staging.view(self._word)
        dw = st.shape[-1]
        for l, v in enumerate(self._wviews):
            for kind, slot, a, b in segs:
                if kind == "run":  # m pages: staging (m, k, 2, T, H, d), blocks (m*k, 2, T, H, d)
                    m = b
                    page = st[slot:slot + m, l].view(m, k, 2, T, H, dw)
                    blk = v[a:a + m * k].view(m, k, 2, T, H, dw)
                else:  # one block: staging page slot, position a; block b
                    page = st[slot, l, a]
                    blk = v[b]
                yield page, blk

    def gather(self, pages, staging, slots):
        """Copies the blocks of pages[i] into staging page slots[i] (all layers)."""
        self.check_pages(pages)
        for page, blk in self._pairs(staging, self._segments(pages, slots)):
            page.copy_(blk)

    def scatter(self, staging, slots, pages, skips=None):
        """Writes staging page slots[i] into the blocks of pages[i], except its
        first skips[i] blocks (already computed by the engine). A page may list
        fewer blocks than it holds: its last ones are then not written."""
        self.check_pages(pages, unique=True, allow_short=True)
        for page, blk in self._pairs(staging, self._segments(pages, slots, skips)):
            blk.copy_(page)
        if self.device.type == "cuda":  # the caller reports the load done after this
            torch.cuda.current_stream(self.device).synchronize()


def _word_dtype(row_bytes, last_dim_contiguous):
    """The widest integer dtype that tiles a head row of `row_bytes`."""
    if last_dim_contiguous:
        for dt, size in ((torch.int64, 8), (torch.int32, 4), (torch.int16, 2)):
            if row_bytes % size == 0:
                return dt
    return torch.uint8


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
        # Last freed, first lent: the slots in use stay the same few, whose
        # memory both processes have already touched (a slot's first use
        # costs a page fault per 4 KiB on each side: ~9 ms for two 2 MiB pages).
        with self._cv:
            self._free[:0] = slots
            self._cv.notify_all()


class DirectKv:
    """An engine's CPU KV tensors registered with the daemon where they are
    (kvtier.ShmBuffer.share), so a page moves between the daemon and its
    blocks in one copy. A GET or PUT names each page by the offset of its
    first block and cuts every page the same way into runs
    (docs/PROTOCOL.md, "Scattered pages"): the engine page's layer | block
    | K,V order, each K or V block one run where the tensor keeps its tokens
    and heads together (FlashAttention, FlashInfer), one head row per run
    otherwise. Pages whose blocks are
    consecutive ids and lie in the shared memory qualify (fits); the
    others, and loads that must skip blocks, go through staging.

    Raises ValueError where the tensors cannot be shared (not CPU, pinned,
    head dim not contiguous, a layer without a whole page) and kvtier.Error
    where the daemon cannot take them (an older daemon: no page_runs)."""

    MAX_KEYS = 1024  # pages per GET/PUT

    def __init__(self, client, kv, tensors):
        if kv.device.type != "cpu":
            raise ValueError(f"the KV caches are on {kv.device} (only CPU memory is shared in "
                             "place)")
        if any(t.is_pinned() for t in tensors):
            raise ValueError("the KV caches are pinned (page-locked) memory, which cannot be "
                             "remapped")
        v = kv._views[0]  # (B, 2, T, H, D) over layer 0, in elements
        sB, s2, sT, sH, sD = v.stride()
        if sD != 1:
            raise ValueError(f"the head dim is not contiguous (stride {sD})")
        e = v.element_size()
        k, T, H = kv.blocks_per_page, kv.block_size, kv.kv_heads
        run = kv.head_dim * e
        # Byte offsets of each head row of a page starting at block 0, in
        # page order (block, K/V, token, head), relative to its layer
        # tensor's first byte.
        j = torch.arange(k).view(k, 1, 1, 1)
        kvi = torch.arange(2).view(1, 2, 1, 1)
        tok = torch.arange(T).view(1, 1, T, 1)
        hi = torch.arange(H).view(1, 1, 1, H)
        rel = ((j * sB + kvi * s2 + tok * sT + hi * sH) * e).reshape(-1)
        regions = [(t.data_ptr(), t.numel() * t.element_size()) for t in tensors]
        self.buf, ranges = kvtier.ShmBuffer.share(regions)
        # Held until close(), which makes the memory private again before
        # the engine may free it (an allocator must not get shared pages back).
        self._tensors, self._ranges = list(tensors), ranges
        # Where layer l's byte 0 would be in the buffer (its first partial
        # 4 KiB page is not shared, so this may lie before the buffer).
        bases = [off - (addr - ptr) for (addr, size, off), (ptr, _) in zip(ranges, regions)]
        self.block_bytes = sB * e
        self._m = min(bases)  # keys' offsets are block offsets + m; runs from there
        pos = torch.cat([rel + b for b in bases])
        # Runs that continue one another become one.
        starts = [int(pos[0])]
        lens = [run]
        for p in pos[1:].tolist():
            if p == starts[-1] + lens[-1]:
                lens[-1] += run
            else:
                starts.append(p)
                lens.append(run)
        self.runs = [(n, p - self._m) for p, n in zip(starts, lens)]
        # A page starting at block b qualifies when b * block_bytes lies in
        # [lo, hi] (every layer's runs inside its shared range).
        lo_rel, hi_rel = int(rel.min()), int(rel.max()) + run
        self._lo = max(off - b - lo_rel for (_, _, off), b in zip(ranges, bases))
        self._hi = min(off + size - b - hi_rel for (_, size, off), b in zip(ranges, bases))
        self.k = k
        self.buffer_id = None
        try:
            if any(size == 0 for _, size, _ in ranges):
                raise ValueError("a KV layer tensor holds no whole memory page")
            self.buffer_id = client.register(self.buf)
            # An older daemon would ignore page_runs: the client refuses them instead.
            client.get([bytes(16)], self.buffer_id, [self.offset([self._first_fit()])],
                       page_runs=self.runs)
        except (ValueError, kvtier.Error):
            self.close(client)
            raise

    def close(self, client):
        """Unregisters the memory and makes it private again (same bytes).
        Transfers still in the daemon then write only the shared object,
        which this process no longer maps."""
        if self._ranges is None:
            return
        if self.buffer_id is not None:
            try:
                client.unregister(self.buffer_id)
            except kvtier.Error as e:  # a dead daemon maps nothing any more
                log.info("kvtier: unregistering the shared KV caches: %s", e)
        kvtier.ShmBuffer.unshare(self._ranges)
        self._ranges, self._tensors, self.buffer_id = None, None, None

    def _first_fit(self):
        b = -(-self._lo // self.block_bytes)
        if b * self.block_bytes > self._hi:
            raise ValueError("no block lies inside the shared memory")
        return b

    def fits(self, blocks):
        """Whether a page of these block ids moves directly."""
        if len(blocks) != self.k or any(blocks[j] != blocks[0] + j for j in range(1, self.k)):
            return False
        at = blocks[0] * self.block_bytes
        return self._lo <= at <= self._hi

    def offset(self, blocks):
        return blocks[0] * self.block_bytes + self._m


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
        self._getter = None  # the thread GETs run on, while load() writes blocks
        self.direct = None  # a DirectKv once the engine's tensors are shared
        self.direct_moved = 0  # pages loaded or saved in place (not staged)

    @staticmethod
    def _chunk_pages(st):
        """Pages per GET or PUT: half a staging buffer, so one chunk moves
        between the daemon and staging while the other is copied between
        staging and the engine's blocks (a buffer of 1 page: no overlap)."""
        return max(1, st.capacity // 2)

    def load_calls(self, n_pages):
        """How many GETs load() makes for n_pages (to bound a load's time)."""
        return -(-n_pages // self._chunk_pages(self.load_staging))

    def _get_async(self, chunk, st):
        """Lends slots for `chunk` and starts its GET on the getter thread:
        (chunk, slots, future of get_pages' answer)."""
        if self._getter is None:
            self._getter = concurrent.futures.ThreadPoolExecutor(1, "kvtier-get")
        slots = st.acquire(len(chunk))
        try:
            fut = self._getter.submit(get_pages, self.client, [p.key for p in chunk],
                                      st.buffer_id, st.offsets(slots), self.get_timeout_ms)
        except BaseException:
            st.release(slots)
            raise
        return chunk, slots, fut

    def load(self, job):
        """GETs job.pages into their blocks; returns the indices of the pages
        that did not arrive (their blocks untouched, or to be recomputed).
        Pages the daemon can write in place go straight into the blocks; the
        rest through staging."""
        direct = [i for i, p in enumerate(job.pages)
                  if self.direct is not None and p.skip == 0 and self.direct.fits(p.blocks)]
        if not direct:
            return self._load_staged(job, job.pages)
        failed = self._load_direct(job, direct)
        taken = set(direct)
        rest = [i for i in range(len(job.pages)) if i not in taken]
        if rest:
            failed |= {rest[j] for j in self._load_staged(job, [job.pages[i] for i in rest])}
        return failed

    def _load_direct(self, job, idx):
        """One GET per DirectKv.MAX_KEYS pages, straight into the blocks. The
        job's write lock is held during each: a cancel waits for the GET,
        after which (its deadline passed, docs/PROTOCOL.md) the daemon writes
        nothing more."""
        d, failed = self.direct, set()
        for n in range(0, len(idx), d.MAX_KEYS):
            part = idx[n:n + d.MAX_KEYS]
            pages = [job.pages[i] for i in part]
            with job.write_lock:
                if job.cancelled:
                    return set(idx)
                ok = get_pages(self.client, [p.key for p in pages], d.buffer_id,
                               [d.offset(p.blocks) for p in pages], self.get_timeout_ms,
                               page_runs=d.runs)
            if ok is None:  # the daemon is gone: stop asking
                return failed | set(idx[n:])
            failed.update(i for i, good in zip(part, ok) if not good)
            self.direct_moved += sum(ok)
        return failed

    def _load_staged(self, job, pages):
        """GETs `pages` chunk by chunk into staging and writes the pages that
        arrived into their blocks; returns the indices (into `pages`) of the
        others. The GET of the next chunk runs while this one is written."""
        failed, st = set(), self.load_staging
        size = self._chunk_pages(st)
        overlap = st.capacity >= 2 * size
        starts = list(range(0, len(pages), size))
        nxt = self._get_async(pages[:size], st) if starts else None
        try:
            for n, start in enumerate(starts):
                (chunk, slots, fut), nxt = nxt, None
                try:
                    ok = fut.result()
                    if ok is None:  # the daemon is gone: stop asking, use nothing staged
                        return failed | set(range(start, len(pages)))
                    later = start + size < len(pages)
                    if later and overlap:
                        nxt = self._get_async(pages[start + size:start + 2 * size], st)
                    hit = [i for i, good in enumerate(ok) if good]
                    with job.write_lock:
                        if job.cancelled:
                            return set(range(len(pages)))
                        self.kv.scatter(self._load_pages, [slots[i] for i in hit],
                                        [chunk[i].blocks for i in hit],
                                        [chunk[i].skip for i in hit])
                finally:
                    st.release(slots)
                failed.update(start + i for i, good in enumerate(ok) if not good)
                if later and not overlap:
                    nxt = self._get_async(pages[start + size:start + 2 * size], st)
            return failed
        finally:
            if nxt is not None:  # its GET may still write its slots: wait before lending them
                nxt[2].exception()
                st.release(nxt[1])

    def close(self):
        if self._getter is not None:
            self._getter.shutdown(wait=True)
        if self.direct is not None:
            self.direct.close(self.client)

    def stage(self, pages, timeout_s=30.0):
        """Caller's thread: yields (pages, slots) chunks whose blocks are now
        copied out, so the engine may reuse them. The caller hands each chunk
        to put_staged (on the transfer thread) before taking the next: that
        PUT is what frees the slots a later chunk may wait for (TimeoutError
        after timeout_s)."""
        st = self.save_staging
        for chunk in chunks(list(pages), self._chunk_pages(st)):
            slots = st.acquire(len(chunk), timeout_s)
            try:
                self.kv.gather([p.blocks for p in chunk], self._save_pages, slots)
            except Exception:
                st.release(slots)
                raise
            yield chunk, slots

    def put_direct(self, pages):
        """PUTs pages straight out of the engine's blocks (each run of pages
        whose parent is the page before as one chain) and returns the indices
        of those the store did not take. Returns once the daemon has read
        them (or, failing, once its deadline passed): the engine may then
        reuse the blocks."""
        d, lost = self.direct, set()
        for part in chunks(list(range(len(pages))), d.MAX_KEYS):
            sub = [pages[i] for i in part]
            for lo, hi in _chain_runs(sub):
                kept = put_chain(self.client, [p.key for p in sub[lo:hi]], d.buffer_id,
                                 [d.offset(p.blocks) for p in sub[lo:hi]], sub[lo].parent,
                                 page_runs=d.runs)
                lost.update(part[j] for j in range(lo + kept, hi))
        self.direct_moved += len(pages) - len(lost)
        return lost

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
