// SimResult helpers and the page-id to PageKey mapping.
#include "tools/sim/sim.h"

namespace kvtier::sim {

double SimResult::tier_rate(const std::string& tier) const {
  for (const TierHits& t : tier_hits) {
    if (t.tier == tier) return refs == 0 ? 0 : static_cast<double>(t.hits) / refs;
  }
  return 0;
}

void RemoteCounters::Add(const RemoteCounters& o) {
  reads += o.reads;
  read_misses += o.read_misses;
  writes += o.writes;
  write_through += o.write_through;
  exists += o.exists;
  adopted += o.adopted;
  deletes += o.deletes;
}

PageKey KeyForPage(uint64_t id) {
  PageKey k;
  const uint64_t hi = ~id;
  for (int b = 0; b < 8; ++b) {
    k.bytes[b] = static_cast<uint8_t>(id >> (8 * b));
    k.bytes[8 + b] = static_cast<uint8_t>(hi >> (8 * b));
  }
  return k;
}

}  // namespace kvtier::sim
