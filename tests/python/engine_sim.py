# Test helper: drives kvtier's vLLM connector with the call sequence of vLLM
# v0.11.1's Scheduler and GPUModelRunner (prefill only, no local prefix cache),
# over real per-layer KV tensors shaped as the chosen attention backend shapes
# them (FlashAttention or FlashInfer), with the classes of one vLLM stand-in
# (tests/python/standins/vllm_v*.py, installed by the caller). Its "model"
# writes KV that depends on the whole token prefix, as a real one does, so a
# restored page can be checked byte for byte against a recomputation.
import hashlib
import pickle
from types import SimpleNamespace

import torch


NONE_HASH = hashlib.sha256(b"PYTHONHASHSEED=0").digest()  # vLLM seeds its chain like this


def vllm_block_hashes(tokens, block_size, parent=NONE_HASH):
    """vLLM v0.11 `request.block_hashes` with --prefix-caching-hash-algo sha256:
    sha256(pickle((parent hash, block token ids, extra keys))) per full block."""
    out = []
    for i in range(len(tokens) // block_size):
        blk = tuple(tokens[i * block_size:(i + 1) * block_size])
        parent = hashlib.sha256(pickle.dumps((parent, blk, None),
                                             protocol=pickle.HIGHEST_PROTOCOL)).digest()
        out.append(parent)
    return out


class SimRequest:
    def __init__(self, req_id, tokens, block_size):
        self.request_id, self.prompt_token_ids = req_id, list(tokens)
        self.all_token_ids = list(tokens)
        self.num_prompt_tokens, self.num_computed_tokens = len(tokens), 0
        self.block_hashes = vllm_block_hashes(tokens, block_size)

    @property
    def num_tokens(self):
        return len(self.all_token_ids)


class SimModelConfig:
    def __init__(self, layers, kv_heads, head_dim, dtype, model="sim/llama-gqa"):
        self.model, self.dtype = model, dtype
        self._layers, self._kv_heads, self._head_dim = layers, kv_heads, head_dim

    def get_num_layers(self, parallel_config):
        return self._layers

    def get_num_kv_heads(self, parallel_config):
        return self._kv_heads

    def get_head_size(self):
        return self._head_dim


def sim_vllm_config(layers=4, kv_heads=2, head_dim=64, block_size=16, dtype=torch.float16,
                    extra=None, engine=None, backend=None):
    """A VllmConfig with what the connector reads. With `engine` (a vLLM
    stand-in) and `backend` (its attention backend class), every layer is
    registered in static_forward_context as vLLM registers Attention layers."""
    layers_ctx = {}
    if backend is not None:
        layers_ctx = {f"model.layers.{i}.self_attn.attn": engine.Attention(backend)
                      for i in range(layers)}
    return SimpleNamespace(
        compilation_config=SimpleNamespace(static_forward_context=layers_ctx),
        model_config=SimModelConfig(layers, kv_heads, head_dim, dtype),
        cache_config=SimpleNamespace(block_size=block_size, cache_dtype="auto"),
        parallel_config=SimpleNamespace(tensor_parallel_size=1, pipeline_parallel_size=1, rank=0),
        kv_transfer_config=SimpleNamespace(kv_connector="KvtierConnector",
                                           kv_connector_module_path="kvtier.integrations.vllm",
                                           kv_role="kv_both", kv_connector_extra_config=extra))


def reference_kv(tokens, pos, layer, kv_heads, head_dim, dtype):
    """The (2, kv_heads, head_dim) KV the sim model gives token `pos`: a
    function of the prefix tokens[:pos+1] and the layer only."""
    h = hashlib.sha256(repr((tokens[:pos + 1], layer)).encode()).digest()
    g = torch.Generator().manual_seed(int.from_bytes(h[:8], "little"))
    return torch.randn(2, kv_heads, head_dim, generator=g).to(dtype)


class VllmSim:
    """One scheduler-side and one worker-side KvtierConnector in one process,
    with the classes of `engine` (a vLLM stand-in module) and KV tensors of
    `backend`'s shape (default: FlashAttention's)."""

    def __init__(self, vllm_config, engine, num_blocks=64, backend=None):
        from kvtier.integrations import vllm as kv_vllm  # against the installed stand-in
        self.cfg, self.v = vllm_config, engine
        backend = backend or engine.FlashAttentionBackend
        mc, self.bs = vllm_config.model_config, vllm_config.cache_config.block_size
        self.H, self.D, self.dtype = mc._kv_heads, mc._head_dim, mc.dtype
        self.names = [f"model.layers.{i}.self_attn.attn" for i in range(mc._layers)]
        shape = backend.get_kv_cache_shape(num_blocks, self.bs, self.H, self.D)
        self.kv_first = shape[0] == 2 and shape[1] == num_blocks  # FlashAttention: (2, N, ...)
        self.kv = {n: torch.zeros(shape, dtype=self.dtype) for n in self.names}
        self.sched = kv_vllm.KvtierConnector(vllm_config, engine.KVConnectorRole.SCHEDULER)
        self.work = kv_vllm.KvtierConnector(vllm_config, engine.KVConnectorRole.WORKER)
        self.work.register_kv_caches(self.kv)
        self.free = list(range(num_blocks))
        self.waiting, self.loading, self.ready = [], {}, []
        self.blocks, self.computed = {}, {}  # req id -> block ids / positions the model computed
        self.reqs = {}
        self.finished_ids, self.held = set(), set()  # finished since last step; blocks kept

    def slot(self, name, block, pos):
        """The (2, kv_heads, head_size) KV of one token slot, as a view."""
        t = self.kv[name]
        return t[:, block, pos] if self.kv_first else t[block, :, pos]

    # -- scheduler -------------------------------------------------------------
    def add(self, req):
        self.reqs[req.request_id] = req
        self.waiting.append(req)

    def _alloc(self, req_id, n_tokens):
        have = self.blocks.setdefault(req_id, [])
        while len(have) * self.bs < n_tokens:
            have.append(self.free.pop(0))
        return list(have)

    def _schedule(self, out):
        new, sched = [], {}
        for req in list(self.waiting):
            ext, is_async = self.sched.get_num_new_matched_tokens(req, 0)
            out["matched"][req.request_id] = ext
            if ext is None:
                continue  # vLLM leaves it waiting and asks again next step
            self.waiting.remove(req)
            ids = self._alloc(req.request_id, ext if is_async else req.num_tokens)
            self.sched.update_state_after_alloc(req, self.v.KVCacheBlocks(ids), ext)
            if is_async:
                self.loading[req.request_id] = ext
                continue
            req.num_computed_tokens = ext
            new.append(self.v.NewRequestData(req.request_id, req.prompt_token_ids, (ids,), ext))
            sched[req.request_id] = req.num_tokens - ext
        for req_id, done in self.ready:
            req = self.reqs[req_id]
            ids = self._alloc(req_id, req.num_tokens)
            self.sched.update_state_after_alloc(req, self.v.KVCacheBlocks(ids), 0)
            req.num_computed_tokens = done
            new.append(self.v.NewRequestData(req_id, req.prompt_token_ids, (ids,), done))
            sched[req_id] = req.num_tokens - done
        self.ready = []
        return new, self.v.CachedRequestData(), sched

    # -- worker (the model runner) -----------------------------------------------
    def _forward(self, layer, name, req_id, start, end):
        req, ids = self.reqs[req_id], self.blocks[req_id]
        for p in range(start, end):
            self.slot(name, ids[p // self.bs], p % self.bs)[...] = reference_kv(
                req.all_token_ids, p, layer, self.H, self.D, self.dtype)
            self.computed.setdefault(req_id, set()).add(p)

    def wait_lookups(self):
        assert self.sched.scheduler._lookups.wait_pending(10.0), "lookups still pending"

    def step(self, on_worker_start=None):
        """One engine step; returns what each call answered."""
        out = {"matched": {}, "recving": set(), "sending": set(), "errors": set()}
        finished, self.finished_ids = self.finished_ids, set()
        new, cached, sched = self._schedule(out)
        so = self.v.SchedulerOutput(new, cached, sched, sum(sched.values()))
        meta = self.sched.build_connector_meta(so)
        if on_worker_start is not None:
            on_worker_start()
        self.work.bind_connector_metadata(meta)
        self.work.start_load_kv(None)
        runs = [(n.req_id, n.num_computed_tokens, n.num_computed_tokens + sched[n.req_id])
                for n in new]
        runs += [(r, c, c + sched[r]) for r, c in zip(cached.req_ids, cached.num_computed_tokens)]
        for layer, name in enumerate(self.names):
            self.work.wait_for_layer_load(name)
            for req_id, start, end in runs:
                self._forward(layer, name, req_id, start, end)
            self.work.save_kv_layer(name, self.kv[name], None)
        self.work.wait_for_save()
        # What this version's model runner asks the connector after the step.
        kv_out = self.v.kv_connector_output(self.work, finished)
        out["recving"] = kv_out.finished_recving or set()
        out["sending"] = kv_out.finished_sending or set()
        out["errors"] = getattr(kv_out, "invalid_block_ids", set())
        self.work.clear_connector_metadata()
        self._update_from_output(out, runs)
        return out

    def _update_from_output(self, out, runs):
        """vLLM's reaction: finished loads wake their request; a failed block
        rolls the request back to it, and the model recomputes from there."""
        self.sched.update_connector_output(self.v.KVConnectorOutput(
            finished_sending=out["sending"], finished_recving=out["recving"],
            invalid_block_ids=out["errors"]))
        for req_id in out["sending"]:  # the connector no longer needs them
            self.held.discard(req_id)
            self.free += self.blocks.pop(req_id)
        for req_id in out["recving"] & set(self.loading):
            loaded = self.loading.pop(req_id)
            self.ready.append((req_id, min(loaded, self._first_bad(req_id, out["errors"]))))
        for req_id, _, _ in runs:
            first_bad = self._first_bad(req_id, out["errors"])
            if first_bad < self.reqs[req_id].num_tokens:
                self.recompute(req_id, first_bad)

    def _first_bad(self, req_id, errors):
        bad = [i for i, b in enumerate(self.blocks[req_id]) if b in errors]
        return bad[0] * self.bs if bad else self.reqs[req_id].num_tokens

    def recompute(self, req_id, start):
        """The step vLLM schedules after a failed load: the request again, as a
        cached request from `start` (its saves follow)."""
        req = self.reqs[req_id]
        cached = self.v.CachedRequestData.of([req_id], set(), [None], [start])
        so = self.v.SchedulerOutput([], cached, {req_id: req.num_tokens - start},
                                    req.num_tokens - start)
        meta = self.sched.build_connector_meta(so)
        self.work.bind_connector_metadata(meta)
        self.work.start_load_kv(None)
        for layer, name in enumerate(self.names):
            self.work.wait_for_layer_load(name)
            self._forward(layer, name, req_id, start, req.num_tokens)
        self.work.wait_for_save()
        self.work.clear_connector_metadata()

    def finish(self, req_id):
        """vLLM's _free_request: finished or aborted, waiting, loading or running.
        True when the connector keeps the blocks until it reports the request."""
        self.waiting = [r for r in self.waiting if r.request_id != req_id]
        self.loading.pop(req_id, None)
        self.finished_ids.add(req_id)
        keep, _ = self.sched.request_finished(self.reqs[req_id], self.blocks.get(req_id, []))
        if keep:
            self.held.add(req_id)
        else:
            self.free += self.blocks.pop(req_id, [])
        return keep

    # -- checks -----------------------------------------------------------------
    def tokens_kv(self, req_id, layer, start, end):
        ids, name = self.blocks[req_id], self.names[layer]
        return torch.stack([self.slot(name, ids[p // self.bs], p % self.bs)
                            for p in range(start, end)])

    def expected_kv(self, req_id, layer, start, end):
        toks = self.reqs[req_id].all_token_ids
        return torch.stack([reference_kv(toks, p, layer, self.H, self.D, self.dtype)
                            for p in range(start, end)])

    def close(self):
        self.work.shutdown()
        self.sched.shutdown()
