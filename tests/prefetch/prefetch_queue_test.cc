// PrefetchQueue: order (demand, then priority, then deadline, then arrival),
// merging of a second request for a queued key, capacity, demand upgrade.
#include "prefetch/prefetch_queue.h"

#include "gtest/gtest.h"
#include "tests/unit/tiers_test_util.h"

namespace kvtier::prefetch {
namespace {

using tiers::testing::Key;

Job J(uint64_t key, JobClass cls, int32_t priority = 0,
      absl::Time deadline = absl::InfiniteFuture()) {
  return Job{.ns = 1, .key = Key(key), .cls = cls, .priority = priority, .deadline = deadline};
}

std::vector<PageKey> PopAll(PrefetchQueue& q) {
  std::vector<PageKey> out;
  while (auto j = q.Pop()) out.push_back(j->key);
  return out;
}

TEST(PrefetchQueueTest, DemandFirstThenPriorityThenDeadlineThenArrival) {
  PrefetchQueue q(100);
  const absl::Time now = absl::Now();
  q.Add(J(1, JobClass::kLookahead));
  q.Add(J(2, JobClass::kHint, 1));
  q.Add(J(3, JobClass::kHint, 5));
  q.Add(J(4, JobClass::kHint, 1, now + absl::Seconds(1)));  // same priority as 2, has a deadline
  q.Add(J(5, JobClass::kDemand));
  q.Add(J(6, JobClass::kLookahead));
  EXPECT_EQ(PopAll(q), (std::vector<PageKey>{Key(5), Key(3), Key(4), Key(2), Key(1), Key(6)}));
  EXPECT_TRUE(q.empty());
}

TEST(PrefetchQueueTest, SecondRequestForAQueuedKeyMerges) {
  PrefetchQueue q(100);
  const absl::Time now = absl::Now();
  EXPECT_EQ(q.Add(J(1, JobClass::kLookahead, 0, now + absl::Milliseconds(10))),
            PrefetchQueue::AddResult::kQueued);
  EXPECT_EQ(q.Add(J(2, JobClass::kHint)), PrefetchQueue::AddResult::kQueued);
  Job again = J(1, JobClass::kHint, 7, now + absl::Seconds(5));
  again.lease = absl::Seconds(3);
  EXPECT_EQ(q.Add(again), PrefetchQueue::AddResult::kMerged);
  ASSERT_EQ(q.size(), 2u);
  // The merged job took the more urgent class and priority, the later
  // deadline and the longer lease, so it now runs first.
  const Job* head = q.Peek();
  ASSERT_NE(head, nullptr);
  EXPECT_EQ(head->key, Key(1));
  EXPECT_EQ(head->cls, JobClass::kHint);
  EXPECT_EQ(head->priority, 7);
  EXPECT_EQ(head->deadline, now + absl::Seconds(5));
  EXPECT_EQ(head->lease, absl::Seconds(3));
}

TEST(PrefetchQueueTest, FullQueueRefusesNewKeysButStillMerges) {
  PrefetchQueue q(2);
  EXPECT_EQ(q.Add(J(1, JobClass::kHint)), PrefetchQueue::AddResult::kQueued);
  EXPECT_EQ(q.Add(J(2, JobClass::kHint)), PrefetchQueue::AddResult::kQueued);
  EXPECT_EQ(q.Add(J(3, JobClass::kHint)), PrefetchQueue::AddResult::kFull);
  EXPECT_EQ(q.Add(J(2, JobClass::kDemand)), PrefetchQueue::AddResult::kMerged);
  EXPECT_EQ(q.size(), 2u);
  EXPECT_FALSE(q.Contains(JobId{1, Key(3)}));
}

TEST(PrefetchQueueTest, DemandUpgradeMovesAJobToTheFrontAndClearsItsDeadline) {
  PrefetchQueue q(100);
  q.Add(J(1, JobClass::kHint, 9));
  q.Add(J(2, JobClass::kLookahead, 0, absl::Now() - absl::Seconds(1)));
  EXPECT_FALSE(q.Demand(JobId{1, Key(3)}));
  EXPECT_TRUE(q.Demand(JobId{1, Key(2)}));
  auto first = q.Pop();
  ASSERT_TRUE(first);
  EXPECT_EQ(first->key, Key(2));
  EXPECT_EQ(first->cls, JobClass::kDemand);
  EXPECT_TRUE(first->demanded);
  EXPECT_EQ(first->deadline, absl::InfiniteFuture());
}

TEST(PrefetchQueueTest, SameKeyInAnotherNamespaceIsAnotherJob) {
  PrefetchQueue q(100);
  Job a = J(1, JobClass::kHint);
  Job b = a;
  b.ns = 2;
  EXPECT_EQ(q.Add(a), PrefetchQueue::AddResult::kQueued);
  EXPECT_EQ(q.Add(b), PrefetchQueue::AddResult::kQueued);
  EXPECT_EQ(q.Drain().size(), 2u);
  EXPECT_TRUE(q.empty());
}

}  // namespace
}  // namespace kvtier::prefetch
