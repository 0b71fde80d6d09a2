// kvtier-sim's shared cache on traces small enough to follow by hand: a page
// one node stored reaches another only through the shared cluster, the
// cluster drops its least recently used record, admission put, and what a
// record gone from the cluster does to a later LOOKUP.
#include <vector>

#include "gtest/gtest.h"
#include "tests/sim/sim_test_util.h"
#include "tiers/shared_cache/memory_shared_cache.h"
#include "tools/sim/policy_replay.h"

namespace kvtier::sim {
namespace {

using testing::Req;

// Host 4 pages, NVMe 2, kvtierd's watermarks (sim_policy_test.cc
// TwoTiersDemoteOnEvictionAndPromoteOnGet): host demotes its oldest page
// when it reaches 4, NVMe when it reaches 2 (down to 1), publishing what
// leaves it to a shared cluster of `shared` pages.
ReplayConfig RemoteConfig(uint64_t shared, RemoteAdmission admission = RemoteAdmission::kAll) {
  ReplayConfig c;
  c.host = PagesTier(4);
  c.nvme = PagesTier(2);
  c.remote = SimRemoteConfig{shared, admission};
  return c;
}

// Two nodes, requests alternating: node 0 gets [1]..[5] (its NVMe demotes
// 1 into the cluster at [5]: host {2,3,4} -> {3,4,5}, NVMe {1,2} -> {2}),
// node 1 four empty requests (it stores nothing), then `tail` goes on
// alternating from node 1.
std::vector<SimRequest> TwoNodeTrace(std::vector<SimRequest> tail) {
  std::vector<SimRequest> reqs;
  for (uint64_t i = 1; i <= 5; ++i) {
    reqs.push_back(Req({i}));
    if (i < 5) reqs.push_back(Req({}));
  }
  for (SimRequest& r : tail) reqs.push_back(std::move(r));
  return reqs;
}

uint64_t TierHitsOf(const SimResult& r, const std::string& tier) {
  for (const TierHits& t : r.tier_hits)
    if (t.tier == tier) return t.hits;
  return 0;
}

TEST(SimRemoteTest, ANodeHitsAPageAnotherStoredOnlyThroughTheCluster) {
  const std::vector<SimRequest> reqs = TwoNodeTrace({Req({1})});
  ASSERT_EQ(reqs.size(), 10u);
  absl::StatusOr<NodesResult> r = ReplayNodes(reqs, RemoteConfig(10), 2);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->nodes.size(), 2u);
  // Node 0 SET page 1; node 1's LOOKUP missed it locally, found it with
  // EXISTS, and its GET fetched it into its store (adopted): 1 remote hit,
  // node 1's only hit.
  EXPECT_EQ(r->nodes[0].hits, 0u);
  EXPECT_EQ(r->nodes[0].remote.writes, 1u);
  EXPECT_EQ(r->nodes[1].hits, 1u);
  EXPECT_EQ(TierHitsOf(r->nodes[1], "remote"), 1u);
  EXPECT_EQ(r->nodes[1].remote.adopted, 1u);
  EXPECT_EQ(r->nodes[1].remote.reads, 1u);
  EXPECT_EQ(r->nodes[1].remote.read_misses, 0u);
  EXPECT_EQ(r->nodes[1].remote.exists, 1u);  // one key, for its one LOOKUP miss
  EXPECT_EQ(TierHitsOf(r->total, "remote"), 1u);
  EXPECT_EQ(r->total.requests, 10u);
  EXPECT_EQ(r->backing.sets, 1u);
  EXPECT_EQ(r->backing.gets, 1u);
  // The same nodes without the remote tier: the page is on node 0 alone.
  ReplayConfig plain = RemoteConfig(10);
  plain.remote.reset();
  absl::StatusOr<NodesResult> p = ReplayNodes(reqs, plain, 2);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->total.hits, 0u);
}

TEST(SimRemoteTest, AFetchKeepsTheRecordForTheOtherNodes) {
  // Node 0 fetches its page 1 back from the cluster into its store, then
  // node 1 asks [1]: a fetch never deletes the record, so node 1 still
  // finds it.
  absl::StatusOr<NodesResult> r =
      ReplayNodes(TwoNodeTrace({Req({}), Req({1}), Req({1})}), RemoteConfig(10), 2);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(TierHitsOf(r->nodes[0], "remote"), 1u);
  EXPECT_EQ(TierHitsOf(r->nodes[1], "remote"), 1u);
  EXPECT_EQ(r->nodes[0].remote.deletes, 0u);
  EXPECT_EQ(r->backing.gets, 2u);
}

TEST(SimRemoteTest, TheClusterDropsItsLeastRecentlyUsedRecord) {
  // The cluster itself (the sim's MemorySharedCache of two pages).
  tiers::shared_cache::MemorySharedCache b(2 * kSimPageBytes);
  const std::vector<uint8_t> page(kSimPageBytes, 0);
  auto set = [&](uint64_t id) {
    EXPECT_TRUE(b.Publish("sim", KeyForPage(id), PageKey::Zero(), page.data(), page.size()));
  };
  auto exists = [&](uint64_t id) {
    bool found = false;
    b.Contains("sim", {KeyForPage(id)}, [&](std::vector<bool> p) { found = p[0]; });
    return found;
  };
  auto get = [&](uint64_t id) {
    bool found = false;
    b.Fetch("sim", {KeyForPage(id)}, kSimPageBytes,
            [&](std::vector<tiers::FetchedPage> p) { found = p[0].status.ok(); });
    return found;
  };
  set(1);
  set(2);
  EXPECT_TRUE(exists(1));  // EXISTS does not refresh 1 (Redis: LOOKUP_NOTOUCH)
  set(3);                  // drops 1
  EXPECT_FALSE(exists(1));
  EXPECT_TRUE(get(2));  // GET refreshes 2
  set(4);               // drops 3
  EXPECT_FALSE(get(3));
  EXPECT_TRUE(exists(2) && exists(4));
  EXPECT_EQ(b.lru_drops(), 2u);
  EXPECT_EQ(b.counters().fetch_misses, 1u);
  EXPECT_EQ(b.records(), 2u);
  // Through the nodes, a cluster of one record: node 0's [6] makes its
  // NVMe demote 2 (host {3,4,5,6} -> 3 to NVMe {2,3} -> 2 to the cluster),
  // whose SET drops record 1. Node 1 asks [1] before it and [2] after it:
  // both hit; asking [1] after it misses.
  absl::StatusOr<NodesResult> r =
      ReplayNodes(TwoNodeTrace({Req({1}), Req({6}), Req({2})}), RemoteConfig(1), 2);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->backing.sets, 2u);
  EXPECT_EQ(r->backing.lru_drops, 1u);
  EXPECT_EQ(TierHitsOf(r->nodes[1], "remote"), 2u);
  absl::StatusOr<NodesResult> late =
      ReplayNodes(TwoNodeTrace({Req({}), Req({6}), Req({1})}), RemoteConfig(1), 2);
  ASSERT_TRUE(late.ok()) << late.status();
  EXPECT_EQ(late->backing.lru_drops, 1u);
  EXPECT_EQ(late->nodes[1].hits, 0u) << "record 1 was dropped for 2";
  EXPECT_EQ(late->nodes[1].remote.adopted, 0u);
}

TEST(SimRemoteTest, PutAdmissionWritesEveryPutThroughAndDropsNvmeEvictions) {
  // Node 0 PUTs [1] (a SET at once); node 1 asks [1] next: a remote hit
  // with no eviction anywhere. Under admission all it is not there yet.
  const std::vector<SimRequest> reqs = {Req({1}), Req({1})};
  absl::StatusOr<NodesResult> put = ReplayNodes(reqs, RemoteConfig(10, RemoteAdmission::kPut), 2);
  ASSERT_TRUE(put.ok()) << put.status();
  EXPECT_EQ(TierHitsOf(put->nodes[1], "remote"), 1u);
  EXPECT_EQ(put->nodes[0].remote.write_through, 1u);
  absl::StatusOr<NodesResult> all = ReplayNodes(reqs, RemoteConfig(10), 2);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->total.hits, 0u);
  // Node 0 of the trace above: 5 PUTs, 5 SETs, all write-through; the
  // NVMe eviction at [5] drops page 1 without publishing it again.
  absl::StatusOr<NodesResult> r =
      ReplayNodes(TwoNodeTrace({Req({1})}), RemoteConfig(10, RemoteAdmission::kPut), 2);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->nodes[0].remote.writes, 5u);
  EXPECT_EQ(r->nodes[0].remote.write_through, 5u);
  EXPECT_EQ(r->nodes[0].dropped, 1u);
  EXPECT_EQ(TierHitsOf(r->nodes[1], "remote"), 1u);
}

TEST(SimRemoteTest, ARecordGoneFromTheClusterIsAMissThatIsStoredAgain) {
  // One node, a cluster of one record: [1]..[5] put 1 in it; [6] publishes
  // 2 there, which drops record 1. The first [1] misses (the store lists no
  // remote pages: the cluster answers EXISTS no), the PUT after the miss
  // stores 1 again, and the second [1] hits it in host.
  std::vector<SimRequest> reqs;
  for (uint64_t i = 1; i <= 6; ++i) reqs.push_back(Req({i}));
  reqs.push_back(Req({1}));
  reqs.push_back(Req({1}));
  absl::StatusOr<NodesResult> r = ReplayNodes(reqs, RemoteConfig(1), 1);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->nodes[0].remote.read_misses, 0u);  // never fetched: EXISTS said no
  EXPECT_EQ(r->nodes[0].remote.reads, 0u);
  EXPECT_GE(r->backing.lru_drops, 1u);
  EXPECT_EQ(r->total.hits, 1u);
  EXPECT_EQ(TierHitsOf(r->total, "host"), 1u);
}

TEST(SimRemoteTest, ARecordDroppedBetweenLookupAndGetIsAMiss) {
  // One node, a cluster of two records, one page per GET. After [1..6] the
  // cluster holds 1 and 2, so the second [1..6] LOOKUP names both remote.
  // The first GET fetches 1 into the store; the evictor that GET kicks
  // publishes a page leaving NVMe, and the cluster drops record 2 for it,
  // so the second GET's fetch misses: one hit, the chain cut there.
  ReplayConfig c = RemoteConfig(2);
  c.batch_pages = 1;
  absl::StatusOr<NodesResult> r =
      ReplayNodes({Req({1, 2, 3, 4, 5, 6}), Req({1, 2, 3, 4, 5, 6})}, c, 1);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->total.hits, 1u);
  EXPECT_EQ(TierHitsOf(r->total, "remote"), 1u);
  EXPECT_EQ(r->nodes[0].remote.reads, 2u);
  EXPECT_EQ(r->nodes[0].remote.read_misses, 1u);
  EXPECT_EQ(r->nodes[0].remote.adopted, 1u);
  EXPECT_EQ(r->backing.get_misses, 1u);
}

TEST(SimRemoteTest, OneNodeWithoutRemoteIsTheTwoTierReplay) {
  std::vector<SimRequest> reqs;
  for (uint64_t id : {1, 2, 3, 4, 1, 2, 5, 3, 4, 3}) reqs.push_back(Req({id}));
  ReplayConfig c = RemoteConfig(10);
  c.remote.reset();
  absl::StatusOr<SimResult> one = ReplayTierManager(reqs, c);
  absl::StatusOr<NodesResult> nodes = ReplayNodes(reqs, c, 1);
  ASSERT_TRUE(one.ok() && nodes.ok());
  EXPECT_EQ(nodes->total.hits, one->hits);
  EXPECT_EQ(nodes->total.demotions, one->demotions);
  EXPECT_EQ(nodes->total.dropped, one->dropped);
  EXPECT_EQ(one->tier_hits.size(), 2u);  // no "remote" column without the tier
  EXPECT_FALSE(ReplayNodes(reqs, c, 0).ok());
}

}  // namespace
}  // namespace kvtier::sim
