// The machine's floor under LOOKUP at scale (kvtier-scale-bench): a chain
// LOOKUP at millions of pages is bound by random cache-line loads, a table
// line and then the entry it names, per key. This measures that access
// pattern alone, with the same look-ahead, over an array of a given size, so
// the store's 10M ÷ 1M LOOKUP ratio can be read against what the memory
// system itself charges at those footprints in the same run (on a VM with
// nested paging, a random line over 1.4 GiB costs about twice one over
// 150 MiB: TLB reach and page-walk caches, not the index).
#pragma once

#include <cstdint>
#include <random>

namespace kvtier::tiers::bench {

class MemoryFloor {
 public:
  // An array of `bytes` (rounded down to whole lines) on transparent huge
  // pages, as the index's memory is, every line naming another at random.
  explicit MemoryFloor(uint64_t bytes, uint64_t seed);
  ~MemoryFloor();
  MemoryFloor(const MemoryFloor&) = delete;
  MemoryFloor& operator=(const MemoryFloor&) = delete;

  // p50 over `ops` operations of `keys` keys each, in microseconds: per key
  // one random line, loaded 8 keys ahead, and then the line it names
  // (TierManager::Lookup's schedule: buckets ahead, entries on use).
  double MeasureP50Us(uint32_t keys, uint32_t ops, std::mt19937_64& rng);

 private:
  char* base_ = nullptr;
  uint64_t bytes_ = 0, lines_ = 0;
};

}  // namespace kvtier::tiers::bench
