// Sizing (kvtier-sim --target_hit_rate): how many GiB of host RAM and NVMe a
// model's KV pages need for a workload to reach a hit rate. The answer comes
// from replaying the trace through the daemon's own policy (ReplayTierManager)
// at candidate capacities, not from a formula: the smallest RAM-only capacity
// that reaches the target (a geometric bisection, within 2%), then a RAM +
// NVMe split of it checked by a two-tier replay and grown until it reaches
// the target too (a page may sit in both tiers, so the split can need more).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kvtier/layout.h"
#include "tools/sim/policy_replay.h"
#include "tools/sim/sim.h"

namespace kvtier::sim {

struct SizingConfig {
  Layout layout;               // the model's KV page
  double target = 0;           // hit rate, (0, 1)
  uint64_t host_bytes = 0;     // RAM of the split to check (0: a quarter of the total)
  uint64_t slab_bytes = 16ull << 20;
};

struct SizingResult {
  uint64_t page_bytes = 0;
  double bytes_per_token = 0;
  uint64_t pages = 0;          // RAM-only pages that reach the target
  double hit_rate = 0;         // at `pages`
  double infinite = 0;         // the trace's bound
  uint64_t split_host_pages = 0, split_nvme_pages = 0;
  double split_hit_rate = 0;   // the two-tier replay of that split
  int probes = 0;              // replays run
};

// FailedPrecondition when the target is at or above the infinite-cache
// bound (no capacity reaches it), naming the bound.
absl::StatusOr<SizingResult> SizeFor(absl::Span<const SimRequest> requests,
                                     const ReplayConfig& base, const SimResult& infinite,
                                     const SizingConfig& config);

std::string FormatSizing(const SizingConfig& config, const SizingResult& r);

// "llama3-8b", "llama3-70b", "mistral-7b", "qwen2-7b", or
// "LAYERS:KV_HEADS:HEAD_DIM": the model part of a Layout.
absl::StatusOr<Layout> NamedModelLayout(const std::string& name);

}  // namespace kvtier::sim
