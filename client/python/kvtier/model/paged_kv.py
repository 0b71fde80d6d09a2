# PagedKvCache: the Python model's KV cache, an arena of pages in one buffer
# (a kvtier.ShmBuffer, so kvtierd GETs and PUTs pages in place) viewed by torch
# without a copy, laid out exactly as the C++ decoder's cache
# (client/decoder/kv_cache.h): a 4 KiB header (the layer-wise GET's progress
# word), then pages of kvtier's layout, page-first:
#   page = layer 0 | layer 1 | ...;  layer = K half | V half;
#   half = [kv_heads][tokens_per_page][head_dim] elements of the page dtype.
# Token t of a sequence is in block t // tokens_per_page, slot t % tokens_per_page.
# Not thread-safe: one model thread drives it.
import torch

from .. import _native

__all__ = ["ARENA_HEADER_BYTES", "KV_DTYPES", "KvCacheError", "PagedKvCache"]

ARENA_HEADER_BYTES = 4096
# Page dtypes the torch model reads and writes (int8/fp8 pages carry per-token
# scales the C++ kernels compute; the Python model does not implement them).
KV_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


class KvCacheError(RuntimeError):
    """A cache operation that cannot be done (unknown sequence, arena full, ...)."""


class _Sequence:
    __slots__ = ("length", "blocks")

    def __init__(self):
        self.length, self.blocks = 0, []


class PagedKvCache:
    """Pages of `layout` (a kvtier.Layout or anything with layers, kv_heads,
    head_dim, tokens_per_page and dtype) in `buffer`, which must be writable,
    support the buffer protocol and hold ARENA_HEADER_BYTES + num_pages pages."""

    def __init__(self, layers, kv_heads, head_dim, tokens_per_page, dtype, num_pages, buffer):
        if dtype not in KV_DTYPES:
            raise KvCacheError(f"kv cache: page dtype {dtype!r} is not supported by the Python "
                               f"model ({', '.join(KV_DTYPES)})")
        for name, v in (("layers", layers), ("kv_heads", kv_heads), ("head_dim", head_dim),
                        ("tokens_per_page", tokens_per_page), ("num_pages", num_pages)):
            if not isinstance(v, int) or v <= 0:
                raise KvCacheError(f"kv cache: {name} must be a positive int, got {v!r}")
        self.layers, self.kv_heads, self.head_dim = layers, kv_heads, head_dim
        self.tokens_per_page, self.dtype, self.num_pages = tokens_per_page, dtype, num_pages
        self.torch_dtype = KV_DTYPES[dtype]
        elem = torch.finfo(self.torch_dtype).bits // 8
        self.page_bytes = layers * 2 * kv_heads * tokens_per_page * head_dim * elem
        self.buffer = buffer
        raw = memoryview(buffer)
        need = ARENA_HEADER_BYTES + num_pages * self.page_bytes
        if raw.readonly or raw.nbytes < need:
            raise KvCacheError(f"kv cache: the arena buffer must be writable and hold {need} "
                               f"bytes ({num_pages} pages of {self.page_bytes}), got "
                               f"{raw.nbytes}{' read-only' if raw.readonly else ''}")
        raw.release()
        whole = torch.frombuffer(buffer, dtype=torch.uint8, count=need)
        self.bytes = whole  # the arena as bytes (header included)
        # [page][layer][K/V][kv_head][slot][head_dim], a view of the buffer.
        self.pages = whole[ARENA_HEADER_BYTES:].view(self.torch_dtype).view(
            num_pages, layers, 2, kv_heads, tokens_per_page, head_dim)
        self.pages.zero_()  # touch it now: the first prefill measures work, not faults
        self._free = list(range(num_pages - 1, -1, -1))  # a stack, as the C++ cache
        self._seqs = {}
        # The pages as the kernels see them (paged_attention): the arena past
        # the header, and its layout.
        self._kernel_arena = whole[ARENA_HEADER_BYTES:].numpy()
        self._kernel_layout = _native.Layout(layers, kv_heads, head_dim, tokens_per_page, dtype)
        self._next_id = 1

    # -- sizes and offsets -------------------------------------------------
    @staticmethod
    def arena_bytes(page_bytes, num_pages):
        return ARENA_HEADER_BYTES + num_pages * page_bytes

    def page_offset(self, page):
        """Byte offset of `page` in the registered buffer (what GET/PUT take)."""
        return ARENA_HEADER_BYTES + page * self.page_bytes

    def page_bytes_of(self, page):
        """The raw bytes of one page (a view)."""
        off = self.page_offset(page)
        return self.bytes[off:off + self.page_bytes]

    @property
    def free_pages(self):
        return len(self._free)

    # -- sequences ---------------------------------------------------------
    def add_sequence(self):
        sid = self._next_id
        self._next_id += 1
        self._seqs[sid] = _Sequence()
        return sid

    def _find(self, seq):
        s = self._seqs.get(seq)
        if s is None:
            raise KvCacheError(f"kv cache: no sequence {seq}")
        return s

    def has_sequence(self, seq):
        return seq in self._seqs

    def remove_sequence(self, seq):
        s = self._find(seq)
        self._free.extend(s.blocks)
        del self._seqs[seq]

    def reset(self):
        self._seqs.clear()
        self._free = list(range(self.num_pages - 1, -1, -1))

    def length(self, seq):
        s = self._seqs.get(seq)
        return 0 if s is None else s.length

    def block_table(self, seq):
        return list(self._find(seq).blocks)

    def reserve(self, seq, n):
        """Pages for `n` more tokens after length(seq); nothing taken on failure."""
        s = self._find(seq)
        tpp = self.tokens_per_page
        more = max(0, (s.length + n + tpp - 1) // tpp - len(s.blocks))
        if more > len(self._free):
            raise KvCacheError(f"kv cache: sequence {seq} needs {more} more pages for {n} tokens "
                               f"but only {len(self._free)} of {self.num_pages} are free")
        for _ in range(more):
            s.blocks.append(self._free.pop())

    def commit(self, seq, n):
        """Records `n` more tokens as written (after reserve and scatter)."""
        s = self._find(seq)
        if s.length + n > len(s.blocks) * self.tokens_per_page:
            raise KvCacheError(f"kv cache: commit of {n} tokens past the reserved pages of "
                               f"sequence {seq}")
        s.length += n

    def truncate(self, seq, length):
        """Rolls the sequence back to `length` tokens and frees pages past it."""
        s = self._find(seq)
        if length > s.length:
            raise KvCacheError(f"kv cache: cannot truncate sequence {seq} of {s.length} tokens "
                               f"to {length}")
        keep = (length + self.tokens_per_page - 1) // self.tokens_per_page
        while len(s.blocks) > keep:
            self._free.append(s.blocks.pop())
        s.length = length

    # -- K/V rows ------------------------------------------------------------
    def _spans(self, seq, start, end):
        """(page, slot0, slot1, row0) for positions [start, end) of seq."""
        s, tpp = self._find(seq), self.tokens_per_page
        if end > len(s.blocks) * tpp:
            raise KvCacheError(f"kv cache: positions up to {end} of sequence {seq} need "
                               f"{(end + tpp - 1) // tpp} pages, it has {len(s.blocks)}")
        pos = start
        while pos < end:
            b, slot = divmod(pos, tpp)
            n = min(end - pos, tpp - slot)
            yield s.blocks[b], slot, slot + n, pos - start
            pos += n

    def scatter(self, seq, layer, start, k, v):
        """Writes fp32 rows k, v [n][kv_heads][head_dim] for positions
        [start, start + n) of `layer`, rounding to the page dtype (to nearest
        even, as the C++ FloatToHalf)."""
        n = k.shape[0]
        for page, s0, s1, r0 in self._spans(seq, start, start + n):
            rows = slice(r0, r0 + s1 - s0)
            self.pages[page, layer, 0, :, s0:s1] = k[rows].transpose(0, 1)
            self.pages[page, layer, 1, :, s0:s1] = v[rows].transpose(0, 1)

    def gather(self, seq, layer, end, out=None):
        """K and V of positions [0, end) of `layer` as fp32 [kv_heads][end][head_dim].
        `out`: an fp32 workspace [2][kv_heads][>= end][head_dim] to fill and
        return views of (valid until it is filled again); None: a new tensor.
        One pass per page: the page dtype is converted while it is copied."""
        s, tpp = self._find(seq), self.tokens_per_page
        nb = (end + tpp - 1) // tpp
        if nb > len(s.blocks):
            raise KvCacheError(f"kv cache: sequence {seq} has {len(s.blocks)} pages, "
                               f"{end} tokens need {nb}")
        if out is None:
            out = torch.empty(2, self.kv_heads, end, self.head_dim)
        elif (out.dtype != torch.float32 or out.dim() != 4 or out.shape[2] < end or
              tuple(out.shape[:2]) != (2, self.kv_heads) or out.shape[3] != self.head_dim):
            raise KvCacheError(f"kv cache: gather workspace {tuple(out.shape)} {out.dtype} "
                               f"cannot hold [2][{self.kv_heads}][{end}][{self.head_dim}] fp32")
        for i, page in enumerate(s.blocks[:nb]):
            t0, t1 = i * tpp, min(end, (i + 1) * tpp)
            out[:, :, t0:t1].copy_(self.pages[page, layer, :, :, :t1 - t0])
        return out[0, :, :end], out[1, :, :end]

    def attention(self, seq, layer, start, q, num_q_heads, sm_scale, sliding_window=0):
        """Causal attention of fp32 queries q [n][num_q_heads * head_dim] at
        positions [start, start + n) of `seq` over `layer`'s K/V in the pages
        (the queries' own K/V scattered first) -> fp32 [n][num_q_heads * head_dim].
        The C++ decoder's CPU paged-attention kernels read the page dtype in
        place: nothing is gathered or converted to fp32 first."""
        s = self._find(seq)
        if start + q.shape[0] > len(s.blocks) * self.tokens_per_page:
            raise KvCacheError(f"kv cache: positions up to {start + q.shape[0]} of sequence {seq} "
                               f"need more than its {len(s.blocks)} pages")
        out = torch.empty(q.shape)
        q = q.contiguous()
        table = torch.tensor(s.blocks, dtype=torch.int32)
        _native.paged_attention(self._kernel_arena, self._kernel_layout, self.num_pages, layer,
                                table.numpy(), start, q.numpy(), out.numpy(), num_q_heads,
                                sm_scale, sliding_window)
        return out
