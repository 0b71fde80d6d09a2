// PrefetchQueue: an ordered std::set plus an index by key, so a merge or a
// demand upgrade re-positions one job in O(log n).
#include "prefetch/prefetch_queue.h"

#include <algorithm>
#include <tuple>

namespace kvtier::prefetch {

bool PrefetchQueue::Before::operator()(const Job& a, const Job& b) const {
  // Larger priority first: compare negated values.
  return std::make_tuple(static_cast<int>(a.cls), -static_cast<int64_t>(a.priority), a.deadline,
                         a.seq) < std::make_tuple(static_cast<int>(b.cls),
                                                  -static_cast<int64_t>(b.priority), b.deadline,
                                                  b.seq);
}

void PrefetchQueue::Reinsert(Set::iterator it, Job merged) {
  const JobId id = IdOf(merged);
  jobs_.erase(it);
  index_[id] = jobs_.insert(std::move(merged)).first;
}

PrefetchQueue::AddResult PrefetchQueue::Add(Job job) {
  const JobId id = IdOf(job);
  auto found = index_.find(id);
  if (found == index_.end()) {
    if (index_.size() >= capacity_) return AddResult::kFull;
    job.seq = next_seq_++;
    index_[id] = jobs_.insert(std::move(job)).first;
    return AddResult::kQueued;
  }
  Job merged = *found->second;
  merged.cls = std::min(merged.cls, job.cls);
  merged.priority = std::max(merged.priority, job.priority);
  merged.deadline = std::max(merged.deadline, job.deadline);
  merged.lease = std::max(merged.lease, job.lease);
  merged.bytes = std::max(merged.bytes, job.bytes);
  merged.demanded = merged.demanded || job.demanded;
  Reinsert(found->second, std::move(merged));
  return AddResult::kMerged;
}

std::optional<Job> PrefetchQueue::Pop() {
  if (jobs_.empty()) return std::nullopt;
  Job job = *jobs_.begin();
  index_.erase(IdOf(job));
  jobs_.erase(jobs_.begin());
  return job;
}

std::optional<Job> PrefetchQueue::Take(const JobId& id) {
  auto found = index_.find(id);
  if (found == index_.end()) return std::nullopt;
  Job job = *found->second;
  jobs_.erase(found->second);
  index_.erase(found);
  return job;
}

const Job* PrefetchQueue::Peek() const { return jobs_.empty() ? nullptr : &*jobs_.begin(); }

bool PrefetchQueue::Demand(const JobId& id) {
  auto found = index_.find(id);
  if (found == index_.end()) return false;
  Job merged = *found->second;
  merged.cls = JobClass::kDemand;
  merged.demanded = true;
  // A GET is waiting: its page must not be dropped for a past deadline.
  merged.deadline = absl::InfiniteFuture();
  Reinsert(found->second, std::move(merged));
  return true;
}

std::vector<Job> PrefetchQueue::Drain() {
  std::vector<Job> out(jobs_.begin(), jobs_.end());
  jobs_.clear();
  index_.clear();
  return out;
}

}  // namespace kvtier::prefetch
