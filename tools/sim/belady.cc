// Belady's MIN and the infinite-cache bound over page-id chains. Next uses
// are counted in requests (every page of a request is used "at once"), with
// the page's depth in its chain breaking ties, deepest evicted first.
#include "tools/sim/belady.h"

#include <limits>
#include <set>
#include <tuple>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/time/clock.h"

namespace kvtier::sim {
namespace {

constexpr uint64_t kNever = std::numeric_limits<uint64_t>::max();

// next[r][i]: the index of the next request after r that uses page
// requests[r].pages[i], or kNever.
std::vector<std::vector<uint64_t>> NextUses(absl::Span<const SimRequest> requests) {
  std::vector<std::vector<uint64_t>> next(requests.size());
  absl::flat_hash_map<uint64_t, uint64_t> seen_at;  // page -> earliest later request
  for (size_t r = requests.size(); r-- > 0;) {
    const std::vector<uint64_t>& pages = requests[r].pages;
    next[r].resize(pages.size());
    for (size_t i = 0; i < pages.size(); ++i) {
      auto it = seen_at.find(pages[i]);
      next[r][i] = it == seen_at.end() ? kNever : it->second;
    }
    for (uint64_t id : pages) seen_at[id] = r;
  }
  return next;
}

// Cache entries ordered by eviction priority: the last one goes first.
using Rank = std::tuple<uint64_t /*next use*/, uint32_t /*depth*/, uint64_t /*id*/>;

class MinCache {
 public:
  explicit MinCache(uint64_t capacity) : capacity_(capacity) {}
  bool Contains(uint64_t id) const { return rank_of_.contains(id); }

  // Uses page `id` at chain depth `depth`; `next` is its next use.
  void Use(uint64_t id, uint32_t depth, uint64_t next) {
    const Rank rank{next, depth, id};
    if (auto it = rank_of_.find(id); it != rank_of_.end()) {
      order_.erase(it->second);
      it->second = rank;
      order_.insert(rank);
      return;
    }
    if (capacity_ == 0) return;
    if (rank_of_.size() >= capacity_) {
      const Rank worst = *order_.rbegin();
      if (!(rank < worst)) return;  // bypass: it is the page needed last
      order_.erase(std::prev(order_.end()));
      rank_of_.erase(std::get<2>(worst));
    }
    rank_of_.emplace(id, rank);
    order_.insert(rank);
  }

 private:
  const uint64_t capacity_;
  std::set<Rank> order_;
  absl::flat_hash_map<uint64_t, Rank> rank_of_;
};

}  // namespace

SimResult RunBelady(absl::Span<const SimRequest> requests, uint64_t capacity_pages) {
  const absl::Time start = absl::Now();
  SimResult out;
  out.policy = "belady";
  out.capacity_pages = capacity_pages;
  const std::vector<std::vector<uint64_t>> next = NextUses(requests);
  MinCache cache(capacity_pages);
  for (size_t r = 0; r < requests.size(); ++r) {
    const std::vector<uint64_t>& pages = requests[r].pages;
    uint64_t hits = 0;
    while (hits < pages.size() && cache.Contains(pages[hits])) ++hits;
    for (size_t i = 0; i < pages.size(); ++i) {
      cache.Use(pages[i], static_cast<uint32_t>(i), next[r][i]);
    }
    ++out.requests;
    out.refs += pages.size();
    out.hits += hits;
  }
  out.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  return out;
}

SimResult RunInfinite(absl::Span<const SimRequest> requests) {
  const absl::Time start = absl::Now();
  SimResult out;
  out.policy = "infinite";
  absl::flat_hash_set<uint64_t> seen;
  for (const SimRequest& r : requests) {
    uint64_t hits = 0;
    while (hits < r.pages.size() && seen.contains(r.pages[hits])) ++hits;
    seen.insert(r.pages.begin(), r.pages.end());
    ++out.requests;
    out.refs += r.pages.size();
    out.hits += hits;
  }
  out.capacity_pages = seen.size();  // what "infinite" needs for this trace
  out.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  return out;
}

}  // namespace kvtier::sim
