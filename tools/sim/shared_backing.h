// SharedBacking: what kvtier-sim puts in place of the Redis Cluster that
// several daemons share: a set of page records (one per namespace and page
// key, no bytes) under one capacity, dropped least recently used first, as
// a cluster with `maxmemory-policy allkeys-lru` drops values on its own.
#pragma once

#include <cstdint>
#include <list>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "kvtier/page_key.h"

namespace kvtier::sim {

// The name of a page's record: one per (namespace, key), whoever stored it,
// as tiers/remote/remote_record.h names them in the cluster.
std::string RecordName(absl::string_view ns, const PageKey& key);

// Commands the cluster served, all nodes together.
struct BackingCounters {
  uint64_t sets = 0;        // records written (new or replaced)
  uint64_t gets = 0;        // reads
  uint64_t get_misses = 0;  // reads of a record not there (dropped or deleted)
  uint64_t exists = 0;      // existence checks (one per key asked)
  uint64_t deletes = 0;     // records deleted by a node
  uint64_t lru_drops = 0;   // records the cluster's own eviction dropped
};

// Redis semantics, per command: SET makes a record the most recently used
// (and drops the least recently used ones above capacity); GET of a
// present record refreshes it; EXISTS does not (Redis looks keys up with
// LOOKUP_NOTOUCH for it); DEL removes it. Exact LRU over one capacity:
// Redis samples (maxmemory-samples) and each master evicts its own slots,
// which over many keys comes close. Single-threaded, like the replay.
class SharedBacking {
 public:
  explicit SharedBacking(uint64_t capacity_pages) : capacity_(capacity_pages) {}

  void Set(const std::string& name);
  bool Get(const std::string& name);
  bool Exists(const std::string& name);
  bool Delete(const std::string& name);

  uint64_t capacity_pages() const { return capacity_; }
  uint64_t records() const { return index_.size(); }
  const BackingCounters& counters() const { return counters_; }

 private:
  using Lru = std::list<std::string>;  // front: most recently used
  const uint64_t capacity_;
  Lru lru_;
  absl::flat_hash_map<std::string, Lru::iterator> index_;
  BackingCounters counters_;
};

}  // namespace kvtier::sim
