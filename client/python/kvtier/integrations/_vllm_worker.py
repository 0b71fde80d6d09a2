# The worker half of KvtierConnector (vLLM v0.11.1 call sequence per step:
# bind_connector_metadata -> start_load_kv -> wait_for_layer_load per layer ->
# forward -> save_kv_layer per layer -> wait_for_save -> get_finished ->
# get_block_ids_with_load_errors). GETs and PUTs run on one transfer thread,
# saves after the loads of the same step; failed loads are reported per block.
import logging
import re

import kvtier

from .core import Job, LoadTracker, PageTask, TransferWorker
from .paging import DirectKv, PagedKv, PageMover

log = logging.getLogger("kvtier.integrations.vllm")


def layer_order(names):
    """vLLM's layer names ("model.layers.12.self_attn.attn") in layer order:
    by the integers in them when those tell every layer apart, else as given.
    Every worker and every restart must lay out pages in the same order."""
    names = list(names)
    nums = [tuple(int(x) for x in re.findall(r"\d+", n)) for n in names]
    if all(nums) and len(set(nums)) == len(nums):
        return [n for _, n in sorted(zip(nums, names))]
    return names


class WorkerSide:
    def __init__(self, cfg, keyspace, rank, expected_layout, kv_dims=None):
        """kv_dims(layer_name, shape) -> the dims string of the layers' KV
        tensors (the attention backend's layout); None: cfg.kv_dims as given."""
        self.cfg, self.keyspace, self.rank, self.expected = cfg, keyspace, rank, expected_layout
        self._kv_dims = kv_dims or (lambda name, shape: cfg.kv_dims)
        self.client = self.mover = self.thread = None
        self.tracker = LoadTracker()
        self.tensors = {}
        self._sync = None  # this step's synchronous load
        self._loading = set()  # req ids with a load between steps in flight
        self._orphans = set()  # ... of which vLLM finished (aborted) the request
        self.stats = {"pages_loaded": 0, "pages_load_failed": 0, "pages_saved": 0,
                      "pages_not_saved": 0}

    def register(self, kv_caches):
        if self.mover is not None:
            raise RuntimeError("register_kv_caches was called twice")
        if not isinstance(kv_caches, dict) or not kv_caches:
            raise TypeError("register_kv_caches takes a non-empty dict of layer name -> tensor")
        names = layer_order(kv_caches)
        first = kv_caches[names[0]]
        dims = self._kv_dims(names[0], tuple(getattr(first, "shape", ())))
        kv = PagedKv([kv_caches[n] for n in names], dims, self.cfg.blocks_per_page)
        if self.expected is not None and kv.layout != self.expected:
            raise ValueError(f"the registered KV caches make pages of {kv.layout}, but the "
                             f"model config says {self.expected}: keys would not match")
        self.client = kvtier.Client(self.cfg.endpoint, tenant=self.cfg.tenant,
                                    token=self.cfg.token, layout=kv.layout,
                                    timeout_ms=self.cfg.timeout_ms,
                                    client_name=f"vllm-worker-{self.rank}")
        self.mover = PageMover(self.client, kv, self.cfg.staging_pages)
        if self.cfg.direct and kv.device.type == "cpu":
            # Before the engine runs a step: sharing copies the tensors' pages
            # and maps shared memory over them (a write meanwhile is lost).
            try:
                self.mover.direct = DirectKv(self.client, kv, [kv_caches[n] for n in names])
                log.info("kvtier: KV caches registered in place; pages move in one copy")
            except (ValueError, kvtier.Error) as e:
                log.warning("kvtier: KV caches not registered in place (%s); pages move through "
                            "the staging buffers", e)
        self.thread = TransferWorker(f"kvtier-vllm-{self.rank}")
        self.tensors = {n: kv_caches[n] for n in names}

    def _require(self):
        if self.mover is None:
            raise RuntimeError("KvtierConnector: register_kv_caches was not called")

    def _tasks(self, specs, with_parents=False):
        keys = self.keyspace.keys([s.block_hash for s in specs], self.rank)
        tasks = [PageTask(k, list(s.blocks), s.skip) for k, s in zip(keys, specs)]
        if with_parents:  # saves: each request's pages form one chain
            if specs and specs[0].parent_hash is not None:
                tasks[0].parent = self.keyspace.keys([specs[0].parent_hash], self.rank)[0]
            for prev, t in zip(tasks, tasks[1:]):
                t.parent = prev.key
        return tasks

    def start_load(self, meta):
        self._require()
        self.settle()  # a step that never reached wait_for_layer_load
        if not meta.loads:
            return
        pages, tags = [], []
        for req_id, specs in meta.loads:
            pages += self._tasks(specs)
            tags.append(req_id)
        # Bad block ids raise here, before anything is read or written.
        self.mover.kv.check_pages([p.blocks for p in pages], unique=True, allow_short=True)
        job = self.thread.submit(Job("load", tags, pages, self._load))
        if meta.load_async:
            self._loading.update(tags)
            self.tracker.track(job)
        else:
            self._sync = job

    def _load(self, job):
        failed = set(self.mover.load(job))
        self.stats["pages_load_failed"] += len(failed)
        self.stats["pages_loaded"] += len(job.pages) - len(failed)
        return failed

    def settle(self):
        """Waits for this step's synchronous load; its failures become
        reportable at once."""
        job, self._sync = self._sync, None
        if job is not None:
            chunks = 1 + self.mover.load_calls(len(job.pages))
            self.tracker.settle(job, chunks * self.cfg.timeout_ms / 1000.0 + 5.0)

    def check_layer(self, layer_name, kv_layer):
        self._require()
        t = self.tensors.get(layer_name)
        if t is None:
            raise ValueError(f"save_kv_layer: unknown layer {layer_name!r}")
        if kv_layer is not None and (kv_layer.data_ptr() != t.data_ptr() or
                                     kv_layer.shape != t.shape):
            raise ValueError(f"save_kv_layer({layer_name!r}) got a tensor that is not the "
                             "KV cache registered for that layer")

    def save(self, meta):
        """Copies this step's finished pages out of the KV cache now (the
        engine may reuse their blocks as soon as this returns) and queues
        their PUT behind this step's loads."""
        self._require()
        self.settle()
        pages, tags = [], []
        for req_id, specs in meta.saves:
            pages += self._tasks(specs, with_parents=True)
            tags.append(req_id)
        if self.mover.direct is not None:
            # Pages in the shared KV memory are PUT from the blocks now: the
            # engine may reuse the blocks once the daemon has read them.
            direct, staged = [], []
            for p in pages:
                (direct if self.mover.direct.fits(p.blocks) else staged).append(p)
            if direct:
                lost = self.mover.put_direct(direct)
                self.stats["pages_saved"] += len(direct) - len(lost)
                self.stats["pages_not_saved"] += len(lost)
            pages = staged
        queued = 0
        try:
            # Waits at most one daemon call for staging slots: a slow or dead
            # daemon costs the engine its cache, never its step.
            for chunk, slots in self.mover.stage(pages, self.cfg.timeout_ms / 1000.0):
                self.thread.submit(Job("save", tags, chunk,
                                       lambda job, c=chunk, s=slots: self._put(c, s)))
                queued += len(chunk)
        except TimeoutError as e:
            log.warning("kvtier: %d pages not saved: %s", len(pages) - queued, e)
            self.stats["pages_not_saved"] += len(pages) - queued

    def _put(self, chunk, slots):
        lost = self.mover.put_staged(chunk, slots)
        self.stats["pages_saved"] += len(chunk) - len(lost)
        self.stats["pages_not_saved"] += len(lost)
        return lost

    def finished(self, finished_req_ids=()):
        """(finished_sending, finished_recving). A request vLLM finished while
        its load was in flight kept its blocks (request_finished said so): it
        is reported as sending once the load can no longer write them."""
        self.settle()
        self._orphans |= set(finished_req_ids or ()) & self._loading
        sending, recving = set(), set()
        for req_id in (r for tags in self.tracker.take_finished() for r in tags):
            self._loading.discard(req_id)
            if req_id in self._orphans:
                self._orphans.discard(req_id)
                sending.add(req_id)
            else:
                recving.add(req_id)
        return sending, recving

    def failed_blocks(self):
        self.settle()
        return self.tracker.take_failed_blocks()

    def drain(self, timeout=30.0):
        """Waits for every queued transfer (tests, shutdown)."""
        if self.thread is not None:
            self.thread.submit(Job("drain", "drain", [], lambda job: ())).wait(timeout)

    def close(self):
        if self.thread is not None:
            self.drain()
            self.thread.close()
        if self.mover is not None:
            self.mover.close()
        if self.client is not None:
            self.client.close()
