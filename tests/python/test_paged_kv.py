# The Python model's paged KV cache (kvtier.model.paged_kv): every element
# lands at the byte the kvtier page layout (and the C++ decoder's cache) puts
# it, the arena is the registered buffer itself, and bad buffers or a full
# arena are clear errors that leave the cache as it was.
import struct

import pytest
import torch

import kvtier
from kvtier.model.paged_kv import ARENA_HEADER_BYTES, KvCacheError, PagedKvCache

L, H, D, TPP = 3, 2, 4, 8  # layers, kv heads, head_dim, tokens per page


def make(pages=4, dtype="fp32", buf=None):
    pb = kvtier.Layout(L, H, D, tokens_per_page=TPP, dtype=dtype).page_bytes
    buf = buf if buf is not None else kvtier.ShmBuffer(PagedKvCache.arena_bytes(pb, pages))
    return PagedKvCache(L, H, D, TPP, dtype, pages, buf), buf


def test_page_bytes_match_kvtier_layout():
    for dtype in ("fp32", "fp16", "bf16"):
        c, _ = make(dtype=dtype)
        assert c.page_bytes == kvtier.Layout(L, H, D, tokens_per_page=TPP, dtype=dtype).page_bytes


def test_scatter_writes_the_documented_offsets():
    """byte = header + page * page_bytes + layer * layer_bytes + {K: 0, V: half}
    + head * tpp * d * 4 + slot * d * 4 + i * 4 (fp32 pages)."""
    c, buf = make()
    seq = c.add_sequence()
    n = 11  # two pages, the second partial
    c.reserve(seq, n)
    k = torch.arange(n * H * D, dtype=torch.float32).view(n, H, D)
    v = -k - 1
    for layer in range(L):
        c.scatter(seq, layer, 0, k + 1000 * layer, v - 1000 * layer)
    c.commit(seq, n)
    raw = bytes(memoryview(buf))
    half = H * TPP * D * 4
    table = c.block_table(seq)
    for t in range(n):
        page, slot = table[t // TPP], t % TPP
        for layer in range(L):
            for h in range(H):
                for i in range(D):
                    base = (ARENA_HEADER_BYTES + page * c.page_bytes + layer * 2 * half +
                            h * TPP * D * 4 + slot * D * 4 + i * 4)
                    assert struct.unpack_from("<f", raw, base)[0] == k[t, h, i] + 1000 * layer
                    assert struct.unpack_from("<f", raw, base + half)[0] == v[t, h, i] - 1000 * layer
    kk, vv = c.gather(seq, 2, n)
    assert torch.equal(kk, (k + 2000).transpose(0, 1)) and torch.equal(vv, (v - 2000).transpose(0, 1))
    assert raw[:ARENA_HEADER_BYTES] == bytes(ARENA_HEADER_BYTES)  # the header holds no page


def test_fp16_rounds_to_nearest_even():
    c, _ = make(dtype="fp16")
    seq = c.add_sequence()
    c.reserve(seq, 1)
    x = torch.tensor([1 + 2 ** -11, 1 + 3 * 2 ** -11, 65520.0, 1e-8]).repeat(H, 1)[:, :D]
    c.scatter(seq, 0, 0, x.unsqueeze(0), x.unsqueeze(0))
    kk, _ = c.gather(seq, 0, 1)
    assert kk[0, 0].tolist() == [1.0, 1 + 2 ** -9, float("inf"), 0.0]


def test_gather_into_a_workspace_equals_a_fresh_gather():
    """The model's reused fp32 workspace (no fresh tensor per layer) gives the
    same K/V, for every page dtype and a partial last page; a workspace of the
    wrong shape or dtype is refused."""
    for dtype in ("fp32", "fp16", "bf16"):
        c, _ = make(dtype=dtype)
        seq = c.add_sequence()
        n = 19  # three pages, the last partial
        c.reserve(seq, n)
        g = torch.Generator().manual_seed(3)
        c.scatter(seq, 1, 0, torch.randn(n, H, D, generator=g), torch.randn(n, H, D, generator=g))
        c.commit(seq, n)
        work = torch.full((2, H, 4 * TPP, D), float("nan"))
        for end in (1, TPP, n):
            want = c.gather(seq, 1, end)
            got = c.gather(seq, 1, end, work)
            assert all(torch.equal(a, b) for a, b in zip(want, got))
            assert got[0].data_ptr() == work.data_ptr()  # views of the workspace
        for bad in (torch.empty(2, H, n - 1, D), torch.empty(2, H, n, D, dtype=torch.float64),
                    torch.empty(2, H + 1, n, D)):
            with pytest.raises(KvCacheError, match="workspace"):
                c.gather(seq, 1, n, bad)


def test_pages_view_the_buffer_without_copy():
    c, buf = make()
    c.pages[1, 2, 1, 1, 7, 3] = 42.0
    off = c.page_offset(1) + (2 * 2 + 1) * H * TPP * D * 4 + (1 * TPP * D + 7 * D + 3) * 4
    assert struct.unpack_from("<f", memoryview(buf), off)[0] == 42.0
    assert torch.equal(c.page_bytes_of(1), c.bytes[c.page_offset(1):c.page_offset(2)])


def test_bad_buffers():
    pb = kvtier.Layout(L, H, D, tokens_per_page=TPP, dtype="fp32").page_bytes
    with pytest.raises(KvCacheError, match="writable"):
        PagedKvCache(L, H, D, TPP, "fp32", 4, bytes(PagedKvCache.arena_bytes(pb, 4)))
    with pytest.raises(KvCacheError, match="hold"):
        PagedKvCache(L, H, D, TPP, "fp32", 4, bytearray(PagedKvCache.arena_bytes(pb, 4) - 1))
    with pytest.raises(KvCacheError, match="not supported"):
        PagedKvCache(L, H, D, TPP, "int8", 4, bytearray(1 << 16))
    with pytest.raises(KvCacheError, match="num_pages"):
        PagedKvCache(L, H, D, TPP, "fp32", 0, bytearray(1 << 16))
    with pytest.raises(TypeError):
        PagedKvCache(L, H, D, TPP, "fp32", 1, object())


def test_full_arena_and_rollback_leave_the_cache_consistent():
    c, _ = make(pages=3)
    a, b = c.add_sequence(), c.add_sequence()
    c.reserve(a, 2 * TPP)
    c.commit(a, 2 * TPP)
    with pytest.raises(KvCacheError, match="needs 2 more pages"):
        c.reserve(b, TPP + 1)
    assert c.free_pages == 1 and c.block_table(b) == []
    with pytest.raises(KvCacheError, match="past the reserved pages"):
        c.commit(b, 1)
    c.truncate(a, TPP - 1)
    assert c.length(a) == TPP - 1 and len(c.block_table(a)) == 1 and c.free_pages == 2
    with pytest.raises(KvCacheError, match="cannot truncate"):
        c.truncate(a, TPP)
    with pytest.raises(KvCacheError, match="no sequence 99"):
        c.reserve(99, 1)
    c.remove_sequence(a)
    c.remove_sequence(b)
    assert c.free_pages == 3


def _reference_attention(c, seq, layer, start, q, q_heads, window):
    """Causal GQA softmax attention in float64 over the gathered pages."""
    n = q.shape[0]
    k, v = (t.double() for t in c.gather(seq, layer, start + n))  # [H][T][D]
    qd = q.double().view(n, q_heads, D)
    out = torch.empty(n, q_heads, D, dtype=torch.float64)
    for j in range(n):
        p = start + j
        lo = max(0, p - window + 1) if window else 0
        for h in range(q_heads):
            kv = h // (q_heads // H)
            s = k[kv, lo:p + 1] @ qd[j, h] / D ** 0.5
            out[j, h] = torch.softmax(s, 0) @ v[kv, lo:p + 1]
    return out.view(n, q_heads * D)


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("q_heads", [H, 2 * H])  # one query head per kv head, and GQA
@pytest.mark.parametrize("window", [0, 5])
def test_kernel_attention_equals_softmax_over_the_pages(dtype, q_heads, window):
    """PagedKvCache.attention (the C++ decoder's paged kernels over the pages in
    place) is causal softmax attention over exactly the K/V the pages hold:
    prefill chunks and single decode queries, partial pages, every page dtype,
    GQA and a sliding window; pages in a scrambled order."""
    c, _ = make(pages=6, dtype=dtype)
    filler = c.add_sequence()  # the sequence's pages are not 0, 1, 2: the block table matters
    c.reserve(filler, 1)
    seq = c.add_sequence()
    g = torch.Generator().manual_seed(5)
    start = 0
    for n in (11, 1, 6, 1):  # prefill, decode, a chunk, decode: 19 tokens, a partial third page
        c.reserve(seq, n)
        for layer in range(L):
            c.scatter(seq, layer, start, torch.randn(n, H, D, generator=g),
                      torch.randn(n, H, D, generator=g))
        q = torch.randn(n, q_heads * D, generator=g)
        for layer in (0, L - 1):
            got = c.attention(seq, layer, start, q, q_heads, float(D ** -0.5), window)
            want = _reference_attention(c, seq, layer, start, q, q_heads, window)
            assert got.shape == (n, q_heads * D) and got.dtype == torch.float32
            assert torch.allclose(got.double(), want, atol=1e-5, rtol=1e-5), (n, layer)
        c.commit(seq, n)
        start += n
    assert c.block_table(seq)[0] != 0


def test_kernel_attention_refuses_what_does_not_fit():
    """Every size the native call takes from Python is checked before a kernel
    reads a byte: a clear error naming the field, the cache unchanged."""
    c, _ = make(pages=2, dtype="fp16")
    seq = c.add_sequence()
    c.reserve(seq, 4)
    q = torch.zeros(4, H * D)
    with pytest.raises(KvCacheError, match="need more than its 1 pages"):
        c.attention(seq, 0, 5, q, H, 0.5)
    native, arena, layout = kvtier._native, c._kernel_arena, c._kernel_layout
    table = torch.tensor(c.block_table(seq), dtype=torch.int32).numpy()
    out = torch.empty(4, H * D).numpy()
    ok = dict(arena=arena, layout=layout, num_pages=2, layer=0, block_table=table, start=0,
              q=q.numpy(), out=out, num_q_heads=H, sm_scale=0.5)
    native.paged_attention(**ok)
    for change, msg in [
            (dict(q=torch.zeros(4, H * D, dtype=torch.float64).numpy()), "q must hold float32"),
            (dict(q=torch.zeros(4 * H * D + 1).numpy()), "not a positive multiple"),
            (dict(q=torch.zeros(8, H * D).numpy()[::2]), "q must be contiguous"),
            (dict(out=torch.empty(3, H * D).numpy()), "out has"),
            (dict(num_q_heads=3), "not a positive multiple of kv_heads"),
            (dict(layer=L), f"layer {L} of a {L}-layer"),
            (dict(num_pages=3), "must be writable and hold"),
            (dict(arena=bytes(arena.nbytes)), "must be writable"),
            (dict(block_table=torch.zeros(1, dtype=torch.int64).numpy()), "int32"),
            (dict(start=TPP), "need 2")]:
        with pytest.raises(ValueError, match=msg):
            native.paged_attention(**{**ok, **change})
    with pytest.raises(kvtier.InvalidArgument):  # a page outside the arena: the kernel says no
        native.paged_attention(**{**ok, "block_table": torch.tensor([7], dtype=torch.int32).numpy()})
