// The two references kvtier-sim sets an LRU run against: Belady's offline
// optimum (evict the page whose next use is furthest) and the infinite-cache
// bound (every page seen before is a hit). Both count prefix hits, like the
// LRU run: a request's hits are the leading run of its pages present.
#pragma once

#include <cstdint>

#include "absl/types/span.h"
#include "tools/sim/sim.h"

namespace kvtier::sim {

// Belady's MIN over the input pages with bypass (a page whose next use is
// further than every cached page's is not cached at all). Ties on the next
// use go to the deeper page, so with prefix-closed ids (a child is never
// used without its parent) the cache stays prefix-closed and prefix hits
// equal MIN's page hits: no policy can score more. Decode pages are never
// looked up again, so an optimal cache never keeps them; they are skipped.
SimResult RunBelady(absl::Span<const SimRequest> requests, uint64_t capacity_pages);

// Hits of an unbounded cache that keeps every input page it has seen.
SimResult RunInfinite(absl::Span<const SimRequest> requests);

}  // namespace kvtier::sim
