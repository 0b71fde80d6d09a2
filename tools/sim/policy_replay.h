// Replays requests through the real tiers::TierManager over accounting-only
// tiers, doing per request what kvtier-stress asks of the daemon: LOOKUP the
// chain, GET the leading hits (pin, promote NVMe pages to host as the
// daemon's GET does), PUT the misses with parents, PUT the decode pages.
// The daemon's evictor thread is replaced by synchronous EvictTo calls at
// the points where the daemon kicks it.
#pragma once

#include <optional>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "tiers/tier_manager.h"
#include "tools/sim/accounting_tier.h"
#include "tools/sim/sim.h"

namespace kvtier::sim {

struct ReplayConfig {
  TierSize host;
  std::optional<TierSize> nvme;  // the second tier, as kvtierd --nvme_bytes
  // kvtierd's defaults; start_evictor_thread is ignored (always off).
  tiers::TierManagerConfig store;
  bool decode = true;  // PUT decode pages as kvtier-stress does
  // Pages per GET and per PUT call, as kvtier-stress --batch_pages (each
  // call commits on its own and kicks the evictor); 0: a whole chain per call.
  uint32_t batch_pages = 32;
  // When the stand-in evictor runs: after each daemon call that can kick it
  // (GET, PUT: an evictor that keeps up between requests), or after every
  // page reserved (one that never lags).
  enum class EvictAt { kCall, kPage };
  EvictAt evict_at = EvictAt::kCall;
};

// Runs every request in order from an empty store. Errors only for a bad
// configuration (e.g. a tier of zero pages).
absl::StatusOr<SimResult> ReplayTierManager(absl::Span<const SimRequest> requests,
                                            const ReplayConfig& config);

}  // namespace kvtier::sim
