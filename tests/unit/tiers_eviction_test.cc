// TierManager eviction tests: LRU order, leaf-first eviction along prefix
// chains, the watermark-driven evictor thread, and demotion between tiers.
#include <chrono>
#include <thread>

#include "gtest/gtest.h"
#include "tests/unit/tiers_test_util.h"

namespace kvtier::tiers {
namespace {

using testing::AddNs;
using testing::Bytes;
using testing::Has;
using testing::Key;
using testing::MakeManager;
using testing::Put;

constexpr uint64_t kPage = 4096;

// Evicts exactly one page from tier 0 and returns which of `keys` is gone.
int EvictOneOf(TierManager& m, NamespaceId ns, const std::vector<uint64_t>& keys,
               std::vector<bool>& gone) {
  const uint64_t used = m.Snapshot().tiers[0].used_bytes;
  EXPECT_EQ(m.EvictTo(0, used - kPage), 1u);
  int found = -1;
  // Probing refreshes recency, so probe tail-first (last key first), the
  // order LOOKUP uses, to keep ancestors newer than descendants.
  for (size_t j = keys.size(); j > 0; --j) {
    const size_t i = j - 1;
    if (gone[i]) continue;
    auto pin = m.PinForRead(ns, Key(keys[i]));
    if (!pin.has_value()) {
      EXPECT_EQ(found, -1) << "more than one page went";
      found = static_cast<int>(i);
      gone[i] = true;
    }
  }
  return found;
}

TEST(EvictionTest, OldestPageGoesFirst) {
  auto m = MakeManager({8}, kPage);
  NamespaceId a = AddNs(*m, "a");
  for (uint64_t k = 0; k < 8; ++k) ASSERT_TRUE(Put(*m, a, k, kPage).ok());
  { auto pin = m->PinForRead(a, Key(0)); }  // 0 becomes the newest
  ASSERT_TRUE(Put(*m, a, 8, kPage).ok());   // tier full: evicts 1
  EXPECT_FALSE(Has(*m, a, 1));
  EXPECT_TRUE(Has(*m, a, 0));
  EXPECT_EQ(m->EvictTo(0, 6 * kPage), 2u);
  EXPECT_FALSE(Has(*m, a, 2));
  EXPECT_FALSE(Has(*m, a, 3));
  EXPECT_TRUE(Has(*m, a, 4));
  auto snap = m->Snapshot();
  EXPECT_EQ(snap.tiers[0].evictions, 3u);
  EXPECT_EQ(snap.tiers[0].pages, 6u);
  EXPECT_EQ(snap.index_pages, 6u);
}

// Descendants go before ancestors, whether the chain was just written
// (root oldest: leaf-first skips pages with resident children) or just
// looked up (tail-first touch: root newest; checked with a scan window of
// one page so that the stamps alone must give the order).
void CheckChainEvictsLeafFirst(bool lookup_after_put) {
  TierManagerConfig config = testing::NoThreadConfig();
  if (lookup_after_put) config.leaf_scan_limit = 1;
  auto m = MakeManager({16}, kPage, config);
  NamespaceId a = AddNs(*m, "a");
  std::vector<uint64_t> chain = {10, 11, 12, 13, 14};
  PageKey parent = PageKey::Zero();
  for (uint64_t k : chain) {
    ASSERT_TRUE(Put(*m, a, Key(k), parent, Bytes(kPage, k)).ok());
    parent = Key(k);
  }
  if (lookup_after_put) {
    std::vector<PageKey> keys;
    for (uint64_t k : chain) keys.push_back(Key(k));
    ASSERT_EQ(m->Lookup(a, keys).hits, chain.size());
  }
  std::vector<bool> gone(chain.size(), false);
  for (int expect = static_cast<int>(chain.size()) - 1; expect >= 0; --expect) {
    EXPECT_EQ(EvictOneOf(*m, a, chain, gone), expect);
  }
}

TEST(EvictionTest, ChainEvictsLeafFirstAfterPut) { CheckChainEvictsLeafFirst(false); }
TEST(EvictionTest, ChainEvictsLeafFirstAfterLookup) { CheckChainEvictsLeafFirst(true); }

TEST(EvictionTest, DedupPutKeepsParentNewerThanChild) {
  TierManagerConfig config = testing::NoThreadConfig();
  config.leaf_scan_limit = 1;  // recency alone must protect the parent
  auto m = MakeManager({8}, kPage, config);
  NamespaceId a = AddNs(*m, "a");
  ASSERT_TRUE(Put(*m, a, Key(1), PageKey::Zero(), Bytes(kPage, 1)).ok());
  ASSERT_TRUE(Put(*m, a, Key(2), Key(1), Bytes(kPage, 2)).ok());
  ASSERT_TRUE(Put(*m, a, 3, kPage).ok());
  ASSERT_TRUE(Put(*m, a, Key(2), Key(1), Bytes(kPage, 2)).ok());  // dedup: touches 2, then 1
  EXPECT_EQ(m->EvictTo(0, 2 * kPage), 1u);
  EXPECT_FALSE(Has(*m, a, 3));
  EXPECT_EQ(m->EvictTo(0, 1 * kPage), 1u);
  EXPECT_FALSE(Has(*m, a, 2));
  EXPECT_TRUE(Has(*m, a, 1));
}

TEST(EvictionTest, EvictorThreadKeepsUsageBetweenWatermarks) {
  TierManagerConfig config;
  config.high_watermark = 0.8;
  config.low_watermark = 0.5;
  config.eviction_batch = 4;
  auto m = MakeManager({64}, kPage, config);
  NamespaceId a = AddNs(*m, "a");
  // 52 pages is the first count above 80% of 64: the last PUT kicks the
  // evictor, which must bring usage down to 50% (32 pages) on its own.
  for (uint64_t k = 0; k < 52; ++k) ASSERT_TRUE(Put(*m, a, k, kPage).ok());
  const uint64_t low = 32 * kPage;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (m->Snapshot().tiers[0].used_bytes > low && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  auto snap = m->Snapshot();
  EXPECT_LE(snap.tiers[0].used_bytes, low);
  EXPECT_GE(snap.tiers[0].evictions, 20u);
  EXPECT_TRUE(Has(*m, a, 51));  // the newest stay
  EXPECT_FALSE(Has(*m, a, 0));
}

TEST(EvictionTest, DemotionToLowerTierKeepsBytesExact) {
  auto m = MakeManager({4, 16}, kPage);
  NamespaceId a = AddNs(*m, "a");
  for (uint64_t k = 0; k < 10; ++k) ASSERT_TRUE(Put(*m, a, k, kPage).ok());
  auto snap = m->Snapshot();
  ASSERT_EQ(snap.tiers.size(), 2u);
  EXPECT_EQ(snap.tiers[0].pages, 4u);
  EXPECT_EQ(snap.tiers[1].pages, 6u);
  EXPECT_EQ(snap.tiers[0].evictions, 6u);
  EXPECT_EQ(snap.tiers[1].bytes_in, 6 * kPage);  // demoted copies
  EXPECT_EQ(snap.tiers[1].evictions, 0u);
  for (uint64_t k = 0; k < 10; ++k) {
    auto pin = m->PinForRead(a, Key(k));
    ASSERT_TRUE(pin.has_value()) << k;
    auto want = Bytes(kPage, k);
    EXPECT_EQ(std::memcmp(pin->data(), want.data(), kPage), 0) << k;
  }
  // Tier 0 missed the six demoted pages; tier 1 served them.
  snap = m->Snapshot();
  EXPECT_EQ(snap.tiers[0].hits, 4u);
  EXPECT_EQ(snap.tiers[0].misses, 6u);
  EXPECT_EQ(snap.tiers[1].hits, 6u);
  // Keep pushing: the lower tier drops its oldest once it is full too.
  for (uint64_t k = 10; k < 30; ++k) ASSERT_TRUE(Put(*m, a, k, kPage).ok());
  snap = m->Snapshot();
  EXPECT_EQ(snap.index_pages, 20u);
  EXPECT_EQ(snap.tiers[1].evictions, 10u);
  EXPECT_EQ(snap.namespaces[0].pages, 20u);
  EXPECT_EQ(snap.namespaces[0].bytes, 20 * kPage);
}

TEST(EvictionTest, QuotaInLowerTierIsRespectedOnDemotion) {
  auto m = MakeManager({4, 16}, kPage);
  // Both tiers are host tiers here, so one quota applies to each.
  NamespaceId a = AddNs(*m, "a", {{TierKind::kHost, 3 * kPage}});
  for (uint64_t k = 0; k < 8; ++k) ASSERT_TRUE(Put(*m, a, k, kPage).ok());
  auto snap = m->Snapshot();
  EXPECT_EQ(snap.tiers[0].pages, 3u);
  EXPECT_EQ(snap.tiers[1].pages, 3u);
  EXPECT_EQ(snap.namespaces[0].pages, 6u);
  EXPECT_TRUE(Has(*m, a, 7));
  EXPECT_FALSE(Has(*m, a, 0));
}

}  // namespace
}  // namespace kvtier::tiers
