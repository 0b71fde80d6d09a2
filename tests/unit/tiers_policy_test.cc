// Eviction policies (tiers/store/eviction_policy.h): what 2q, arc, s3fifo and
// prefix promise beyond LRU
// (pages read again outlive a flood of one-off pages; a page PUT again soon
// after its eviction skips probation; protected pages stay within their
// share), that it keeps the store's rules (pinned pages stay, leaf-first),
// and the --eviction flag's refusals. The rules every policy keeps (reserves,
// quotas, a thousand tenants) run for each policy in tiers_reserve_test.cc,
// tiers_tenants_test.cc and nvme_reserve_test.cc.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/unit/tiers_test_util.h"
#include "tiers/store/internal/page_index.h"

namespace kvtier::tiers {
namespace {

using testing::AddNs;
using testing::Bytes;
using testing::Has;
using testing::Key;
using testing::MakeManager;
using testing::Put;

constexpr uint64_t kPage = 4096;
constexpr uint64_t kTierPages = 32;

// One index shard: 2q's shares are per shard, so one shard makes them exact.
std::unique_ptr<TierManager> Manager(EvictionPolicy policy, uint64_t pages = kTierPages) {
  TierManagerConfig c = testing::NoThreadConfig();
  c.index_shards = 1;
  c.eviction[TierKind::kHost] = policy;
  return MakeManager({pages}, kPage, c);
}

// Pages `first`..`first + n - 1`, each PUT as a one-page prompt (no chain:
// leaf-first plays no part) and never read.
void Flood(TierManager& m, NamespaceId ns, uint64_t first, uint64_t n) {
  for (uint64_t k = first; k < first + n; ++k) ASSERT_TRUE(Put(m, ns, k, kPage).ok()) << k;
}

uint64_t Present(TierManager& m, NamespaceId ns, uint64_t first, uint64_t n) {
  uint64_t c = 0;
  for (uint64_t k = first; k < first + n; ++k) c += Has(m, ns, k);
  return c;
}

// Eight pages read once each, then another tenant's one-off pages, four times
// the tier: LRU loses every read page, 2q keeps them all.
TEST(EvictionPolicyTest, PagesReadAgainOutliveAFloodOfOneOffPagesUnder2q) {
  for (EvictionPolicy policy : {EvictionPolicy::kLru, EvictionPolicy::k2q}) {
    SCOPED_TRACE(std::string(EvictionPolicyName(policy)));
    auto m = Manager(policy);
    const NamespaceId a = AddNs(*m, "a"), b = AddNs(*m, "b");
    Flood(*m, a, 0, 8);
    for (uint64_t k = 0; k < 8; ++k) ASSERT_TRUE(m->PinForRead(a, Key(k)).has_value());
    Flood(*m, b, 1000, 4 * kTierPages);
    EXPECT_EQ(Present(*m, a, 0, 8), policy == EvictionPolicy::k2q ? 8u : 0u);
    // The flood itself was stored page by page: the store stays full.
    EXPECT_EQ(m->Snapshot().tiers[0].pages, kTierPages);
    if (policy == EvictionPolicy::k2q) {
      const TierSnapshot t = m->Snapshot().tiers[0];
      EXPECT_EQ(t.eviction, EvictionPolicy::k2q);
      EXPECT_EQ(t.protected_pages, 8u);
      EXPECT_GT(t.ghost_entries, 0u);
    }
  }
}

// s3fifo: a read only marks the page (it stays in the small FIFO); when
// eviction reaches it, it moves to main instead of going, and outlives the
// flood; the pages nobody read go.
TEST(EvictionPolicyTest, S3FifoMovesReadPagesToMainWhenEvictionReachesThem) {
  auto m = Manager(EvictionPolicy::kS3Fifo);
  const NamespaceId a = AddNs(*m, "a"), b = AddNs(*m, "b");
  Flood(*m, a, 0, 8);
  Flood(*m, a, 50, 4);  // never read
  for (uint64_t k = 0; k < 8; ++k) ASSERT_TRUE(m->PinForRead(a, Key(k)).has_value());
  EXPECT_EQ(m->Snapshot().tiers[0].protected_pages, 0u) << "a read moved a page under the lock";
  Flood(*m, b, 1000, 4 * kTierPages);
  EXPECT_EQ(Present(*m, a, 0, 8), 8u);
  EXPECT_EQ(Present(*m, a, 50, 4), 0u);
  const TierSnapshot t = m->Snapshot().tiers[0];
  EXPECT_EQ(t.eviction, EvictionPolicy::kS3Fifo);
  EXPECT_EQ(t.protected_pages, 8u);
  EXPECT_GT(t.ghost_entries, 0u);
}

// s3fifo's main is a FIFO with one bit of CLOCK: when it overflows, pages
// read since they entered it go round again, the others fall back to the
// small FIFO and go with the next flood.
TEST(EvictionPolicyTest, S3FifoMainRequeuesPagesReadAgainAndLetsTheOthersGo) {
  auto m = Manager(EvictionPolicy::kS3Fifo);
  const NamespaceId a = AddNs(*m, "a"), b = AddNs(*m, "b");
  const double low = testing::NoThreadConfig().low_watermark;
  const auto main_pages = static_cast<uint64_t>(kTierPages * low * kS3FifoMainShare);
  ASSERT_GE(main_pages, 8u);
  const uint64_t half = main_pages / 2;
  // Main filled: pages 0..main_pages-1, read once, then moved by a flood.
  Flood(*m, a, 0, main_pages);
  for (uint64_t k = 0; k < main_pages; ++k) ASSERT_TRUE(m->PinForRead(a, Key(k)).has_value());
  Flood(*m, b, 1000, 4 * kTierPages);
  ASSERT_EQ(Present(*m, a, 0, main_pages), main_pages);
  // The older half is read again; then `half` newcomers, read once, push
  // main over its share as the next flood moves them there.
  for (uint64_t k = 0; k < half; ++k) ASSERT_TRUE(m->PinForRead(a, Key(k)).has_value());
  Flood(*m, a, 500, half);
  for (uint64_t k = 500; k < 500 + half; ++k) ASSERT_TRUE(m->PinForRead(a, Key(k)).has_value());
  Flood(*m, b, 2000, 4 * kTierPages);
  EXPECT_EQ(Present(*m, a, 0, half), half) << "read again: requeued";
  EXPECT_EQ(Present(*m, a, 500, half), half) << "the newcomers reached main";
  EXPECT_LT(Present(*m, a, half, main_pages - half), main_pages - half)
      << "main kept pages nobody read since they entered it";
}

// A dedup PUT (the same page PUT again) is a reuse too.
TEST(EvictionPolicyTest, APageStoredAgainIsProtectedUnder2q) {
  auto m = Manager(EvictionPolicy::k2q);
  const NamespaceId a = AddNs(*m, "a");
  Flood(*m, a, 0, 4);
  Flood(*m, a, 0, 4);  // deduplicated: present
  Flood(*m, a, 100, 4 * kTierPages);
  EXPECT_EQ(Present(*m, a, 0, 4), 4u);
}

// A page evicted from probation leaves its fingerprint in the ghost; PUT
// again while it is there, it enters protected and outlives the next flood.
TEST(EvictionPolicyTest, APagePutAgainSoonAfterItsEvictionSkipsProbation) {
  auto m = Manager(EvictionPolicy::k2q);
  const NamespaceId a = AddNs(*m, "a");
  Flood(*m, a, 0, 1);
  Flood(*m, a, 100, kTierPages);  // page 0 is evicted from probation
  ASSERT_FALSE(Has(*m, a, 0));
  const uint64_t ghost = m->Snapshot().tiers[0].ghost_entries;
  EXPECT_GT(ghost, 0u);
  Flood(*m, a, 0, 1);  // back, through the ghost
  EXPECT_EQ(m->Snapshot().tiers[0].protected_pages, 1u);
  Flood(*m, a, 200, 2 * kTierPages);
  EXPECT_TRUE(Has(*m, a, 0));
  // A page never seen before goes to probation and with the flood.
  Flood(*m, a, 5000, 1);
  Flood(*m, a, 300, 2 * kTierPages);
  EXPECT_FALSE(Has(*m, a, 5000));
}

// Protected pages never hold more than their share (of what the tier holds at
// its low watermark): a tier whose every page was read still evicts, oldest
// reads first.
TEST(EvictionPolicyTest, ProtectedPagesStayWithinTheirShare) {
  auto m = Manager(EvictionPolicy::k2q);
  const NamespaceId a = AddNs(*m, "a");
  Flood(*m, a, 0, kTierPages);
  for (uint64_t k = 0; k < kTierPages; ++k) ASSERT_TRUE(m->PinForRead(a, Key(k)).has_value());
  const double low = testing::NoThreadConfig().low_watermark;
  EXPECT_EQ(m->Snapshot().tiers[0].protected_pages,
            static_cast<uint64_t>(kTierPages * low * k2qProtectedShare));  // 14 of 32
  // The pages read first fell back to probation and go first.
  Flood(*m, a, 100, 4);
  EXPECT_EQ(Present(*m, a, 0, 4), 0u);
  EXPECT_EQ(Present(*m, a, 4, kTierPages - 4), kTierPages - 4);
}

// Under 2q as under LRU: a pinned page is never a victim (a reader's pin, a
// lease's hold), whatever its segment.
TEST(EvictionPolicyTest, PinnedAndHeldPagesStayUnder2q) {
  auto m = Manager(EvictionPolicy::k2q, 16);
  const NamespaceId a = AddNs(*m, "a");
  Flood(*m, a, 0, 2);
  ASSERT_TRUE(m->PinForRead(a, Key(1)).has_value());  // 1: protected; 0: probation
  auto pin = m->PinForPromotion(a, Key(0));
  auto hold = m->HoldForLease(a, Key(1));
  ASSERT_TRUE(pin.has_value() && hold.has_value());
  Flood(*m, a, 100, 64);
  EXPECT_TRUE(Has(*m, a, 0));
  EXPECT_TRUE(Has(*m, a, 1));
}

// A chain loses its leaves before its prefix, in protected as in probation:
// with probation emptied, the two pages that go are the chain's last two.
TEST(EvictionPolicyTest, LeafFirstHoldsInTheProtectedSegment) {
  auto m = Manager(EvictionPolicy::k2q, 16);
  const NamespaceId a = AddNs(*m, "a");
  PageKey parent = PageKey::Zero();
  for (uint64_t k = 10; k < 14; ++k) {
    ASSERT_TRUE(Put(*m, a, Key(k), parent, Bytes(kPage, k)).ok());
    parent = Key(k);
  }
  // Read head-first (10 oldest in protected: a plain LRU scan would take it first).
  for (uint64_t k = 10; k < 14; ++k) ASSERT_TRUE(m->PinForRead(a, Key(k)).has_value());
  Flood(*m, a, 100, 64);
  ASSERT_EQ(Present(*m, a, 10, 4), 4u);
  EXPECT_EQ(m->EvictTo(0, 2 * kPage), 14u);  // the 12 probation pages, then two chain pages
  EXPECT_TRUE(Has(*m, a, 10));
  EXPECT_TRUE(Has(*m, a, 11));
  EXPECT_FALSE(Has(*m, a, 12));
  EXPECT_FALSE(Has(*m, a, 13));
}

TEST(EvictionPolicyTest, TheFlagNamesTheChoices) {
  const std::vector<TierKind> tiers = {TierKind::kHost, TierKind::kNvme};
  auto all = ParseEvictionFlag("2q", tiers);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->at(TierKind::kHost), EvictionPolicy::k2q);
  EXPECT_EQ(all->at(TierKind::kNvme), EvictionPolicy::k2q);
  auto per = ParseEvictionFlag("host=2q, nvme=lru", tiers);
  ASSERT_TRUE(per.ok()) << per.status();
  EXPECT_EQ(per->at(TierKind::kHost), EvictionPolicy::k2q);
  EXPECT_EQ(per->at(TierKind::kNvme), EvictionPolicy::kLru);
  struct Bad {
    const char* value;
    const char* says;
  };
  for (const Bad& b : std::vector<Bad>{
           {"lfu", "unknown eviction policy 'lfu' (choices: lru, 2q, arc, s3fifo, prefix)"},
           {"", "--eviction is empty"},
           {"hbm=2q", "tier 'hbm', which this store does not have (its tiers: host, nvme)"},
           {"host=2q,host=lru", "names tier 'host' twice"},
           {"host=fifo",
            "for tier 'host': unknown eviction policy 'fifo' (choices: lru, 2q, arc, s3fifo, "
            "prefix)"}}) {
    auto r = ParseEvictionFlag(b.value, tiers);
    ASSERT_FALSE(r.ok()) << b.value;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(b.says), absl::string_view::npos) << r.status();
  }
  // The store itself refuses a policy for a tier it lacks.
  TierManagerConfig c = testing::NoThreadConfig();
  c.eviction[TierKind::kNvme] = EvictionPolicy::k2q;
  std::vector<std::unique_ptr<Tier>> host;
  host.push_back(testing::HostTier(16 * kPage, kPage));
  auto m = TierManager::Create(c, std::move(host));
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("eviction policy 2q for tier nvme, which the store does "
                                      "not have"),
            std::string::npos)
      << m.status();
}

// A one-page entry of namespace 1, kept in `held`, inserted into `shard`.
PageEntry* InsertPage(IndexShard& shard, std::vector<std::unique_ptr<PageEntry>>& held, uint64_t id,
                      uint64_t stamp) ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu) {
  held.push_back(std::make_unique<PageEntry>());
  PageEntry* e = held.back().get();
  e->key = Key(id);
  e->ns = 1;
  e->slot.bytes = kPage;
  shard.InsertLocked(e, stamp);
  return e;
}

// arc on one shard, driven by hand: a page PUT again while the first ghost
// remembers it (evicted from probation, never reused) shrinks the protected
// limit by a page; one the second ghost remembers (it had been protected,
// fell back and was evicted) grows it, up to the shard's share. Under 2q the
// same steps leave the limit where it was. Either way the page returns
// protected.
TEST(EvictionPolicyTest, ArcMovesTheProtectedLimitTowardTheGhostThatIsHit) {
  for (EvictionPolicy policy : {EvictionPolicy::k2q, EvictionPolicy::kArc}) {
    SCOPED_TRACE(EvictionPolicyName(policy));
    const bool arc = policy == EvictionPolicy::kArc;
    IndexShard shard;
    absl::MutexLock lock(&shard.mu);
    shard.SetPolicyLocked(0, policy, 2 * kPage, 3 * kPage);
    std::vector<std::unique_ptr<PageEntry>> held;
    uint64_t stamp = 0;
    auto put = [&](uint64_t id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu) {
      return InsertPage(shard, held, id, ++stamp);
    };
    auto read = [&](PageEntry* e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu) {
      shard.TouchLocked(e, ++stamp, /*reused=*/true);
    };
    auto evict = [&](PageEntry* e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu) {
      ASSERT_FALSE(e->flags & PageEntry::kProtected);
      shard.RememberEvictedLocked(e);
      shard.DetachLocked(e);
    };
    auto cap = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu) {
      return shard.ProtectedCapLocked(0) / kPage;
    };
    // Pages nobody reads, so that the ghosts hold more than one fingerprint
    // (a ghost's stale place of a fingerprint taken back may push out its
    // next entry early: harmless, but not in a ghost of one).
    for (uint64_t id = 100; id < 110; ++id) put(id);
    evict(put(1));          // from probation, never reused
    PageEntry* a = put(1);  // the first ghost remembers it
    EXPECT_TRUE(a->flags & PageEntry::kProtected);
    EXPECT_EQ(cap(), arc ? 1u : 2u);
    PageEntry* b = put(2);
    read(b);  // arc: over its 1-page limit, a falls back to probation
    PageEntry* c = put(3);
    read(c);  // arc: b falls back too; 2q: a falls back (2 pages)
    EXPECT_FALSE(a->flags & PageEntry::kProtected);
    EXPECT_TRUE(a->flags & PageEntry::kWasProtected);
    evict(a);
    EXPECT_EQ(shard.GhostLocked(0), 1u);
    a = put(1);  // arc: the second ghost remembers it
    EXPECT_TRUE(a->flags & PageEntry::kProtected);
    EXPECT_FALSE(a->flags & PageEntry::kWasProtected);
    EXPECT_EQ(cap(), 2u);
    if (!arc) continue;
    evict(b);  // fell back before: the second ghost again
    b = put(2);
    EXPECT_EQ(cap(), 3u);  // the share
    read(put(4));          // over 3 pages: c falls back
    evict(c);
    put(3);
    EXPECT_EQ(cap(), 3u) << "grew past the shard's share";
  }
}

// Two tiers: a page the host tier demoted unread and a GET then promotes
// back is a hit of the host tier's ghost, as a page PUT again is. Before,
// a promotion skipped the ghost: its fingerprint stayed (stale), and arc,
// which adapts on ghost hits, never adapted in a store with NVMe below it
// (kvtier-sim gave arc and 2q the same figures at host 4k + NVMe 16k).
TEST(EvictionPolicyTest, APagePromotedBackIsAGhostHitOfTheTierThatDemotedIt) {
  for (EvictionPolicy policy :
       {EvictionPolicy::k2q, EvictionPolicy::kArc, EvictionPolicy::kS3Fifo}) {
    SCOPED_TRACE(EvictionPolicyName(policy));
    IndexShard shard;
    absl::MutexLock lock(&shard.mu);
    shard.SetPolicyLocked(0, policy, 2 * kPage, 3 * kPage);
    std::vector<std::unique_ptr<PageEntry>> held;
    uint64_t stamp = 0;
    auto put = [&](uint64_t id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu) {
      return InsertPage(shard, held, id, ++stamp);
    };
    for (uint64_t id = 100; id < 110; ++id) put(id);  // more than one ghost entry's room
    PageEntry* a = put(1);
    Slot slot;
    slot.bytes = kPage;
    shard.MoveTierLocked(a, 1, slot, ++stamp);  // demoted unread: the host tier's ghost
    ASSERT_EQ(shard.GhostLocked(0), 1u);
    shard.MoveTierLocked(a, 0, slot, ++stamp);  // a GET promotes it back
    EXPECT_EQ(shard.GhostLocked(0), 0u) << "the ghost still remembers a page that is back";
    if (policy == EvictionPolicy::kArc)
      EXPECT_EQ(shard.ProtectedCapLocked(0) / kPage, 1u) << "arc did not adapt to the ghost hit";
    if (policy != EvictionPolicy::kS3Fifo) EXPECT_TRUE(a->flags & PageEntry::kProtected);
  }
}

// prefix: once its offsets are measured (a window of 64 arrivals here), a
// chain's unread last page goes before the pages that lead to it, and a
// flood of one-off pages (each a chain end) takes its own oldest pages
// before a chain's middle or a page read again. Under LRU the flood takes
// them all. The chain's parents leave the chain ends as their children come
// (StoreCore::AttachToParent): without it the flood took them too.
TEST(EvictionPolicyTest, PrefixTakesChainEndsFirstAndReusedPagesLast) {
  for (EvictionPolicy policy : {EvictionPolicy::kLru, EvictionPolicy::kPrefix}) {
    SCOPED_TRACE(std::string(EvictionPolicyName(policy)));
    const bool prefix = policy == EvictionPolicy::kPrefix;
    auto m = Manager(policy);
    const NamespaceId a = AddNs(*m, "a"), b = AddNs(*m, "b");
    Flood(*m, b, 1000, 2 * kTierPages);  // a full window of arrivals
    PageKey parent = PageKey::Zero();
    for (uint64_t k = 10; k < 14; ++k) {
      ASSERT_TRUE(Put(*m, a, Key(k), parent, Bytes(kPage, k)).ok());
      parent = Key(k);
    }
    Flood(*m, a, 50, 1);
    ASSERT_TRUE(m->PinForRead(a, Key(50)).has_value());
    Flood(*m, b, 2000, kTierPages);
    EXPECT_EQ(Present(*m, a, 10, 3), prefix ? 3u : 0u) << "the chain's first three pages";
    EXPECT_FALSE(Has(*m, a, 13)) << "the chain's unread end outlived a flood";
    EXPECT_EQ(Has(*m, a, 50), prefix);
    if (prefix) {
      const TierSnapshot t = m->Snapshot().tiers[0];
      EXPECT_EQ(t.eviction, EvictionPolicy::kPrefix);
      EXPECT_EQ(t.protected_pages, 1u);
      EXPECT_GT(t.ghost_entries, 0u);
    }
  }
}

// prefix on one shard, driven by hand: the offsets are a capacity of
// arrivals turned into stamps (here 3 stamps an arrival, 64 pages: 192
// stamps), times 3 for chain ends and 6 for reused pages; victims come in
// rank order across the three lists; a child moves its parent off the
// chain ends when the parent is touched again.
TEST(EvictionPolicyTest, PrefixRanksPagesByStampAndTheirListsOffset) {
  IndexShard shard;
  absl::MutexLock lock(&shard.mu);
  shard.SetPolicyLocked(0, EvictionPolicy::kPrefix, UINT64_MAX, UINT64_MAX);
  std::vector<std::unique_ptr<PageEntry>> held;
  uint64_t stamp = 0;
  std::vector<PageEntry*> pages;
  for (uint64_t id = 0; id < 64; ++id) {
    stamp += 3;
    pages.push_back(InsertPage(shard, held, id, stamp));
    EXPECT_TRUE(shard.ChainEndLocked(pages.back()));  // no child: a chain end
  }
  EXPECT_EQ(shard.PrefixOffsetsLocked(0), std::make_pair(uint64_t{576}, uint64_t{1152}));
  // Page 0 gains a child: touched, it is a page PUT once (rank = stamp).
  ++pages[0]->resident_children;
  shard.TouchLocked(pages[0], ++stamp);
  EXPECT_FALSE(shard.ChainEndLocked(pages[0]));
  --pages[0]->resident_children;  // (a leaf again, so the scans below may take it)
  // Page 1 is read: reused (rank = stamp + 1152).
  shard.TouchLocked(pages[1], ++stamp, /*reused=*/true);
  EXPECT_TRUE(pages[1]->flags & PageEntry::kProtected);
  // The 62 other chain ends rank 576 below their stamps (3..192 less 576):
  // they go first, oldest first; then page 0, then page 1.
  std::vector<uint64_t> order;
  for (int i = 0; i < 64; ++i) {
    Victim v = shard.FindVictimLocked(0, 0, 8);
    ASSERT_NE(v.entry, nullptr);
    order.push_back(v.entry->key == Key(0) ? 0 : v.entry->key == Key(1) ? 1 : 2);
    if (i == 0) {
      EXPECT_EQ(v.entry->key, Key(2));
    }
    shard.RememberEvictedLocked(v.entry);
    shard.DetachLocked(v.entry);
  }
  EXPECT_EQ(order[62], 0u);
  EXPECT_EQ(order[63], 1u);
  EXPECT_EQ(shard.SizeLocked(), 0u);
  // A page PUT again while the ghost remembers it (one of the last evicted:
  // the ghost shrinks with the shard's pages) comes back reused.
  EXPECT_TRUE(InsertPage(shard, held, 0, ++stamp)->flags & PageEntry::kProtected);
  EXPECT_FALSE(InsertPage(shard, held, 500, ++stamp)->flags & PageEntry::kProtected);
}

}  // namespace
}  // namespace kvtier::tiers
