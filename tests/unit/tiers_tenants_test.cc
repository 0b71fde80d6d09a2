// Eviction with a thousand namespaces: victim choice scans one list per
// shard across namespaces (page_index.h), so these check that every store
// rule still holds with many tenants present: global LRU across tenants,
// quotas evicting the tenant's own pages only, leaf-first chains, pins and
// lease holds never evicted, reserves kept, and exact counts under
// concurrent tenants with the evictor running.
#include <atomic>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/unit/tiers_test_util.h"

namespace kvtier::tiers {
namespace {

using testing::Bytes;
using testing::Key;
using testing::MakeManager;
using testing::Put;

constexpr uint64_t kPage = 1024;
constexpr uint32_t kTenants = 1000;

// Every test runs under every eviction policy: quotas, reserves, pins and
// leaf-first hold whatever order the tier lists keep.
class TenantsTest : public testing::PolicyTest {};
KVTIER_EVERY_POLICY(TenantsTest);

TierManagerConfig ManyShards() {
  TierManagerConfig c = testing::NoThreadConfig();
  c.index_shards = 16;
  return c;
}

std::vector<NamespaceId> AddTenants(TierManager& m, uint32_t n, const std::string& prefix = "t") {
  std::vector<NamespaceId> ids;
  for (uint32_t i = 0; i < n; ++i) ids.push_back(testing::AddNs(m, absl::StrCat(prefix, i)));
  return ids;
}

// Present without touching recency (Lookup and PinForRead would reorder).
bool Present(TierManager& m, NamespaceId ns, uint64_t key) { return m.Locate(ns, Key(key)) >= 0; }

uint64_t Used(TierManager& m) { return m.Snapshot().tiers[0].used_bytes; }

TEST_P(TenantsTest, EvictionTakesTheOldestPagesAcrossAThousandTenants) {
  auto m = MakeManager({kTenants + 16}, kPage, ManyShards());
  const std::vector<NamespaceId> ids = AddTenants(*m, kTenants);
  for (uint32_t i = 0; i < kTenants; ++i) ASSERT_TRUE(Put(*m, ids[i], i, kPage).ok());
  EXPECT_EQ(m->EvictTo(0, Used(*m) - 100 * kPage), 100u);
  for (uint32_t i = 0; i < kTenants; ++i) {
    EXPECT_EQ(m->NamespacePages(ids[i]), i < 100 ? 0u : 1u) << "tenant " << i;
  }
}

TEST_P(TenantsTest, OverQuotaTenantEvictsOnlyItsOwnPagesAmongAThousand) {
  auto m = MakeManager({2 * kTenants}, kPage, ManyShards());
  const std::vector<NamespaceId> ids = AddTenants(*m, kTenants - 1);
  const NamespaceId q = testing::AddNs(*m, "quota", {{TierKind::kHost, 8 * kPage}});
  for (uint32_t i = 0; i < ids.size(); ++i) ASSERT_TRUE(Put(*m, ids[i], i, kPage).ok());
  // The others' pages are older, yet only q's own make room under its quota.
  for (uint64_t k = 0; k < 20; ++k) ASSERT_TRUE(Put(*m, q, 100000 + k, kPage).ok());
  for (uint64_t k = 0; k < 20; ++k) EXPECT_EQ(Present(*m, q, 100000 + k), k >= 12) << k;
  for (uint32_t i = 0; i < ids.size(); ++i) EXPECT_EQ(m->NamespacePages(ids[i]), 1u) << i;
  const StoreSnapshot s = m->Snapshot();
  EXPECT_EQ(s.namespaces.back().quota_evictions, 12u);
  EXPECT_EQ(s.tiers[0].evictions, 12u);
}

// A chain whose root is the store's oldest page, among a thousand tenants'
// newer pages: page by page, it always loses its deepest page first.
TEST_P(TenantsTest, ChainEvictsLeafFirstAmongAThousandTenants) {
  auto m = MakeManager({kTenants + 64}, kPage, ManyShards());
  const NamespaceId x = testing::AddNs(*m, "chain");
  const std::vector<NamespaceId> ids = AddTenants(*m, kTenants);
  constexpr uint64_t kChain = 12;
  PageKey parent = PageKey::Zero();
  for (uint64_t k = 0; k < kChain; ++k) {  // one PUT each: the root is the oldest
    ASSERT_TRUE(Put(*m, x, Key(k), parent, Bytes(kPage, k)).ok());
    parent = Key(k);
  }
  for (uint32_t i = 0; i < kTenants; ++i) ASSERT_TRUE(Put(*m, ids[i], 1000 + i, kPage).ok());
  uint64_t left = kChain;
  for (uint32_t step = 0; left > 0 && step < kTenants + kChain; ++step) {
    ASSERT_EQ(m->EvictTo(0, Used(*m) - kPage), 1u);
    while (left > 0 && !Present(*m, x, left - 1)) --left;
    // What is left of the chain is a prefix: no ancestor went before a descendant.
    for (uint64_t k = 0; k < left; ++k) ASSERT_TRUE(Present(*m, x, k)) << "step " << step;
  }
  EXPECT_EQ(left, 0u);
}

TEST_P(TenantsTest, PinnedAndHeldPagesStayAmongAThousandTenants) {
  auto m = MakeManager({kTenants + 16}, kPage, ManyShards());
  const std::vector<NamespaceId> ids = AddTenants(*m, kTenants);
  ASSERT_TRUE(Put(*m, ids[0], 0, kPage).ok());
  // The oldest page, pinned by a reader about to read it (a prefetch's pin:
  // a GET's would also make it reused, which 2q protects).
  std::optional<PagePin> reader = m->PinForPromotion(ids[0], Key(0));
  ASSERT_TRUE(reader.has_value());
  for (uint32_t i = 1; i < kTenants; ++i) ASSERT_TRUE(Put(*m, ids[i], i, kPage).ok());
  std::vector<PagePin> holds;  // leases on the next nine oldest
  for (uint32_t i = 1; i < 10; ++i) {
    std::optional<PagePin> h = m->HoldForLease(ids[i], Key(i));
    ASSERT_TRUE(h.has_value());
    holds.push_back(*std::move(h));
  }
  EXPECT_EQ(m->EvictTo(0, Used(*m) - 100 * kPage), 100u);
  for (uint32_t i = 0; i < 120; ++i) {
    EXPECT_EQ(Present(*m, ids[i], i), i < 10 || i >= 110) << "tenant " << i;
  }
  reader.reset();
  holds.clear();
  EXPECT_EQ(m->EvictTo(0, Used(*m) - 10 * kPage), 10u);  // now they are the oldest
  for (uint32_t i = 0; i < 10; ++i) EXPECT_FALSE(Present(*m, ids[i], i)) << i;
  EXPECT_TRUE(Present(*m, ids[110], 110));
}

TEST_P(TenantsTest, ReserveHoldsAgainstAThousandTenants) {
  auto m = MakeManager({256}, kPage, ManyShards());
  NamespaceConfig vc;
  vc.name = "victim";
  vc.reserved_bytes[TierKind::kHost] = 32 * kPage;
  auto victim = m->AddNamespace(vc);
  ASSERT_TRUE(victim.ok()) << victim.status();
  const std::vector<NamespaceId> ids = AddTenants(*m, kTenants);
  for (uint64_t k = 0; k < 48; ++k) ASSERT_TRUE(Put(*m, *victim, k, kPage).ok());
  for (uint64_t k = 0; k < 3000; ++k) ASSERT_TRUE(Put(*m, ids[k % kTenants], 1000 + k, kPage).ok());
  // The 16 pages above the reserve went, oldest first; the 32 newest stay.
  for (uint64_t k = 0; k < 48; ++k) EXPECT_EQ(Present(*m, *victim, k), k >= 16) << k;
  EXPECT_EQ(m->Snapshot().namespaces[0].tier_bytes[TierKind::kHost], 32 * kPage);
}

// Tenants on four threads PUT chains, read, look up, delete and evict their
// own pages while a fifth evicts tier-wide (the evictor's EvictTo) and PUTs
// evict inline: nothing read is wrong, the counts agree, and every page
// stays reachable by eviction.
TEST_P(TenantsTest, ConcurrentTenantsKeepCountsExactAndEveryPageEvictable) {
  TierManagerConfig c = ManyShards();
  c.eviction_batch = 8;
  auto m = MakeManager({256}, kPage, c);
  const std::vector<NamespaceId> ids = AddTenants(*m, 200);
  std::atomic<uint64_t> bad{0};
  std::atomic<bool> done{false};
  std::thread evictor([&] {
    while (!done.load()) m->EvictTo(0, 128 * kPage);
  });
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      for (int op = 0; op < 2000; ++op) {
        const NamespaceId ns = ids[t * 50 + rng() % 50];
        const uint64_t k = rng() % 64;
        switch (rng() % 6) {
          case 0:
          case 1:
            (void)Put(*m, ns, Key(k), k % 4 ? Key(k - 1) : PageKey::Zero(), Bytes(kPage, k));
            break;
          case 2:
            if (auto pin = m->PinForRead(ns, Key(k)); pin.has_value()) {
              if (std::memcmp(pin->data(), Bytes(kPage, k).data(), kPage) != 0) ++bad;
            }
            break;
          case 3: {
            std::vector<PageKey> keys = {Key(k), Key(k + 1), Key(k + 2)};
            m->Lookup(ns, keys);
            break;
          }
          case 4:
            m->Delete(ns, Key(k));
            break;
          default:
            (void)m->EvictNamespace(ns, TierKind::kHost, 2);
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  done = true;
  evictor.join();
  EXPECT_EQ(bad.load(), 0u);
  StoreSnapshot s = m->Snapshot();
  uint64_t ns_pages = 0;
  for (const NamespaceSnapshot& n : s.namespaces) {
    ns_pages += n.pages;
    EXPECT_EQ(n.tier_bytes.at(TierKind::kHost), n.pages * kPage) << n.name;
  }
  EXPECT_EQ(ns_pages, s.index_pages);
  EXPECT_EQ(s.tiers[0].used_bytes, s.tiers[0].pages * kPage);
  m->EvictTo(0, 0);  // a page missing from the lists would stay behind
  s = m->Snapshot();
  EXPECT_EQ(s.index_pages, 0u);
  EXPECT_EQ(s.tiers[0].used_bytes, 0u);
}

}  // namespace
}  // namespace kvtier::tiers
