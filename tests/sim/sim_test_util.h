// Helpers shared by the kvtier-sim tests: building requests and replay
// configurations by hand.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <vector>

#include "tools/sim/policy_replay.h"
#include "tools/sim/sim.h"

namespace kvtier::sim::testing {

inline SimRequest Req(std::initializer_list<uint64_t> pages,
                      std::initializer_list<uint64_t> decode = {}) {
  return SimRequest{std::vector<uint64_t>(pages), std::vector<uint64_t>(decode)};
}

// Watermarks at 1.0/0.999 never trigger the stand-in evictor for a tier of
// fewer than 1000 pages, so eviction is inline only, when a tier is full:
// plain capacity, easy to follow by hand.
inline ReplayConfig HandConfig(uint64_t host_pages) {
  ReplayConfig c;
  c.host = PagesTier(host_pages);
  c.store.high_watermark = 1.0;
  c.store.low_watermark = 0.999;
  c.decode = true;
  return c;
}

}  // namespace kvtier::sim::testing
