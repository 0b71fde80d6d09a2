// Batched LOOKUP (Client::LookupBatch) through a real kvtierd with an NVMe
// tier: each chain is answered as a single-chain LOOKUP would be (leading
// hits, tiers), the lookahead starts on every chain's NVMe hits, leases hold
// every chain's hits until the GET, and the tenant's lease cap cuts the
// batch where it runs out, chain by chain.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "tests/prefetch/nvme_daemon_fixture.h"
#include "tools/common/page_pattern.h"

namespace kvtier::itest {
namespace {

// Of the 20 chains, the oldest end up on NVMe, the newest in RAM.
class LookupBatchTest : public NvmeChainsTest {
 protected:
  LookupBatchTest() : NvmeChainsTest(8000, 0) {}

  // GETs `chain` and checks every page is a `want` hit with its own bytes.
  void ExpectGet(const std::vector<PageKey>& chain, TierKind want) {
    std::memset(buf_->data(), 0, buf_->size());
    auto got = c_->Get(chain, id_, Offsets(chain.size()));
    ASSERT_TRUE(got.ok()) << got.status();
    for (size_t i = 0; i < chain.size(); ++i) {
      EXPECT_EQ((*got)[i], want) << "page " << i;
      EXPECT_EQ(tools::CheckPattern(chain[i], Page(i), kPage), kPage) << "page " << i;
    }
  }
  const std::vector<PageKey>& ram() const { return chains_.back(); }
  const std::vector<PageKey>& ram2() const { return chains_[chains_.size() - 2]; }
  const std::vector<PageKey>& nvme() const { return chains_.front(); }
};

TEST_F(LookupBatchTest, EachChainIsAnsweredAsASingleLookupAndNvmeHitsComeUp) {
  // A chain whose tail is unknown, and one nobody stored.
  std::vector<PageKey> partial(ram().begin(), ram().begin() + 3);
  for (const PageKey& k : MakeChain(SmallLayout(), 99001, 2)) partial.push_back(k);
  const std::vector<PageKey> missing = MakeChain(SmallLayout(), 99002, 4);
  ASSERT_TRUE(c_->Get(ram(), id_, Offsets(kLen)).ok());  // in RAM now, wherever PUT left it
  auto got = c_->LookupBatch(std::vector<std::vector<PageKey>>{ram(), nvme(), partial, missing});
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 4u);
  // The GET left ram() in RAM where the host tier had room (a page may have
  // stayed on NVMe): its NVMe hits, and only those, go to the lookahead.
  EXPECT_EQ((*got)[0].hits, kLen);
  const auto nvme_hits = [](const LookupResult& r) {
    return static_cast<uint32_t>(std::count(r.tiers.begin(), r.tiers.end(), TierKind::kNvme));
  };
  EXPECT_EQ((*got)[0].prefetching, nvme_hits((*got)[0]));
  EXPECT_EQ((*got)[1].hits, kLen);
  EXPECT_EQ((*got)[1].tiers, std::vector<TierKind>(kLen, TierKind::kNvme));
  EXPECT_EQ((*got)[1].prefetching, kLen);  // the lookahead ran for this chain
  EXPECT_EQ((*got)[2].hits, 3u);           // ram()'s first 3, then unknown keys
  EXPECT_EQ((*got)[2].tiers,
            std::vector<TierKind>((*got)[0].tiers.begin(), (*got)[0].tiers.begin() + 3));
  EXPECT_EQ((*got)[3].hits, 0u);
  EXPECT_TRUE((*got)[3].tiers.empty());
  uint32_t queued = 0;
  for (const LookupResult& r : *got) {
    EXPECT_EQ(r.leased, 0u);
    queued += r.prefetching;
  }
  // The single-chain form agrees.
  auto one = c_->Lookup(partial);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->hits, 3u);
  // Every queued promotion ends; the NVMe chain's came through (nothing
  // else competes for room): its GET reads RAM.
  ASSERT_TRUE(WaitStats([&](const auto& p) {
    return p.promoted_pages() + p.failed() + p.dropped() >= queued;
  }));
  ExpectGet(nvme(), TierKind::kHost);
  // In time or late (a GET that caught a promotion still finishing counts as
  // late): either way every page of the chain was promoted before it was read.
  const wire::PrefetchStats p = Prefetch();
  EXPECT_GE(p.completed_in_time() + p.late(), kLen);
}

// Room for two chains' leases (16 pages).
class LookupBatchLeaseTest : public LookupBatchTest {
 protected:
  DaemonOptions DaemonOpts() const override {
    DaemonOptions o = LookupBatchTest::DaemonOpts();
    o.flags.push_back("--prefetch_max_pinned=2MiB");
    o.flags.push_back("--prefetch_max_leased_per_tenant=1MiB");
    return o;
  }
};

TEST_F(LookupBatchLeaseTest, LeasesHoldEveryChainsHitsUntilItsGet) {
  const LookupOptions lease{.lease = std::chrono::seconds(20)};
  ASSERT_TRUE(c_->Get(ram2(), id_, Offsets(kLen)).ok());  // both RAM chains in RAM
  auto got = c_->LookupBatch(std::vector<std::vector<PageKey>>{ram(), ram2()}, lease);
  ASSERT_TRUE(got.ok()) << got.status();
  for (const LookupResult& r : *got) {
    EXPECT_EQ(r.hits, kLen);
    EXPECT_EQ(r.leased, kLen);
  }
  // Every page held once. (Not lookup_leased: a page the GET left on NVMe
  // was promoted by the lookahead under a prefetch lease, which the LOOKUP
  // then extended instead of taking a second one; 1 run in ~20 under load.)
  EXPECT_EQ(Prefetch().leased_pages(), 2 * kLen);
  // Held: emptying the host tier leaves both chains there.
  ASSERT_TRUE(c_->Evict("", TierKind::kHost, 0).ok());
  ExpectGet(ram(), TierKind::kHost);
  ExpectGet(ram2(), TierKind::kHost);
  EXPECT_EQ(Prefetch().leased_pages(), 0u);  // each GET ended its chain's leases
  // Read, they are ordinary again: the same eviction now moves them down.
  ASSERT_TRUE(c_->Evict("", TierKind::kHost, 0).ok());
  auto plain = c_->LookupBatch(std::vector<std::vector<PageKey>>{ram(), ram2()});
  ASSERT_TRUE(plain.ok()) << plain.status();
  for (const LookupResult& r : *plain) {
    ASSERT_EQ(r.hits, kLen);
    EXPECT_EQ(r.tiers[0], TierKind::kNvme);
    EXPECT_EQ(r.leased, 0u);
  }
}

// The tenant's lease cap (512 KiB = 8 pages here) is taken chain by chain:
// the first chain gets it all, the next ones count nothing held.
TEST_F(LookupBatchTest, TheLeaseCapCutsLaterChains) {
  const LookupOptions lease{.lease = std::chrono::seconds(20)};
  const std::vector<std::vector<PageKey>> three{ram(), ram2(), chains_[chains_.size() - 3]};
  auto got = c_->LookupBatch(three, lease);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ((*got)[0].hits, kLen);
  EXPECT_EQ((*got)[0].leased, kLen);
  EXPECT_EQ((*got)[1].hits, 0u);
  EXPECT_EQ((*got)[2].hits, 0u);
  EXPECT_GE(Prefetch().lookup_lease_refused(), 1u);
  auto plain = c_->LookupBatch(three);
  ASSERT_TRUE(plain.ok()) << plain.status();
  for (const LookupResult& r : *plain) EXPECT_EQ(r.hits, kLen);
}

TEST_F(LookupBatchTest, EmptyChainsLongChainsAndBigBatches) {
  auto empty = c_->LookupBatch(std::vector<std::vector<PageKey>>{{}, ram(), {}});
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ((*empty)[0].hits, 0u);
  EXPECT_EQ((*empty)[1].hits, kLen);
  EXPECT_EQ((*empty)[2].hits, 0u);
  auto none = c_->LookupBatch(std::vector<std::vector<PageKey>>{});
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
  // A chain over the daemon's per-chain limit: refused before anything is sent.
  std::vector<PageKey> huge = MakeChain(SmallLayout(), 99003, 4097);
  auto bad = c_->LookupBatch(std::vector<std::vector<PageKey>>{ram(), huge},
                             LookupOptions{.lease = std::chrono::seconds(20)});
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(bad.status())) << bad.status();
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "chain 1 has 4097 keys")) << bad.status();
  EXPECT_EQ(Prefetch().lookup_leased(), 0u);
  // 4500 chains (over 4096 per request) and 9 x 4000 keys (over 32768):
  // split by the client, answered in order.
  std::vector<std::vector<PageKey>> many(4500, std::vector<PageKey>{huge[0]});
  many[4300] = ram();
  auto split = c_->LookupBatch(many);
  ASSERT_TRUE(split.ok()) << split.status();
  ASSERT_EQ(split->size(), many.size());
  for (size_t i = 0; i < many.size(); ++i) ASSERT_EQ((*split)[i].hits, i == 4300 ? kLen : 0u) << i;
  std::vector<std::vector<PageKey>> wide(9, std::vector<PageKey>(huge.begin(), huge.begin() + 4000));
  wide[8].insert(wide[8].begin(), ram().begin(), ram().end());
  auto big = c_->LookupBatch(wide);
  ASSERT_TRUE(big.ok()) << big.status();
  for (size_t i = 0; i < wide.size(); ++i) EXPECT_EQ((*big)[i].hits, i == 8 ? kLen : 0u) << i;
}

}  // namespace
}  // namespace kvtier::itest
