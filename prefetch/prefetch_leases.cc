// Prefetcher: what happens after a promotion — the lease that keeps the page
// pinned until its GET (or expiry), the timer thread that ends leases and
// overdue waits, the watch that counts promoted pages evicted unread
// (wasted), the demand-read scope, and shutdown.
#include <algorithm>

#include "prefetch/prefetcher.h"

namespace kvtier::prefetch {
namespace {

// An unread page stops being watched after this long (it was neither read
// nor evicted: neither useful nor provably wasted).
constexpr absl::Duration kWatchTtl = absl::Minutes(5);

}  // namespace

void Prefetcher::Finish(const Job& job, tiers::PromoteResult result,
                        std::vector<std::shared_ptr<Waiter>>* fire, tiers::PagePin* release) {
  const JobId id = IdOf(job);
  Running run = std::move(running_[id]);
  running_.erase(id);
  pinned_bytes_ -= job.bytes;
  const absl::Time now = absl::Now();
  const bool ok = result.outcome == tiers::PromoteOutcome::kPromoted ||
                  result.outcome == tiers::PromoteOutcome::kAlreadyThere;
  if (!ok) {
    ++c_.failed;
  } else {
    if (result.outcome == tiers::PromoteOutcome::kPromoted) {
      ++c_.promoted_pages;
      c_.promoted_bytes += result.pin.bytes();
    }
    const bool late = run.demanded || now > job.deadline;
    if (run.is_prefetch && late) ++c_.late;
    // The lease counts the stored page's real size against the namespace's
    // cap: no session's declared page size can stretch it.
    const uint64_t bytes = result.pin.bytes();
    uint64_t& leased = leased_by_ns_[job.ns];
    // A promoted page left unleased (none asked for, or over the cap) is
    // watched like an expired lease, so its read still counts as in time.
    const bool watch = run.is_prefetch && !late && watch_.size() < config_.max_watched;
    if (job.lease <= absl::ZeroDuration()) {
      if (watch) watch_[id] = now;  // the pin goes back below
    } else if (auto old = leases_.find(id); old != leases_.end()) {
      old->second.expiry = std::max(old->second.expiry, now + job.lease);  // keeps its pin
    } else if (leased + bytes > max_leased_per_ns_) {
      ++c_.lease_refused;
      if (watch) watch_[id] = now;
    } else {
      Lease lease{std::move(result.pin), now + job.lease, now, bytes,
                  /*counted=*/late || !run.is_prefetch};
      pinned_bytes_ += bytes;
      leased += bytes;
      if (lease.expiry < next_wake_) timer_cv_.Signal();
      leases_.emplace(id, std::move(lease));
    }
    if (leased == 0) leased_by_ns_.erase(job.ns);
  }
  if (result.pin.valid()) *release = std::move(result.pin);
  for (auto& w : run.waiters)
    if (--w->remaining == 0) fire->push_back(w);
  WakeWaitersLocked(id, fire);
  work_cv_.SignalAll();  // budget freed
}

uint32_t Prefetcher::LeaseHits(tiers::NamespaceId ns, absl::Span<const PageKey> keys,
                               absl::Duration lease) {
  const absl::Duration max_lease = policy_->Lease(JobClass::kHint, absl::InfiniteDuration());
  lease = std::min(lease, max_lease);
  std::vector<tiers::PagePin> release;  // declared first: dropped after the unlocks
  uint32_t leased_keys = 0;
  for (const PageKey& key : keys) {
    const JobId id{ns, key};
    if (ExtendLease(id, lease, max_lease)) {
      ++leased_keys;
      continue;
    }
    // The store's shard lock is never taken under mu_.
    std::optional<tiers::PagePin> hold = store_->HoldForLease(ns, key);
    if (!hold) break;
    absl::MutexLock lock(&mu_);
    if (stopping_) {
      release.push_back(std::move(*hold));
      break;
    }
    const absl::Time now = absl::Now();
    if (auto l = leases_.find(id); l != leases_.end()) {  // leased meanwhile
      l->second.expiry =
          std::max(l->second.expiry, std::min(now + lease, l->second.granted + max_lease));
      release.push_back(std::move(*hold));
      ++leased_keys;
      continue;
    }
    const uint64_t bytes = hold->bytes();
    uint64_t& leased = leased_by_ns_[ns];
    if (leased + bytes > max_leased_per_ns_ || pinned_bytes_ + bytes > max_pinned_bytes_) {
      ++c_.lookup_lease_refused;
      if (leased == 0) leased_by_ns_.erase(ns);
      release.push_back(std::move(*hold));
      break;
    }
    // counted: a lookup lease is not a prefetch, so its read is not "in time".
    Lease l{std::move(*hold), now + lease, now, bytes, /*counted=*/true};
    pinned_bytes_ += bytes;
    leased += bytes;
    ++c_.lookup_leased;
    if (l.expiry < next_wake_) timer_cv_.Signal();
    leases_.emplace(id, std::move(l));
    ++leased_keys;
  }
  return leased_keys;
}

bool Prefetcher::ExtendLease(const JobId& id, absl::Duration lease, absl::Duration max_lease) {
  absl::MutexLock lock(&mu_);
  auto l = leases_.find(id);
  if (l == leases_.end()) return false;
  l->second.expiry =
      std::max(l->second.expiry, std::min(absl::Now() + lease, l->second.granted + max_lease));
  return true;
}

void Prefetcher::UnleaseLocked(const JobId& id, const Lease& lease) {
  pinned_bytes_ -= lease.bytes;
  auto it = leased_by_ns_.find(id.ns);
  if (it == leased_by_ns_.end()) return;
  it->second -= std::min(it->second, lease.bytes);
  if (it->second == 0) leased_by_ns_.erase(it);
}

void Prefetcher::OnDemandRead(tiers::NamespaceId ns, absl::Span<const PageKey> keys) {
  std::vector<tiers::PagePin> release;  // declared first: dropped after the unlock
  absl::MutexLock lock(&mu_);
  for (const PageKey& key : keys) {
    const JobId id{ns, key};
    if (auto l = leases_.find(id); l != leases_.end()) {
      if (!l->second.counted) ++c_.completed_in_time;
      UnleaseLocked(id, l->second);
      release.push_back(std::move(l->second.pin));
      leases_.erase(l);
    } else if (watch_.erase(id) > 0) {
      ++c_.completed_in_time;  // read after its lease, but still from RAM
    }
  }
  if (!release.empty()) work_cv_.SignalAll();
}

Prefetcher::DemandScope::DemandScope(Prefetcher* p) : p_(p) {
  absl::MutexLock lock(&p_->mu_);
  ++p_->demand_io_;
}

Prefetcher::DemandScope::~DemandScope() {
  if (p_ == nullptr) return;
  absl::MutexLock lock(&p_->mu_);
  if (--p_->demand_io_ == 0) p_->work_cv_.SignalAll();
}

absl::Time Prefetcher::ExpireLocked(absl::Time now, std::vector<tiers::PagePin>* release,
                                    std::vector<std::shared_ptr<Waiter>>* fire) {
  absl::Time next = now + config_.watch_period;
  for (auto it = leases_.begin(); it != leases_.end();) {
    Lease& l = it->second;
    if (l.expiry > now) {
      next = std::min(next, l.expiry);
      ++it;
      continue;
    }
    ++c_.lease_expired;
    if (!l.counted && watch_.size() < config_.max_watched) watch_[it->first] = now;
    UnleaseLocked(it->first, l);
    release->push_back(std::move(l.pin));
    leases_.erase(it++);
  }
  for (auto it = timed_.begin(); it != timed_.end();) {
    if ((*it)->fired.load()) {
      it = timed_.erase(it);
    } else if ((*it)->deadline <= now) {
      fire->push_back(*it);
      it = timed_.erase(it);
    } else {
      next = std::min(next, (*it)->deadline);
      ++it;
    }
  }
  if (!release->empty()) work_cv_.SignalAll();
  return next;
}

std::vector<JobId> Prefetcher::WatchedLocked() const {
  std::vector<JobId> ids;
  ids.reserve(watch_.size());
  for (const auto& [id, since] : watch_) ids.push_back(id);
  return ids;
}

void Prefetcher::SettleWatchLocked(absl::Span<const JobId> ids, absl::Span<const int> where) {
  const absl::Time now = absl::Now();
  for (size_t i = 0; i < ids.size(); ++i) {
    auto it = watch_.find(ids[i]);
    if (it == watch_.end()) continue;  // read meanwhile
    if (where[i] < 0 || where[i] > target_) {
      ++c_.wasted;
      watch_.erase(it);
    } else if (now - it->second > kWatchTtl) {
      watch_.erase(it);
    }
  }
}

void Prefetcher::TimerLoop() {
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    std::vector<tiers::PagePin> release;
    std::vector<std::shared_ptr<Waiter>> fire;
    absl::Time now = absl::Now();
    next_wake_ = ExpireLocked(now, &release, &fire);
    if (now >= next_probe_ && !watch_.empty()) {
      const std::vector<JobId> ids = WatchedLocked();
      mu_.Unlock();  // Locate takes shard locks: probe without ours
      std::vector<int> where(ids.size());
      for (size_t i = 0; i < ids.size(); ++i) where[i] = store_->Locate(ids[i].ns, ids[i].key);
      mu_.Lock();
      SettleWatchLocked(ids, where);
      next_probe_ = absl::Now() + config_.watch_period;
    }
    if (!release.empty() || !fire.empty()) {
      mu_.Unlock();
      release.clear();
      Fire(fire);
      mu_.Lock();
      continue;  // re-scan: time has passed
    }
    timer_cv_.WaitWithDeadline(&mu_, next_wake_);
  }
}

PrefetchCounters Prefetcher::counters() const {
  absl::MutexLock lock(&mu_);
  PrefetchCounters c = c_;
  c.queued = queue_.size();
  c.inflight = running_.size();
  c.leased_pages = leases_.size();
  c.pinned_bytes = pinned_bytes_;
  return c;
}

void Prefetcher::Shutdown() {
  if (shut_.exchange(true)) return;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    work_cv_.SignalAll();
    timer_cv_.Signal();
  }
  for (auto& t : workers_) t.join();  // each finishes the promotion it runs
  if (timer_.joinable()) timer_.join();
  std::vector<std::shared_ptr<Waiter>> fire;
  std::vector<tiers::PagePin> release;
  {
    absl::MutexLock lock(&mu_);
    for (const Job& job : queue_.Drain()) {
      ++c_.cancelled;
      WakeWaitersLocked(IdOf(job), &fire);
    }
    for (auto& [id, ws] : queued_waiters_) fire.insert(fire.end(), ws.begin(), ws.end());
    queued_waiters_.clear();
    fire.insert(fire.end(), timed_.begin(), timed_.end());
    timed_.clear();
    for (auto& [id, l] : leases_) release.push_back(std::move(l.pin));
    leases_.clear();
    leased_by_ns_.clear();
    watch_.clear();
    pinned_bytes_ = 0;
  }
  release.clear();
  // Every GET still waiting gets its callback now (it serves what it finds).
  Fire(fire);
}

}  // namespace kvtier::prefetch
