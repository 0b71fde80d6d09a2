# PrefixStore: the Python model's link to kvtierd, the same protocol as the
# C++ decoder's (client/decoder/prefix_store.cc, layerwise_restore.cc): the
# KV arena (a kvtier.ShmBuffer) is registered once; restore() LOOKUPs a
# prompt's full pages and GETs the leading hits straight into the sequence's
# pages before prefill; publish() PUTs every newly completed page. Keys are
# kvtier.page_keys over the tokens, rooted at the model fingerprint, so pages
# stored by kvtier-generate and by this model are the same pages.
# Not thread-safe (one session; a layer-wise restore owns it until finish()).
import dataclasses
import threading
import time

import kvtier

__all__ = ["RestoreResult", "PublishResult", "PrefixStore", "PendingRestore"]


@dataclasses.dataclass
class RestoreResult:
    tokens: int = 0            # tokens whose K/V came from the daemon
    pages_looked_up: int = 0   # full prompt pages eligible for reuse
    tiers: list = dataclasses.field(default_factory=list)  # tier of each restored page


@dataclasses.dataclass
class PublishResult:
    stored: int = 0
    deduplicated: int = 0
    not_stored: int = 0


@dataclasses.dataclass
class _Plan:
    pages_looked_up: int = 0
    keys: list = dataclasses.field(default_factory=list)     # the leading hits
    offsets: list = dataclasses.field(default_factory=list)  # their pages in the arena


class PrefixStore:
    """Connects to kvtierd with the cache's layout and registers its arena
    (which must be a kvtier.ShmBuffer). kvtier.Unavailable when no daemon answers."""

    def __init__(self, cache, root, endpoint=None, tenant="default", token="",
                 timeout_ms=10000, client_name="kvtier-python-model"):
        if len(root) != 16:
            raise ValueError(f"root must be 16 bytes (the model fingerprint), got {len(root)}")
        self.cache, self.root = cache, bytes(root)
        self.layout = kvtier.Layout(cache.layers, cache.kv_heads, cache.head_dim,
                                    tokens_per_page=cache.tokens_per_page, dtype=cache.dtype)
        if self.layout.page_bytes != cache.page_bytes:
            raise ValueError(f"kvtier page of {self.layout.page_bytes} bytes but the cache's "
                             f"is {cache.page_bytes}")
        self.client = kvtier.Client(endpoint, tenant=tenant, token=token, layout=self.layout,
                                    timeout_ms=timeout_ms, client_name=client_name)
        try:
            self.buffer_id = self.client.register(cache.buffer)
        except BaseException:
            self.client.close()
            raise
        self._published = {}  # seq -> keys of its pages stored so far, in order

    def close(self):
        self.client.close()  # the daemon drops the registration with the session

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def keys(self, tokens):
        """Page keys of every full block of `tokens` (the C++ DeriveChain from the root)."""
        return kvtier.page_keys(self.layout, list(tokens), root=self.root)

    # -- restore -------------------------------------------------------------
    def _plan(self, seq, prompt):
        """LOOKUP, then reserves the leading hits' pages in the empty sequence."""
        if self.cache.length(seq) != 0:
            raise kvtier.FailedPrecondition(f"restore: sequence {seq} is not empty")
        tpp = self.cache.tokens_per_page
        p = _Plan(pages_looked_up=len(prompt) // tpp)
        if p.pages_looked_up == 0:
            return p
        keys = self.keys(prompt[:p.pages_looked_up * tpp])
        hits = self.client.lookup(keys).hits
        if hits == 0:
            return p
        self.cache.reserve(seq, hits * tpp)
        table = self.cache.block_table(seq)
        p.keys = keys[:hits]
        p.offsets = [self.cache.page_offset(table[i]) for i in range(hits)]
        return p

    def _settle(self, seq, prompt_tokens, plan, tiers, committed):
        """Keeps the leading pages that arrived; at least the prompt's last token is
        left to compute (its logits start generation)."""
        tpp = self.cache.tokens_per_page
        got = 0
        while got < min(len(tiers), len(plan.keys)) and tiers[got] is not None:
            got += 1
        r = RestoreResult(tokens=min(got * tpp, prompt_tokens - 1),
                          pages_looked_up=plan.pages_looked_up, tiers=list(tiers[:got]))
        if not committed:
            self.cache.commit(seq, got * tpp)
        if not committed or got < len(plan.keys):
            self.cache.truncate(seq, r.tokens)
        self._published[seq] = list(plan.keys[:got])  # restored pages are stored already
        return r

    def restore(self, seq, prompt):
        """For an empty sequence: GETs the leading cached full pages of `prompt`
        into its pages; the sequence then holds RestoreResult.tokens tokens."""
        prompt = list(prompt)
        plan = self._plan(seq, prompt)
        if not plan.keys:
            return RestoreResult(pages_looked_up=plan.pages_looked_up)
        try:
            tiers = self.client.get(plan.keys, self.buffer_id, plan.offsets)
        except BaseException:
            self.cache.truncate(seq, 0)
            raise
        return self._settle(seq, len(prompt), plan, tiers, committed=False)

    def start_restore(self, seq, prompt):
        """The layer-wise restore: LOOKUP, record the hits' tokens in the sequence
        now, and GET on a helper thread layer by layer. Run the forward pass of
        the rest with PendingRestore.wait_layer as its layer gate, then finish()."""
        prompt = list(prompt)
        start = time.monotonic()
        plan = self._plan(seq, prompt)
        hit_tokens = len(plan.keys) * self.cache.tokens_per_page
        planned = min(hit_tokens, len(prompt) - 1)
        if hit_tokens:
            try:
                self.cache.commit(seq, hit_tokens)
                self.cache.truncate(seq, planned)
            except BaseException:
                self.cache.truncate(seq, 0)
                raise
        return PendingRestore(self, seq, len(prompt), planned, plan, start)

    # -- publish -------------------------------------------------------------
    def publish(self, seq, tokens):
        """PUTs the sequence's full pages not yet stored; `tokens` are its tokens
        (at least length(seq) of them). Pages rewritten after a rollback are
        noticed by their keys and stored again."""
        out, tpp = PublishResult(), self.cache.tokens_per_page
        length = self.cache.length(seq)
        if len(tokens) < length:
            raise ValueError(f"publish: {len(tokens)} tokens for a sequence of {length}")
        full = length // tpp
        pub = self._published.setdefault(seq, [])
        if full == 0:
            return out
        keys = self.keys(list(tokens[:full * tpp]))
        done = 0
        while done < min(len(pub), len(keys)) and pub[done] == keys[done]:
            done += 1
        if done >= full:
            return out
        table = self.cache.block_table(seq)
        offsets = [self.cache.page_offset(table[i]) for i in range(done, full)]
        parent = self.root if done == 0 else keys[done - 1]
        r = self.client.put(keys[done:full], self.buffer_id, offsets, parent=parent)
        out = PublishResult(r.stored, r.deduplicated, r.not_stored)
        # Only the leading pages kept: a page may fail anywhere in the chain.
        self._published[seq] = keys[:done + r.leading_kept]
        return out

    def forget(self, seq):
        self._published.pop(seq, None)


class PendingRestore:
    """A layer-wise GET in flight. wait_layer runs on the model's thread; the
    helper thread only advances the layer count."""

    def __init__(self, store, seq, prompt_tokens, planned, plan, start):
        self._store, self._seq, self._prompt_tokens = store, seq, prompt_tokens
        self.planned_tokens, self._plan, self._start = planned, plan, start
        self._cv = threading.Condition()
        self._layers, self._done, self._tiers, self._error = 0, False, None, None
        self.wait_ms, self.get_ms, self._finished = 0.0, 0.0, False
        self._thread = None
        if plan.keys:
            self._thread = threading.Thread(target=self._run, name="kvtier-layerwise", daemon=True)
            self._thread.start()

    def _on_layer(self, layer):
        with self._cv:
            self._layers = layer + 1
            self._cv.notify_all()

    def _run(self):
        s, tiers, error = self._store, None, None
        try:
            tiers = s.client.get_layers(self._plan.keys, s.buffer_id, self._plan.offsets,
                                        s.cache.buffer, 0, self._on_layer)
        except BaseException as e:  # reported by wait_layer / finish on the model's thread
            error = e
        with self._cv:
            self._tiers, self._error, self._done = tiers, error, True
            self.get_ms = (time.monotonic() - self._start) * 1e3
            self._cv.notify_all()

    def wait_layer(self, layer):
        """Blocks until layer `layer` of every restored page is in the arena."""
        if not self._plan.keys:
            return
        t0 = time.monotonic()
        with self._cv:
            self._cv.wait_for(lambda: self._layers > layer or self._done)
            self.wait_ms += (time.monotonic() - t0) * 1e3
            if self._layers > layer:
                return
            why = f"failed: {self._error}" if self._error else (
                f"ended after {self._layers} layers, before layer {layer}")
        raise kvtier.Aborted(f"layer-wise GET {why}")

    def finish(self):
        """Waits for the GET's reply and settles the sequence (see the C++
        PendingRestore::Finish): truncated to what arrived, or to 0 on failure."""
        if self._finished:
            raise kvtier.FailedPrecondition("layer-wise restore: finish called twice")
        self._finished = True
        if self._thread is not None:
            self._thread.join()
        if not self._plan.keys:
            return RestoreResult(pages_looked_up=self._plan.pages_looked_up)
        if self._error is not None:
            self._store.cache.truncate(self._seq, 0)
            raise self._error
        return self._store._settle(self._seq, self._prompt_tokens, self._plan, self._tiers,
                                   committed=True)
