// Prefetcher: promotes pages to the target tier (host by default) before a
// GET asks for them, on its own threads. Sources: LOOKUP lookahead, PREFETCH
// hints, and GETs that wait for a promotion (demand, always first). It
// dedups concurrent requests for one (namespace, key), drops jobs past their
// deadline, bounds in-flight promotions (io_threads) and pinned bytes, and
// holds each promoted page pinned by a *lease* until its GET or the lease's
// expiry, so "hit on LOOKUP, gone by GET" cannot happen. Promotion itself is
// tiers::TierManager::PromoteTo (mechanism); the PrefetchPolicy decides.
//
// Shares (issue 24): the pinned budget is split evenly among the *active*
// namespaces — those holding leases or promotions, or that asked for a lease
// or a prefetch within `share_active_window`. A namespace's share is
// min(max_leased_bytes_per_ns, max_pinned_bytes / active); over it, it gets
// no new lease and no new promotion (its queued jobs wait, keeping their
// place, while others' run). Shares shrink when a tenant arrives, so a
// namespace within its share that finds the budget full ends the newest
// leases of the namespaces over theirs, down to their shares (`lease_revoked`):
// a newcomer gets its share at once, not when old leases expire. Shares are
// isolation, not policy: the Prefetcher enforces them whatever the policy.
//
// Lease lifetime: a namespace holds one page leased at most max_lease from
// the first grant, however the lease is renewed (PREFETCH or LOOKUP again, or
// a GET ending it and a new one granting another). The first grant is
// remembered for `lease_window` (default 2 × max_lease), so a page is held at
// most max_lease out of any lease_window; past that the page is not leased
// again until the window ends (`lease_bound_refused`).
//
// Thread-safety: every public method is thread-safe. Callbacks given to
// WhenReady run on a prefetcher thread (or the caller's, when nothing is
// pending) with no prefetcher lock held.
#pragma once

#include <atomic>
#include <deque>
#include <optional>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "prefetch/prefetch_policy.h"
#include "prefetch/prefetch_queue.h"
#include "tiers/store/tier_manager.h"

namespace kvtier::prefetch {

struct PrefetcherConfig {
  tiers::TierKind target = tiers::TierKind::kHost;  // promotions go here
  uint32_t io_threads = 2;      // promotions in flight at once
  uint32_t batch_pages = 8;     // jobs one thread takes per round
  // Leases + in-flight promotions; 0: a quarter of the target tier.
  uint64_t max_pinned_bytes = 0;
  // Leased bytes one namespace may hold at once; 0: half of max_pinned_bytes.
  // A promotion that would go over it ends without a lease.
  uint64_t max_leased_bytes_per_ns = 0;
  size_t max_queued = 65536;    // more is refused (counted in `rejected`)
  bool lookahead = true;        // LOOKUP schedules its below-target hits
  // Unread promoted pages watched for eviction (the `wasted` counter).
  size_t max_watched = 16384;
  absl::Duration watch_period = absl::Milliseconds(100);
  DefaultPolicyConfig policy;   // used when no policy is passed to Create
  // A namespace counts towards the share split while it holds leases or
  // promotions, and this long after it last asked for a lease or prefetch.
  absl::Duration share_active_window = absl::Seconds(3);
  // The lease lifetime bound's window; 0: 2 × the policy's longest lease.
  absl::Duration lease_window = absl::ZeroDuration();
  // First grants remembered per namespace for the lifetime bound. A
  // namespace with this many gets no lease on a page it was not granted in
  // the window (bounded memory; only the namespace itself loses leases).
  size_t max_grant_records_per_ns = 1 << 17;

  absl::Status Validate() const;
};

struct PrefetchCounters {
  uint64_t issued = 0;             // prefetch jobs queued (hint + lookahead)
  uint64_t merged = 0;             // requests merged into a queued/running/leased job
  uint64_t completed_in_time = 0;  // promoted before the GET that read them
  uint64_t late = 0;               // a GET waited for them, or done past deadline
  uint64_t wasted = 0;             // promoted, then left the target tier unread
  uint64_t dropped = 0;            // past their deadline before they started
  uint64_t rejected = 0;           // queue full
  uint64_t failed = 0;             // could not promote (no room, busy, missing, read error)
  uint64_t cancelled = 0;          // still queued at shutdown
  uint64_t lease_expired = 0;      // leases that ended without a GET
  uint64_t lease_refused = 0;      // promoted, but the namespace's lease cap was reached
  uint64_t lookup_leased = 0;      // pages a LOOKUP with a lease began holding
  uint64_t lookup_lease_refused = 0;  // LOOKUP hits left unleased: over the lease cap
  uint64_t lease_revoked = 0;      // leases ended early: their namespace was over its share
  uint64_t lease_bound_refused = 0;  // pages left unleased: held max_lease in this window
  uint64_t demand_waited = 0;      // GET pages that waited on a queued/running prefetch
  uint64_t taken_by_get = 0;       // queued prefetches a plain GET read itself instead
  uint64_t demand_jobs = 0;        // promotions a GET asked for directly (timeout policy)
  uint64_t promoted_pages = 0;     // pages this prefetcher moved up
  uint64_t promoted_bytes = 0;
  // Gauges.
  uint64_t queued = 0, inflight = 0, leased_pages = 0, pinned_bytes = 0;
};

// What Schedule did with a request's keys.
struct ScheduleResult {
  uint32_t queued = 0;    // new jobs
  uint32_t merged = 0;    // already queued, running or leased
  uint32_t resident = 0;  // already at or above the target tier
  uint32_t missing = 0;   // not in the store
  uint32_t rejected = 0;  // queue full
};

struct Hint {
  JobClass cls = JobClass::kHint;
  int32_t priority = 0;
  absl::Time deadline = absl::InfiniteFuture();
  absl::Duration lease = absl::ZeroDuration();  // 0: the policy's default
  // No page size here: budgets count each stored page's real size (a
  // session's declared size is a client's claim).
};

class Prefetcher {
 public:
  // `store` must outlive the Prefetcher. `policy` null: MakeDefaultPolicy.
  static absl::StatusOr<std::unique_ptr<Prefetcher>> Create(
      const PrefetcherConfig& config, tiers::TierManager* store,
      std::unique_ptr<PrefetchPolicy> policy = nullptr);
  ~Prefetcher();  // Shutdown()

  // Queues promotions of `keys` that sit below the target tier.
  ScheduleResult Schedule(tiers::NamespaceId ns, absl::Span<const PageKey> keys, const Hint& hint)
      ABSL_LOCKS_EXCLUDED(mu_);
  // LOOKUP lookahead: `tiers` are the kinds of the chain's leading hits.
  ScheduleResult OnLookup(tiers::NamespaceId ns, absl::Span<const PageKey> keys,
                          absl::Span<const tiers::TierKind> tiers)
      ABSL_LOCKS_EXCLUDED(mu_);

  // GET side. Whether any key has a queued or running promotion.
  bool AnyPending(tiers::NamespaceId ns, absl::Span<const PageKey> keys) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // How many keys have a queued or running promotion.
  size_t CountPending(tiers::NamespaceId ns, absl::Span<const PageKey> keys) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // Runs `done` once every key's queued or running promotion has finished
  // (raising queued ones to demand), or at `deadline`, whichever is first.
  // With `schedule_below_target`, keys below the target tier that nothing
  // is promoting get demand jobs first. `done` runs at once (on this thread)
  // when nothing is pending; at shutdown it runs from Shutdown().
  void WhenReady(tiers::NamespaceId ns, absl::Span<const PageKey> keys, bool schedule_below_target,
                 absl::Time deadline, std::function<void()> done)
      ABSL_LOCKS_EXCLUDED(mu_);
  // LOOKUP with a lease: holds the leading `keys` (the lookup's hits, in
  // chain order) in the store for `lease` (at most the policy's longest),
  // or until a GET reads them, extending leases a page already has. Stops
  // at the first key it cannot hold (gone since the lookup, or over the
  // namespace's share or the pinned-bytes budget) and returns how many
  // leading keys count as hits; `*leased` (optional) gets how many of them
  // are held. The two differ by the pages this namespace already held for
  // max_lease in the window (the lifetime bound): those still count as hits,
  // unleased — they were present, and refusing the hit would make a
  // scheduler recompute a hot prefix — but nothing holds them. Held pages
  // may still be promoted (TierManager::HoldForLease).
  uint32_t LeaseHits(tiers::NamespaceId ns, absl::Span<const PageKey> keys, absl::Duration lease,
                     uint32_t* leased = nullptr) ABSL_LOCKS_EXCLUDED(mu_);

  // A GET pinned (ns, key): its lease, if any, is no longer needed.
  void OnDemandRead(tiers::NamespaceId ns, const PageKey& key) ABSL_LOCKS_EXCLUDED(mu_) {
    OnDemandRead(ns, absl::MakeConstSpan(&key, 1));
  }
  // The same for every key a GET pinned, under one lock.
  void OnDemandRead(tiers::NamespaceId ns, absl::Span<const PageKey> keys) ABSL_LOCKS_EXCLUDED(mu_);

  // Demand reads of lower tiers (a GET reading NVMe itself) hold one of these
  // while they run; prefetch does not start new work meanwhile.
  class DemandScope {
   public:
    DemandScope() = default;
    explicit DemandScope(Prefetcher* p) ABSL_LOCKS_EXCLUDED(p->mu_);
    DemandScope(DemandScope&& o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
    DemandScope& operator=(DemandScope&&) = delete;
    ~DemandScope();

   private:
    Prefetcher* p_ = nullptr;
  };
  DemandScope DemandIo() ABSL_LOCKS_EXCLUDED(mu_) { return DemandScope(this); }

  PrefetchCounters counters() const ABSL_LOCKS_EXCLUDED(mu_);
  int target_index() const { return target_; }
  const PrefetcherConfig& config() const { return config_; }
  // Stops the threads, cancels queued jobs, runs pending WhenReady
  // callbacks and releases every lease. Idempotent.
  void Shutdown() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // A WhenReady call: `done` runs once, when `remaining` reaches 0 or at
  // `deadline`, whichever is first (`fired` decides).
  struct Waiter {
    std::function<void()> done;
    absl::Time deadline;
    int remaining = 0;  // guarded by mu_
    std::atomic<bool> fired{false};
  };
  struct Lease {
    tiers::PagePin pin;
    absl::Time expiry;
    // The first grant of (ns, key) in the lease window: renewals never
    // extend expiry past granted + max_lease.
    absl::Time granted;
    uint64_t bytes = 0;  // the stored page's real size
    bool counted = false;  // already counted (late / demand): no in_time on read
    uint64_t seq = 0;      // grant order: revocation ends the newest first
  };
  // First grants of one namespace's pages within the lease window, for the
  // lifetime bound. `order` is in grant order (grants are stamped under mu_),
  // so aging pops its front.
  struct GrantRecords {
    absl::flat_hash_map<PageKey, absl::Time> first;
    std::deque<std::pair<absl::Time, PageKey>> order;
  };
  struct Running {
    std::vector<std::shared_ptr<Waiter>> waiters;
    bool demanded = false;     // a GET waits for it: late
    bool is_prefetch = true;   // false for a GET's own (timeout) demand job
    // Set when a GET joins the job while its read may still be queued as
    // prefetch I/O: the device queue serves it as demand from then on.
    std::shared_ptr<std::atomic<bool>> urgent = std::make_shared<std::atomic<bool>>(false);
  };

  Prefetcher(const PrefetcherConfig& config, tiers::TierManager* store,
             std::unique_ptr<PrefetchPolicy> policy, int target);
  void Start();
  // The loops take mu_ themselves and drop it around store calls (which take
  // shard locks: never called with mu_ held) and callbacks.
  void WorkerLoop() ABSL_LOCKS_EXCLUDED(mu_);
  void TimerLoop() ABSL_LOCKS_EXCLUDED(mu_);
  // Takes up to batch_pages jobs in queue order while the policy admits
  // them; drops jobs past their deadline on the way (their waiters to *fire).
  // Passes over jobs of namespaces at their share; may revoke leases over
  // share (their pins into *release, dropped by the caller unlocked).
  std::vector<Job> TakeBatch(std::vector<std::shared_ptr<Waiter>>* fire,
                             std::vector<tiers::PagePin>* release)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RunBatch(std::vector<Job>& batch) ABSL_LOCKS_EXCLUDED(mu_);
  // Records a job's outcome: a lease, or the pin to drop (into *release,
  // dropped by the caller after unlocking), counters, waiters to *fire.
  void Finish(const Job& job, tiers::PromoteResult result,
              std::vector<std::shared_ptr<Waiter>>* fire, tiers::PagePin* release)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void WakeWaitersLocked(const JobId& id, std::vector<std::shared_ptr<Waiter>>* fire)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  ScheduleResult AddJobs(tiers::NamespaceId ns, absl::Span<const PageKey> keys,
                         absl::Span<const uint32_t> which, const Hint& hint)
      ABSL_LOCKS_EXCLUDED(mu_);
  PrefetchLoad LoadLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Timer work: expired leases, overdue waiters, the wasted watch.
  absl::Time ExpireLocked(absl::Time now, std::vector<tiers::PagePin>* release,
                          std::vector<std::shared_ptr<Waiter>>* fire)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The wasted watch, in two halves around the caller's unlocked Locate of
  // each watched page: the pages to probe, then the outcome (`where[i]` is
  // Locate(ids[i])): pages gone from the target count as wasted.
  std::vector<JobId> WatchedLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SettleWatchLocked(absl::Span<const JobId> ids, absl::Span<const int> where)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static void Fire(std::vector<std::shared_ptr<Waiter>>& fire);

  const PrefetcherConfig config_;
  tiers::TierManager* const store_;
  const std::unique_ptr<PrefetchPolicy> policy_;
  const int target_;  // tier index
  uint64_t max_pinned_bytes_ = 0;

  mutable absl::Mutex mu_;
  absl::CondVar work_cv_;   // workers: queue, budget, demand_io, stop
  absl::CondVar timer_cv_;  // timer: new lease or waiter deadline, stop
  PrefetchQueue queue_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<JobId, Running> running_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<JobId, Lease> leases_ ABSL_GUARDED_BY(mu_);
  // Waiters of queued keys (running keys keep theirs in running_).
  absl::flat_hash_map<JobId, std::vector<std::shared_ptr<Waiter>>> queued_waiters_
      ABSL_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<Waiter>> timed_ ABSL_GUARDED_BY(mu_);
  // Promoted pages whose lease ended unread: evicted from the target = wasted.
  // Value: when it started being watched (entries age out after a while).
  absl::flat_hash_map<JobId, absl::Time> watch_ ABSL_GUARDED_BY(mu_);
  absl::Time next_wake_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  absl::Time next_probe_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  uint64_t pinned_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t max_leased_per_ns_ = 0;
  // Leased bytes per namespace (within its share when granted; a shrunk
  // share may leave it over until revoked).
  absl::flat_hash_map<tiers::NamespaceId, uint64_t> leased_by_ns_ ABSL_GUARDED_BY(mu_);
  // Ends a lease's accounting (the caller drops or keeps the pin).
  void UnleaseLocked(const JobId& id, const Lease& lease) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Pushes an existing lease's expiry to now + lease (never past its grant +
  // max_lease); false when (ns, key) has no lease.
  bool ExtendLease(const JobId& id, absl::Duration lease, absl::Duration max_lease)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Shares. `ns` asked for a lease or a prefetch now (it becomes active).
  void MarkActiveLocked(tiers::NamespaceId ns, absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // min(max_leased_per_ns_, budget / active namespaces), `ns` counted active.
  uint64_t ShareLocked(tiers::NamespaceId ns, absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Leased bytes of `ns`: what its share bounds for leases. In-flight
  // promotions are not counted there, or a LOOKUP's own lookahead (the same
  // pages coming up) would use up the share its lease needs.
  uint64_t LeasedLocked(tiers::NamespaceId ns) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Leased + in-flight bytes of `ns`: what its share bounds for admission.
  uint64_t UsageLocked(tiers::NamespaceId ns) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends the newest leases of every namespace leasing more than its share,
  // down to its share (pins into *release); returns the bytes freed.
  uint64_t RevokeOverShareLocked(absl::Time now, std::vector<tiers::PagePin>* release)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Lifetime bound: the first grant of (ns, key) in the window (now when
  // none), or nullopt when a lease now would go past first + max_lease or
  // the namespace's records are full.
  std::optional<absl::Time> FirstGrantLocked(const JobId& id, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Records a grant made at `first` (no-op when already recorded).
  void RememberGrantLocked(const JobId& id, absl::Time first) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Forgets first grants older than the window.
  void AgeGrantsLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Grants a lease of `pin` to `id` (accounting, timer); caller checked share and bound.
  void GrantLocked(const JobId& id, tiers::PagePin pin, absl::Time now, absl::Time first,
                   absl::Duration lease, uint64_t bytes, bool counted)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Duration max_lease_;     // the policy's longest lease
  absl::Duration lease_window_;  // see PrefetcherConfig::lease_window
  // In-flight promotion bytes per namespace (running jobs).
  absl::flat_hash_map<tiers::NamespaceId, uint64_t> inflight_by_ns_ ABSL_GUARDED_BY(mu_);
  // When each namespace last asked for a lease or a prefetch.
  absl::flat_hash_map<tiers::NamespaceId, absl::Time> last_asked_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<tiers::NamespaceId, GrantRecords> grants_ ABSL_GUARDED_BY(mu_);
  uint64_t next_lease_seq_ ABSL_GUARDED_BY(mu_) = 0;
  uint32_t demand_io_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  PrefetchCounters c_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> workers_;
  std::thread timer_;
  std::atomic<bool> shut_{false};
};

}  // namespace kvtier::prefetch
