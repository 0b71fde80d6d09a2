// The three prefetch paths through a real kvtierd with an NVMe tier (under
// /tmp, a real disk): LOOKUP lookahead, PREFETCH hints, GET policies
// (best_effort, timeout) and layer-wise GET — bytes and STATS counters.
#include <gtest/gtest.h>

#include <cstring>
#include <thread>

#include "absl/strings/match.h"
#include "tests/prefetch/nvme_daemon_fixture.h"
#include "tools/common/page_pattern.h"

namespace kvtier::itest {
namespace {

class PrefetchDaemonTest : public NvmeChainsTest {
 protected:
  // 4 KiB past the chain's pages: where the layer-wise GET's progress word goes.
  PrefetchDaemonTest() : NvmeChainsTest(7000, 4096) {}

  absl::Span<uint8_t> Mapping() { return absl::MakeSpan(buf_->data(), buf_->size()); }
  // Where each page of `chain` is, one LOOKUP per key would start lookahead,
  // so read it from STATS-neutral GETs instead: callers use the reply tiers.
  void ExpectIntact(const std::vector<PageKey>& chain, const std::vector<TierKind>& tiers,
                    TierKind want) {
    ASSERT_EQ(tiers.size(), chain.size());
    for (size_t i = 0; i < chain.size(); ++i) {
      EXPECT_EQ(tiers[i], want) << "page " << i;
      EXPECT_EQ(tools::CheckPattern(chain[i], Page(i), kPage), kPage) << "page " << i;
    }
  }
};

TEST_F(PrefetchDaemonTest, LookupStartsPromotingNvmeHitsAndTheGetFindsThemInRam) {
  const auto& chain = chains_.front();
  auto look = c_->Lookup(chain);
  ASSERT_TRUE(look.ok()) << look.status();
  ASSERT_EQ(look->hits, kLen);
  for (TierKind t : look->tiers) EXPECT_EQ(t, TierKind::kNvme);
  EXPECT_EQ(look->prefetching, kLen);
  ASSERT_TRUE(WaitStats([](const auto& p) { return p.leased_pages() == kLen; }));
  auto got = c_->Get(chain, id_, Offsets(kLen));
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectIntact(chain, *got, TierKind::kHost);
  wire::PrefetchStats p = Prefetch();
  EXPECT_EQ(p.issued(), kLen);
  EXPECT_EQ(p.promoted_pages(), kLen);
  EXPECT_EQ(p.completed_in_time(), kLen);
  EXPECT_EQ(p.late(), 0u);
  EXPECT_EQ(p.leased_pages(), 0u);
  EXPECT_EQ(p.pinned_bytes(), 0u);
}

TEST_F(PrefetchDaemonTest, PrefetchRequestPromotesBeforeTheDeadline) {
  const auto& chain = chains_[1];
  PrefetchOptions o;
  o.priority = 3;
  o.deadline = std::chrono::milliseconds(5000);
  auto r = c_->Prefetch(chain, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->queued, kLen);
  ASSERT_TRUE(WaitStats([](const auto& p) { return p.leased_pages() == kLen; }));
  auto again = c_->Prefetch(chain, o);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->merged, kLen);  // leased: the lease is extended, nothing queued
  auto missing = c_->Prefetch(MakeChain(SmallLayout(), 99999, 2));
  ASSERT_TRUE(missing.ok());
  EXPECT_EQ(missing->missing, 2u);
  auto got = c_->Get(chain, id_, Offsets(kLen), GetOptions{.policy = GetPolicy::kBestEffort});
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectIntact(chain, *got, TierKind::kHost);
  wire::PrefetchStats p = Prefetch();
  EXPECT_EQ(p.completed_in_time(), kLen);
  EXPECT_EQ(p.dropped(), 0u);
  // Only host is a prefetch target here.
  auto bad = c_->Prefetch(chain, PrefetchOptions{.target = TierKind::kNvme});
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(bad.status())) << bad.status();
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "target tier 'nvme'")) << bad.status();
}

TEST_F(PrefetchDaemonTest, BestEffortServesRamOnlyAndPromotesTheRest) {
  const auto& chain = chains_[2];
  auto got = c_->Get(chain, id_, Offsets(kLen), GetOptions{.policy = GetPolicy::kBestEffort});
  ASSERT_TRUE(got.ok()) << got.status();
  for (size_t i = 0; i < kLen; ++i) {
    EXPECT_EQ((*got)[i], TierKind::kNone) << "page " << i << " is on NVMe: a miss";
    EXPECT_EQ(Page(i)[0], 0) << "a missed page's bytes were written";
  }
  // The misses were queued for promotion: a retry finds them in RAM.
  ASSERT_TRUE(WaitStats([](const auto& p) { return p.leased_pages() == kLen; }));
  got = c_->Get(chain, id_, Offsets(kLen), GetOptions{.policy = GetPolicy::kBestEffort});
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectIntact(chain, *got, TierKind::kHost);
}

TEST_F(PrefetchDaemonTest, TimeoutWaitsForPromotionThenServesWhatIsInRam) {
  const auto& chain = chains_[3];
  GetOptions wait{.policy = GetPolicy::kTimeout, .timeout = std::chrono::milliseconds(10000)};
  auto got = c_->Get(chain, id_, Offsets(kLen), wait);
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectIntact(chain, *got, TierKind::kHost);  // all came up within the bound
  EXPECT_GE(Prefetch().demand_jobs(), kLen);
  // A zero bound serves only what is up already: every page is either a
  // miss or an exact RAM hit, never an NVMe read.
  const auto& next = chains_[4];
  std::memset(buf_->data(), 0, buf_->size());
  got = c_->Get(next, id_, Offsets(kLen),
                GetOptions{.policy = GetPolicy::kTimeout, .timeout = std::chrono::milliseconds(0)});
  ASSERT_TRUE(got.ok()) << got.status();
  for (size_t i = 0; i < kLen; ++i) {
    ASSERT_NE((*got)[i], TierKind::kNvme) << i;
    if ((*got)[i] == TierKind::kHost)
      EXPECT_EQ(tools::CheckPattern(next[i], Page(i), kPage), kPage) << i;
  }
}

TEST_F(PrefetchDaemonTest, LayerwiseGetDeliversLayersInOrderByteExact) {
  const auto& chain = chains_[5];  // on NVMe: read whole, checked, then layer by layer
  const Layout layout = SmallLayout();
  const uint64_t lb = layout.LayerBytes();
  ASSERT_EQ(layout.layers * lb, kPage);
  const uint64_t progress = kLen * kPage;
  std::vector<uint32_t> seen;
  std::vector<uint8_t> want(kPage);
  auto got = c_->GetLayers(chain, id_, Offsets(kLen), Mapping(), progress, [&](uint32_t l) {
    seen.push_back(l);
    // Layer l of every page is there when its callback runs.
    for (size_t i = 0; i < kLen; ++i) {
      tools::FillPattern(chain[i], want.data(), kPage);
      EXPECT_EQ(std::memcmp(Page(i) + l * lb, want.data() + l * lb, lb), 0)
          << "layer " << l << " of page " << i;
    }
  });
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(seen, (std::vector<uint32_t>{0, 1}));
  for (size_t i = 0; i < kLen; ++i) {
    EXPECT_NE((*got)[i], TierKind::kNone) << i;
    EXPECT_EQ(tools::CheckPattern(chain[i], Page(i), kPage), kPage) << i;
  }
  uint64_t counter = 0;
  std::memcpy(&counter, buf_->data() + progress, 8);
  EXPECT_EQ(counter, layout.layers);
  // Bad progress counters are refused by name.
  auto overlap = c_->GetLayers(chain, id_, Offsets(kLen), Mapping(), kPage, nullptr);
  ASSERT_FALSE(overlap.ok());
  EXPECT_TRUE(absl::StrContains(overlap.status().message(), "overlaps page 1")) << overlap.status();
  auto outside = c_->GetLayers(chain, id_, Offsets(kLen), Mapping(), buf_->size(), nullptr);
  ASSERT_FALSE(outside.ok());
  EXPECT_TRUE(absl::IsOutOfRange(outside.status())) << outside.status();
}

// LOOKUP with lease_ms: the hits it counts are held until the GET (here an
// EVICT of the host tier would otherwise move them to NVMe), NVMe hits are
// still promoted by the lookahead while held, and once read the pages are
// ordinary again.
TEST_F(PrefetchDaemonTest, LookupWithALeaseKeepsItsHitsUntilTheGet) {
  const auto& ram_chain = chains_.back();
  const auto& nvme_chain = chains_.front();
  const LookupOptions lease{.lease = std::chrono::seconds(20)};
  auto deep = c_->Lookup(nvme_chain, lease);
  ASSERT_TRUE(deep.ok()) << deep.status();
  ASSERT_EQ(deep->hits, kLen);
  EXPECT_EQ(deep->leased, kLen);
  EXPECT_EQ(deep->prefetching, kLen);  // held pages are still promoted
  ASSERT_TRUE(WaitStats([](const auto& p) { return p.promoted_pages() >= kLen; }));
  auto up = c_->Get(nvme_chain, id_, Offsets(kLen));
  ASSERT_TRUE(up.ok()) << up.status();
  ExpectIntact(nvme_chain, *up, TierKind::kHost);

  // A GET brings the chain to RAM (promote on GET) wherever PUT left it.
  ASSERT_TRUE(c_->Get(ram_chain, id_, Offsets(kLen)).ok());
  auto look = c_->Lookup(ram_chain, lease);
  ASSERT_TRUE(look.ok()) << look.status();
  ASSERT_EQ(look->hits, kLen);
  EXPECT_EQ(look->leased, kLen);
  for (TierKind t : look->tiers) EXPECT_EQ(t, TierKind::kHost);
  auto evicted = c_->Evict("", TierKind::kHost, 0);
  ASSERT_TRUE(evicted.ok()) << evicted.status();
  std::memset(buf_->data(), 0, buf_->size());
  auto got = c_->Get(ram_chain, id_, Offsets(kLen));
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectIntact(ram_chain, *got, TierKind::kHost);
  wire::PrefetchStats p = Prefetch();
  EXPECT_EQ(p.lookup_leased(), 2 * kLen);
  EXPECT_EQ(p.lookup_lease_refused(), 0u);
  EXPECT_EQ(p.leased_pages(), 0u);
  // Read: the leases are gone, and the same eviction now moves them down.
  ASSERT_TRUE(c_->Evict("", TierKind::kHost, 0).ok());
  auto plain = c_->Lookup(ram_chain);
  ASSERT_TRUE(plain.ok());
  ASSERT_EQ(plain->hits, kLen);
  EXPECT_EQ(plain->leased, 0u);
  EXPECT_EQ(plain->tiers[0], TierKind::kNvme);
}

// The lease cap bounds what one tenant's LOOKUPs may hold; hits beyond it
// are not counted (the chain is cut where the lease ran out).
TEST_F(PrefetchDaemonTest, LookupLeasesStopAtTheTenantsCap) {
  // --prefetch_max_leased_per_tenant defaults to half of a quarter of host
  // (512 KiB = 8 pages of 64 KiB): a second chain gets nothing held.
  const LookupOptions lease{.lease = std::chrono::seconds(20)};
  auto first = c_->Lookup(chains_.back(), lease);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->hits, kLen);
  auto second = c_->Lookup(chains_[chains_.size() - 2], lease);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->hits, 0u);
  EXPECT_EQ(second->leased, 0u);
  EXPECT_EQ(Prefetch().lookup_lease_refused(), 1u);
  // Without a lease the same chain is all there.
  auto plain = c_->Lookup(chains_[chains_.size() - 2]);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->hits, kLen);
}

TEST_F(PrefetchDaemonTest, CountersShowUpInKvtierctl) {
  auto look = c_->Lookup(chains_.front());
  ASSERT_TRUE(look.ok());
  ASSERT_EQ(look->prefetching, kLen);
  ASSERT_TRUE(WaitStats([](const auto& p) { return p.promoted_pages() == kLen; }));
  auto r = RunCommand({KVTIERCTL_PATH, "stats", "--json", "--endpoint=" + daemon_->endpoint()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "\"prefetch\"")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "\"promoted_pages\": 8")) << r.out;
}

}  // namespace
}  // namespace kvtier::itest
