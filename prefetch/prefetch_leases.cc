// Prefetcher: what happens after a promotion — the lease that keeps the page
// pinned until its GET (or expiry), the timer thread that ends leases and
// overdue waits, the watch that counts promoted pages evicted unread
// (wasted), the demand-read scope, and shutdown.
#include <algorithm>

#include "absl/container/flat_hash_set.h"

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
  if (auto f = inflight_by_ns_.find(job.ns); f != inflight_by_ns_.end()) {
    f->second -= std::min(f->second, job.bytes);
    if (f->second == 0) inflight_by_ns_.erase(f);
  }
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
    // A promoted page left unleased (none asked for, over the share, or
    // past the lifetime bound) is watched like an expired lease, so its read
    // still counts as in time.
    const bool watch = run.is_prefetch && !late && watch_.size() < config_.max_watched;
    std::optional<absl::Time> first;
    if (job.lease <= absl::ZeroDuration()) {
      if (watch) watch_[id] = now;  // the pin goes back below
    } else if (auto old = leases_.find(id); old != leases_.end()) {
      // Keeps its pin; never past its first grant + max_lease.
      old->second.expiry = std::max(
          old->second.expiry, std::min(now + job.lease, old->second.granted + max_lease_));
    } else if (first = FirstGrantLocked(id, now); !first) {
      ++c_.lease_bound_refused;
      if (watch) watch_[id] = now;
    } else if (LeasedLocked(job.ns) + bytes > ShareLocked(job.ns, now)) {
      ++c_.lease_refused;
      if (watch) watch_[id] = now;
    } else {
      GrantLocked(id, std::move(result.pin), now, *first, job.lease, bytes,
                  /*counted=*/late || !run.is_prefetch);
    }
  }
  if (result.pin.valid()) *release = std::move(result.pin);
  for (auto& w : run.waiters)
    if (--w->remaining == 0) fire->push_back(w);
  WakeWaitersLocked(id, fire);
  work_cv_.SignalAll();  // budget freed
}

uint32_t Prefetcher::LeaseHits(tiers::NamespaceId ns, absl::Span<const PageKey> keys,
                               absl::Duration lease, uint32_t* leased) {
  lease = std::min(lease, max_lease_);
  std::vector<tiers::PagePin> release;  // declared first: dropped after the unlocks
  uint32_t hits = 0, leased_keys = 0;
  // The namespace's share, once per call rather than once per key (it scans
  // every active namespace): a tenant arriving meanwhile gets its share from
  // the revocation below, so a share a few keys old costs no one.
  uint64_t share = 0;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = absl::Now();
    MarkActiveLocked(ns, now);
    share = ShareLocked(ns, now);
  }
  for (const PageKey& key : keys) {
    const JobId id{ns, key};
    if (ExtendLease(id, lease, max_lease_)) {
      ++hits;
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
    auto l = leases_.find(id);
    if (l != leases_.end() && l->second.granted + max_lease_ > now) {
      // Leased meanwhile.
      l->second.expiry =
          std::max(l->second.expiry, std::min(now + lease, l->second.granted + max_lease_));
      release.push_back(std::move(*hold));
      ++hits;
      ++leased_keys;
      continue;
    }
    // Held for max_lease in this window already (a lease at its bound the
    // timer has not ended yet, or a remembered first grant), or the
    // namespace's grant records are full: a hit, not held. Checked before
    // the share, so it costs the namespace none of it.
    std::optional<absl::Time> first;
    if (l == leases_.end()) first = FirstGrantLocked(id, now);
    if (!first) {
      ++c_.lease_bound_refused;
      release.push_back(std::move(*hold));
      ++hits;
      continue;
    }
    const uint64_t bytes = hold->bytes();
    const bool over_share = LeasedLocked(ns) + bytes > share;
    // Within its share but the budget is full: take the excess back from
    // the namespaces over their (shrunk) shares first.
    if (over_share || (pinned_bytes_ + bytes > max_pinned_bytes_ &&
                       (RevokeOverShareLocked(now, &release) == 0 ||
                        pinned_bytes_ + bytes > max_pinned_bytes_))) {
      ++c_.lookup_lease_refused;
      release.push_back(std::move(*hold));
      break;
    }
    // counted: a lookup lease is not a prefetch, so its read is not "in time".
    GrantLocked(id, std::move(*hold), now, *first, lease, bytes, /*counted=*/true);
    ++c_.lookup_leased;
    ++hits;
    ++leased_keys;
  }
  if (leased != nullptr) *leased = leased_keys;
  return hits;
}

bool Prefetcher::ExtendLease(const JobId& id, absl::Duration lease, absl::Duration max_lease) {
  absl::MutexLock lock(&mu_);
  auto l = leases_.find(id);
  if (l == leases_.end()) return false;
  const absl::Time now = absl::Now();
  // A lease at its bound (the timer has not ended it yet) is not renewed:
  // the caller's slow path counts the page past the bound.
  if (l->second.granted + max_lease <= now) return false;
  l->second.expiry = std::max(l->second.expiry, std::min(now + lease, l->second.granted + max_lease));
  return true;
}

void Prefetcher::GrantLocked(const JobId& id, tiers::PagePin pin, absl::Time now, absl::Time first,
                             absl::Duration lease, uint64_t bytes, bool counted) {
  Lease l{std::move(pin), std::min(now + lease, first + max_lease_), first, bytes, counted,
          next_lease_seq_++};
  pinned_bytes_ += bytes;
  leased_by_ns_[id.ns] += bytes;
  RememberGrantLocked(id, first);
  if (l.expiry < next_wake_) timer_cv_.Signal();
  leases_.emplace(id, std::move(l));
}

void Prefetcher::MarkActiveLocked(tiers::NamespaceId ns, absl::Time now) { last_asked_[ns] = now; }

uint64_t Prefetcher::LeasedLocked(tiers::NamespaceId ns) const {
  auto it = leased_by_ns_.find(ns);
  return it == leased_by_ns_.end() ? 0 : it->second;
}

uint64_t Prefetcher::UsageLocked(tiers::NamespaceId ns) const {
  uint64_t used = 0;
  if (auto it = leased_by_ns_.find(ns); it != leased_by_ns_.end()) used += it->second;
  if (auto it = inflight_by_ns_.find(ns); it != inflight_by_ns_.end()) used += it->second;
  return used;
}

uint64_t Prefetcher::ShareLocked(tiers::NamespaceId ns, absl::Time now) {
  // Active: holding leases or promotions, or asked within the window. A
  // handful of tenants: the set is rebuilt on each call.
  absl::flat_hash_set<tiers::NamespaceId> active = {ns};
  for (auto it = last_asked_.begin(); it != last_asked_.end();) {
    if (now - it->second <= config_.share_active_window) {
      active.insert(it->first);
    } else if (!leased_by_ns_.contains(it->first) && !inflight_by_ns_.contains(it->first)) {
      last_asked_.erase(it++);  // idle: forgotten
      continue;
    }
    ++it;
  }
  for (const auto& [n, b] : leased_by_ns_) active.insert(n);
  for (const auto& [n, b] : inflight_by_ns_) active.insert(n);
  return std::min(max_leased_per_ns_, std::max<uint64_t>(1, max_pinned_bytes_ / active.size()));
}

uint64_t Prefetcher::RevokeOverShareLocked(absl::Time now, std::vector<tiers::PagePin>* release) {
  absl::flat_hash_map<tiers::NamespaceId, uint64_t> excess;  // leased bytes to give back
  for (const auto& [ns, leased] : leased_by_ns_) {
    const uint64_t share = ShareLocked(ns, now);
    if (leased > share) excess[ns] = leased - share;
  }
  if (excess.empty()) return 0;
  // The newest leases first: a chain's leading pages were leased first, and
  // a prefix that keeps its head keeps its hits (the tail alone is useless).
  std::vector<std::pair<uint64_t, JobId>> newest;
  for (const auto& [id, l] : leases_)
    if (excess.contains(id.ns)) newest.emplace_back(l.seq, id);
  std::sort(newest.begin(), newest.end(),
            [](const auto& a, const auto& b) { return a.first > b.first; });
  uint64_t freed = 0;
  for (const auto& [seq, id] : newest) {
    uint64_t& left = excess[id.ns];
    if (left == 0) continue;
    auto it = leases_.find(id);
    left -= std::min(left, it->second.bytes);
    freed += it->second.bytes;
    ++c_.lease_revoked;
    UnleaseLocked(id, it->second);
    release->push_back(std::move(it->second.pin));
    leases_.erase(it);
  }
  if (freed > 0) work_cv_.SignalAll();
  return freed;
}

std::optional<absl::Time> Prefetcher::FirstGrantLocked(const JobId& id, absl::Time now) {
  auto g = grants_.find(id.ns);
  if (g == grants_.end()) return now;
  GrantRecords& r = g->second;
  while (!r.order.empty() && r.order.front().first + lease_window_ <= now) {
    r.first.erase(r.order.front().second);
    r.order.pop_front();
  }
  if (auto f = r.first.find(id.key); f != r.first.end()) {
    if (f->second + max_lease_ <= now) return std::nullopt;  // held its max_lease this window
    return f->second;
  }
  if (r.first.size() >= config_.max_grant_records_per_ns) return std::nullopt;
  return now;
}

void Prefetcher::RememberGrantLocked(const JobId& id, absl::Time first) {
  GrantRecords& r = grants_[id.ns];
  if (r.first.emplace(id.key, first).second) r.order.emplace_back(first, id.key);
}

void Prefetcher::AgeGrantsLocked(absl::Time now) {
  for (auto g = grants_.begin(); g != grants_.end();) {
    GrantRecords& r = g->second;
    while (!r.order.empty() && r.order.front().first + lease_window_ <= now) {
      r.first.erase(r.order.front().second);
      r.order.pop_front();
    }
    if (r.order.empty()) {
      grants_.erase(g++);
    } else {
      ++g;
    }
  }
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
  AgeGrantsLocked(now);
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
    inflight_by_ns_.clear();
    grants_.clear();
    watch_.clear();
    pinned_bytes_ = 0;
  }
  release.clear();
  // Every GET still waiting gets its callback now (it serves what it finds).
  Fire(fire);
}

}  // namespace kvtier::prefetch
