// A tier whose backing other nodes share (the remote tier): besides the
// Tier interface, it can say which pages another node stored there, and
// hand out slots for them. Kept apart from tier.h: only the store's
// cluster-wide lookup asks for it (dynamic_cast).
#pragma once

#include <optional>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "kvtier/page_key.h"
#include "tiers/tier.h"

namespace kvtier::tiers {

class SharedTier {
 public:
  virtual ~SharedTier() = default;
  // Which of `keys` of namespace `ns` the shared backing holds now, whoever
  // stored them (one round trip per node touched). Each found page gets a
  // slot of `bytes` (the caller's page size; the record's own header is
  // checked against it at read) that this node does not own: freeing it
  // never deletes the other node's copy. nullopt: absent, or the backing
  // is down. Thread-safe.
  virtual std::vector<std::optional<Slot>> AdoptShared(absl::string_view ns,
                                                       absl::Span<const PageKey> keys,
                                                       uint64_t bytes) = 0;
  // Write-through (--remote_admission=put): stores a copy of page `key` of
  // `ns` (n bytes at `bytes`, copied before the call returns) in the shared
  // backing, asynchronously, as a record this node does not own: no slot,
  // nothing charged here; the backing's own eviction bounds it. False when
  // the copy was not queued (the queue is full, or the backing is down):
  // the page stays local only. Thread-safe.
  virtual bool Publish(absl::string_view ns, const PageKey& key, const PageKey& parent,
                       const void* bytes, uint64_t n) = 0;
};

}  // namespace kvtier::tiers
