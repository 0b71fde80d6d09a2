// The Prefetcher against a real store (host tier over an NVMe tier):
// promotion and leases, lease expiry and the wasted count, dedup of
// concurrent requests, deadlines, demand-first and priority order,
// backpressure, LOOKUP lookahead, waits with a bound, and shutdown.
#include <atomic>
#include <mutex>
#include <thread>

#include "absl/synchronization/notification.h"
#include "tests/prefetch/prefetch_test_util.h"

namespace kvtier::prefetch::testing {
namespace {

TEST_F(PrefetchTest, HintPromotesAndLeasesUntilTheGet) {
  Open(8);
  PutOnNvme(0, 4);
  StartPrefetcher(Config());
  auto keys = Keys(0, 4);
  ScheduleResult r = pf_->Schedule(ns_, keys, HintFor());
  EXPECT_EQ(r.queued, 4u);
  ASSERT_TRUE(WaitFor([&] { return pf_->counters().leased_pages == 4; }));
  for (uint64_t i = 0; i < 4; ++i) EXPECT_EQ(mgr_->Locate(ns_, Key(i)), 0) << i;
  EXPECT_EQ(HostPinned(), 4u);
  // Leased pages are pinned: an eviction pass cannot take them.
  mgr_->EvictTo(0, 0);
  for (uint64_t i = 0; i < 4; ++i) EXPECT_EQ(mgr_->Locate(ns_, Key(i)), 0) << i;
  for (uint64_t i = 0; i < 4; ++i) {
    EXPECT_TRUE(Intact(i)) << i;
    pf_->OnDemandRead(ns_, Key(i));
  }
  PrefetchCounters c = pf_->counters();
  EXPECT_EQ(c.issued, 4u);
  EXPECT_EQ(c.promoted_pages, 4u);
  EXPECT_EQ(c.promoted_bytes, 4 * kPage);
  EXPECT_EQ(c.completed_in_time, 4u);
  EXPECT_EQ(c.late, 0u);
  EXPECT_EQ(c.leased_pages, 0u);
  EXPECT_EQ(c.pinned_bytes, 0u);
  EXPECT_EQ(HostPinned(), 0u);
  // Once read, the pages are ordinary again: eviction moves them down.
  mgr_->EvictTo(0, 0);
  EXPECT_EQ(mgr_->Locate(ns_, Key(0)), 1);
}

TEST_F(PrefetchTest, LeaseExpiryUnpinsAndAnEvictedUnreadPageCountsAsWasted) {
  Open(8);
  PutOnNvme(0, 3);
  StartPrefetcher(Config());
  pf_->Schedule(ns_, Keys(0, 3), HintFor(0, absl::Milliseconds(30)));
  ASSERT_TRUE(WaitFor([&] { return pf_->counters().lease_expired == 3; }));
  EXPECT_EQ(HostPinned(), 0u);
  EXPECT_EQ(pf_->counters().pinned_bytes, 0u);
  for (uint64_t i = 0; i < 3; ++i) EXPECT_EQ(mgr_->Locate(ns_, Key(i)), 0) << i;
  // Page 0 is read after its lease (still useful); 1 and 2 get evicted unread.
  pf_->OnDemandRead(ns_, Key(0));
  mgr_->EvictTo(0, 0);
  ASSERT_TRUE(WaitFor([&] { return pf_->counters().wasted == 2; }));
  PrefetchCounters c = pf_->counters();
  EXPECT_EQ(c.completed_in_time, 1u);
  EXPECT_EQ(c.wasted, 2u);
}

TEST_F(PrefetchTest, ConcurrentRequestsForOnePageMakeOneJob) {
  Open(16);
  PutOnNvme(0, 8);
  StartPrefetcher(Config(2));
  auto keys = Keys(0, 8);
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t)
    threads.emplace_back([&] {
      for (int round = 0; round < 20; ++round) pf_->Schedule(ns_, keys, HintFor());
    });
  for (auto& t : threads) t.join();
  ASSERT_TRUE(WaitFor([&] { return pf_->counters().leased_pages == 8; }));
  PrefetchCounters c = pf_->counters();
  EXPECT_EQ(c.issued, 8u);
  EXPECT_EQ(c.promoted_pages, 8u);
  EXPECT_EQ(c.issued + c.merged, 6u * 20u * 8u);
  EXPECT_EQ(c.failed, 0u);
  for (uint64_t i = 0; i < 8; ++i) EXPECT_TRUE(Intact(i)) << i;
}

TEST_F(PrefetchTest, JobsPastTheirDeadlineAreDroppedAndCounted) {
  Open(8);
  PutOnNvme(0, 4);
  StartPrefetcher(Config());
  Hint h = HintFor();
  h.deadline = absl::Now() - absl::Milliseconds(1);
  EXPECT_EQ(pf_->Schedule(ns_, Keys(0, 4), h).queued, 4u);
  ASSERT_TRUE(WaitFor([&] { return pf_->counters().dropped == 4; }));
  EXPECT_EQ(pf_->counters().promoted_pages, 0u);
  for (uint64_t i = 0; i < 4; ++i) EXPECT_EQ(mgr_->Locate(ns_, Key(i)), 1) << i;
}

TEST_F(PrefetchTest, DemandRunsFirstThenHintsByPriorityThenLookahead) {
  KVTIER_REQUIRE_SYNC_POINTS();
  Open(16);
  PutOnNvme(0, 6);
  std::mutex mu;
  std::vector<PageKey> order;
  auto& sp = test_hooks::SyncPoints::Get();
  sp.SetCallback("promote.after_read", [&](void* arg) {
    std::lock_guard<std::mutex> lock(mu);
    order.push_back(*static_cast<PageKey*>(arg));
  });
  sp.EnableProcessing();
  StartPrefetcher(Config(1));
  {
    // While a demand read runs, prefetch holds back; demand jobs do not.
    Prefetcher::DemandScope busy = pf_->DemandIo();
    std::vector<tiers::TierKind> nvme(2, tiers::TierKind::kNvme);
    auto look = Keys(0, 2);
    EXPECT_EQ(pf_->OnLookup(ns_, look, nvme).queued, 2u);
    pf_->Schedule(ns_, Keys(2, 1), HintFor(1));
    pf_->Schedule(ns_, Keys(3, 1), HintFor(5));
    absl::Notification got;
    auto want = Keys(4, 1);
    pf_->WhenReady(ns_, want, /*schedule_below_target=*/true, absl::InfiniteFuture(),
                   [&] { got.Notify(); });
    EXPECT_TRUE(got.WaitForNotificationWithTimeout(absl::Seconds(5)));
    EXPECT_EQ(mgr_->Locate(ns_, Key(4)), 0);
    EXPECT_EQ(mgr_->Locate(ns_, Key(3)), 1) << "a hint ran during a demand read";
  }
  ASSERT_TRUE(WaitFor([&] { return pf_->counters().promoted_pages == 5; }));
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(order, (std::vector<PageKey>{Key(4), Key(3), Key(2), Key(0), Key(1)}));
  PrefetchCounters c = pf_->counters();
  EXPECT_EQ(c.demand_jobs, 1u);
  EXPECT_EQ(c.issued, 4u);
  EXPECT_EQ(c.demand_waited, 0u);  // the demand job was the GET's own
}

TEST_F(PrefetchTest, PinnedBytesBudgetHoldsPrefetchBack) {
  Open(16);
  PutOnNvme(0, 6);
  PrefetcherConfig cfg = Config(2);
  cfg.max_pinned_bytes = 2 * kPage;
  cfg.max_leased_bytes_per_ns = 2 * kPage;  // one namespace may use the whole budget here
  StartPrefetcher(cfg);
  pf_->Schedule(ns_, Keys(0, 6), HintFor());
  ASSERT_TRUE(WaitFor([&] { return pf_->counters().leased_pages == 2; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  PrefetchCounters c = pf_->counters();
  EXPECT_EQ(c.leased_pages, 2u);
  EXPECT_EQ(c.queued, 4u);
  EXPECT_LE(c.pinned_bytes, 2 * kPage);
  // GETs release two leases: two more pages come up, in queue order.
  pf_->OnDemandRead(ns_, Key(0));
  pf_->OnDemandRead(ns_, Key(1));
  ASSERT_TRUE(WaitFor([&] { return pf_->counters().promoted_pages == 4; }));
  EXPECT_EQ(mgr_->Locate(ns_, Key(2)), 0);
  EXPECT_EQ(mgr_->Locate(ns_, Key(3)), 0);
  EXPECT_EQ(mgr_->Locate(ns_, Key(5)), 1);
}

TEST_F(PrefetchTest, LookaheadSchedulesOnlyHitsBelowTheTarget) {
  Open(16);
  PutOnNvme(0, 3);
  ASSERT_TRUE(tiers::testing::Put(*mgr_, ns_, Key(3), Key(2), Bytes(kPage, 3)).ok());
  StartPrefetcher(Config());
  auto keys = Keys(0, 5);  // 0-2 on NVMe, 3 in RAM, 4 absent
  tiers::LookupResult look = mgr_->Lookup(ns_, keys);
  ASSERT_EQ(look.hits, 4u);
  ScheduleResult r = pf_->OnLookup(ns_, keys, look.tiers);
  EXPECT_EQ(r.queued, 3u);
  ASSERT_TRUE(WaitFor([&] { return pf_->counters().leased_pages == 3; }));
  for (uint64_t i = 0; i < 4; ++i) EXPECT_EQ(mgr_->Locate(ns_, Key(i)), 0) << i;
  // Off by configuration: nothing is scheduled.
  pf_.reset();
  PrefetcherConfig off = Config();
  off.lookahead = false;
  StartPrefetcher(off);
  EXPECT_EQ(pf_->OnLookup(ns_, keys, look.tiers).queued, 0u);
}

TEST_F(PrefetchTest, WaitWithDeadlineReturnsAtTheBoundWhileThePromotionRuns) {
  KVTIER_REQUIRE_SYNC_POINTS();
  Open(8);
  PutOnNvme(0, 1);
  absl::Notification reading, release;
  auto& sp = test_hooks::SyncPoints::Get();
  sp.SetCallback("promote.after_read", [&](void*) {
    reading.Notify();
    release.WaitForNotification();
  });
  sp.EnableProcessing();
  StartPrefetcher(Config());
  auto keys = Keys(0, 1);
  pf_->Schedule(ns_, keys, HintFor());
  ASSERT_TRUE(reading.WaitForNotificationWithTimeout(absl::Seconds(5)));
  EXPECT_TRUE(pf_->AnyPending(ns_, keys));
  absl::Notification done;
  const absl::Time t0 = absl::Now();
  pf_->WhenReady(ns_, keys, false, t0 + absl::Milliseconds(50), [&] { done.Notify(); });
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(5)));
  EXPECT_GE(absl::Now() - t0, absl::Milliseconds(45));
  EXPECT_EQ(mgr_->Locate(ns_, Key(0)), 1) << "the wait ended before the promotion";
  release.Notify();
  ASSERT_TRUE(WaitFor([&] { return pf_->counters().promoted_pages == 1; }));
  PrefetchCounters c = pf_->counters();
  EXPECT_EQ(c.demand_waited, 1u);
  EXPECT_EQ(c.late, 1u);
  pf_->OnDemandRead(ns_, Key(0));
  EXPECT_EQ(pf_->counters().completed_in_time, 0u);  // it was late, not in time
}

// A plain GET does not wait for a prefetch that has not started: it takes
// the job out of the queue and reads the page itself, with the rest of its
// pages, at demand class (issue 28). A running one it joins, as before.
TEST_F(PrefetchTest, PlainGetTakesOverAQueuedPrefetch) {
  KVTIER_REQUIRE_SYNC_POINTS();
  Open(8);
  PutOnNvme(0, 2);
  absl::Notification reading, release;
  auto& sp = test_hooks::SyncPoints::Get();
  sp.SetCallback("promote.after_read", [&](void*) {
    if (reading.HasBeenNotified()) return;
    reading.Notify();
    release.WaitForNotification();
  });
  sp.EnableProcessing();
  StartPrefetcher(Config(/*threads=*/1));
  pf_->Schedule(ns_, Keys(0, 1), HintFor());  // the only worker holds it
  ASSERT_TRUE(reading.WaitForNotificationWithTimeout(absl::Seconds(5)));
  auto later = Keys(1, 1);
  pf_->Schedule(ns_, later, HintFor());  // queued: no worker is free
  ASSERT_TRUE(pf_->AnyPending(ns_, later));
  absl::Notification done;
  pf_->WhenReady(ns_, later, false, absl::Now() + absl::Seconds(30), [&] { done.Notify(); });
  EXPECT_TRUE(done.HasBeenNotified()) << "the GET waited for a prefetch nobody had started";
  EXPECT_FALSE(pf_->AnyPending(ns_, later));
  // The running one is joined: its waiter fires once it is up.
  absl::Notification joined;
  pf_->WhenReady(ns_, Keys(0, 1), false, absl::Now() + absl::Seconds(30),
                 [&] { joined.Notify(); });
  EXPECT_FALSE(joined.HasBeenNotified());
  release.Notify();
  ASSERT_TRUE(joined.WaitForNotificationWithTimeout(absl::Seconds(5)));
  ASSERT_TRUE(WaitFor([&] { return pf_->counters().promoted_pages == 1; }));
  absl::SleepFor(absl::Milliseconds(50));
  const PrefetchCounters c = pf_->counters();
  EXPECT_EQ(c.taken_by_get, 1u);
  EXPECT_EQ(c.demand_waited, 1u);
  EXPECT_EQ(c.promoted_pages, 1u) << "the taken job ran anyway";
  EXPECT_EQ(mgr_->Locate(ns_, Key(1)), 1) << "page 1 is the GET's to read (and promote)";
  sp.DisableProcessing();
  sp.ClearAll();
}

TEST_F(PrefetchTest, ShutdownCancelsQueuedJobsAndReleasesEveryPin) {
  Open(16);
  PutOnNvme(0, 6);
  StartPrefetcher(Config());
  pf_->Schedule(ns_, Keys(0, 1), HintFor());
  ASSERT_TRUE(WaitFor([&] { return pf_->counters().leased_pages == 1; }));
  int fired = 0;
  {
    Prefetcher::DemandScope busy = pf_->DemandIo();  // holds the rest in the queue
    EXPECT_EQ(pf_->Schedule(ns_, Keys(1, 5), HintFor()).queued, 5u);
    pf_->Shutdown();
  }
  PrefetchCounters c = pf_->counters();
  EXPECT_EQ(c.cancelled, 5u);
  EXPECT_EQ(c.leased_pages, 0u);
  EXPECT_EQ(HostPinned(), 0u);
  for (uint64_t i = 1; i < 6; ++i) EXPECT_EQ(mgr_->Locate(ns_, Key(i)), 1) << i;
  // After shutdown nothing is queued and a waiter is answered at once.
  EXPECT_EQ(pf_->Schedule(ns_, Keys(1, 1), HintFor()).rejected, 1u);
  pf_->WhenReady(ns_, Keys(1, 1), true, absl::InfiniteFuture(), [&] { ++fired; });
  EXPECT_EQ(fired, 1);
}

TEST_F(PrefetchTest, BadConfigAndTargetAreRefusedByName) {
  Open(4);
  PrefetcherConfig c = Config();
  c.io_threads = 0;
  auto p = Prefetcher::Create(c, mgr_.get());
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("io_threads"), std::string::npos) << p.status();
  c = Config();
  c.target = tiers::TierKind::kHbm;
  p = Prefetcher::Create(c, mgr_.get());
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("hbm"), std::string::npos) << p.status();
}

}  // namespace
}  // namespace kvtier::prefetch::testing

namespace kvtier::prefetch::testing {
namespace {

// Issue 12, hole 10: leases count the stored page's real size against the
// namespace's cap, whatever size the caller declared (Hint has none now).
TEST_F(PrefetchTest, LeasesCountRealBytesUpToTheNamespaceCap) {
  Open(16);
  PutOnNvme(1, 12);
  PrefetcherConfig c = Config();
  c.max_leased_bytes_per_ns = 4 * kPage;
  StartPrefetcher(c);
  ScheduleResult r = pf_->Schedule(ns_, Keys(1, 12), HintFor(0, absl::Seconds(30)));
  EXPECT_EQ(r.queued, 12u);
  ASSERT_TRUE(WaitFor([&] {
    PrefetchCounters k = pf_->counters();
    return k.queued == 0 && k.inflight == 0;
  }));
  PrefetchCounters k = pf_->counters();
  EXPECT_EQ(k.leased_pages, 4u);
  EXPECT_EQ(k.pinned_bytes, 4 * kPage);
  EXPECT_EQ(k.lease_refused, 8u);
  EXPECT_EQ(HostPinned(), 4u);  // the others are promoted, not pinned
  // Asking again does not stretch the cap.
  pf_->Schedule(ns_, Keys(1, 12), HintFor(0, absl::Seconds(30)));
  EXPECT_EQ(pf_->counters().leased_pages, 4u);
  for (uint64_t i = 1; i <= 12; ++i) EXPECT_TRUE(Intact(i)) << i;
  // Leased or not, every page was promoted before its read: all in time
  // (the unleased ones used to count as nothing).
  pf_->OnDemandRead(ns_, Keys(1, 12));
  EXPECT_EQ(pf_->counters().completed_in_time, 12u);
  EXPECT_EQ(pf_->counters().late, 0u);
}

// Repeating PREFETCH extends a lease, but never past the longest lease from
// when it was granted: a page cannot be kept pinned for ever.
TEST_F(PrefetchTest, RenewalNeverExtendsPastTheLongestLease) {
  Open(8);
  PutOnNvme(1, 1);
  PrefetcherConfig c = Config();
  c.policy.max_lease = absl::Milliseconds(300);
  StartPrefetcher(c);
  pf_->Schedule(ns_, Keys(1, 1), HintFor(0, absl::Milliseconds(300)));
  ASSERT_TRUE(WaitFor([&] { return pf_->counters().leased_pages == 1; }));
  const absl::Time granted = absl::Now();
  // Renew every 50 ms: the lease must still end ~300 ms after its grant.
  bool ended = false;
  while (absl::Now() - granted < absl::Milliseconds(1500)) {
    pf_->Schedule(ns_, Keys(1, 1), HintFor(0, absl::Milliseconds(300)));
    if (pf_->counters().lease_expired > 0) {
      ended = true;
      break;
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_TRUE(ended) << "renewals kept the page leased past max_lease";
}

}  // namespace
}  // namespace kvtier::prefetch::testing
