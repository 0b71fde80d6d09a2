// Prefetcher: promotes pages to the target tier (host by default) before a
// GET asks for them, on its own threads. Sources: LOOKUP lookahead, PREFETCH
// hints, and GETs that wait for a promotion (demand, always first). It
// dedups concurrent requests for one (namespace, key), drops jobs past their
// deadline, bounds in-flight promotions (io_threads) and pinned bytes, and
// holds each promoted page pinned by a *lease* until its GET or the lease's
// expiry, so "hit on LOOKUP, gone by GET" cannot happen. Promotion itself is
// tiers::TierManager::PromoteTo (mechanism); the PrefetchPolicy decides.
//
// Thread-safety: every public method is thread-safe. Callbacks given to
// WhenReady run on a prefetcher thread (or the caller's, when nothing is
// pending) with no prefetcher lock held.
#pragma once

#include <atomic>
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
#include "tiers/tier_manager.h"

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
  uint64_t demand_waited = 0;      // GET pages that waited on a queued/running prefetch
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
  // namespace's lease cap or the pinned-bytes budget) and returns how many
  // leading keys are now leased: only those may be counted on. Held pages
  // may still be promoted (TierManager::HoldForLease).
  uint32_t LeaseHits(tiers::NamespaceId ns, absl::Span<const PageKey> keys, absl::Duration lease)
      ABSL_LOCKS_EXCLUDED(mu_);

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
    absl::Time granted;  // PREFETCH again extends expiry, never past granted + max_lease
    uint64_t bytes = 0;  // the stored page's real size
    bool counted = false;  // already counted (late / demand): no in_time on read
  };
  struct Running {
    std::vector<std::shared_ptr<Waiter>> waiters;
    bool demanded = false;     // a GET waits for it: late
    bool is_prefetch = true;   // false for a GET's own (timeout) demand job
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
  std::vector<Job> TakeBatch(std::vector<std::shared_ptr<Waiter>>* fire)
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
  // Leased bytes per namespace (≤ max_leased_per_ns_).
  absl::flat_hash_map<tiers::NamespaceId, uint64_t> leased_by_ns_ ABSL_GUARDED_BY(mu_);
  // Ends a lease's accounting (the caller drops or keeps the pin).
  void UnleaseLocked(const JobId& id, const Lease& lease) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Pushes an existing lease's expiry to now + lease (never past its grant +
  // max_lease); false when (ns, key) has no lease.
  bool ExtendLease(const JobId& id, absl::Duration lease, absl::Duration max_lease)
      ABSL_LOCKS_EXCLUDED(mu_);
  uint32_t demand_io_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  PrefetchCounters c_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> workers_;
  std::thread timer_;
  std::atomic<bool> shut_{false};
};

}  // namespace kvtier::prefetch
