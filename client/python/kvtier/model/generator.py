# Generator: prompt in, tokens out, with prefix reuse through kvtierd when a
# PrefixStore is given — the C++ Generator's steps (client/decoder/generator.cc):
# restore the cached prefix, prefill only the rest, first token (TTFT), PUT
# the completed pages, decode (PUTting each page decode completes). Greedy
# decoding only. Store failures never fail generation: reuse is turned off
# for the call and stats.reuse_note says why.
import dataclasses
import time

import kvtier

from .llama import greedy
from .paged_kv import KvCacheError

__all__ = ["GenerateStats", "GenerateResult", "Generator", "bytes_to_text"]


@dataclasses.dataclass
class GenerateStats:
    prompt_tokens: int = 0
    restored_tokens: int = 0   # K/V copied in from kvtierd
    computed_tokens: int = 0   # prompt tokens prefilled here (prompt - restored)
    prefill_forward_tokens: int = 0  # tokens the model's forward really ran during prefill
    new_tokens: int = 0
    pages_put: int = 0
    pages_deduplicated: int = 0
    pages_not_stored: int = 0
    restored_from: list = dataclasses.field(default_factory=list)  # tier of each restored page
    layerwise: bool = False
    layer_wait_ms: float = 0.0
    redone_tokens: int = 0
    restore_ms: float = 0.0    # LOOKUP + GET
    ttft_ms: float = 0.0       # start to first token (restore + prefill + sample)
    put_ms: float = 0.0
    decode_s: float = 0.0
    reuse_note: str = ""
    # Why generation stopped before max_new_tokens other than at EOS (the
    # sequence reached max_position_embeddings); empty otherwise.
    stop_note: str = ""

    def decode_tokens_per_s(self):
        return (self.new_tokens - 1) / self.decode_s if self.decode_s > 0 and self.new_tokens > 1 else 0.0


@dataclasses.dataclass
class GenerateResult:
    tokens: list
    stats: GenerateStats


def _ms_since(t):
    return (time.perf_counter() - t) * 1e3


class Generator:
    """`model` is a LlamaModel; `store` a PrefixStore over the model's cache, or None."""

    def __init__(self, model, store=None):
        self.model, self.store = model, store

    def _publish(self, seq, tokens, stats):
        if self.store is None or stats.reuse_note:
            return
        t0 = time.perf_counter()
        try:
            r = self.store.publish(seq, tokens)
        except kvtier.Error as e:
            stats.reuse_note = f"PUT failed: {e}"
            return
        finally:
            stats.put_ms += _ms_since(t0)
        stats.pages_put += r.stored
        stats.pages_deduplicated += r.deduplicated
        stats.pages_not_stored += r.not_stored

    def _prefill(self, seq, prompt, layerwise, stats):
        cache = self.model.cache
        if self.store is not None and layerwise:
            return self._prefill_layerwise(seq, prompt, stats)
        if self.store is not None:
            t0 = time.perf_counter()
            try:
                r = self.store.restore(seq, prompt)
                stats.restored_tokens, stats.restored_from = r.tokens, r.tiers
            except (kvtier.Error, KvCacheError) as e:  # e.g. no room for the hits: compute
                stats.reuse_note = f"restore failed: {e}"
                cache.truncate(seq, 0)
            stats.restore_ms = _ms_since(t0)
        stats.computed_tokens = stats.prompt_tokens - stats.restored_tokens
        return self.model.forward(seq, prompt[stats.restored_tokens:])

    def _prefill_layerwise(self, seq, prompt, stats):
        stats.layerwise = True
        try:
            pending = self.store.start_restore(seq, prompt)
        except (kvtier.Error, KvCacheError) as e:
            stats.reuse_note = f"restore failed: {e}"
            self.model.cache.truncate(seq, 0)
            stats.computed_tokens = stats.prompt_tokens
            return self.model.forward(seq, prompt)
        planned = pending.planned_tokens
        logits, error = None, None
        try:
            logits = self.model.forward(seq, prompt[planned:], layer_gate=pending.wait_layer)
        except kvtier.Error as e:  # the GET failed under the pass: redone below
            error = e
        try:
            r = pending.finish()
            stats.restored_tokens, stats.restored_from = r.tokens, r.tiers
        except kvtier.Error as e:
            stats.reuse_note = f"restore failed: {e}"
            stats.restored_tokens = 0
        stats.restore_ms, stats.layer_wait_ms = pending.get_ms, pending.wait_ms
        stats.computed_tokens = stats.prompt_tokens - stats.restored_tokens
        if logits is not None and error is None and stats.restored_tokens == planned:
            return logits
        # The GET failed or came back short: the pass read pages that never
        # arrived; finish() truncated the sequence to what did. Compute the rest.
        stats.redone_tokens = stats.prompt_tokens - planned if error is None else 0
        return self.model.forward(seq, prompt[stats.restored_tokens:])

    def generate(self, prompt, max_new_tokens=32, stop_at_eos=True, layerwise=False):
        """Runs `prompt` (token ids) in a fresh sequence and removes it at the end.
        Reaching max_position_embeddings ends generation like EOS: the tokens so
        far are returned and stats.stop_note says why (a prompt too long to
        prefill is a ModelError)."""
        prompt = [int(t) for t in prompt]
        if not prompt:
            raise ValueError("generate: empty prompt")
        cache, model = self.model.cache, self.model
        stats = GenerateStats(prompt_tokens=len(prompt))
        if self.store is None:
            stats.reuse_note = "no daemon: every prompt token is computed"
        seq = cache.add_sequence()
        out, tokens = [], list(prompt)
        try:
            start = time.perf_counter()
            before = model.tokens_computed
            logits = self._prefill(seq, prompt, layerwise, stats)
            stats.prefill_forward_tokens = model.tokens_computed - before
            nxt = greedy(logits) if max_new_tokens > 0 else 0
            if max_new_tokens > 0:
                out.append(nxt)
            stats.ttft_ms = _ms_since(start)
            self._publish(seq, tokens, stats)
            eos, tpp = model.config.eos_token_id, cache.tokens_per_page
            max_positions = model.config.max_position_embeddings
            decode_start, put_before = time.perf_counter(), stats.put_ms
            while len(out) < max_new_tokens and not (stop_at_eos and eos >= 0 and nxt == eos):
                if cache.length(seq) >= max_positions:  # nxt would need position max_positions
                    stats.stop_note = (f"stopped after {len(out)} new tokens: the sequence reached "
                                       f"max_position_embeddings ({max_positions})")
                    break
                tokens.append(nxt)
                nxt = greedy(model.forward(seq, [nxt]))
                out.append(nxt)
                if cache.length(seq) % tpp == 0:
                    self._publish(seq, tokens, stats)
            stats.decode_s = (_ms_since(decode_start) - (stats.put_ms - put_before)) / 1e3
            stats.new_tokens = len(out)
        finally:
            cache.remove_sequence(seq)
            if self.store is not None:
                self.store.forget(seq)
        return GenerateResult(out, stats)


def bytes_to_text(tokens):
    """Token ids as text: bytes for ids < 256 (non-printable ones escaped), "<id>"
    for the rest (the C++ BytesToText)."""
    s = []
    for t in tokens:
        if t >= 256:
            s.append(f"<{t}>")
        elif t == 10 or 0x20 <= t < 0x7F:
            s.append(chr(t))
        else:
            s.append(f"\\x{t:02x}")
    return "".join(s)
