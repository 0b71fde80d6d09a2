// IndexShard: map, recency lists and the per-shard victim scan (the design
// is at the top of page_index.h). Recency stamps are taken under the shard
// lock (or, a LOOKUP's stamps taken before it, placed by stamp:
// RestampLocked), so every list stays ordered by stamp: a list's tail is its
// oldest page, and a shard's oldest page of a tier is the oldest of its tier
// list's tail and its reserved namespaces' tails. Under 2q a tier list is
// two (probation, protected), each in stamp order (a page falling back from
// protected to probation's head takes the stamp of the arrival that pushed
// it out).
#include "tiers/store/internal/page_index.h"

#include <algorithm>
#include <cstring>

namespace kvtier::tiers {
namespace {

// The one definition of what a victim scan may take (besides reserves):
// never a pinned page (a reader, a mover or a lease hold), and only pages
// of the kind the caller's eviction mode allows.
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

// Walks `first` from its tail to its head, then `then` (if any) the same
// way: eviction order over 2q's probation and protected lists.
template <typename List>
class TailCursor {
 public:
  TailCursor(const List& first, const List* then) : then_(then), e_(first.tail()) { Skip(); }
  PageEntry* get() const { return e_; }
  void Next() {
    e_ = List::Newer(e_);
    Skip();
  }
  static uint64_t Rank(const PageEntry* e) { return VictimRank(e); }

 private:
  void Skip() {
    if (e_ == nullptr && then_ != nullptr) {
      e_ = then_->tail();
      then_ = nullptr;
    }
  }
  const List* then_;
  PageEntry* e_;
};

// prefix's eviction order: the tails of the chain ends, the pages PUT once
// and the reused pages (in that order of offsets), merged by PrefixRank.
template <typename List>
class RankCursor {
 public:
  RankCursor(const List& ends, const List& once, const List& reused, uint64_t penalty,
             uint64_t bonus)
      : at_{ends.tail(), once.tail(), reused.tail()}, penalty_(penalty), bonus_(bonus) {
    Pick();
  }
  PageEntry* get() const { return at_[which_]; }
  void Next() {
    at_[which_] = List::Newer(at_[which_]);
    Pick();
  }
  uint64_t Rank(const PageEntry* e) const { return PrefixRank(e, penalty_, bonus_); }

 private:
  void Pick() {
    which_ = 0;
    uint64_t best = UINT64_MAX;
    for (int i = 0; i < 3; ++i) {
      if (at_[i] == nullptr) continue;
      const uint64_t r = Rank(at_[i]);
      if (r < best || at_[which_] == nullptr) {
        best = r;
        which_ = i;
      }
    }
  }
  PageEntry* at_[3];
  int which_ = 0;
  uint64_t penalty_, bonus_;
};

// Leaf-first within a window: the first leaf among the `scan_limit` first
// eligible pages in eviction order (the cursor's: a list from its tail, then
// another, or prefix's merge), else the first eligible non-leaf of that
// window. `headroom` cuts the list where a namespace's reserve begins.
template <typename Cursor>
Victim ScanList(Cursor c, uint32_t scan_limit, VictimFilter filter, uint64_t headroom) {
  Victim fallback;
  uint32_t scanned = 0;
  for (; c.get() != nullptr && scanned < scan_limit; c.Next()) {
    PageEntry* e = c.get();
    if (!Matches(e, filter)) continue;
    if (e->slot.bytes > headroom) return fallback;  // the rest is within the reserve
    ++scanned;
    if (e->resident_children == 0) return Victim{e, c.Rank(e), true};
    if (fallback.entry == nullptr) fallback = Victim{e, c.Rank(e), false};
  }
  // Nothing eligible within the window: keep walking for any eligible page
  // so a run of pinned (or filtered) pages at the tail cannot stall eviction.
  if (fallback.entry == nullptr) {
    for (; c.get() != nullptr; c.Next()) {
      PageEntry* e = c.get();
      if (!Matches(e, filter)) continue;
      if (e->slot.bytes > headroom) break;
      // scan_limit 0 means plain LRU: every candidate counts as a leaf.
      return Victim{e, c.Rank(e), scan_limit == 0 || e->resident_children == 0};
    }
  }
  return fallback;
}

// What a ghost remembers of a page: a hash with no per-process seed
// (absl's has one), so that one replay gives the same figures in every run
// (kvtier-sim: prefix's ghost table keeps a part of it and places it by
// another, so its figures depended on the seed).
uint64_t Fingerprint(NamespaceId ns, const PageKey& key) {
  uint64_t lo, hi;
  std::memcpy(&lo, key.bytes.data(), 8);
  std::memcpy(&hi, key.bytes.data() + 8, 8);
  uint64_t h = lo ^ (hi * 0xC2B2AE3D27D4EB4Full) ^ (uint64_t{ns} * 0x165667B19E3779F9ull);
  h ^= h >> 33;  // MurmurHash3's fmix64
  h *= 0xFF51AFD7ED558CCDull;
  h ^= h >> 33;
  h *= 0xC4CEB9FE1A85EC53ull;
  return h ^ (h >> 33);
}
uint64_t Fingerprint(const PageEntry* e) { return Fingerprint(e->ns, e->key); }

// Moves e (already restamped) below the pages of `list` newer than it: a
// few at most, those stamped since e's stamp was taken.
template <typename List>
void RelinkByStamp(List& list, PageEntry* e) {
  if (list.head() == e) return;  // the newest already, and its stamp only grew
  list.Remove(e);
  PageEntry* above = nullptr;
  for (PageEntry* p = list.head(); p != nullptr && p->stamp > e->stamp; p = List::Older(p)) {
    above = p;
  }
  list.InsertAfter(above, e);
}

template <typename List>
PageEntry* RecentClean(const List& list, uint32_t scan_limit) {
  uint32_t scanned = 0;
  for (PageEntry* e = list.head(); e != nullptr && scanned < scan_limit;
       e = List::Older(e), ++scanned) {
    if (e->pins == 0 && e->clean()) return e;
  }
  return nullptr;
}

}  // namespace

IndexShard::IndexShard(RankClock* clocks, uint32_t shards)
    : clocks_(clocks != nullptr ? clocks : own_clocks_.data()),
      shards_(std::max<uint32_t>(1, shards)) {
  for (auto& o : oldest_) o.store(UINT64_MAX, std::memory_order_relaxed);
}

PageEntry* IndexShard::FindLocked(NamespaceId ns, const PageKey& key) const {
  return map_.Find(IndexKey{ns, key});
}

void IndexShard::InsertLocked(PageEntry* e, uint64_t stamp) {
  map_.Insert(e);
  e->stamp = stamp;
  // 2q: a page PUT again soon after probation dropped it is one that is
  // reused; it skips probation.
  LinkLocked(e, Lists(e->tier).Recall(e));
  CountArrivalLocked(e);
}

void IndexShard::DetachLocked(PageEntry* e) {
  map_.Erase(e);
  // Leaving the index (an eviction, a DELETE): the next pick wants the page
  // that is first now anyway, so the hint is made exact here at no extra
  // cost; left low, every pick after an eviction scanned a second shard
  // (a fifth of the eviction rate at 1,000 namespaces).
  if (UnlinkLocked(e)) UpdateOldestLocked(e->tier);
  e->flags |= PageEntry::kDetached;
}

void IndexShard::TouchLocked(PageEntry* e, uint64_t stamp, bool reused) {
  const TierLists& l = Lists(e->tier);
  const bool lazy = LazyPromotion(l.policy) && !l.Reserved(e->ns);
  if (lazy && reused) {
    // s3fifo: a read marks the page, and nothing moves under the lock;
    // eviction looks at the mark (RequeueAccessedLocked).
    e->flags |= PageEntry::kAccessed;
    return;
  }
  // Other touches move the page to the head of its own segment, under
  // s3fifo too: a parent after its child's commit must stay newer than the
  // child (leaf-first; without it every pick found a chain's root at the
  // tail and scanned every shard for a leaf: a quarter of LRU's eviction
  // rate at 1,000 namespaces). Its mark stays.
  const uint8_t mark = e->flags & PageEntry::kAccessed;
  const bool protect = (reused && !lazy) || (e->flags & PageEntry::kProtected);
  UnlinkLocked(e);
  e->stamp = stamp;
  LinkLocked(e, protect);
  e->flags |= mark;
}

void IndexShard::RestampLocked(PageEntry* e, uint64_t stamp) {
  if (e->stamp >= stamp) return;
  TierLists& l = tiers_[e->tier];  // e is linked: its lists exist
  if (LazyPromotion(l.policy) && !l.Reserved(e->ns)) return;  // s3fifo: reorders nothing
  newest_stamp_ = std::max(newest_stamp_, stamp);
  NsList& own = l.by_ns[e->ns];
  const bool reserved = l.Reserved(e->ns);
  e->stamp = stamp;
  RelinkByStamp(own, e);
  if (!reserved) RelinkByStamp(l.ListOf(e), e);
  // A newer stamp never lowers the tier's oldest rank: the hint stays a
  // lower bound without loading the page that is first now (OldestStamp).
}

void IndexShard::MoveTierLocked(PageEntry* e, uint8_t tier, const Slot& slot, uint64_t stamp) {
  const uint8_t from = e->tier;
  if (tier > from) RememberEvictedLocked(e);  // demoted: evicted from `from`
  const bool was_first = UnlinkLocked(e);  // exact below, as in DetachLocked
  e->flags &= ~PageEntry::kWasProtected;  // of the old tier's lists
  e->slot = slot;
  e->tier = tier;
  e->stamp = stamp;
  TierLists& l = Lists(tier);
  // Up: a promotion, the page is being read. Down: an arrival, like a PUT.
  // Either way the tier's ghost is asked: a page read back from below after
  // this tier demoted it is what a ghost hit means (arc adapts to it, as to
  // a PUT again), and its fingerprint must not stay behind as a stale ghost.
  const bool recalled = l.Recall(e);
  LinkLocked(e, tier < from || recalled);  // (LinkLocked protects under 2q only)
  CountArrivalLocked(e);
  if (was_first) UpdateOldestLocked(from);
}

void IndexShard::RememberEvictedLocked(const PageEntry* e) {
  if (e->tier >= tiers_.size()) return;
  TierLists& l = tiers_[e->tier];
  if (!Segmented(l.policy) || l.Reserved(e->ns) || (e->flags & PageEntry::kProtected)) return;
  // The two ghosts together hold at most ghost_share x the shard's pages
  // (the larger gives way), so arc's second ghost costs no more memory.
  const size_t pages = l.Pages();
  const size_t cap = std::max<size_t>(1, static_cast<size_t>(pages * GhostShare(l.policy)));
  if (Ranked(l.policy)) {
    l.ghost_table.Push(Fingerprint(e), cap);
    return;
  }
  const bool second = l.policy == EvictionPolicy::kArc && (e->flags & PageEntry::kWasProtected);
  Ghost& into = second ? l.ghost_prot : l.ghost;
  Ghost& other = second ? l.ghost : l.ghost_prot;
  into.Push(Fingerprint(e), cap > other.set.size() ? cap - other.set.size() : 1);
}

bool IndexShard::TierLists::Recall(const PageEntry* e) {
  if (!Segmented(policy) || Reserved(e->ns)) return false;
  const uint64_t f = Fingerprint(e);
  if (Ranked(policy)) return ghost_table.Take(f);
  if (ghost.Take(f)) {
    if (policy == EvictionPolicy::kArc) {  // recency was short of room
      const uint64_t step =
          e->slot.bytes * std::max<uint64_t>(1, ghost_prot.set.size() / (ghost.set.size() + 1));
      prot_cap_bytes -= std::min(prot_cap_bytes, step);
    }
    return true;
  }
  if (policy != EvictionPolicy::kArc || !ghost_prot.Take(f)) return false;
  // The reused pages were.
  const uint64_t step =
      e->slot.bytes * std::max<uint64_t>(1, ghost.set.size() / (ghost_prot.set.size() + 1));
  prot_cap_bytes = std::min(share_bytes, prot_cap_bytes + step);
  return true;
}

void IndexShard::SetPolicyLocked(uint8_t tier, EvictionPolicy policy, uint64_t protected_cap,
                                 uint64_t share_bytes) {
  TierLists& l = Lists(tier);
  l.policy = policy;
  l.prot_cap_bytes = protected_cap;
  l.share_bytes = share_bytes;
}

size_t IndexShard::ProtectedLocked(uint8_t tier) const {
  return tier < tiers_.size() ? tiers_[tier].prot.size() : 0;
}

size_t IndexShard::GhostLocked(uint8_t tier) const {
  if (tier >= tiers_.size()) return 0;
  const TierLists& l = tiers_[tier];
  return l.ghost.set.size() + l.ghost_prot.set.size() + l.ghost_table.entries;
}

void IndexShard::Ghost::Push(uint64_t f, size_t cap) {
  if (!set.insert(f).second) return;
  order.push_back(f);
  while (order.size() > cap) {  // the oldest fingerprints go first
    set.erase(order.front());
    order.pop_front();
  }
}

bool IndexShard::Ghost::Take(uint64_t f) {
  // Its place in `order` stays until it reaches the front, where erasing an
  // absent fingerprint is a no-op (a re-pushed one may go early: harmless).
  return set.erase(f) > 0;
}

namespace {
// A GhostTable's bucket for fingerprint f (its high bits), and the 4 bytes
// kept of it (its low half; never 0, which marks an empty slot).
size_t GhostBucketOf(uint64_t f, size_t buckets) {
  return static_cast<size_t>((static_cast<unsigned __int128>(f) * buckets) >> 64);
}
uint32_t GhostTag(uint64_t f) {
  const auto t = static_cast<uint32_t>(f);
  return t == 0 ? 1 : t;
}
}  // namespace

void IndexShard::GhostTable::Push(uint64_t f, size_t cap) {
  constexpr size_t kWays = std::tuple_size_v<decltype(GhostBucket::tags)>;
  const size_t want = std::max<size_t>(1, (cap + kWays - 1) / kWays);
  if (buckets.empty() || want > 2 * buckets.size() || 4 * want < buckets.size()) {
    buckets.assign(want, GhostBucket{});  // a tag alone cannot be moved
    entries = 0;
  }
  std::array<uint32_t, kWays>& t = buckets[GhostBucketOf(f, buckets.size())].tags;
  entries += t[kWays - 1] == 0;
  std::copy_backward(t.begin(), t.end() - 1, t.end());  // the oldest falls out
  t[0] = GhostTag(f);
}

void IndexShard::GhostTable::Prefetch(uint64_t f) const {
  if (!buckets.empty()) __builtin_prefetch(&buckets[GhostBucketOf(f, buckets.size())], 1);
}

void IndexShard::PrefetchGhostLocked(NamespaceId ns, const PageKey& key) const {
  for (const TierLists& l : tiers_) {
    if (Ranked(l.policy)) l.ghost_table.Prefetch(Fingerprint(ns, key));
  }
}

bool IndexShard::GhostTable::Take(uint64_t f) {
  if (buckets.empty()) return false;
  auto& tags = buckets[GhostBucketOf(f, buckets.size())].tags;
  const uint32_t tag = GhostTag(f);
  for (uint32_t& slot : tags) {
    if (slot != tag) continue;
    slot = 0;
    --entries;
    return true;
  }
  return false;
}

void IndexShard::MarkReservedLocked(uint8_t tier, NamespaceId ns) {
  TierLists& l = Lists(tier);
  if (l.Reserved(ns)) return;
  if (ns >= l.is_reserved.size()) l.is_reserved.resize(ns + 1, false);
  l.is_reserved[ns] = true;
  l.reserved.push_back(ns);
}

IndexShard::NsList& IndexShard::TierLists::ListFor(NamespaceId ns) {
  if (ns >= by_ns.size()) by_ns.resize(ns + 1);
  return by_ns[ns];
}

IndexShard::TierLists& IndexShard::Lists(uint8_t tier) {
  if (tier >= tiers_.size()) tiers_.resize(tier + 1);
  return tiers_[tier];
}

void IndexShard::LinkLocked(PageEntry* e, bool protect) {
  TierLists& l = Lists(e->tier);
  NsList& own = l.ListFor(e->ns);
  newest_stamp_ = std::max(newest_stamp_, e->stamp);
  e->flags &= ~(PageEntry::kProtected | PageEntry::kAccessed);
  if (Ranked(l.policy)) e->flags &= ~PageEntry::kChainEnd;
  if (l.Reserved(e->ns)) {
    // A new head is the newest page: only a list that was empty gets a new tail.
    own.PushFront(e);
    LowerOldestLocked(e->tier, l.ReservedRankOf(e));
    return;
  }
  own.PushFront(e);
  if (Ranked(l.policy)) {
    // prefix: no share to keep, reused pages age out by rank. A page with
    // no child yet is a chain end until one names it (AttachToParent).
    if (protect) {
      e->flags |= PageEntry::kProtected;
      l.prot.PushFront(e);
      l.prot_bytes += e->slot.bytes;
    } else if (e->resident_children == 0) {
      e->flags |= PageEntry::kChainEnd;
      l.ends.PushFront(e);
    } else {
      l.all.PushFront(e);
    }
    // A chain end's rank is below newer pages': it may be the first now.
    LowerOldestLocked(e->tier, l.RankOf(e));
    return;
  }
  const PageEntry* first = l.First();
  if (protect && Segmented(l.policy)) {
    e->flags = (e->flags | PageEntry::kProtected) & ~PageEntry::kWasProtected;
    l.prot.PushFront(e);
    l.prot_bytes += e->slot.bytes;
    // Protected beyond its share: this shard's oldest protected pages fall
    // back to probation's head (they were reused, just not lately), about
    // one per protected arrival, stamped as arriving now so that probation
    // stays in stamp order and other shards' picks rank them as new.
    while (l.prot.size() > 1 && l.prot_bytes > l.prot_cap_bytes) {
      PageEntry* d = l.prot.tail();
      if (d != e && (d->flags & PageEntry::kAccessed)) {  // s3fifo's CLOCK: once more round
        RequeueInMainLocked(l, d);
        continue;
      }
      l.prot.Remove(d);
      l.prot_bytes -= std::min<uint64_t>(l.prot_bytes, d->slot.bytes);
      d->flags = (d->flags & ~PageEntry::kProtected) | PageEntry::kWasProtected;
      d->stamp = std::max(d->stamp, e->stamp);
      RelinkByStamp(l.ListFor(d->ns), d);
      l.all.PushFront(d);
    }
  } else {
    l.all.PushFront(e);
  }
  // The first page changes only when e or a page that fell back is linked
  // where the list was empty: a page in hand, no load.
  if (l.First() != first) LowerOldestLocked(e->tier, VictimRank(l.First()));
}

PageEntry* IndexShard::TierLists::First() const {
  if (!Ranked(policy)) return all.empty() ? prot.tail() : all.tail();
  return RankCursor<TierList>(ends, all, prot, end_penalty, reuse_bonus).get();
}

void IndexShard::CountArrivalLocked(const PageEntry* e) {
  const uint8_t tier = e->tier;
  TierLists& l = tiers_[tier];
  if (!Ranked(l.policy)) return;
  RankClock& c = clocks_[tier];
  const uint64_t n = c.arrivals.fetch_add(1, std::memory_order_relaxed) + 1;
  uint64_t end = c.window_end.load(std::memory_order_relaxed);
  if (n < end) return;
  // The tier's capacity in pages of this one's size (its bytes at the low
  // watermark: SetPolicy), or, for a shard alone, its pages times the
  // shards. The next window is a capacity of arrivals (64 at least, for
  // tiny tiers), so the estimate covers what the offsets are measured in.
  const uint64_t capacity = l.share_bytes != UINT64_MAX && e->slot.bytes > 0
                                ? std::max<uint64_t>(1, l.share_bytes / e->slot.bytes) * shards_
                                : l.Pages() * shards_;
  if (!c.window_end.compare_exchange_strong(end, n + std::max<uint64_t>(64, capacity),
                                            std::memory_order_relaxed)) {
    return;  // another shard closes this window
  }
  const uint64_t start = c.window_start.exchange(n, std::memory_order_relaxed);
  const uint64_t since = c.window_stamp.exchange(newest_stamp_, std::memory_order_relaxed);
  const double stamps_per_arrival =
      static_cast<double>(newest_stamp_ - std::min(newest_stamp_, since)) /
      static_cast<double>(std::max<uint64_t>(1, n - start));
  const auto stamps = static_cast<uint64_t>(stamps_per_arrival * static_cast<double>(capacity));
  c.end_penalty.store(kPrefixEndPenalty * stamps, std::memory_order_relaxed);
  c.reuse_bonus.store(kPrefixReuseBonus * stamps, std::memory_order_relaxed);
  RefreshOffsetsLocked(tier);
}

void IndexShard::RefreshOffsetsLocked(uint8_t tier) {
  TierLists& l = tiers_[tier];
  const RankClock& c = clocks_[tier];
  const uint64_t penalty = c.end_penalty.load(std::memory_order_relaxed);
  const uint64_t bonus = c.reuse_bonus.load(std::memory_order_relaxed);
  if (penalty == l.end_penalty && bonus == l.reuse_bonus) return;
  l.end_penalty = penalty;
  l.reuse_bonus = bonus;
  UpdateOldestLocked(tier);  // every rank of ends and prot moved
}

void IndexShard::RequeueInMainLocked(TierLists& l, PageEntry* d) {
  d->flags &= ~PageEntry::kAccessed;
  l.prot.Remove(d);
  d->stamp = std::max(d->stamp, newest_stamp_);
  RelinkByStamp(l.ListFor(d->ns), d);
  l.prot.PushFront(d);
}

void IndexShard::RequeueAccessedLocked(uint8_t tier, uint32_t window) {
  TierLists& l = tiers_[tier];
  const uint32_t want = std::max<uint32_t>(window, 1);
  uint32_t passed = 0;
  bool found = false;  // an unmarked, unpinned leaf: what the scan takes first
  for (PageEntry* e = l.all.tail(); e != nullptr && passed < want;) {
    PageEntry* newer = TierList::Newer(e);  // in small: the moves below never take it
    if (e->flags & PageEntry::kAccessed) {
      // Read since it came: on to main (whose unmarked overflow comes back
      // to small's head, passed below as unmarked).
      UnlinkLocked(e);
      e->stamp = std::max(e->stamp, newest_stamp_);
      LinkLocked(e, /*protect=*/true);
    } else {
      ++passed;
      // Stop there: walking the whole window on every pick cost 4/5 of the
      // eviction rate at 1,000 namespaces. (A filter that skips this page
      // may let the scan reach a marked one above it: taken, as LRU would.)
      if (e->pins == 0 && e->resident_children == 0) {
        found = true;
        break;
      }
    }
    e = newer;
  }
  if (!found && passed < want) {  // small holds too few: the pick reaches main's tail
    bool moved = false;
    for (size_t budget = l.prot.size(); budget > 0 && l.prot.size() > 1; --budget) {
      PageEntry* d = l.prot.tail();
      if (!(d->flags & PageEntry::kAccessed)) break;
      RequeueInMainLocked(l, d);
      moved = true;
    }
    if (moved) UpdateOldestLocked(tier);
  }
}

bool IndexShard::UnlinkLocked(PageEntry* e) {
  TierLists& l = Lists(e->tier);
  NsList& own = l.ListFor(e->ns);
  const bool reserved = l.Reserved(e->ns);
  // prefix: a list's tail stands for "may be first", so that an unlink loads
  // no other list's tail (the caller makes the hint exact).
  const bool was_first = reserved           ? own.tail() == e
                         : Ranked(l.policy) ? l.ListOf(e).tail() == e
                                            : l.First() == e;
  own.Remove(e);
  if (reserved) {
  } else if (e->flags & PageEntry::kProtected) {
    l.prot.Remove(e);
    l.prot_bytes -= std::min<uint64_t>(l.prot_bytes, e->slot.bytes);
  } else {
    l.ListOf(e).Remove(e);
  }
  // Taking the first page out leaves the hint a lower bound: loading the
  // page first now was a cold miss on every touch of a tier's oldest page
  // (a fifth of a batched LOOKUP's time when it re-reads old chains). A page
  // leaving the tier has its caller make it exact (DetachLocked).
  return was_first;
}

void IndexShard::LowerOldestLocked(uint8_t tier, uint64_t rank) {
  if (rank < oldest_[tier].load(std::memory_order_relaxed))
    oldest_[tier].store(rank, std::memory_order_relaxed);
}

void IndexShard::UpdateOldestLocked(uint8_t tier) {
  const TierLists& l = tiers_[tier];
  const PageEntry* first = l.First();
  uint64_t oldest = first == nullptr ? UINT64_MAX : l.RankOf(first);
  for (NamespaceId id : l.reserved) {
    if (id < l.by_ns.size() && !l.by_ns[id].empty()) {
      oldest = std::min(oldest, l.ReservedRankOf(l.by_ns[id].tail()));
    }
  }
  oldest_[tier].store(oldest, std::memory_order_relaxed);
}

Victim IndexShard::FindVictimLocked(uint8_t tier, NamespaceId ns, uint32_t scan_limit,
                                    VictimFilter filter, const ReserveView* reserves) {
  if (tier >= tiers_.size()) return Victim{};
  if (ns == 0 && LazyPromotion(tiers_[tier].policy)) RequeueAccessedLocked(tier, scan_limit);
  if (Ranked(tiers_[tier].policy)) RefreshOffsetsLocked(tier);  // ranks as other shards' now
  const TierLists& l = tiers_[tier];
  auto scan_own = [&](NamespaceId id) {
    if (id >= l.by_ns.size() || l.by_ns[id].empty()) return Victim{};
    const uint64_t headroom = reserves == nullptr ? UINT64_MAX : reserves->Headroom(id);
    return headroom == 0
               ? Victim{}
               : ScanList(TailCursor<NsList>(l.by_ns[id], nullptr), scan_limit, filter, headroom);
  };
  if (ns != 0) return scan_own(ns);
  // Namespaces in the tier list have no reserve here: no headroom to ask.
  Victim best =
      Ranked(l.policy)
          ? ScanList(RankCursor<TierList>(l.ends, l.all, l.prot, l.end_penalty, l.reuse_bonus),
                     scan_limit, filter, UINT64_MAX)
          : ScanList(TailCursor<TierList>(l.all, Segmented(l.policy) ? &l.prot : nullptr),
                     scan_limit, filter, UINT64_MAX);
  // prefix: the victim's ghost bucket, for RememberEvictedLocked soon after.
  if (Ranked(l.policy) && best.entry != nullptr) l.ghost_table.Prefetch(Fingerprint(best.entry));
  for (NamespaceId id : l.reserved) {
    Victim v = scan_own(id);
    if (v.BetterThan(best)) best = v;
  }
  UpdateOldestLocked(tier);  // the scan loaded the same tails
  return best;
}

PageEntry* IndexShard::FindRecentCleanLocked(uint8_t tier, uint32_t scan_limit) const {
  if (tier >= tiers_.size()) return nullptr;
  const TierLists& l = tiers_[tier];
  if (PageEntry* e = RecentClean(l.prot, scan_limit)) return e;
  if (PageEntry* e = RecentClean(l.all, scan_limit)) return e;
  if (PageEntry* e = RecentClean(l.ends, scan_limit)) return e;
  for (NamespaceId id : l.reserved) {
    if (id >= l.by_ns.size()) continue;
    if (PageEntry* e = RecentClean(l.by_ns[id], scan_limit)) return e;
  }
  return nullptr;
}

std::vector<PageEntry*> IndexShard::DrainLocked() {
  std::vector<PageEntry*> out;
  out.reserve(map_.size());
  map_.ForEach([&out](PageEntry* e) { out.push_back(e); });
  map_.Clear();
  tiers_.clear();
  for (auto& o : oldest_) o.store(UINT64_MAX, std::memory_order_relaxed);
  return out;
}

PageIndex::PageIndex(uint32_t shards) {
  while ((1u << shard_bits_) < shards) ++shard_bits_;
  for (uint32_t i = 0; i < (1u << shard_bits_); ++i) {
    shards_.push_back(std::make_unique<IndexShard>(clocks_.data(), 1u << shard_bits_));
  }
}

IndexShard& PageIndex::ShardFor(NamespaceId ns, const PageKey& key) {
  return *shards_[ShardIndex(ns, key)];
}

uint32_t PageIndex::ShardIndex(NamespaceId ns, const PageKey& key) const {
  // Keys are SHA-256 prefixes, but tests and tools also use small counters,
  // so mix before taking the top bits.
  uint64_t lo, hi;
  std::memcpy(&lo, key.bytes.data(), 8);
  std::memcpy(&hi, key.bytes.data() + 8, 8);
  uint64_t h = (lo ^ (hi * 0x9E3779B97F4A7C15ull) ^ ns) * 0xD6E8FEB86659FD93ull;
  h ^= h >> 32;
  if (shard_bits_ == 0) return 0;
  return static_cast<uint32_t>((h * 0x9E3779B97F4A7C15ull) >> (64 - shard_bits_));
}

void PageIndex::MarkReserved(uint8_t tier, NamespaceId ns) {
  for (auto& shard : shards_) {
    absl::MutexLock lock(&shard->mu);
    shard->MarkReservedLocked(tier, ns);
  }
}

void PageIndex::SetPolicy(uint8_t tier, EvictionPolicy policy, uint64_t bytes) {
  const uint64_t share = bytes / shards_.size();
  // prefix caps no list: its reused pages age out by rank.
  const uint64_t cap =
      Ranked(policy) ? UINT64_MAX
                     : static_cast<uint64_t>(static_cast<double>(share) * ProtectedShare(policy));
  for (auto& shard : shards_) {
    absl::MutexLock lock(&shard->mu);
    shard->SetPolicyLocked(tier, policy, cap, share);
  }
}

}  // namespace kvtier::tiers
