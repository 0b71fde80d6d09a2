# The scheduler half of KvtierConnector (vLLM v0.11.1 call sequence per step:
# get_num_new_matched_tokens -> update_state_after_alloc -> build_connector_meta;
# request_finished at the end). It never blocks on the daemon: lookups are
# asynchronous and leased, and the counts it gives are of leased pages only.
from dataclasses import dataclass, field
from typing import Any, List, Optional

from .core import LeasedLookups


@dataclass
class PageSpec:
    """One kvtier page in the engine's terms (picklable: it travels in the
    step's metadata). block_hash: the engine's hash of the page's last block;
    parent_hash: the previous page's (None at a chain start); blocks: the
    engine blocks to write (loads) or read (saves); skip: leading blocks a
    load leaves alone (computed locally)."""
    block_hash: Any
    parent_hash: Any
    blocks: List[int]
    skip: int = 0


def _resumed(cached, i, req_id):
    """Whether a cached request resumes from preemption (its new_block_ids are
    then all its blocks). vLLM v0.11.1 says so in a list of flags,
    `resumed_from_preemption`; later versions in a set of ids,
    `resumed_req_ids`, keeping the list for a while as a deprecated property
    that warns on every read. The set is asked first, so the property is
    only read where it is the field."""
    ids = getattr(cached, "resumed_req_ids", None)
    if ids is not None:
        return req_id in ids
    return bool(cached.resumed_from_preemption[i])


@dataclass
class _Req:
    request: Any
    block_ids: List[int] = field(default_factory=list)
    saved_pages: int = 0  # pages [0, saved_pages) are in kvtier or on their way
    key_cache: Optional[tuple] = None  # (first page, pages, chains)


class SchedulerSide:
    """State of the requests the scheduler has shown the connector."""

    def __init__(self, cfg, keyspace, block_size, lookup_client, make_meta):
        self.cfg, self.keyspace, self.block_size = cfg, keyspace, block_size
        self.k = cfg.blocks_per_page
        self.tpp = block_size * self.k
        self._lookups = LeasedLookups(lookup_client, cfg.lease_ms, cfg.lookup_timeout_ms)
        self._make_meta = make_meta
        self._reqs = {}
        self._matched = {}  # req id -> (first page, end page, locally computed tokens)
        self._loads = []  # (req id, [PageSpec]) for the next metadata
        self._async_loads = set()  # req ids whose load between steps is not done yet

    def _track(self, request):
        st = self._reqs.get(request.request_id)
        if st is None:
            st = self._reqs[request.request_id] = _Req(request)
        st.request = request
        return st

    def _page_hashes(self, request):
        """The engine's hash of the last block of every full page."""
        h = request.block_hashes
        return [h[(i + 1) * self.k - 1] for i in range(len(h) // self.k)]

    def _chains(self, st, first, hashes):
        if st.key_cache is None or st.key_cache[:2] != (first, len(hashes)):
            chains = [self.keyspace.keys(hashes[first:], r) for r in range(self.keyspace.tp_size)]
            st.key_cache = (first, len(hashes), chains)
        return st.key_cache[2]

    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        st = self._track(request)
        hashes = self._page_hashes(request)
        first = num_computed_tokens // self.tpp
        if len(hashes) <= first:
            self._matched[request.request_id] = (first, first, num_computed_tokens)
            return 0, False
        hits = self._lookups.poll(request.request_id, self._chains(st, first, hashes))
        if hits is None:
            return None, False  # vLLM asks again next step
        end = first + hits
        self._matched[request.request_id] = (first, end, num_computed_tokens)
        # vLLM must compute at least the prompt's last token itself.
        external = min(end * self.tpp, request.num_tokens - 1) - num_computed_tokens
        if external <= 0:
            return 0, False
        return external, self.cfg.load_async

    def update_state_after_alloc(self, request, blocks, num_external_tokens):
        st = self._track(request)
        st.block_ids = list(blocks.get_block_ids()[0])
        self._lookups.forget(request.request_id)
        matched = self._matched.pop(request.request_id, None)
        if matched is None:
            return
        first, end, local = matched
        st.saved_pages = max(st.saved_pages, end)  # the lookup found them stored
        if num_external_tokens <= 0:
            return
        hashes = self._page_hashes(request)
        last_block = -(-(local + num_external_tokens) // self.block_size)  # blocks to fill
        pages = []
        for i in range(first, end):
            blocks = st.block_ids[i * self.k:min((i + 1) * self.k, last_block)]
            if blocks:
                skip = max(0, local // self.block_size - i * self.k)
                pages.append(PageSpec(hashes[i], None, blocks, skip))
        self._loads.append((request.request_id, pages))

    def build_connector_meta(self, scheduler_output):
        loads, self._loads = self._loads, []
        if self.cfg.load_async:
            self._async_loads.update(req_id for req_id, _ in loads)
        saves = []
        sched = scheduler_output.num_scheduled_tokens
        for new in scheduler_output.scheduled_new_reqs:
            st = self._reqs.get(new.req_id)
            if st is not None:
                st.block_ids = list(new.block_ids[0])
                self._add_saves(saves, st, new.num_computed_tokens + sched.get(new.req_id, 0))
        cached = scheduler_output.scheduled_cached_reqs
        for i, req_id in enumerate(cached.req_ids):
            st = self._reqs.get(req_id)
            if st is None:
                continue
            new_ids = cached.new_block_ids[i]
            if _resumed(cached, i, req_id):
                st.block_ids = list(new_ids[0]) if new_ids else []
            elif new_ids:
                st.block_ids.extend(new_ids[0])
            self._add_saves(saves, st, cached.num_computed_tokens[i] + sched.get(req_id, 0))
        return self._make_meta(loads, saves, self.cfg.load_async)

    def _add_saves(self, saves, st, computed_tokens):
        """Queues the pages this step completes (their KV is written by its
        forward pass; the worker copies them out in wait_for_save)."""
        hashes = self._page_hashes(st.request)
        full = min(computed_tokens // self.tpp, len(hashes), len(st.block_ids) // self.k)
        if full <= st.saved_pages:
            return
        specs = [PageSpec(hashes[i], hashes[i - 1] if i else None,
                          st.block_ids[i * self.k:(i + 1) * self.k])
                 for i in range(st.saved_pages, full)]
        saves.append((st.request.request_id, specs))
        st.saved_pages = full

    def update_connector_output(self, out):
        for req_id in (out.finished_recving or ()):
            self._async_loads.discard(req_id)
        for req_id in (out.finished_sending or ()):
            self._async_loads.discard(req_id)
        self._on_load_errors(getattr(out, "invalid_block_ids", None))

    def _on_load_errors(self, invalid_block_ids):
        """Pages whose load failed are recomputed by vLLM; save them again."""
        if not invalid_block_ids:
            return
        for st in self._reqs.values():
            bad = [i for i, b in enumerate(st.block_ids) if b in invalid_block_ids]
            if bad:
                st.saved_pages = min(st.saved_pages, bad[0] // self.k)

    def request_finished(self, request, block_ids):
        self._reqs.pop(request.request_id, None)
        self._matched.pop(request.request_id, None)
        self._lookups.forget(request.request_id)
        # Saves copy out during the step, so vLLM may free the blocks now --
        # unless a load between steps may still write them: then they stay
        # until the worker reports the request in finished_sending.
        return request.request_id in self._async_loads, None
