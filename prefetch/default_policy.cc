// The default prefetch policy (prefetch_policy.h): promote every NVMe hit of
// a LOOKUP, leading pages first, and admit prefetch only inside the pinned
// bytes budget and never while a demand read of a lower tier is running.
#include <algorithm>

#include "prefetch/prefetch_policy.h"

namespace kvtier::prefetch {
namespace {

class DefaultPolicy final : public PrefetchPolicy {
 public:
  explicit DefaultPolicy(const DefaultPolicyConfig& c) : c_(c) {}

  std::string_view name() const override { return "default"; }

  std::vector<uint32_t> SelectLookahead(absl::Span<const bool> below_target) const override {
    std::vector<uint32_t> out;
    for (uint32_t i = 0; i < below_target.size() && out.size() < c_.max_lookahead_pages; ++i)
      if (below_target[i]) out.push_back(i);
    return out;
  }

  int32_t LookaheadPriority() const override { return 0; }
  absl::Duration LookaheadDeadline() const override { return c_.lookahead_deadline; }

  absl::Duration Lease(JobClass cls, absl::Duration requested) const override {
    absl::Duration d = requested > absl::ZeroDuration() ? requested : c_.default_lease;
    return std::min(d, c_.max_lease);
  }

  bool Admit(const Job& job, const PrefetchLoad& load) const override {
    if (c_.yield_to_demand && load.demand_io > 0) return false;
    // One job always fits when nothing is pinned, so a budget smaller than
    // a page cannot stall prefetch forever.
    if (load.pinned_bytes == 0) return true;
    return load.pinned_bytes + job.bytes <= load.max_pinned_bytes;
  }

 private:
  const DefaultPolicyConfig c_;
};

}  // namespace

std::string_view JobClassName(JobClass c) {
  switch (c) {
    case JobClass::kDemand: return "demand";
    case JobClass::kHint: return "hint";
    case JobClass::kLookahead: return "lookahead";
  }
  return "?";
}

std::unique_ptr<PrefetchPolicy> MakeDefaultPolicy(const DefaultPolicyConfig& config) {
  return std::make_unique<DefaultPolicy>(config);
}

}  // namespace kvtier::prefetch
