// The store's per-namespace and per-tier state: byte charges, quotas and
// reserves, and the counters STATS reports, all atomics read without a lock.
// Internal to tiers/store/ (StoreCore, store_core.h, owns the tables of them).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tiers/store/tier_manager.h"
#include "tiers/tier.h"

namespace kvtier::tiers {

using Counter = std::atomic<uint64_t>;

struct NamespaceState {
  NamespaceState(std::string n, size_t tiers)
      : name(std::move(n)),
        quota(tiers, 0),
        reserve(tiers, 0),
        tier_bytes(new Counter[tiers]()),
        evicting(new Counter[tiers]()) {}
  const std::string name;
  std::vector<uint64_t> quota;            // per tier index; 0 = unlimited
  std::vector<uint64_t> reserve;          // per tier index; 0 = none. Fixed once added
  std::unique_ptr<Counter[]> tier_bytes;  // page bytes charged, incl. reservations
  // Bytes of pages that tier-wide evictions have picked and not yet
  // settled (still charged): a reserve claim each, so a batch of picks, or
  // two evictors at once, cannot together go below the reserve.
  std::unique_ptr<Counter[]> evicting;
  Counter pages{0};
  Counter lookup_hits{0}, lookup_misses{0}, get_hits{0}, get_misses{0};
  Counter puts{0}, dedup_puts{0}, quota_evictions{0};
};

struct TierState {
  std::unique_ptr<Tier> tier;
  uint64_t high_bytes = 0;   // evictor starts above this
  uint64_t low_bytes = 0;    // and stops at this
  uint64_t clean_bytes = 0;        // the cleaner keeps this many cold bytes clean...
  uint64_t clean_start_bytes = 0;  // ...once the tier holds more than this
  Counter pages{0}, pinned_pages{0}, hits{0}, misses{0}, evictions{0};
  Counter demotions{0}, promotions{0}, dropped{0}, admission_drops{0}, checksum_errors{0};
  Counter clean_pages{0}, clean_page_bytes{0};  // pages here with a durable copy below
  Counter cleaned{0};                           // pages the cleaner wrote back
  Counter durability_failures{0};               // PUT pages refused: their copy could not be made durable
  // Bytes moved through the tier's Address() (or by a device DMA) rather
  // than its Read/Write, which the tier cannot see: a GET served from a RAM
  // slot, a promotion read into one, a move's addressable side. Added to the
  // tier's own counters in Stats(), so BYTES IN/OUT count every byte once.
  Counter direct_in{0}, direct_out{0};
  // Some namespace reserves room here (set once, before that namespace is
  // visible): tier-wide victim picks only consult reserves when it is.
  std::atomic<bool> has_reserves{false};
};


// A durable slot whose record must go before the slot is reused, queued by
// a thread that may not do disk I/O and finished by the evictor thread.
struct PendingUnpersist {
  size_t tier = 0;
  NamespaceId ns = 0;
  Slot slot;
  PageMeta meta;  // ns_name points into the namespace's (immortal) name
};

}  // namespace kvtier::tiers
