// PrefetchPolicy: the small interface behind the Prefetcher's decisions —
// which hits of a LOOKUP to promote, how urgent lookahead is, how long a
// promoted page stays leased, and whether a job may start under the current
// load (backpressure). The Prefetcher (prefetcher.h) is the machinery: queue,
// threads, pins; a policy only decides. kvtier-sim may run policies offline.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "absl/time/time.h"
#include "absl/types/span.h"
#include "kvtier/page_key.h"
#include "tiers/store/tier_manager.h"

namespace kvtier::prefetch {

// Where a job came from. Lower values run first: a GET waiting on a page
// (demand) always goes before hints, which go before LOOKUP lookahead.
enum class JobClass : uint8_t { kDemand = 0, kHint = 1, kLookahead = 2 };
std::string_view JobClassName(JobClass c);

// One page to promote. `deadline` InfiniteFuture means none.
struct Job {
  tiers::NamespaceId ns = 0;
  PageKey key;
  JobClass cls = JobClass::kLookahead;
  int32_t priority = 0;  // larger is more urgent, within a class
  absl::Time deadline = absl::InfiniteFuture();
  absl::Duration lease = absl::ZeroDuration();  // pin after promotion; 0: none
  uint64_t bytes = 0;                           // page bytes, for the pinned-bytes budget
  absl::Time enqueued;
  uint64_t seq = 0;       // FIFO among equals; set by the queue
  bool demanded = false;  // a GET asked for it before it finished (late)
};

// What the Prefetcher is holding now, for Admit().
struct PrefetchLoad {
  size_t queued = 0;
  size_t inflight_pages = 0;
  uint64_t pinned_bytes = 0;      // leases + in-flight promotions
  uint64_t max_pinned_bytes = 0;  // the configured budget
  uint32_t demand_io = 0;         // demand reads of lower tiers in progress
};

class PrefetchPolicy {
 public:
  virtual ~PrefetchPolicy() = default;
  virtual std::string_view name() const = 0;

  // LOOKUP lookahead: indices of the chain's hits to promote, in the order to
  // queue them. below_target[i] is true when hit i sits below the target tier.
  virtual std::vector<uint32_t> SelectLookahead(absl::Span<const bool> below_target) const = 0;
  // Urgency of lookahead jobs (within the lookahead class) and how long one
  // stays useful: past it, a job not yet started is dropped.
  virtual int32_t LookaheadPriority() const = 0;
  virtual absl::Duration LookaheadDeadline() const = 0;
  // How long a promoted page stays pinned waiting for its GET. `requested`
  // is what the client asked for (0: no preference).
  virtual absl::Duration Lease(JobClass cls, absl::Duration requested) const = 0;
  // Backpressure: whether `job` may start now. Demand jobs are never asked.
  virtual bool Admit(const Job& job, const PrefetchLoad& load) const = 0;
};

struct DefaultPolicyConfig {
  uint32_t max_lookahead_pages = 4096;  // per LOOKUP
  absl::Duration lookahead_deadline = absl::Seconds(1);
  absl::Duration default_lease = absl::Seconds(2);
  absl::Duration max_lease = absl::Seconds(30);
  // Prefetch (not demand) waits while a demand read of a lower tier runs.
  bool yield_to_demand = true;
};

// Lookahead of every below-target hit, leading pages first; fixed leases;
// admission while the pinned-bytes budget holds and no demand read runs.
std::unique_ptr<PrefetchPolicy> MakeDefaultPolicy(const DefaultPolicyConfig& config);

}  // namespace kvtier::prefetch
