// Prefetcher: intake (Schedule, OnLookup, WhenReady) and the I/O workers
// that take jobs in queue order under the policy's backpressure and promote
// them. Leases, the timer thread and shutdown are in prefetch_leases.cc.
#include "prefetch/prefetcher.h"

#include <algorithm>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "tiers/common/io_class.h"

namespace kvtier::prefetch {

absl::Status PrefetcherConfig::Validate() const {
  if (io_threads < 1 || io_threads > 64)
    return absl::InvalidArgumentError(absl::StrCat("prefetch io_threads ", io_threads,
                                                   " must be in [1, 64]"));
  if (batch_pages < 1) return absl::InvalidArgumentError("prefetch batch_pages must be >= 1");
  if (max_queued < 1) return absl::InvalidArgumentError("prefetch max_queued must be >= 1");
  if (watch_period <= absl::ZeroDuration())
    return absl::InvalidArgumentError("prefetch watch_period must be > 0");
  if (policy.default_lease < absl::ZeroDuration() || policy.max_lease < absl::ZeroDuration())
    return absl::InvalidArgumentError("prefetch leases must be >= 0");
  if (share_active_window <= absl::ZeroDuration())
    return absl::InvalidArgumentError("prefetch share_active_window must be > 0");
  if (lease_window < absl::ZeroDuration())
    return absl::InvalidArgumentError("prefetch lease_window must be >= 0");
  if (max_grant_records_per_ns < 1)
    return absl::InvalidArgumentError("prefetch max_grant_records_per_ns must be >= 1");
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Prefetcher>> Prefetcher::Create(
    const PrefetcherConfig& config, tiers::TierManager* store,
    std::unique_ptr<PrefetchPolicy> policy) {
  if (absl::Status st = config.Validate(); !st.ok()) return st;
  if (store == nullptr) return absl::InvalidArgumentError("Prefetcher needs a store");
  const int target = store->TierIndex(config.target);
  if (target < 0)
    return absl::InvalidArgumentError(absl::StrCat(
        "prefetch target tier '", std::string(tiers::TierName(config.target)),
        "' is not one of the store's tiers"));
  if (policy == nullptr) policy = MakeDefaultPolicy(config.policy);
  std::unique_ptr<Prefetcher> p(new Prefetcher(config, store, std::move(policy), target));
  p->Start();
  return p;
}

Prefetcher::Prefetcher(const PrefetcherConfig& config, tiers::TierManager* store,
                       std::unique_ptr<PrefetchPolicy> policy, int target)
    : config_(config), store_(store), policy_(std::move(policy)), target_(target),
      queue_(config.max_queued) {
  max_pinned_bytes_ = config.max_pinned_bytes;
  if (max_pinned_bytes_ == 0) {
    const auto snap = store->Snapshot();
    max_pinned_bytes_ = std::max<uint64_t>(1, snap.tiers[target].capacity_bytes / 4);
  }
  max_leased_per_ns_ = config.max_leased_bytes_per_ns > 0
                           ? config.max_leased_bytes_per_ns
                           : std::max<uint64_t>(1, max_pinned_bytes_ / 2);
  max_lease_ = policy_->Lease(JobClass::kHint, absl::InfiniteDuration());
  // At least max_lease, so a lease always ends before its record ages out.
  lease_window_ = config.lease_window > absl::ZeroDuration()
                      ? std::max(config.lease_window, max_lease_)
                      : 2 * max_lease_;
}

Prefetcher::~Prefetcher() { Shutdown(); }

void Prefetcher::Start() {
  for (uint32_t i = 0; i < config_.io_threads; ++i) workers_.emplace_back([this] { WorkerLoop(); });
  timer_ = std::thread([this] { TimerLoop(); });
}

ScheduleResult Prefetcher::Schedule(tiers::NamespaceId ns, absl::Span<const PageKey> keys,
                                    const Hint& hint) {
  std::vector<uint32_t> all(keys.size());
  for (uint32_t i = 0; i < keys.size(); ++i) all[i] = i;
  return AddJobs(ns, keys, all, hint);
}

ScheduleResult Prefetcher::OnLookup(tiers::NamespaceId ns, absl::Span<const PageKey> keys,
                                    absl::Span<const tiers::TierKind> tiers) {
  if (!config_.lookahead || tiers.empty()) return {};
  std::vector<bool> below(tiers.size());
  bool any = false;
  for (size_t i = 0; i < tiers.size(); ++i) any |= below[i] = store_->TierIndex(tiers[i]) > target_;
  if (!any) return {};
  std::unique_ptr<bool[]> flags(new bool[below.size()]);
  for (size_t i = 0; i < below.size(); ++i) flags[i] = below[i];
  std::vector<uint32_t> which =
      policy_->SelectLookahead(absl::MakeConstSpan(flags.get(), below.size()));
  Hint hint{.cls = JobClass::kLookahead,
            .priority = policy_->LookaheadPriority(),
            .deadline = absl::Now() + policy_->LookaheadDeadline()};
  return AddJobs(ns, keys.subspan(0, tiers.size()), which, hint);
}

ScheduleResult Prefetcher::AddJobs(tiers::NamespaceId ns, absl::Span<const PageKey> keys,
                                   absl::Span<const uint32_t> which, const Hint& hint) {
  ScheduleResult r;
  // Probe outside our lock: Locate takes a shard lock.
  std::vector<int> where(which.size());
  std::vector<uint64_t> bytes(which.size());
  for (size_t j = 0; j < which.size(); ++j) where[j] = store_->Locate(ns, keys[which[j]], &bytes[j]);
  const absl::Time now = absl::Now();
  const absl::Duration lease = policy_->Lease(hint.cls, hint.lease);
  const absl::Duration max_lease = max_lease_;
  absl::MutexLock lock(&mu_);
  if (!which.empty()) MarkActiveLocked(ns, now);
  for (size_t j = 0; j < which.size(); ++j) {
    const JobId id{ns, keys[which[j]]};
    if (where[j] < 0) {
      ++r.missing;
      continue;
    }
    if (auto l = leases_.find(id); l != leases_.end()) {
      // Wanted again: later expiry, but never past the longest lease from
      // its grant, so repeating PREFETCH cannot pin a page for ever.
      l->second.expiry =
          std::max(l->second.expiry, std::min(now + lease, l->second.granted + max_lease));
      ++r.merged;
      continue;
    }
    if (running_.contains(id)) {  // before the tier check: it may be up, not yet leased
      ++r.merged;
      continue;
    }
    if (where[j] <= target_) {
      ++r.resident;
      continue;
    }
    if (stopping_) {
      ++r.rejected;
      continue;
    }
    Job job{.ns = ns, .key = id.key, .cls = hint.cls, .priority = hint.priority,
            .deadline = hint.deadline, .lease = lease, .bytes = bytes[j], .enqueued = now};
    switch (queue_.Add(std::move(job))) {
      case PrefetchQueue::AddResult::kQueued: ++r.queued; break;
      case PrefetchQueue::AddResult::kMerged: ++r.merged; break;
      case PrefetchQueue::AddResult::kFull: ++r.rejected; break;
    }
  }
  (hint.cls == JobClass::kDemand ? c_.demand_jobs : c_.issued) += r.queued;
  c_.merged += r.merged;
  c_.rejected += r.rejected;
  if (r.queued > 0 || r.merged > 0) work_cv_.SignalAll();
  return r;
}

bool Prefetcher::AnyPending(tiers::NamespaceId ns, absl::Span<const PageKey> keys) const {
  absl::MutexLock lock(&mu_);
  for (const PageKey& k : keys) {
    const JobId id{ns, k};
    if (queue_.Contains(id) || running_.contains(id)) return true;
  }
  return false;
}

size_t Prefetcher::CountPending(tiers::NamespaceId ns, absl::Span<const PageKey> keys) const {
  absl::MutexLock lock(&mu_);
  size_t n = 0;
  for (const PageKey& k : keys) {
    const JobId id{ns, k};
    n += queue_.Contains(id) || running_.contains(id);
  }
  return n;
}

void Prefetcher::WhenReady(tiers::NamespaceId ns, absl::Span<const PageKey> keys,
                           bool schedule_below_target, absl::Time deadline,
                           std::function<void()> done) {
  if (schedule_below_target) {
    Schedule(ns, keys, Hint{.cls = JobClass::kDemand});
  }
  auto w = std::make_shared<Waiter>();
  w->done = std::move(done);
  w->deadline = deadline;
  {
    absl::MutexLock lock(&mu_);
    for (const PageKey& k : keys) {
      const JobId id{ns, k};
      if (auto run = running_.find(id); run != running_.end()) {
        if (!run->second.demanded && run->second.is_prefetch) ++c_.demand_waited;
        run->second.demanded = run->second.is_prefetch;
        // Its read may be queued behind the prefetch share: demand now.
        run->second.urgent->store(true, std::memory_order_release);
        run->second.waiters.push_back(w);
        ++w->remaining;
      } else if (const Job* job = queue_.Find(id);
                 job != nullptr && !schedule_below_target && job->cls != JobClass::kDemand &&
                 !job->demanded) {
        // A prefetch not started yet, that no other GET waits for: the GET
        // reads the page itself, with the rest of its pages, at demand
        // class and all at once, instead of waiting for a prefetch thread
        // to come free and read it a batch at a time.
        queue_.Take(id);
        ++c_.taken_by_get;
      } else if (job != nullptr) {
        // A prefetch a GET now waits for is late; a fresh demand job is not.
        if (job->cls != JobClass::kDemand || job->demanded) {
          if (!job->demanded) ++c_.demand_waited;
          queue_.Demand(id);
        }
        queued_waiters_[id].push_back(w);
        ++w->remaining;
      }
    }
    if (w->remaining > 0 && !stopping_) {
      if (deadline != absl::InfiniteFuture()) {
        timed_.push_back(w);
        timer_cv_.Signal();
      }
      work_cv_.SignalAll();
      return;
    }
  }
  w->fired = true;
  w->done();
}

PrefetchLoad Prefetcher::LoadLocked() const {
  return PrefetchLoad{.queued = queue_.size(),
                      .inflight_pages = running_.size(),
                      .pinned_bytes = pinned_bytes_,
                      .max_pinned_bytes = max_pinned_bytes_,
                      .demand_io = demand_io_};
}

std::vector<Job> Prefetcher::TakeBatch(std::vector<std::shared_ptr<Waiter>>* fire,
                                       std::vector<tiers::PagePin>* release) {
  std::vector<Job> batch;
  const absl::Time now = absl::Now();
  // Namespaces at their share while the budget is full, this round: their
  // prefetches wait (in place) while other namespaces' jobs behind them run,
  // so one tenant's PREFETCHes cannot hold the queue's head against everyone.
  // (With room in the budget, a namespace over its share is still promoted,
  // just not leased: Finish.)
  absl::flat_hash_set<tiers::NamespaceId> at_share;
  while (batch.size() < config_.batch_pages) {
    const Job* head = queue_.FirstWhere([&](const Job& j) {
      return j.cls == JobClass::kDemand || j.deadline < now || !at_share.contains(j.ns);
    });
    if (head == nullptr) break;
    const bool demand = head->cls == JobClass::kDemand;
    if (!demand && head->deadline < now) {
      Job late = *queue_.Take(IdOf(*head));
      ++c_.dropped;
      WakeWaitersLocked(IdOf(late), fire);
      continue;
    }
    if (!demand && !policy_->Admit(*head, LoadLocked())) {
      // Held back for another reason than the budget (demand I/O): all wait.
      if (pinned_bytes_ + head->bytes <= max_pinned_bytes_) break;
      // The budget is full. A namespace at its share waits (in place) and
      // the jobs of others behind it go on; one job always fits a namespace
      // holding nothing, so a share below a page cannot stall it.
      const uint64_t used = UsageLocked(head->ns);
      if (used > 0 && used + head->bytes > ShareLocked(head->ns, now)) {
        at_share.insert(head->ns);
        continue;
      }
      // Within its share: the namespaces over theirs (shares shrank when
      // this one arrived) give back their excess.
      if (RevokeOverShareLocked(now, release) == 0 || !policy_->Admit(*head, LoadLocked())) break;
    }
    Job job = *queue_.Take(IdOf(*head));
    const JobId id = IdOf(job);
    Running& run = running_[id];
    run.is_prefetch = job.cls != JobClass::kDemand || job.demanded;
    run.demanded = job.demanded;
    if (auto w = queued_waiters_.find(id); w != queued_waiters_.end()) {
      run.waiters = std::move(w->second);
      queued_waiters_.erase(w);
    }
    pinned_bytes_ += job.bytes;
    inflight_by_ns_[job.ns] += job.bytes;
    batch.push_back(std::move(job));
  }
  return batch;
}

void Prefetcher::WorkerLoop() {
  for (;;) {
    std::vector<Job> batch;
    std::vector<std::shared_ptr<Waiter>> fire;
    std::vector<tiers::PagePin> release;  // revoked leases: dropped unlocked
    {
      absl::MutexLock lock(&mu_);
      for (;;) {
        if (stopping_) return;
        batch = TakeBatch(&fire, &release);
        if (!batch.empty() || !fire.empty() || !release.empty()) break;
        // The timeout re-checks deadlines of jobs held back by backpressure.
        work_cv_.WaitWithTimeout(&mu_, absl::Milliseconds(50));
      }
    }
    release.clear();
    Fire(fire);
    RunBatch(batch);
  }
}

void Prefetcher::RunBatch(std::vector<Job>& batch) {
  // The jobs a GET already waits for (demand jobs, or prefetches it caught up
  // with) first, as demand I/O; then the promotions ahead of need, which
  // yield to demand I/O in the device queue (io_class.h). Within each, every
  // read is in flight at once (the device's depth, not one page per thread),
  // and each job finishes as soon as its page is up, so a waiting GET is
  // released then.
  for (const bool wanted : {true, false}) {
    std::vector<size_t> jobs;
    std::vector<tiers::PagePin> pins;
    for (size_t j = 0; j < batch.size(); ++j) {
      if ((batch[j].cls == JobClass::kDemand || batch[j].demanded) != wanted) continue;
      jobs.push_back(j);
      std::optional<tiers::PagePin> pin = store_->PinForPromotion(batch[j].ns, batch[j].key);
      pins.push_back(pin ? *std::move(pin) : tiers::PagePin());
    }
    if (jobs.empty()) continue;
    // A GET may join a promotion while its read waits in the device queue
    // as prefetch: each read carries its job's token, and the queue serves
    // it as demand once the GET has set it (WhenReady).
    std::vector<tiers::IoUrgency> urgency;
    if (!wanted) {
      absl::MutexLock lock(&mu_);
      for (size_t j : jobs) {
        auto run = running_.find(IdOf(batch[j]));
        urgency.push_back(run == running_.end() ? nullptr : run->second.urgent);
      }
    }
    tiers::IoClassScope io_class(wanted ? tiers::IoClass::kDemand : tiers::IoClass::kPrefetch);
    // Prefetch threads may write a dirty page back to make room (the
    // cleaner usually left clean ones).
    store_->PromotePinned(absl::MakeSpan(pins), target_, tiers::EvictMode::kMayWrite,
                          [&](size_t k, tiers::PromoteOutcome outcome) {
                            tiers::PromoteResult r{outcome, std::move(pins[k])};
                            std::vector<std::shared_ptr<Waiter>> fire;
                            tiers::PagePin release;
                            {
                              absl::MutexLock lock(&mu_);
                              Finish(batch[jobs[k]], std::move(r), &fire, &release);
                            }
                            release.Reset();
                            Fire(fire);
                          },
                          urgency);
  }
}

void Prefetcher::WakeWaitersLocked(const JobId& id, std::vector<std::shared_ptr<Waiter>>* fire) {
  auto wake = [fire](std::vector<std::shared_ptr<Waiter>>& ws) {
    for (auto& w : ws)
      if (--w->remaining == 0) fire->push_back(w);
  };
  if (auto q = queued_waiters_.find(id); q != queued_waiters_.end()) {
    wake(q->second);
    queued_waiters_.erase(q);
  }
}

void Prefetcher::Fire(std::vector<std::shared_ptr<Waiter>>& fire) {
  for (auto& w : fire)
    if (!w->fired.exchange(true)) w->done();
  fire.clear();
}

}  // namespace kvtier::prefetch
