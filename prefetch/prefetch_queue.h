// PrefetchQueue: the ordered set of promotions not yet started, at most one
// per (namespace, key). Order: class (demand, hint, lookahead), then
// priority (larger first), then deadline (earlier first, none last), then
// arrival. A second request for a queued key merges into the first.
//
// Not thread-safe: the Prefetcher guards it with its mutex.
#pragma once

#include <cstddef>
#include <optional>
#include <set>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "prefetch/prefetch_policy.h"

namespace kvtier::prefetch {

struct JobId {
  tiers::NamespaceId ns = 0;
  PageKey key;
  friend bool operator==(const JobId& a, const JobId& b) { return a.ns == b.ns && a.key == b.key; }
  template <typename H>
  friend H AbslHashValue(H h, const JobId& id) {
    return H::combine(std::move(h), id.ns, id.key);
  }
};
inline JobId IdOf(const Job& j) { return JobId{j.ns, j.key}; }

class PrefetchQueue {
 public:
  enum class AddResult { kQueued, kMerged, kFull };

  explicit PrefetchQueue(size_t capacity) : capacity_(capacity) {}

  // Queues `job`, or merges it into the queued job of the same key: the
  // merged job takes the more urgent class and priority, the later deadline
  // (someone still wants it until then) and the longer lease. kFull when
  // the queue holds `capacity` jobs and the key is not among them.
  AddResult Add(Job job);
  // The most urgent job, removed; nullopt when empty.
  std::optional<Job> Pop();
  // The most urgent job, left queued; nullptr when empty. Valid until the
  // next mutation.
  const Job* Peek() const;
  // The most urgent job for which `pred` holds, left queued; nullptr when
  // none. Lets the Prefetcher pass over jobs of namespaces at their share of
  // the budget without reordering anything (they keep their place).
  template <typename Pred>
  const Job* FirstWhere(Pred pred) const {
    for (const Job& j : jobs_)
      if (pred(j)) return &j;
    return nullptr;
  }
  // Removes the queued job of `id` and returns it; nullopt when not queued.
  std::optional<Job> Take(const JobId& id);
  // Raises a queued job to the demand class (a GET waits on it) and marks it
  // demanded. False when the key is not queued.
  bool Demand(const JobId& id);
  bool Contains(const JobId& id) const { return index_.contains(id); }
  // The queued job of `id`, or nullptr. Valid until the next mutation.
  const Job* Find(const JobId& id) const {
    auto it = index_.find(id);
    return it == index_.end() ? nullptr : &*it->second;
  }
  // Removes every job; returns them in queue order.
  std::vector<Job> Drain();
  size_t size() const { return index_.size(); }
  bool empty() const { return index_.empty(); }

 private:
  struct Before {
    bool operator()(const Job& a, const Job& b) const;
  };
  using Set = std::set<Job, Before>;
  void Reinsert(Set::iterator it, Job merged);

  const size_t capacity_;
  uint64_t next_seq_ = 0;
  Set jobs_;
  absl::flat_hash_map<JobId, Set::iterator> index_;
};

}  // namespace kvtier::prefetch
