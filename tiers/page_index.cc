// IndexShard: map, LRU lists and the per-shard victim scan. Recency stamps
// are taken under the shard lock, so every list stays ordered by stamp and
// the global LRU page of a tier is the oldest of the lists' tails.
#include "tiers/page_index.h"

#include <cstring>

namespace kvtier::tiers {

PageEntry* IndexShard::FindLocked(NamespaceId ns, const PageKey& key) const {
  auto it = map_.find(IndexKey{ns, key});
  return it == map_.end() ? nullptr : *it;
}

void IndexShard::InsertLocked(PageEntry* e, uint64_t stamp) {
  map_.insert(e);
  e->stamp = stamp;
  ListFor(e->tier, e->ns).PushFront(e);
}

void IndexShard::DetachLocked(PageEntry* e) {
  map_.erase(e);
  ListFor(e->tier, e->ns).Remove(e);
  e->flags |= PageEntry::kDetached;
}

void IndexShard::TouchLocked(PageEntry* e, uint64_t stamp) {
  e->stamp = stamp;
  ListFor(e->tier, e->ns).MoveToFront(e);
}

void IndexShard::MoveTierLocked(PageEntry* e, uint8_t tier, uint64_t stamp) {
  ListFor(e->tier, e->ns).Remove(e);
  e->tier = tier;
  e->stamp = stamp;
  ListFor(tier, e->ns).PushFront(e);
}

namespace {

bool Matches(const PageEntry* e, VictimFilter filter) {
  if (e->pins > 0) return false;
  switch (filter) {
    case VictimFilter::kAny: return true;
    case VictimFilter::kClean: return e->clean();
    case VictimFilter::kCleanOrUnreused: return e->clean() || !(e->flags & PageEntry::kReused);
    case VictimFilter::kDirty: return !e->clean();
    case VictimFilter::kDirtyReused: return !e->clean() && (e->flags & PageEntry::kReused);
  }
  return false;
}

}  // namespace

Victim IndexShard::ScanList(const List& list, uint32_t scan_limit, VictimFilter filter,
                            uint64_t headroom) {
  Victim fallback;
  uint32_t scanned = 0;
  PageEntry* e = list.tail();
  for (; e != nullptr && scanned < scan_limit; e = List::Newer(e)) {
    if (!Matches(e, filter)) continue;
    if (e->slot.bytes > headroom) return fallback;  // the rest is within the reserve
    ++scanned;
    if (e->resident_children == 0) return Victim{e, e->stamp, true};
    if (fallback.entry == nullptr) fallback = Victim{e, e->stamp, false};
  }
  // Nothing eligible within the window: keep walking for any eligible page
  // so a run of pinned (or filtered) pages at the tail cannot stall eviction.
  if (fallback.entry == nullptr) {
    for (; e != nullptr; e = List::Newer(e)) {
      if (!Matches(e, filter)) continue;
      if (e->slot.bytes > headroom) break;
      // scan_limit 0 means plain LRU: every candidate counts as a leaf.
      return Victim{e, e->stamp, scan_limit == 0 || e->resident_children == 0};
    }
  }
  return fallback;
}

Victim IndexShard::FindVictimLocked(uint8_t tier, NamespaceId ns, uint32_t scan_limit,
                                    VictimFilter filter, const ReserveView* reserves) const {
  Victim best;
  if (tier >= lists_.size()) return best;
  const auto& by_ns = lists_[tier];
  auto scan = [&](NamespaceId id) {
    const List& list = by_ns[id];
    if (list.empty()) return Victim{};
    const uint64_t headroom = reserves == nullptr ? UINT64_MAX : reserves->Headroom(id);
    return headroom == 0 ? Victim{} : ScanList(list, scan_limit, filter, headroom);
  };
  if (ns != 0) return ns < by_ns.size() ? scan(ns) : best;
  for (NamespaceId id = 0; id < by_ns.size(); ++id) {
    Victim v = scan(id);
    if (v.BetterThan(best)) best = v;
  }
  return best;
}

PageEntry* IndexShard::FindRecentCleanLocked(uint8_t tier, uint32_t scan_limit) const {
  if (tier >= lists_.size()) return nullptr;
  for (const List& list : lists_[tier]) {
    uint32_t scanned = 0;
    for (PageEntry* e = list.head(); e != nullptr && scanned < scan_limit; e = e->next, ++scanned) {
      if (e->pins == 0 && e->clean()) return e;
    }
  }
  return nullptr;
}

std::vector<PageEntry*> IndexShard::DrainLocked() {
  std::vector<PageEntry*> out(map_.begin(), map_.end());
  map_.clear();
  lists_.clear();
  return out;
}

IndexShard::List& IndexShard::ListFor(uint8_t tier, NamespaceId ns) {
  if (tier >= lists_.size()) lists_.resize(tier + 1);
  auto& by_ns = lists_[tier];
  if (ns >= by_ns.size()) by_ns.resize(ns + 1);
  return by_ns[ns];
}

PageIndex::PageIndex(uint32_t shards) {
  while ((1u << shard_bits_) < shards) ++shard_bits_;
  for (uint32_t i = 0; i < (1u << shard_bits_); ++i) {
    shards_.push_back(std::make_unique<IndexShard>());
  }
}

IndexShard& PageIndex::ShardFor(NamespaceId ns, const PageKey& key) {
  // Keys are SHA-256 prefixes, but tests and tools also use small counters,
  // so mix before taking the top bits.
  uint64_t lo, hi;
  std::memcpy(&lo, key.bytes.data(), 8);
  std::memcpy(&hi, key.bytes.data() + 8, 8);
  uint64_t h = (lo ^ (hi * 0x9E3779B97F4A7C15ull) ^ ns) * 0xD6E8FEB86659FD93ull;
  h ^= h >> 32;
  return *shards_[shard_bits_ == 0 ? 0 : (h * 0x9E3779B97F4A7C15ull) >> (64 - shard_bits_)];
}

}  // namespace kvtier::tiers
