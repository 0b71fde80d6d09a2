// kvtier-sim's TierManager replay on traces small enough to follow by hand:
// LRU order, prefix hits, leaf-first eviction, decode pages, the watermarks
// and the host + NVMe mode. Each expected count is derived in the comments.
#include <vector>

#include "gtest/gtest.h"
#include "tests/sim/sim_test_util.h"
#include "tools/sim/policy_replay.h"

namespace kvtier::sim {
namespace {

using testing::HandConfig;
using testing::Req;

TEST(SimPolicyTest, LruEvictsTheLeastRecentlyUsedPage) {
  // Capacity 2, single-page chains.
  //   r1 [1] miss          host {1}
  //   r2 [2] miss          host {1,2}
  //   r3 [1] HIT           1 becomes newest
  //   r4 [3] miss          evicts 2 (oldest)          host {1,3}
  //   r5 [2] miss          evicts 1 (older than 3)    host {3,2}
  //   r6 [1] miss          evicts 3                   host {2,1}
  // 1 hit of 6 references, 3 pages evicted (dropped: there is no lower tier).
  const std::vector<SimRequest> reqs = {Req({1}), Req({2}), Req({1}), Req({3}), Req({2}), Req({1})};
  absl::StatusOr<SimResult> r = ReplayTierManager(reqs, HandConfig(2));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->requests, 6u);
  EXPECT_EQ(r->refs, 6u);
  EXPECT_EQ(r->hits, 1u);
  EXPECT_EQ(r->tier_hits.at(0).hits, 1u);
  EXPECT_EQ(r->evictions, 3u);
  EXPECT_EQ(r->dropped, 3u);
  EXPECT_EQ(r->not_stored, 0u);
}

TEST(SimPolicyTest, HitsAreTheLeadingRunOfPresentPages) {
  // Capacity 3.
  //   r1 [1,2,3] 0 hits    committed tail-first: 3 oldest, 1 newest
  //   r2 [4]     0 hits    evicts 3 (oldest, a leaf)      host {1,2,4}
  //   r3 [1,2,3] 2 hits    (3 is gone); PUT 3 evicts 4, now the oldest
  //   r4 [1,2,3] 3 hits
  // 5 hits of 10 references.
  const std::vector<SimRequest> reqs = {Req({1, 2, 3}), Req({4}), Req({1, 2, 3}), Req({1, 2, 3})};
  absl::StatusOr<SimResult> r = ReplayTierManager(reqs, HandConfig(3));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->refs, 10u);
  EXPECT_EQ(r->hits, 5u);
  EXPECT_EQ(r->dropped, 2u);
}

TEST(SimPolicyTest, NoHitPastTheFirstMissingPage) {
  // Capacity 3. r1 stores [1,2,3]; r2 [9] evicts 3 (oldest leaf); r3 asks
  // [1,7,2]: 1 is present, 7 is not, so 2 does not count although present.
  const std::vector<SimRequest> reqs = {Req({1, 2, 3}), Req({9}), Req({1, 7, 2})};
  absl::StatusOr<SimResult> r = ReplayTierManager(reqs, HandConfig(3));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->hits, 1u);
}

TEST(SimPolicyTest, LeafFirstKeepsAPrefixWhoseChildArrivedLater) {
  // Capacity 3; page 2's parent is 1, PUT by a later request, so 1 counts
  // it as a resident child.
  //   r1 [1]   miss                 host {1}
  //   r2 [1,2] 1 hit; PUT 2         host {1,2}, 1 older than 2
  //   r3 [5]   miss                 host {1,2,5}
  //   r4 [6]   miss: the oldest page is 1, but it has a child: leaf-first
  //            evicts 2 instead     host {1,5,6}
  //   r5 [1]   HIT (plain LRU would have evicted 1 and missed here)
  // 2 hits of 6 references.
  const std::vector<SimRequest> reqs = {Req({1}), Req({1, 2}), Req({5}), Req({6}), Req({1})};
  absl::StatusOr<SimResult> r = ReplayTierManager(reqs, HandConfig(3));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->refs, 6u);
  EXPECT_EQ(r->hits, 2u);
}

// Same story as above with the chain [1,2] PUT in one request. Expected by
// the leaf-first rule: r2 2 hits, r4 evicts 2 (1 has a child), r5 hits: 3.
// Regression test: Reservation::CommitAll used to publish a chain tail-first,
// so page 2 never counted in its parent 1, which then looked like a leaf and
// was evicted first, taking the chain's only useful prefix with it.
TEST(SimPolicyTest, LeafFirstKeepsAPrefixPutInOneBatch) {
  const std::vector<SimRequest> reqs = {Req({1, 2}), Req({1, 2}), Req({5}), Req({6}), Req({1})};
  absl::StatusOr<SimResult> r = ReplayTierManager(reqs, HandConfig(3));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->hits, 3u);
}

TEST(SimPolicyTest, OnePagePerPutCountsEveryParent) {
  // The trace above with --batch_pages=1, as kvtier-stress would send it:
  // each page is its own PUT, so 2 is committed after its parent 1 and
  // counts in it. r2 2 hits; r4 skips 1 (it has a child) and evicts 2; r5
  // hits 1: 3 hits.
  const std::vector<SimRequest> reqs = {Req({1, 2}), Req({1, 2}), Req({5}), Req({6}), Req({1})};
  ReplayConfig c = HandConfig(3);
  c.batch_pages = 1;
  absl::StatusOr<SimResult> r = ReplayTierManager(reqs, c);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->hits, 3u);
}

TEST(SimPolicyTest, ABatchLargerThanTheTierIsCut) {
  // Capacity 3, batches of 4: the PUT [1,2,3,4] reserves 1..3, then page 4
  // finds nothing to evict (the batch's own reservations are not in the
  // index yet): 1..3 are stored, 4 is not, and the chain stops there, so 5
  // (the next batch) is not sent either: 2 pages not stored. r2 [1,2,3]
  // then hits all 3.
  ReplayConfig c = HandConfig(3);
  c.batch_pages = 4;
  const std::vector<SimRequest> reqs = {Req({1, 2, 3, 4, 5}), Req({1, 2, 3})};
  absl::StatusOr<SimResult> r = ReplayTierManager(reqs, c);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->not_stored, 2u);
  EXPECT_EQ(r->hits, 3u);
}

TEST(SimPolicyTest, DecodePagesTakeRoom) {
  // Capacity 2. r1 [1,2] with a decode page 100 (parent 2):
  //   PUT [1,2]: host {1,2}, 2 older (tail-first commit)
  //   PUT [100]: host full, evicts 2 (oldest leaf)   host {1,100}
  //   r2 [1,2]: 1 hit.
  // Without decode PUTs r2 finds both: 2 hits.
  const std::vector<SimRequest> reqs = {Req({1, 2}, {100}), Req({1, 2})};
  ReplayConfig with = HandConfig(2);
  ReplayConfig without = HandConfig(2);
  without.decode = false;
  absl::StatusOr<SimResult> a = ReplayTierManager(reqs, with);
  absl::StatusOr<SimResult> b = ReplayTierManager(reqs, without);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->hits, 1u);
  EXPECT_EQ(b->hits, 2u);
  EXPECT_EQ(a->refs, b->refs);  // decode pages are not references
}

TEST(SimPolicyTest, WatermarksShrinkTheEffectiveCapacity) {
  // 20 pages, then the same 20 again. Without background eviction all 20
  // stay: 20 hits. With kvtierd's 0.95/0.90 watermarks the 20th page lifts
  // the tier above 19 pages, so the evictor brings it to 18 (evicting 1 and
  // 2); the second pass then misses 1, whose PUT pushes out 3 and 4 at the
  // next high mark, and so on: the classic LRU loop, 0 hits.
  std::vector<SimRequest> reqs;
  for (int pass = 0; pass < 2; ++pass) {
    for (uint64_t id = 1; id <= 20; ++id) reqs.push_back(Req({id}));
  }
  ReplayConfig daemon_like;
  daemon_like.host = PagesTier(20);
  absl::StatusOr<SimResult> plain = ReplayTierManager(reqs, testing::HandConfig(20));
  absl::StatusOr<SimResult> marked = ReplayTierManager(reqs, daemon_like);
  ASSERT_TRUE(plain.ok() && marked.ok());
  EXPECT_EQ(plain->hits, 20u);
  EXPECT_EQ(marked->hits, 0u);
}

TEST(SimPolicyTest, TwoTiersDemoteOnEvictionAndPromoteOnGet) {
  // Host 4 pages, NVMe 2, kvtierd's watermarks: a tier evicts when it holds
  // more than 95% (host: 4 pages, NVMe: 2) down to 90% (host 3, NVMe 1).
  // Host evictions demote (plain LRU below the last tier); NVMe drops. The
  // NVMe tier is inclusive: a promoted page keeps its NVMe copy (c1), and
  // by default NVMe makes room from pages that live only there:
  //   r1..r4 [1] [2] [3] [4]  host {1,2,3,4} -> demote 1     nvme {1}
  //   r5 [1]  NVMe hit, promoted, copy kept; demote 2      nvme {c1,2} -> drop 2
  //   r6 [2]  miss; demote 3                               nvme {c1,3} -> drop 3
  //   r7 [5]  miss; demote 4                               nvme {c1,4} -> drop 4
  //   r8 [3]  miss; demote 1 (clean: its copy becomes it)  nvme {1}
  //   r9 [4]  miss; demote 2                               nvme {1,2} -> drop 1
  //   r10 [3] host hit
  // host 1 hit, NVMe 1, of 10; 6 demotions, 1 promotion, 4 dropped.
  // With reclaim_copies_first the copy goes instead of the NVMe-only page
  // (r5: c1, r6: NVMe hit on 2 and c2): host 1, NVMe 2 hits, 2 promotions,
  // 3 dropped — the exclusive tier's numbers.
  std::vector<SimRequest> reqs;
  for (uint64_t id : {1, 2, 3, 4, 1, 2, 5, 3, 4, 3}) reqs.push_back(Req({id}));
  for (bool copies_first : {false, true}) {
    SCOPED_TRACE(copies_first ? "reclaim_copies_first" : "default");
    ReplayConfig c;
    c.host = PagesTier(4);
    c.nvme = PagesTier(2);
    c.store.reclaim_copies_first = copies_first;
    absl::StatusOr<SimResult> r = ReplayTierManager(reqs, c);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->refs, 10u);
    ASSERT_EQ(r->tier_hits.size(), 2u);
    EXPECT_EQ(r->tier_hits[0].tier, "host");
    EXPECT_EQ(r->tier_hits[0].hits, 1u);
    EXPECT_EQ(r->tier_hits[1].tier, "nvme");
    EXPECT_EQ(r->tier_hits[1].hits, copies_first ? 2u : 1u);
    EXPECT_EQ(r->hits, copies_first ? 3u : 2u);
    EXPECT_EQ(r->demotions, 6u);
    EXPECT_EQ(r->promotions, copies_first ? 2u : 1u);
    EXPECT_EQ(r->dropped, copies_first ? 3u : 4u);
  }
}

TEST(SimPolicyTest, PromoteOffServesFromNvmeInPlace) {
  // The first six requests of the trace above, promote_on_get off:
  //   r1..r4  host {1,2,3,4} -> demote 1     host {2,3,4}  nvme {1}
  //   r5 [1]  NVMe hit, read in place: nothing moves
  //   r6 [2]  host hit (with promotion, r5 had pushed 2 down to NVMe)
  std::vector<SimRequest> reqs = {Req({1}), Req({2}), Req({3}), Req({4}), Req({1}), Req({2})};
  ReplayConfig c;
  c.host = PagesTier(4);
  c.nvme = PagesTier(2);
  c.store.promote_on_get = false;
  absl::StatusOr<SimResult> r = ReplayTierManager(reqs, c);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->tier_hits[0].hits, 1u);
  EXPECT_EQ(r->tier_hits[1].hits, 1u);
  EXPECT_EQ(r->promotions, 0u);
  EXPECT_EQ(r->demotions, 1u);
}

TEST(SimPolicyTest, RejectsATierOfNoPages) {
  ReplayConfig c;
  c.host = PagesTier(0);
  absl::StatusOr<SimResult> r = ReplayTierManager({}, c);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("at least one page"), std::string::npos);
}

TEST(SimPolicyTest, TwoQKeepsAPageReadAgainThroughAScanThatLruLosesItTo) {
  // Capacity 4, one index shard (2q's protected share, 2 pages, is per shard).
  //   r1 [1] miss, r2 [1] HIT: 1 is read again (2q: protected)
  //   r3..r8 [2]..[7] misses: a scan of one-off pages
  //   LRU: r6 evicts 1 (the oldest then); r9 [1] misses.
  //   2q: the scan cycles through probation; r9 [1] HITS.
  std::vector<SimRequest> reqs = {Req({1}), Req({1})};
  for (uint64_t p = 2; p <= 7; ++p) reqs.push_back(Req({p}));
  reqs.push_back(Req({1}));
  ReplayConfig c = HandConfig(4);
  c.store.index_shards = 1;
  absl::StatusOr<SimResult> lru = ReplayTierManager(reqs, c);
  ASSERT_TRUE(lru.ok()) << lru.status();
  EXPECT_EQ(lru->policy, "lru");
  EXPECT_EQ(lru->hits, 1u);
  c.store.eviction[tiers::TierKind::kHost] = tiers::EvictionPolicy::k2q;
  absl::StatusOr<SimResult> q = ReplayTierManager(reqs, c);
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->policy, "2q");
  EXPECT_EQ(q->hits, 2u);
}

}  // namespace
}  // namespace kvtier::sim
