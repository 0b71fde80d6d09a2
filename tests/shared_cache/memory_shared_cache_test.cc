// MemorySharedCache (the in-memory twin of the shared cache): its records,
// counters and LRU capacity, and the store publishing to it: pages leaving
// the last tier (shared_admission), PUTs under shared_write_through, and
// fetched pages (FillFetched) never published back.
#include "tiers/shared_cache/memory_shared_cache.h"

#include <cstring>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "tiers/host/host_tier.h"
#include "tiers/store/tier_manager.h"

namespace kvtier::tiers::shared_cache {
namespace {

PageKey Key(uint64_t i) {
  PageKey k;
  std::memcpy(k.bytes.data(), &i, sizeof(i));
  k.bytes[15] = 0x5a;  // never the zero key
  return k;
}

std::vector<uint8_t> Page(uint64_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 7);
  return v;
}

std::vector<bool> ContainsNow(SharedCache& c, absl::string_view ns, std::vector<PageKey> keys) {
  std::vector<bool> out;
  bool called = false;
  c.Contains(ns, std::move(keys), [&](std::vector<bool> present) {
    out = std::move(present);
    called = true;
  });
  EXPECT_TRUE(called) << "the callback runs before Contains returns";
  return out;
}

std::vector<FetchedPage> FetchNow(SharedCache& c, absl::string_view ns, std::vector<PageKey> keys,
                                  uint64_t page_bytes) {
  std::vector<FetchedPage> out;
  bool called = false;
  c.Fetch(ns, std::move(keys), page_bytes, [&](std::vector<FetchedPage> pages) {
    out = std::move(pages);
    called = true;
  });
  EXPECT_TRUE(called) << "the callback runs before Fetch returns";
  return out;
}

TEST(MemorySharedCacheTest, PublishContainsFetchForget) {
  MemorySharedCache c;  // unbounded
  const std::vector<uint8_t> a = Page(100, 1), b = Page(100, 2);
  EXPECT_TRUE(c.Publish("t", Key(1), PageKey::Zero(), a.data(), a.size()));
  EXPECT_TRUE(c.Publish("t", Key(2), Key(1), b.data(), b.size()));
  EXPECT_FALSE(c.Publish("t", Key(3), Key(2), b.data(), 0));  // nothing to store
  EXPECT_EQ(c.records(), 2u);
  // Namespaces are apart: "u" has no page 1.
  EXPECT_EQ(ContainsNow(c, "t", {Key(1), Key(3), Key(2)}), (std::vector<bool>{true, false, true}));
  EXPECT_EQ(ContainsNow(c, "u", {Key(1)}), (std::vector<bool>{false}));

  std::vector<FetchedPage> got = FetchNow(c, "t", {Key(2), Key(3), Key(1)}, 100);
  ASSERT_EQ(got.size(), 3u);
  ASSERT_TRUE(got[0].status.ok()) << got[0].status;
  EXPECT_EQ(got[0].parent, Key(1));
  EXPECT_EQ(std::memcmp(got[0].bytes.get(), b.data(), 100), 0);
  EXPECT_TRUE(absl::IsNotFound(got[1].status));
  EXPECT_EQ(got[1].bytes, nullptr);
  ASSERT_TRUE(got[2].status.ok());
  EXPECT_TRUE(got[2].parent.IsZero());
  EXPECT_EQ(std::memcmp(got[2].bytes.get(), a.data(), 100), 0);
  // Another layout's page size: DataLoss, never wrong bytes.
  got = FetchNow(c, "t", {Key(1), Key(2)}, 64);
  EXPECT_TRUE(absl::IsDataLoss(got[0].status));
  got = FetchNow(c, "t", {Key(1)}, 128);
  EXPECT_TRUE(absl::IsDataLoss(got[0].status));
  EXPECT_EQ(got[0].bytes, nullptr);

  // A newer copy of a key replaces the record.
  EXPECT_TRUE(c.Publish("t", Key(1), Key(9), b.data(), b.size()));
  got = FetchNow(c, "t", {Key(1)}, 100);
  EXPECT_EQ(got[0].parent, Key(9));
  EXPECT_EQ(std::memcmp(got[0].bytes.get(), b.data(), 100), 0);
  EXPECT_EQ(c.records(), 2u);

  absl::Status forget_status = absl::UnknownError("not called");
  uint64_t forgotten = 0;
  c.Forget("t", {Key(1), Key(3)}, [&](absl::Status st, uint64_t n) {
    forget_status = st;
    forgotten = n;
  });
  EXPECT_TRUE(forget_status.ok()) << forget_status;
  EXPECT_EQ(forgotten, 1u);
  EXPECT_EQ(ContainsNow(c, "t", {Key(1), Key(2)}), (std::vector<bool>{false, true}));
  EXPECT_EQ(c.records(), 1u);
  EXPECT_EQ(c.used_bytes(), 100u);

  const SharedCacheCounters n = c.counters();
  EXPECT_EQ(n.published, 3u);
  EXPECT_EQ(n.publish_drops, 1u);
  EXPECT_EQ(n.published_bytes, 300u);
  EXPECT_EQ(n.lookups, 3u);
  EXPECT_EQ(n.lookup_keys, 6u);
  EXPECT_EQ(n.lookup_hits, 3u);
  EXPECT_EQ(n.fetch_keys, 7u);
  EXPECT_EQ(n.fetch_hits, 3u);
  EXPECT_EQ(n.fetch_misses, 1u);
  EXPECT_EQ(n.fetched_bytes, 300u);
  EXPECT_EQ(n.oversized, 2u);  // pages 1 and 2 asked as 64 bytes
  EXPECT_EQ(n.malformed, 1u);  // page 1 asked as 128 bytes
  EXPECT_EQ(n.forgotten, 1u);
  EXPECT_FALSE(c.backing().empty());
}

TEST(MemorySharedCacheTest, CapacityDropsTheLeastRecentlyUsedRecord) {
  MemorySharedCache c(300);  // three pages of 100 bytes
  const std::vector<uint8_t> p = Page(100, 3);
  for (uint64_t i = 1; i <= 3; ++i) ASSERT_TRUE(c.Publish("t", Key(i), Key(i - 1), p.data(), 100));
  // Contains does not refresh 1 (Redis EXISTS: LOOKUP_NOTOUCH); a fetch
  // hit refreshes 2.
  EXPECT_EQ(ContainsNow(c, "t", {Key(1)}), (std::vector<bool>{true}));
  ASSERT_TRUE(FetchNow(c, "t", {Key(2)}, 100)[0].status.ok());
  ASSERT_TRUE(c.Publish("t", Key(4), Key(3), p.data(), 100));  // drops 1
  EXPECT_EQ(ContainsNow(c, "t", {Key(1), Key(2), Key(3), Key(4)}),
            (std::vector<bool>{false, true, true, true}));
  ASSERT_TRUE(c.Publish("t", Key(5), Key(4), p.data(), 100));  // drops 3, not 2
  EXPECT_EQ(ContainsNow(c, "t", {Key(2), Key(3), Key(4), Key(5)}),
            (std::vector<bool>{true, false, true, true}));
  EXPECT_EQ(c.lru_drops(), 2u);
  EXPECT_EQ(c.records(), 3u);
  EXPECT_EQ(c.used_bytes(), 300u);
  // A record larger than the whole cache is refused, and drops nothing.
  const std::vector<uint8_t> big = Page(301, 4);
  EXPECT_FALSE(c.Publish("t", Key(6), Key(5), big.data(), big.size()));
  EXPECT_EQ(c.records(), 3u);
  // A larger copy of a key makes room for itself among the others.
  const std::vector<uint8_t> two = Page(200, 5);
  ASSERT_TRUE(c.Publish("t", Key(5), Key(4), two.data(), two.size()));  // drops 2
  EXPECT_EQ(ContainsNow(c, "t", {Key(2), Key(4), Key(5)}), (std::vector<bool>{false, true, true}));
  EXPECT_EQ(c.used_bytes(), 300u);
}

TEST(MemorySharedCacheTest, StoppedCallsAnswerAtOnceAsMisses) {
  MemorySharedCache c;
  const std::vector<uint8_t> p = Page(10, 6);
  ASSERT_TRUE(c.Publish("t", Key(1), PageKey::Zero(), p.data(), 10));
  c.Drain();  // nothing queued: returns at once
  c.Stop();
  EXPECT_EQ(ContainsNow(c, "t", {Key(1)}), (std::vector<bool>{false}));
  EXPECT_TRUE(absl::IsNotFound(FetchNow(c, "t", {Key(1)}, 10)[0].status));
  absl::Status st;
  c.Forget("t", {Key(1)}, [&](absl::Status s, uint64_t) { st = s; });
  EXPECT_TRUE(absl::IsUnavailable(st));
  EXPECT_EQ(c.records(), 1u);  // not forgotten
  // Publish goes on until destruction (shared_cache.h).
  EXPECT_TRUE(c.Publish("t", Key(2), Key(1), p.data(), 10));
}

TEST(MemorySharedCacheTest, ACallbackMayCallTheCacheAgain) {
  MemorySharedCache c;
  const std::vector<uint8_t> p = Page(10, 7);
  bool inner = false;
  c.Contains("t", {Key(1)}, [&](std::vector<bool>) {
    inner = c.Publish("t", Key(1), PageKey::Zero(), p.data(), 10);  // no lock held
  });
  EXPECT_TRUE(inner);
  EXPECT_EQ(c.records(), 1u);
}

// --- The store with the cache beside it ---

constexpr uint64_t kPage = 4096;

std::unique_ptr<TierManager> Store(MemorySharedCache& cache, TierManagerConfig config,
                                   uint64_t pages) {
  HostTierConfig h;
  h.capacity_bytes = pages * kPage;
  h.slab_bytes = kPage;
  h.hugepages = HugepageMode::kOff;
  h.prefault = false;
  absl::StatusOr<std::unique_ptr<Tier>> host = CreateHostTier(h);
  EXPECT_TRUE(host.ok()) << host.status();
  std::vector<std::unique_ptr<Tier>> tiers;
  tiers.push_back(*std::move(host));
  config.start_evictor_thread = false;
  config.index_shards = 4;
  absl::StatusOr<std::unique_ptr<TierManager>> m =
      TierManager::Create(config, std::move(tiers), &cache);
  EXPECT_TRUE(m.ok()) << m.status();
  return *std::move(m);
}

// Reserve + Fill (or FillFetched) + Commit of page `i` with parent i - 1.
void Put(TierManager& m, NamespaceId ns, uint64_t i, bool fetched = false) {
  absl::StatusOr<ReserveResult> r = m.Reserve(ns, Key(i), i == 1 ? PageKey::Zero() : Key(i - 1),
                                              kPage);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->outcome, PutOutcome::kReserved);
  const std::vector<uint8_t> bytes = Page(kPage, static_cast<uint8_t>(i));
  ASSERT_TRUE((fetched ? r->reservation.FillFetched(bytes.data())
                       : r->reservation.Fill(bytes.data()))
                  .ok());
  ASSERT_TRUE(r->reservation.Commit());
}

TEST(MemorySharedCacheStoreTest, PagesLeavingTheLastTierArePublishedFirst) {
  MemorySharedCache cache;
  TierManagerConfig config;
  config.shared_admission = TierManagerConfig::Admission::kAll;
  std::unique_ptr<TierManager> store = Store(cache, config, 4);
  absl::StatusOr<NamespaceId> ns = store->AddNamespace(NamespaceConfig{"tenant", {}});
  ASSERT_TRUE(ns.ok()) << ns.status();
  for (uint64_t i = 1; i <= 3; ++i) Put(*store, *ns, i);
  EXPECT_EQ(cache.records(), 0u) << "nothing is published before it leaves the store";
  EXPECT_EQ(store->EvictTo(0, 0), 3u);
  EXPECT_EQ(store->NamespacePages(*ns), 0u);
  ASSERT_EQ(cache.records(), 3u);
  std::vector<FetchedPage> got = FetchNow(cache, "tenant", {Key(1), Key(2), Key(3)}, kPage);
  for (uint64_t i = 1; i <= 3; ++i) {
    const FetchedPage& p = got[i - 1];
    ASSERT_TRUE(p.status.ok()) << i << ": " << p.status;
    EXPECT_EQ(p.parent, i == 1 ? PageKey::Zero() : Key(i - 1));
    const std::vector<uint8_t> want = Page(kPage, static_cast<uint8_t>(i));
    EXPECT_EQ(std::memcmp(p.bytes.get(), want.data(), kPage), 0) << i;
  }
  EXPECT_EQ(cache.counters().published, 3u);
}

TEST(MemorySharedCacheStoreTest, ReusedOnlyPublishesPagesReadAgain) {
  MemorySharedCache cache;
  TierManagerConfig config;
  config.shared_admission = TierManagerConfig::Admission::kReusedOnly;
  std::unique_ptr<TierManager> store = Store(cache, config, 4);
  absl::StatusOr<NamespaceId> ns = store->AddNamespace(NamespaceConfig{"tenant", {}});
  ASSERT_TRUE(ns.ok());
  Put(*store, *ns, 1);
  Put(*store, *ns, 2);
  ASSERT_TRUE(store->PinForRead(*ns, Key(2)).has_value());  // read again: reused
  EXPECT_EQ(store->EvictTo(0, 0), 2u);
  EXPECT_EQ(ContainsNow(cache, "tenant", {Key(1), Key(2)}), (std::vector<bool>{false, true}));
}

TEST(MemorySharedCacheStoreTest, WriteThroughPublishesAtFillAndFetchedPagesAreNotPublishedBack) {
  MemorySharedCache cache;
  TierManagerConfig config;
  config.shared_write_through = true;
  std::unique_ptr<TierManager> store = Store(cache, config, 4);
  absl::StatusOr<NamespaceId> ns = store->AddNamespace(NamespaceConfig{"tenant", {}});
  ASSERT_TRUE(ns.ok());
  {
    // Published when filled, before the commit.
    absl::StatusOr<ReserveResult> r = store->Reserve(*ns, Key(1), PageKey::Zero(), kPage);
    ASSERT_TRUE(r.ok()) << r.status();
    const std::vector<uint8_t> bytes = Page(kPage, 1);
    ASSERT_TRUE(r->reservation.Fill(bytes.data()).ok());
    EXPECT_EQ(ContainsNow(cache, "tenant", {Key(1)}), (std::vector<bool>{true}));
    ASSERT_TRUE(r->reservation.Commit());
  }
  Put(*store, *ns, 2, /*fetched=*/true);
  EXPECT_EQ(ContainsNow(cache, "tenant", {Key(1), Key(2)}), (std::vector<bool>{true, false}));
  EXPECT_EQ(cache.counters().published, 1u);
  // Evictions are not published again under write-through: the cluster
  // has every PUT's page already (and a fetched one came from it).
  EXPECT_EQ(store->EvictTo(0, 0), 2u);
  EXPECT_EQ(cache.counters().published, 1u);
  EXPECT_EQ(ContainsNow(cache, "tenant", {Key(2)}), (std::vector<bool>{false}));
}

}  // namespace
}  // namespace kvtier::tiers::shared_cache
