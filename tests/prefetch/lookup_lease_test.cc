// LOOKUP with a lease (Prefetcher::LeaseHits): the leading hits are held in
// whatever tier they are, survive eviction passes until their GET or the
// lease's end, may still be promoted while held, and the namespace's lease
// cap ends the counted chain.
#include "tests/prefetch/prefetch_test_util.h"

namespace kvtier::prefetch::testing {
namespace {

TEST_F(PrefetchTest, LookupLeaseHoldsHostAndNvmePagesThroughEviction) {
  Open(8);
  PutOnNvme(0, 2);
  for (uint64_t i = 2; i < 4; ++i)
    ASSERT_TRUE(tiers::testing::Put(*mgr_, ns_, Key(i), Key(i - 1), Bytes(kPage, i)).ok());
  ASSERT_EQ(mgr_->Locate(ns_, Key(2)), 0);
  StartPrefetcher(Config());
  EXPECT_EQ(pf_->LeaseHits(ns_, Keys(0, 4), absl::Seconds(30)), 4u);
  PrefetchCounters c = pf_->counters();
  EXPECT_EQ(c.lookup_leased, 4u);
  EXPECT_EQ(c.leased_pages, 4u);
  EXPECT_EQ(c.pinned_bytes, 4 * kPage);
  // Neither the host pages nor the NVMe pages leave while held.
  mgr_->EvictTo(0, 0);
  mgr_->EvictTo(1, 0);
  for (uint64_t i = 0; i < 4; ++i) EXPECT_EQ(mgr_->Locate(ns_, Key(i)), i < 2 ? 1 : 0) << i;
  for (uint64_t i = 0; i < 4; ++i) EXPECT_TRUE(Intact(i)) << i;
  // The GET ends the leases; then eviction takes them as usual.
  pf_->OnDemandRead(ns_, Keys(0, 4));
  EXPECT_EQ(pf_->counters().leased_pages, 0u);
  EXPECT_EQ(pf_->counters().pinned_bytes, 0u);
  EXPECT_EQ(pf_->counters().completed_in_time, 0u);  // a lookup lease is no prefetch
  mgr_->EvictTo(0, 0);
  EXPECT_EQ(mgr_->Locate(ns_, Key(2)), 1);
  mgr_->EvictTo(1, 0);
  EXPECT_EQ(mgr_->Locate(ns_, Key(0)), -1);
}

// A hold reads nothing, so the lookahead can still bring a held NVMe page up
// (PromoteTo refuses pages other readers pin).
TEST_F(PrefetchTest, HeldNvmePagesAreStillPromoted) {
  Open(8);
  PutOnNvme(0, 3);
  StartPrefetcher(Config());
  EXPECT_EQ(pf_->LeaseHits(ns_, Keys(0, 3), absl::Seconds(30)), 3u);
  EXPECT_EQ(pf_->Schedule(ns_, Keys(0, 3), HintFor()).merged, 3u);  // leased: nothing new
  // Promote them directly, as a prefetch job would.
  for (uint64_t i = 0; i < 3; ++i) {
    auto pin = mgr_->PinForPromotion(ns_, Key(i));
    ASSERT_TRUE(pin.has_value());
    EXPECT_EQ(mgr_->PromoteTo(*pin, 0), tiers::PromoteOutcome::kPromoted) << i;
  }
  for (uint64_t i = 0; i < 3; ++i) {
    EXPECT_EQ(mgr_->Locate(ns_, Key(i)), 0) << i;
    EXPECT_TRUE(Intact(i)) << i;
  }
  // Still held where they are now.
  mgr_->EvictTo(0, 0);
  for (uint64_t i = 0; i < 3; ++i) EXPECT_EQ(mgr_->Locate(ns_, Key(i)), 0) << i;
  pf_->OnDemandRead(ns_, Keys(0, 3));
  EXPECT_EQ(HostPinned(), 0u);
}

TEST_F(PrefetchTest, LookupLeaseStopsAtTheCapAndAtAMissingPage) {
  Open(16);
  PutOnNvme(0, 6);
  PrefetcherConfig c = Config();
  c.max_leased_bytes_per_ns = 2 * kPage;
  StartPrefetcher(c);
  EXPECT_EQ(pf_->LeaseHits(ns_, Keys(0, 6), absl::Seconds(30)), 2u);
  EXPECT_EQ(pf_->counters().lookup_lease_refused, 1u);
  // Asking again renews the two and stops at the same place.
  EXPECT_EQ(pf_->LeaseHits(ns_, Keys(0, 6), absl::Seconds(30)), 2u);
  EXPECT_EQ(pf_->counters().leased_pages, 2u);
  pf_->OnDemandRead(ns_, Keys(0, 2));
  // A page deleted since the lookup ends the chain there.
  ASSERT_TRUE(mgr_->Delete(ns_, Key(1)));
  EXPECT_EQ(pf_->LeaseHits(ns_, Keys(0, 6), absl::Seconds(30)), 1u);
  pf_->OnDemandRead(ns_, Keys(0, 1));
  EXPECT_EQ(pf_->counters().pinned_bytes, 0u);
}

TEST_F(PrefetchTest, LookupLeasesExpireAndShutdownReleasesThem) {
  Open(8);
  for (uint64_t i = 0; i < 3; ++i)
    ASSERT_TRUE(tiers::testing::Put(*mgr_, ns_, Key(i), i == 0 ? PageKey::Zero() : Key(i - 1),
                                    Bytes(kPage, i))
                    .ok());
  StartPrefetcher(Config());
  EXPECT_EQ(pf_->LeaseHits(ns_, Keys(0, 2), absl::Milliseconds(30)), 2u);
  ASSERT_TRUE(WaitFor([&] { return pf_->counters().lease_expired == 2; }));
  EXPECT_EQ(HostPinned(), 0u);
  EXPECT_EQ(pf_->LeaseHits(ns_, Keys(0, 3), absl::Seconds(30)), 3u);
  EXPECT_EQ(HostPinned(), 3u);
  pf_->Shutdown();
  EXPECT_EQ(HostPinned(), 0u);
  // After shutdown nothing new is held.
  EXPECT_EQ(pf_->LeaseHits(ns_, Keys(0, 3), absl::Seconds(30)), 0u);
  EXPECT_EQ(HostPinned(), 0u);
}

}  // namespace
}  // namespace kvtier::prefetch::testing
