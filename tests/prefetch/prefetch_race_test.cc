// Named interleavings (sync point "promote.after_read", reached between a
// promotion's read and its switch-over): an eviction pass and a DELETE racing
// an in-flight prefetch, and a prefetch meeting a host tier whose pages are
// pinned by GETs.
#include "tests/prefetch/prefetch_test_util.h"

namespace kvtier::prefetch::testing {
namespace {

TEST_F(PrefetchTest, EvictionDuringAnInFlightPrefetchLeavesThatPageAlone) {
  KVTIER_REQUIRE_SYNC_POINTS();
  Open(8);
  PutOnNvme(0, 4);
  std::atomic<size_t> evicted{0};
  auto& sp = test_hooks::SyncPoints::Get();
  sp.SetCallback("promote.after_read", [&](void* arg) {
    if (*static_cast<PageKey*>(arg) != Key(0)) return;
    // Drop everything evictable from NVMe (the last tier) while page 0's
    // bytes are in flight to the host tier.
    evicted += mgr_->EvictTo(1, 0);
  });
  sp.EnableProcessing();
  StartPrefetcher(Config());
  pf_->Schedule(ns_, Keys(0, 1), HintFor());
  ASSERT_TRUE(WaitFor([&] { return pf_->counters().promoted_pages == 1; }));
  EXPECT_EQ(sp.Hits("promote.after_read"), 1u);
  // The three other pages went; the one being promoted did not.
  EXPECT_EQ(evicted.load(), 3u);
  for (uint64_t i = 1; i < 4; ++i) EXPECT_EQ(mgr_->Locate(ns_, Key(i)), -1) << i;
  EXPECT_EQ(mgr_->Locate(ns_, Key(0)), 0);
  EXPECT_TRUE(Intact(0));
  EXPECT_EQ(pf_->counters().failed, 0u);
}

TEST_F(PrefetchTest, DeleteDuringAnInFlightPrefetchAbandonsItCleanly) {
  KVTIER_REQUIRE_SYNC_POINTS();
  Open(8);
  PutOnNvme(0, 2);
  auto& sp = test_hooks::SyncPoints::Get();
  sp.SetCallback("promote.after_read", [&](void* arg) {
    if (*static_cast<PageKey*>(arg) == Key(0)) {
      EXPECT_TRUE(mgr_->Delete(ns_, Key(0)));
    }
  });
  sp.EnableProcessing();
  StartPrefetcher(Config());
  pf_->Schedule(ns_, Keys(0, 2), HintFor());
  ASSERT_TRUE(WaitFor([&] {
    PrefetchCounters c = pf_->counters();
    return c.failed == 1 && c.promoted_pages == 1;
  }));
  EXPECT_EQ(mgr_->Locate(ns_, Key(0)), -1);
  EXPECT_EQ(mgr_->Locate(ns_, Key(1)), 0);
  pf_->OnDemandRead(ns_, Key(1));
  pf_.reset();
  // No slot leaked: only page 1 is left, in the host tier.
  auto snap = mgr_->Snapshot();
  EXPECT_EQ(snap.tiers[0].used_bytes, kPage);
  EXPECT_EQ(snap.tiers[0].pinned_pages, 0u);
  EXPECT_EQ(snap.tiers[1].pages, 0u);
}

TEST_F(PrefetchTest, PrefetchNeverEvictsPagesPinnedByAGet) {
  Open(2);
  PutOnNvme(10, 1);
  ASSERT_TRUE(tiers::testing::Put(*mgr_, ns_, Key(0), PageKey::Zero(), Bytes(kPage, 0)).ok());
  ASSERT_TRUE(tiers::testing::Put(*mgr_, ns_, Key(1), Key(0), Bytes(kPage, 1)).ok());
  // Two GETs hold the host tier's only two pages.
  auto a = mgr_->PinForRead(ns_, Key(0));
  auto b = mgr_->PinForRead(ns_, Key(1));
  ASSERT_TRUE(a && b);
  StartPrefetcher(Config());
  pf_->Schedule(ns_, Keys(10, 1), HintFor());
  ASSERT_TRUE(WaitFor([&] { return pf_->counters().failed == 1; }));
  EXPECT_EQ(mgr_->Locate(ns_, Key(0)), 0);
  EXPECT_EQ(mgr_->Locate(ns_, Key(1)), 0);
  EXPECT_EQ(mgr_->Locate(ns_, Key(10)), 1);
  std::vector<uint8_t> got(kPage);
  ASSERT_TRUE(a->CopyTo(got.data()).ok());
  EXPECT_EQ(got, Bytes(kPage, 0));
  a.reset();
  b.reset();
  // With the GETs done, the same prefetch succeeds: a promotion makes room
  // only by dropping a clean page, and once the cleaner (the evictor
  // thread's job; none runs here) has written one back, there is one.
  EXPECT_GT(mgr_->Clean(0), 0u);
  pf_->Schedule(ns_, Keys(10, 1), HintFor());
  ASSERT_TRUE(WaitFor([&] { return pf_->counters().promoted_pages == 1; }));
  EXPECT_EQ(mgr_->Locate(ns_, Key(10)), 0);
  EXPECT_TRUE(Intact(10));
}

}  // namespace
}  // namespace kvtier::prefetch::testing
