# LlamaModel: the C++ decoder's forward pass (client/decoder/model.cc, ops.cc)
# in torch, op for op, so greedy tokens match kvtier-generate on the same
# checkpoint: RMSNorm with a double sum of squares, linear layers through the
# same BLAS calls (sgemm for several rows, sgemv for one; residuals
# accumulated with beta = 1), RoPE tables computed in double by libm, K/V
# written to the pages in the page dtype and attention read back from them.
# Attention runs the C++ decoder's own CPU paged-attention kernels over the
# pages (kvtier._native.paged_attention, attention="kernel", the default):
# they read fp16/bf16 K/V in place, where torch would first convert every
# layer to fp32 (a restored 2,048-token TTFT, 124m: ~19 ms of ~45 in gather
# and per-head products). attention="torch" is the same attention as a plain
# masked softmax in torch (the kernels are an online softmax over tiles), so
# the two agree within fp32 rounding, not bit for bit.
# Projection biases (attention_bias / mlp_bias checkpoints) are added after
# each linear layer as C++ ops::AddBias does; a sliding window masks the keys
# behind it (every page stays in the cache: nothing to restore around).
import math

import numpy as np
import torch

from .paged_kv import KvCacheError

__all__ = ["ATTENTION", "ModelError", "LlamaModel", "greedy"]

_Q_CHUNK = 256  # query rows per attention block: bounds the [heads, q, keys] scores


class ModelError(ValueError):
    """Bad input to the model (token outside the vocabulary, too long, ...)."""


def _linear(x, w):
    """x[rows][in] * w[out][in]^T: sgemv for one row, sgemm for more (as ops.cc)."""
    if x.shape[0] == 1:
        return torch.mv(w, x[0]).unsqueeze(0)
    return torch.mm(x, w.t())


def _add_bias(y, b):
    """y += b on every row (ops::AddBias); nothing when the projection has none."""
    return y if b is None else y.add_(b)


def _linear_acc(x, w, y):
    """y + x * w^T with BLAS beta = 1, the residual add ops::Linear(..., beta=1) does."""
    if x.shape[0] == 1:
        return torch.addmv(y[0], w, x[0]).unsqueeze(0)
    return torch.addmm(y, x, w.t())


ATTENTION = ("kernel", "torch")


class LlamaModel:
    """Borrows `weights` (ModelWeights) and `cache` (PagedKvCache); the cache's
    shape must be the model's. `sliding_window` overrides the config's (0: full
    attention). `attention`: "kernel" (kvtier's paged-attention kernels, read
    the page dtype in place) or "torch" (gather to fp32, torch ops). Not
    thread-safe."""

    def __init__(self, weights, cache, sliding_window=None, attention="kernel"):
        c = weights.config
        c.validate()
        if (cache.layers, cache.kv_heads, cache.head_dim) != (
                c.num_hidden_layers, c.num_key_value_heads, c.head_dim):
            raise ModelError(
                f"kv cache layout (layers {cache.layers}, kv_heads {cache.kv_heads}, head_dim "
                f"{cache.head_dim}) does not match the model (layers {c.num_hidden_layers}, "
                f"kv_heads {c.num_key_value_heads}, head_dim {c.head_dim})")
        if attention not in ATTENTION:
            raise ModelError(f"attention {attention!r} is not one of {', '.join(ATTENTION)}")
        self.attention = attention
        self.w, self.cache, self.config = weights, cache, c
        self.sliding_window = c.sliding_window if sliding_window is None else int(sliding_window)
        self._eps = float(np.float32(c.rms_norm_eps))  # a float promoted to double, as C++
        self._scale = float(np.float32(1.0) / np.sqrt(np.float32(c.head_dim)))
        half = c.head_dim // 2
        self._inv_freq = [math.pow(float(np.float32(c.rope_theta)), -2.0 * j / c.head_dim)
                          for j in range(half)]
        self._cos = torch.empty(0, half)
        self._sin = torch.empty(0, half)
        # fp32 K/V of one layer for attention, reused by every layer and call:
        # a fresh tensor per layer costs its first-touch page faults each time.
        self._kv_work = torch.empty(2, c.num_key_value_heads, 0, c.head_dim)
        self.tokens_computed = 0  # tokens run through forward(): what prefill really did

    # -- ops -----------------------------------------------------------------
    def _rms_norm(self, x, weight):
        xd = x.double()  # products of floats are exact in double; only the sum rounds
        ss = (xd * xd).sum(dim=1, keepdim=True)
        inv = (1.0 / torch.sqrt(ss / x.shape[1] + self._eps)).float()
        return x * inv * weight

    def _rope_table(self, start, end):
        """cos/sin [end - start][head_dim / 2] of positions [start, end); each angle
        in double (libm cos/sin), rounded to fp32, as ops::MakeRopeTable."""
        have = self._cos.shape[0]
        if end > have:
            cos, sin = [], []
            for p in range(have, end):
                angles = [p * f for f in self._inv_freq]
                cos.append([math.cos(a) for a in angles])
                sin.append([math.sin(a) for a in angles])
            self._cos = torch.cat([self._cos, torch.tensor(cos, dtype=torch.float64).float()])
            self._sin = torch.cat([self._sin, torch.tensor(sin, dtype=torch.float64).float()])
        return self._cos[start:end], self._sin[start:end]

    @staticmethod
    def _rope(x, heads, cos, sin):
        """Rotate-half RoPE on rows [n][heads * head_dim] (Hugging Face convention)."""
        n = x.shape[0]
        v = x.view(n, heads, -1)
        half = v.shape[2] // 2
        a, b = v[:, :, :half], v[:, :, half:]
        c, s = cos.unsqueeze(1), sin.unsqueeze(1)
        out = torch.empty_like(v)
        torch.mul(a, c, out=out[:, :, :half]).sub_(b * s)  # each product rounded, as C++
        torch.mul(b, c, out=out[:, :, half:]).add_(a * s)
        return out.view(n, -1)

    @staticmethod
    def _swiglu(gate, up):
        # g / (1 + exp(-g)) * up in fp32, the C++ expression (torch's expf is
        # within an ulp of libm's; not bit-equal on every element).
        return gate.div_(torch.exp(-gate).add_(1.0)).mul_(up)

    def _attention(self, q, k, v, start):
        """Causal GQA attention of n queries at positions [start, start + n) over
        keys [0, start + n): q [n][heads * d], k/v [kv_heads][T][d] -> [n][heads * d].
        The group's query heads of one kv head are stacked as rows (one matmul per
        kv head, K not repeated); a block of queries only reads the keys it can see."""
        c = self.config
        n, d, hkv, g = q.shape[0], c.head_dim, c.num_key_value_heads, c.group
        if n == 1 and g == 1:
            return self._attention_one(q, k, v, start)
        rows = q.view(n, hkv, g, d).transpose(0, 1).reshape(hkv, n * g, d)  # row = pos * g + r
        kt, out = k.transpose(1, 2), []
        for j0 in range(0, n, _Q_CHUNK):
            j1 = min(n, j0 + _Q_CHUNK)
            seen = start + j1  # keys [0, seen) are visible to some query of the block
            s = torch.bmm(rows[:, j0 * g:j1 * g], kt[:, :, :seen]).mul_(self._scale)
            # Only keys past the block's first query position can be in its future.
            pos = (torch.arange(j0 * g, j1 * g) // g + start).unsqueeze(1)  # row -> position
            tail = torch.arange(start + j0, seen).unsqueeze(0)
            s[:, :, start + j0:].masked_fill_(tail > pos, float("-inf"))
            if self.sliding_window > 0:  # a query at p sees keys (p - window, p]
                keys = torch.arange(0, seen).unsqueeze(0)
                s.masked_fill_(keys <= pos - self.sliding_window, float("-inf"))
            out.append(torch.bmm(torch.softmax(s, dim=-1), v[:, :seen]))
        o = torch.cat(out, dim=1) if len(out) > 1 else out[0]  # [kv_heads][n * g][d]
        return o.view(hkv, n, g, d).transpose(0, 1).reshape(n, c.num_attention_heads * d)

    def _attention_one(self, q, k, v, start):
        """_attention of one query with one query head per kv head (the token
        after a restore, every decode step): a matrix-vector product per head
        (BLAS sgemv), which torch's bmm does ~2x slower for one row (restored
        TTFT of 2,048 tokens, 124m: median 41 vs 49 ms over four runs each,
        docs/BENCHMARKS.md)."""
        c = self.config
        hkv, d, seen = c.num_key_value_heads, c.head_dim, start + 1
        qh = q.view(hkv, d)
        s = torch.empty(hkv, seen)
        for h in range(hkv):
            torch.mv(k[h, :seen], qh[h], out=s[h])
        s.mul_(self._scale)
        if self.sliding_window > 0:  # the query at `start` sees keys (start - window, start]
            s[:, :max(0, seen - self.sliding_window)] = float("-inf")
        p = torch.softmax(s, dim=-1)
        o = torch.empty(hkv, d)
        for h in range(hkv):
            torch.mv(v[h, :seen].t(), p[h], out=o[h])
        return o.view(1, hkv * d)

    def _workspace(self, tokens):
        """self._kv_work with room for `tokens` positions (grown by whole pages)."""
        if self._kv_work.shape[2] < tokens:
            tpp = self.cache.tokens_per_page
            c = self.config
            self._kv_work = torch.empty(2, c.num_key_value_heads, -(-tokens // tpp) * tpp,
                                        c.head_dim)
        return self._kv_work

    # -- forward -------------------------------------------------------------
    def _check(self, seq, tokens):
        c = self.config
        if not self.cache.has_sequence(seq):
            raise KvCacheError(f"forward: no sequence {seq}")
        if len(tokens) == 0:
            raise ModelError(f"forward: empty chunk for sequence {seq}")
        end = self.cache.length(seq) + len(tokens)
        if end > c.max_position_embeddings:
            raise ModelError(f"forward: sequence {seq} would reach {end} tokens, past "
                             f"max_position_embeddings {c.max_position_embeddings}")
        for i, t in enumerate(tokens):
            if not isinstance(t, (int, np.integer)) or isinstance(t, bool) or not (
                    0 <= t < c.vocab_size):
                raise ModelError(f"forward: token {t!r} at index {i} is outside the vocabulary "
                                 f"({c.vocab_size})")

    def _layer(self, l, seq, start, x, cos, sin, gate):
        c, lw = self.config, self.w.layers[l]
        n, hkv, d = x.shape[0], c.num_key_value_heads, c.head_dim
        h = self._rms_norm(x, lw.input_norm)
        q = self._rope(_add_bias(_linear(h, lw.q_proj), lw.q_bias), c.num_attention_heads, cos, sin)
        k = self._rope(_add_bias(_linear(h, lw.k_proj), lw.k_bias), hkv, cos, sin)
        v = _add_bias(_linear(h, lw.v_proj), lw.v_bias)
        if gate is not None:
            gate(l)  # a layer-wise restore: layer l of the restored pages is in place after
        self.cache.scatter(seq, l, start, k.view(n, hkv, d), v.view(n, hkv, d))
        if self.attention == "kernel":
            a = self.cache.attention(seq, l, start, q, c.num_attention_heads, self._scale,
                                     self.sliding_window)
        else:
            kk, vv = self.cache.gather(seq, l, start + n, self._workspace(start + n))  # page dtype
            a = self._attention(q, kk, vv, start)
        x = _add_bias(_linear_acc(a, lw.o_proj, x), lw.o_bias)
        h = self._rms_norm(x, lw.post_norm)
        f = self._swiglu(_add_bias(_linear(h, lw.gate_proj), lw.gate_bias),
                         _add_bias(_linear(h, lw.up_proj), lw.up_bias))
        return _add_bias(_linear_acc(f, lw.down_proj, x), lw.down_bias)

    @torch.no_grad()
    def forward(self, seq, tokens, all_logits=False, layer_gate=None):
        """Appends `tokens` to sequence `seq`: computes their K/V into the cache and
        returns the logits of the last token ([vocab]), or of every token
        ([n][vocab]) with all_logits. On error the sequence length is unchanged."""
        self._check(seq, tokens)
        tokens = [int(t) for t in tokens]
        c, start, n = self.config, self.cache.length(seq), len(tokens)
        self.cache.reserve(seq, n)
        try:
            x = self.w.embed[torch.tensor(tokens, dtype=torch.long)]
            cos, sin = self._rope_table(start, start + n)
            for l in range(c.num_hidden_layers):
                x = self._layer(l, seq, start, x, cos, sin, layer_gate)
        except BaseException:
            self.cache.truncate(seq, self.cache.length(seq))  # give back the reserved pages
            raise
        self.cache.commit(seq, n)
        self.tokens_computed += n
        rows = x if all_logits else x[-1:]
        logits = _linear(self._rms_norm(rows, self.w.final_norm), self.w.lm_head_or_embed())
        return logits if all_logits else logits[0]


def greedy(logits):
    """Index of the largest logit, the lowest on ties (as the C++ Argmax)."""
    return int(torch.argmax(logits).item())
