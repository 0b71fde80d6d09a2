# Engine-agnostic core of the engine connectors: page keys from engine block
# hashes, leased lookups that never block a scheduler, GET/PUT with a per-page
# outcome, transfer jobs on a worker thread and what to report of them. A page
# that did not arrive whole is reported failed (the engine recomputes it) and
# never used. paging.py moves pages between engine blocks and the daemon.
import logging
import queue
import threading
import time
from dataclasses import dataclass
from typing import Optional, Sequence

import kvtier

log = logging.getLogger("kvtier.integrations")


def keys_for_hashes(block_hashes, model_id, layout, blocks_per_page=1):
    """One kvtier key per full page of `block_hashes`: page i's key maps the
    engine's hash of its last block (engines chain block hashes, so it names
    the whole prefix) through kvtier.external_keys, which folds in the model
    identity and the layout."""
    n = len(block_hashes) // blocks_per_page
    last = [block_hashes[(i + 1) * blocks_per_page - 1] for i in range(n)]
    return kvtier.external_keys(last, model_id, layout)


def get_pages(client, keys, buffer_id, offsets, timeout_ms=0, page_runs=None):
    """GET into a registered buffer; one bool per key (a miss leaves its bytes
    untouched), or None when the call failed (daemon gone): then the buffer may
    hold part of any page and none of it may be used. page_runs: scattered
    pages (docs/PROTOCOL.md)."""
    if not keys:
        return []
    try:
        policy = "timeout" if timeout_ms > 0 else "wait"
        tiers = client.get(keys, buffer_id, offsets, policy=policy, timeout_ms=timeout_ms,
                           page_runs=page_runs)
    except kvtier.Error as e:
        log.warning("kvtier GET of %d pages failed: %s", len(keys), e)
        return None
    return [t is not None for t in tiers]


def put_chain(client, keys, buffer_id, offsets, parent=None, page_runs=None):
    """PUT a prefix chain (keys[i]'s parent is keys[i-1]); how many leading
    keys the store now holds (stored or already there)."""
    if not keys:
        return 0
    try:
        r = client.put(keys, buffer_id, offsets, parent=parent, page_runs=page_runs)
    except kvtier.Error as e:
        log.warning("kvtier PUT of %d pages failed: %s", len(keys), e)
        return 0
    if r.not_stored:
        log.info("kvtier kept %d leading pages of %d: %s", r.leading_kept, len(keys),
                 r.not_stored_reason)
    # Only the leading pages count: a page may fail anywhere in the chain
    # (PutReply.page_status), and one past a gap can never be found.
    return r.leading_kept


class LeasedLookups:
    """Scheduler side: how many leading pages kvtier holds for a request, asked
    without blocking. poll() starts a LOOKUP that takes a lease and answers
    None until the daemon replies. With lease_ms > 0 the count is of pages the
    daemon pinned (they cannot be evicted before a GET reads them or the lease
    ends); an answer older than half the lease is asked again."""

    def __init__(self, client, lease_ms=10000, timeout_ms=5000):
        self._client, self.lease_ms, self.timeout_ms = client, lease_ms, timeout_ms
        self._pending = {}  # tag -> (chains, futures, started)
        self._answers = {}  # tag -> (chains, pages, answered at)

    def poll(self, tag, chains):
        """chains: one key list per shard (e.g. per tensor-parallel rank); the
        answer is the smallest leading count over them. None while pending."""
        now = time.monotonic()
        ans = self._answers.get(tag)
        if ans is not None and ans[0] == chains and (now - ans[2]) * 2000 < max(self.lease_ms, 1):
            return ans[1]
        self._answers.pop(tag, None)
        pend = self._pending.get(tag)
        if pend is None or pend[0] != chains:
            futures = [self._client.lookup_async(c, lease_ms=self.lease_ms) for c in chains]
            self._pending[tag] = (chains, futures, now)
            return None
        pages = self._finish(pend[1], now - pend[2])
        if pages is None:
            return None
        del self._pending[tag]
        self._answers[tag] = (chains, pages, now)
        return pages

    def _finish(self, futures, age_s):
        if not all(f.done() for f in futures):
            if age_s * 1000 < self.timeout_ms:
                return None
            log.warning("kvtier LOOKUP unanswered after %d ms: counting no hits", self.timeout_ms)
            return 0
        counts = []
        for f in futures:
            try:
                r = f.poll()  # done: the result, or its exception
            except kvtier.Error as e:
                log.warning("kvtier LOOKUP failed, counting no hits: %s", e)
                return 0
            counts.append(r.leased if self.lease_ms > 0 else r.hits)
        return min(counts) if counts else 0

    def wait_pending(self, timeout_s=10.0):
        """Blocks until every lookup in flight has an answer (tests, warm-up;
        a scheduler never calls it). True when none is left pending."""
        deadline = time.monotonic() + timeout_s
        while not all(f.done() for _, fs, _ in self._pending.values() for f in fs):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.001)
        return True

    def forget(self, tag):
        self._pending.pop(tag, None)
        self._answers.pop(tag, None)


@dataclass
class PageTask:
    """One page of a transfer. blocks: the engine blocks it covers, in order;
    skip: leading blocks a load must not write (the engine has them already);
    parent: the key before this one in its chain (saves), None at a start."""
    key: bytes
    blocks: Sequence[int]
    skip: int = 0
    parent: Optional[bytes] = None

    def written_blocks(self):
        return list(self.blocks[self.skip:])


class Job:
    """A batch of page moves run on a TransferWorker. When done, `failed` holds
    the indices of pages that did not complete (all of them if `error`)."""

    def __init__(self, kind, tag, pages, fn):
        self.kind, self.tag, self.pages, self._fn = kind, tag, list(pages), fn
        self.failed, self.error, self.cancelled = set(), None, False
        self.write_lock = threading.Lock()  # held while it writes engine memory
        self._done = threading.Event()

    def run(self):
        try:
            failed = set(self._fn(self))
        except Exception as e:  # reported per page: the engine recomputes them
            log.warning("kvtier %s job %s failed: %s", self.kind, self.tag, e)
            self.error, failed = f"{type(e).__name__}: {e}", set(range(len(self.pages)))
        with self.write_lock:
            if not self.cancelled:  # cancel() already counted every page failed
                self.failed = failed
        self._done.set()

    def done(self):
        return self._done.is_set()

    def wait(self, timeout=None):
        return self._done.wait(timeout)

    def cancel(self):
        """From now on the job writes nothing into engine memory; its pages all
        count as failed. Waits for a write in progress (short: a local copy)."""
        with self.write_lock:
            self.cancelled = True
            self.failed = set(range(len(self.pages)))

    def failed_blocks(self):
        return {b for i in self.failed for b in self.pages[i].written_blocks()}


class TransferWorker:
    """One daemon thread running jobs in submission order."""

    def __init__(self, name="kvtier-transfer"):
        self._q = queue.Queue()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def submit(self, job):
        self._q.put(job)
        return job

    def _loop(self):
        while True:
            job = self._q.get()
            if job is None:
                return
            job.run()

    def close(self, timeout=30.0):
        self._q.put(None)
        self._thread.join(timeout)


class LoadTracker:
    """Loads in flight and what to tell the engine about them: the tags of
    finished asynchronous loads (once each) and failed block ids, which are
    reported no later than the call that reports their load finished."""

    def __init__(self):
        self._lock = threading.Lock()
        self._async = []
        self._errors = set()

    def track(self, job):
        """An asynchronous load: take_finished() reports job.tag once it ends."""
        with self._lock:
            self._async.append(job)

    def settle(self, job, timeout_s):
        """A synchronous load: waits for it (cancelling it after timeout_s, so it
        can write nothing later) and records its failed blocks at once."""
        if not job.wait(timeout_s):
            log.warning("kvtier load %s not done after %.1f s: its blocks count as failed",
                        job.tag, timeout_s)
            job.cancel()
        with self._lock:
            self._errors |= job.failed_blocks()

    def take_finished(self):
        with self._lock:
            done = [j for j in self._async if j.done()]
            self._async = [j for j in self._async if j not in done]
            for j in done:
                self._errors |= j.failed_blocks()
        return [j.tag for j in done]

    def take_failed_blocks(self):
        with self._lock:
            out, self._errors = self._errors, set()
        return out

    def in_flight(self):
        with self._lock:
            return len(self._async)
