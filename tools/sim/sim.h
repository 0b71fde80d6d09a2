// kvtier-sim's common vocabulary: a request as the sim sees it (the page-id
// chain kvtier-stress looks up and PUTs, plus its decode pages), the result
// of one policy run, and the page-id to PageKey mapping.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvtier/page_key.h"

namespace kvtier::sim {

struct SimRequest {
  // Input page ids, first page first. Prefix-closed: an id names its whole
  // prefix, so page i's parent is page i-1 (page 0 has none).
  std::vector<uint64_t> pages;
  // Pages the decode completes, PUT after the input pages with the last
  // input page as parent. Never looked up (no later request names them).
  std::vector<uint64_t> decode;
};

struct TierHits {
  std::string tier;  // "host", "nvme", "remote"
  uint64_t hits = 0;
};

// One node's commands to the shared cache beside its store (the cluster),
// named after the Redis commands that serve them in kvtierd.
struct RemoteCounters {
  uint64_t reads = 0;          // keys GETs fetched (those missing in the store)
  uint64_t read_misses = 0;    // of those: no record (dropped since the LOOKUP)
  uint64_t writes = 0;         // records published: pages leaving the last tier, or PUTs
  uint64_t write_through = 0;  // of those: published by a PUT (admission put)
  uint64_t exists = 0;         // keys checked for LOOKUP misses (Contains)
  uint64_t adopted = 0;        // fetched pages stored in the node's store (as PUTs)
  uint64_t deletes = 0;        // records a DELETE forgot (kvtier-stress sends none)

  void Add(const RemoteCounters& o);
};

// One policy over one trace at one capacity. Hits are prefix hits: per
// request, the leading run of input pages present when it arrives.
struct SimResult {
  // The store's eviction policy ("lru", "2q": a TierManager replay),
  // "belady" or "infinite".
  std::string policy;
  uint64_t capacity_pages = 0;  // 0 for the infinite bound
  uint64_t requests = 0;
  uint64_t refs = 0;  // input page references (the hit-rate denominator)
  uint64_t hits = 0;
  std::vector<TierHits> tier_hits;  // store runs: hits by the tier LOOKUP named
  // TierManager counters at the end of a store run.
  uint64_t evictions = 0, demotions = 0, promotions = 0, dropped = 0;
  uint64_t not_stored = 0;  // PUT pages refused (nothing evictable)
  double seconds = 0;       // wall time of the run
  RemoteCounters remote;    // runs with a shared cache

  double hit_rate() const { return refs == 0 ? 0 : static_cast<double>(hits) / refs; }
  double tier_rate(const std::string& tier) const;
  bool is_store() const { return policy != "belady" && policy != "infinite"; }
};

// The PageKey the sim uses for page id `id`: the id little-endian in bytes
// 0-7 and its complement in bytes 8-15, so no id maps to the zero key that
// means "no parent". kvtier-stress derives SHA-256 keys instead; the choice
// only decides which index shard a page lands in (eviction scans each
// shard's LRU tail), not the policy.
PageKey KeyForPage(uint64_t id);

}  // namespace kvtier::sim
