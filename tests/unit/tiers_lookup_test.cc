// TierManager::Lookup, which probes a chain shard by shard (one lock per
// shard, not per key) with one block of stamps: leading hits only, every
// shard, tail-first recency (seen through eviction order, with Locate,
// which touches nothing), the index's restamp, and races with eviction.
#include <atomic>
#include <random>
#include <thread>

#include "absl/container/flat_hash_set.h"
#include "gtest/gtest.h"
#include "tests/unit/tiers_test_util.h"
#include "tiers/store/internal/page_index.h"

namespace kvtier::tiers {
namespace {

using testing::AddNs;
using testing::Key;
using testing::MakeManager;
using testing::Put;

constexpr uint64_t kPage = 4096;

std::vector<PageKey> Keys(const std::vector<uint64_t>& ids) {
  std::vector<PageKey> keys;
  for (uint64_t id : ids) keys.push_back(Key(id));
  return keys;
}

TierManagerConfig Shards(uint32_t n) {
  TierManagerConfig c = testing::NoThreadConfig();
  c.index_shards = n;
  return c;
}

// Evicts tier 0 one page at a time until `ids` are all gone; returns them
// in the order they went (oldest first: every page here is a leaf).
std::vector<uint64_t> EvictionOrder(TierManager& m, NamespaceId ns, std::vector<uint64_t> ids) {
  std::vector<uint64_t> order;
  while (!ids.empty()) {
    const uint64_t used = m.Snapshot().tiers[0].used_bytes;
    if (m.EvictTo(0, used - kPage) != 1) break;
    for (auto it = ids.begin(); it != ids.end(); ++it) {
      if (m.Locate(ns, Key(*it)) >= 0) continue;
      order.push_back(*it);
      ids.erase(it);
      break;
    }
  }
  return order;
}

TEST(LookupTest, LeadingHitsStopAtTheFirstGap) {
  auto m = MakeManager({16}, kPage);
  NamespaceId a = AddNs(*m, "a");
  for (uint64_t k : {0, 1, 2, 4, 5}) ASSERT_TRUE(Put(*m, a, k, kPage).ok());
  LookupResult r = m->Lookup(a, Keys({0, 1, 2, 3, 4, 5}));  // 3 is missing
  EXPECT_EQ(r.hits, 3u);
  EXPECT_EQ(r.tiers, std::vector<TierKind>(3, TierKind::kHost));
  EXPECT_EQ(m->Lookup(a, Keys({3, 0, 1})).hits, 0u);
  EXPECT_EQ(m->Lookup(a, Keys({5, 4, 5, 0})).hits, 4u);  // a key twice is two hits
  EXPECT_EQ(m->Lookup(a, {}).hits, 0u);
  EXPECT_EQ(m->Lookup(AddNs(*m, "b"), Keys({0, 1})).hits, 0u);  // another namespace's pages
  for (const NamespaceSnapshot& s : m->Snapshot().namespaces) {
    if (s.name != "a") continue;
    EXPECT_EQ(s.lookup_hits, 3u + 0 + 4);
    EXPECT_EQ(s.lookup_misses, 3u + 3 + 0);
  }
}

// A chain much longer than the shard count: every shard holds several of
// its keys, none adjacent. Then a gap splits it; the whole eviction order
// shows what each LOOKUP stamped.
TEST(LookupTest, ChainOverEveryShard) {
  constexpr uint32_t kShards = 16, kKeys = 128;
  auto m = MakeManager({kKeys}, kPage, Shards(kShards));
  NamespaceId a = AddNs(*m, "a");
  std::vector<uint64_t> ids;
  absl::flat_hash_set<uint32_t> shards;
  PageIndex same_hash(kShards);
  for (uint64_t k = 0; k < kKeys; ++k) {
    ASSERT_TRUE(Put(*m, a, k, kPage).ok());
    ids.push_back(k);
    shards.insert(same_hash.ShardIndex(a, Key(k)));
  }
  ASSERT_EQ(shards.size(), kShards);
  LookupResult r = m->Lookup(a, Keys(ids));
  EXPECT_EQ(r.hits, kKeys);
  EXPECT_EQ(r.tiers.size(), kKeys);
  ASSERT_TRUE(m->Delete(a, Key(77)));
  EXPECT_EQ(m->Lookup(a, Keys(ids)).hits, 77u);
  // 78..127 keep the first LOOKUP's stamps (127 oldest); 0..76 the second's.
  std::vector<uint64_t> want;
  for (uint64_t k = kKeys - 1; k > 77; --k) want.push_back(k);
  for (uint64_t k = 77; k > 0; --k) want.push_back(k - 1);
  ids.erase(ids.begin() + 77);
  EXPECT_EQ(EvictionOrder(*m, a, ids), want);
}

// A chain longer than a LOOKUP's segment (64 keys locked at a time) keeps
// one tail-first order across segments, and a miss at a segment's edge
// ends it there.
TEST(LookupTest, LongChainAcrossSegments) {
  constexpr uint32_t kKeys = 200;
  for (uint64_t miss : {63u, 64u, 65u, 128u, 199u}) {
    SCOPED_TRACE(miss);
    auto m = MakeManager({kKeys}, kPage, Shards(16));
    NamespaceId a = AddNs(*m, "a");
    std::vector<uint64_t> ids;
    for (uint64_t k = 0; k < kKeys; ++k) {
      ASSERT_TRUE(Put(*m, a, k, kPage).ok());
      ids.push_back(k);
    }
    EXPECT_EQ(m->Lookup(a, Keys(ids)).hits, kKeys);
    ASSERT_TRUE(m->Delete(a, Key(miss)));
    EXPECT_EQ(m->Lookup(a, Keys(ids)).hits, miss);
    std::vector<uint64_t> want;  // past the miss: the first LOOKUP's order
    for (uint64_t k = kKeys - 1; k > miss; --k) want.push_back(k);
    for (uint64_t k = miss; k > 0; --k) want.push_back(k - 1);
    ids.erase(ids.begin() + static_cast<std::ptrdiff_t>(miss));
    EXPECT_EQ(EvictionOrder(*m, a, ids), want);
  }
}

// Tail-first across shards: the chain's last hit goes first, its first hit
// last, and pages past the miss keep their older PUT stamps.
TEST(LookupTest, TouchesTailFirstAndNothingPastTheMiss) {
  for (uint32_t shards : {1u, 4u, 64u}) {
    SCOPED_TRACE(shards);
    auto m = MakeManager({16}, kPage, Shards(shards));
    NamespaceId a = AddNs(*m, "a");
    std::vector<uint64_t> ids;
    for (uint64_t k = 0; k < 10; ++k) {
      ASSERT_TRUE(Put(*m, a, k, kPage).ok());
      ids.push_back(k);
    }
    EXPECT_EQ(m->Lookup(a, Keys({7, 3, 9, 1, 100, 5, 6})).hits, 4u);
    EXPECT_EQ(EvictionOrder(*m, a, ids), (std::vector<uint64_t>{0, 2, 4, 5, 6, 8, 1, 9, 3, 7}));
  }
}

PageEntry* NewEntry(uint64_t id, NamespaceId ns) {
  auto* e = new PageEntry;
  e->key = Key(id);
  e->ns = ns;
  return e;
}

// The oldest page of tier 0 in `shard`, in namespace ns's own list (0: the
// tier list and reserved namespaces' lists).
const PageEntry* Oldest(IndexShard& shard, NamespaceId ns) ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu) {
  return shard.FindVictimLocked(0, ns, 0).entry;
}

// The oldest-page hint of tier 0 after a tier-wide pick made it exact.
// Between picks it is only a lower bound: EXPECT_LE before each refresh
// checks that it never rises above the truth.
uint64_t ExactOldest(IndexShard& shard) ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu) {
  const uint64_t hint = shard.OldestStamp(0);
  shard.FindVictimLocked(0, 0, 0);
  const uint64_t exact = shard.OldestStamp(0);
  EXPECT_LE(hint, exact);
  return exact;
}

// A stamp taken before the shard lock (a LOOKUP's block) lands below the
// pages stamped since, in the tier list and the namespace's own list.
TEST(LookupTest, RestampKeepsListsInStampOrder) {
  IndexShard shard;
  absl::MutexLock lock(&shard.mu);
  shard.MarkReservedLocked(0, 2);  // ns 2 is on its own list only
  PageEntry* a = NewEntry(1, 1);
  PageEntry* b = NewEntry(2, 1);
  PageEntry* c = NewEntry(3, 1);
  PageEntry* d = NewEntry(4, 2);
  shard.InsertLocked(a, 10);
  shard.InsertLocked(d, 15);
  shard.InsertLocked(b, 20);
  shard.InsertLocked(c, 30);
  shard.RestampLocked(a, 25);  // under c
  EXPECT_EQ(a->stamp, 25u);
  EXPECT_EQ(Oldest(shard, 1), b);
  EXPECT_EQ(shard.OldestStamp(0), 10u);  // a's, stale: a lower bound
  EXPECT_EQ(ExactOldest(shard), 15u);    // d, in its reserved list
  shard.RestampLocked(c, 5);  // c is newer: kept
  EXPECT_EQ(c->stamp, 30u);
  shard.RestampLocked(d, 40);
  EXPECT_EQ(ExactOldest(shard), 20u);
  shard.RestampLocked(b, 35);  // a(25) c(30) b(35), oldest first
  const std::vector<PageEntry*> want = {a, c, b};
  for (PageEntry* e : want) {
    EXPECT_EQ(Oldest(shard, 1), e);
    EXPECT_EQ(ExactOldest(shard), e->stamp);
    EXPECT_EQ(Oldest(shard, 0), e);
    shard.DetachLocked(e);
    delete e;
  }
  EXPECT_EQ(ExactOldest(shard), 40u);
  EXPECT_EQ(Oldest(shard, 0), d);
  shard.DetachLocked(d);
  delete d;
  EXPECT_EQ(ExactOldest(shard), UINT64_MAX);
}

// LOOKUPs of one chain race its eviction, deletion and re-PUT, and pinned
// reads: a hit may vanish between the probe and the touch, and must then be
// skipped, never used after it was freed (run under ASan/TSan too).
TEST(LookupTest, RacesEvictionAndDelete) {
  constexpr uint64_t kKeys = 48;
  auto m = MakeManager({kKeys}, kPage, Shards(8));
  NamespaceId a = AddNs(*m, "a");
  std::vector<uint64_t> ids;
  for (uint64_t k = 0; k < kKeys; ++k) ids.push_back(k);
  const std::vector<PageKey> chain = Keys(ids);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      for (int i = 0; i < 10000; ++i) {
        const size_t from = rng() % 8;
        LookupResult r = m->Lookup(a, absl::MakeConstSpan(chain).subspan(from));
        if (r.tiers.size() != r.hits || r.hits > kKeys - from) bad.fetch_add(1);
        if (auto pin = m->PinForRead(a, chain[rng() % kKeys])) {
          if (pin->bytes() != kPage) bad.fetch_add(1);
        }
      }
    });
  }
  threads.emplace_back([&] {
    std::mt19937 rng(7);
    while (!stop.load()) {
      const uint64_t k = rng() % kKeys;
      if (rng() % 2) m->Delete(a, Key(k));
      else Put(*m, a, k, kPage).IgnoreError();  // dedup when present; may find the tier full
    }
  });
  threads.emplace_back([&] {
    while (!stop.load()) m->EvictTo(0, m->Snapshot().tiers[0].used_bytes / 2);
  });
  threads[0].join();
  threads[1].join();
  stop.store(true);
  threads[2].join();
  threads[3].join();
  EXPECT_EQ(bad.load(), 0u);
  m->EvictTo(0, 0);  // every list still reaches every page
  StoreSnapshot s = m->Snapshot();
  EXPECT_EQ(s.tiers[0].pages, 0u);
  EXPECT_EQ(s.tiers[0].used_bytes, 0u);
  EXPECT_EQ(s.index_pages, 0u);
  EXPECT_EQ(m->Lookup(a, chain).hits, 0u);
}

}  // namespace
}  // namespace kvtier::tiers
