// The scale benchmark's workload (kvtier-scale-bench): a TierManager over one
// host tier of small pages, filled with prefix chains whose keys are derived
// from (namespace, chain, position), so nothing but the store holds memory
// per page; namespaces get chains and LOOKUPs by a Zipf law. Measures LOOKUP
// latency, eviction throughput and the process's memory per indexed page.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "absl/status/statusor.h"
#include "tiers/store/tier_manager.h"

namespace kvtier::tiers::bench {

struct ScaleConfig {
  uint32_t namespaces = 1;
  uint32_t chain_pages = 32;  // pages per chain (an 8k prompt at 256 tokens a page)
  uint32_t page_bytes = 16;
  double zipf_s = 1.0;          // namespace popularity: weight 1/rank^s
  uint64_t capacity_pages = 0;  // host tier capacity, in pages
  uint32_t index_shards = 16;
  uint64_t seed = 1;
  EvictionPolicy eviction = EvictionPolicy::kLru;  // the host tier's
};

// Draws ranks 0..n-1 with probability proportional to 1/(rank+1)^s.
class Zipf {
 public:
  Zipf(size_t n, double s);
  size_t operator()(std::mt19937_64& rng) const;

 private:
  std::vector<double> cdf_;
};

// /proc/self/status figures, in bytes.
struct ProcMemory {
  uint64_t rss = 0;    // VmRSS
  uint64_t anon = 0;   // RssAnon: the index (entries, maps, lists), not page bytes
  uint64_t shmem = 0;  // RssShmem: the host tier's arena (page bytes) touched so far
};
ProcMemory ReadProcMemory();

struct LookupStats {
  double p50_us = 0, p99_us = 0;
  double hit_rate = 0;  // keys found / keys asked
};

class ScaleStore {
 public:
  static absl::StatusOr<std::unique_ptr<ScaleStore>> Create(const ScaleConfig& config);

  // PUTs whole chains (one CommitAll each, like a PUT request) into
  // Zipf-chosen namespaces until the index holds at least `pages` pages.
  absl::Status GrowTo(uint64_t pages);
  // PUTs `pages` more pages' worth of chains (eviction makes the room).
  absl::Status PutChains(uint64_t pages);
  uint64_t IndexPages() const;
  uint64_t UsedBytes() const;

  // `n` LOOKUPs of whole chains: namespace by Zipf, chain uniform in it.
  LookupStats MeasureLookups(size_t n, std::mt19937_64& rng);
  // Evicts `pages` pages the way the evictor does (TierManager::EvictTo);
  // returns pages evicted per second.
  double MeasureEviction(uint64_t pages);
  // PUT rate, pages/s, into a full tier: each page makes its room inline.
  absl::StatusOr<double> MeasureFullPuts(uint64_t pages);

 private:
  explicit ScaleStore(const ScaleConfig& config);
  PageKey KeyOf(size_t ns_rank, uint64_t chain, uint32_t pos) const;
  absl::Status PutChain(size_t ns_rank);

  const ScaleConfig config_;
  std::unique_ptr<TierManager> mgr_;
  std::vector<NamespaceId> ids_;  // by popularity rank
  std::vector<uint64_t> chains_;  // chains PUT so far, by rank
  Zipf zipf_;
  std::mt19937_64 rng_;
  std::vector<PageKey> keys_;  // scratch: one chain
  std::vector<uint8_t> page_;
};

}  // namespace kvtier::tiers::bench
