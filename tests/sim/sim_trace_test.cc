// kvtier-sim on the first 300 requests of the shared synthetic Mooncake
// trace: at every capacity the offline optimum is at least the TierManager
// LRU and at most the infinite-cache bound, and the pieces agree with the
// trace library's own summary.
#include <filesystem>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tools/sim/belady.h"
#include "tools/sim/policy_replay.h"
#include "tools/sim/trace_input.h"
#include "tools/trace/trace.h"

namespace kvtier::sim {
namespace {

// tests/data holds a copy of the shared traces; ../shared/traces is where a
// checkout finds the originals.
std::string TracePath() {
  for (const char* rel :
       {"/tests/data/synthetic_trace.jsonl", "/../shared/traces/synthetic_trace.jsonl"}) {
    const std::string p = std::string(KVTIER_SOURCE_DIR) + rel;
    if (std::filesystem::exists(p)) return p;
  }
  return "";
}

class SimTraceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string path = TracePath();
    ASSERT_FALSE(path.empty()) << "synthetic_trace.jsonl not found under tests/data or ../shared";
    trace::ParseOptions opts;
    opts.max_requests = 300;
    absl::StatusOr<trace::Trace> t = trace::LoadTrace("mooncake:" + path, opts);
    ASSERT_TRUE(t.ok()) << t.status();
    trace_ = *std::move(t);
    ASSERT_EQ(trace_.requests.size(), 300u);
    reqs_ = FromTrace(trace_, trace::PageMapping{});
  }
  trace::Trace trace_;
  std::vector<SimRequest> reqs_;
};

TEST_F(SimTraceTest, BeladyBoundsLruAndTheInfiniteCacheBoundsBelady) {
  const SimResult inf = RunInfinite(reqs_);
  const trace::TraceSummary sum = trace::Summarize(trace_);
  EXPECT_EQ(inf.refs, sum.block_refs);
  EXPECT_EQ(inf.capacity_pages, sum.unique_blocks);
  EXPECT_NEAR(inf.hit_rate(), sum.infinite_cache_hit_rate, 1e-12);
  uint64_t last_belady = 0;
  for (uint64_t cap : {64, 256, 1000, 2000, 4000, 8000}) {
    ReplayConfig c;
    c.host = PagesTier(cap);
    absl::StatusOr<SimResult> lru = ReplayTierManager(reqs_, c);
    ASSERT_TRUE(lru.ok()) << lru.status();
    const SimResult belady = RunBelady(reqs_, cap);
    EXPECT_EQ(lru->refs, inf.refs);
    EXPECT_EQ(belady.refs, inf.refs);
    EXPECT_GE(belady.hits, lru->hits) << "capacity " << cap;
    EXPECT_LE(belady.hits, inf.hits) << "capacity " << cap;
    EXPECT_GE(belady.hits, last_belady) << "MIN is a stack algorithm: capacity " << cap;
    // A request longer than the tier cannot be stored whole (its own
    // reserved pages are not evictable); from 1000 pages every one fits.
    if (cap >= 1000) EXPECT_EQ(lru->not_stored, 0u) << "capacity " << cap;
    last_belady = belady.hits;
  }
  // A cache as large as the trace's unique pages loses nothing to eviction.
  EXPECT_EQ(RunBelady(reqs_, inf.capacity_pages).hits, inf.hits);
}

TEST_F(SimTraceTest, TwoTiersSplitTheirHitsAndStayUnderBelady) {
  ReplayConfig c;
  c.host = PagesTier(500);
  c.nvme = PagesTier(1500);
  absl::StatusOr<SimResult> r = ReplayTierManager(reqs_, c);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->tier_hits.size(), 2u);
  EXPECT_EQ(r->tier_hits[0].hits + r->tier_hits[1].hits, r->hits);
  EXPECT_GT(r->tier_hits[1].hits, 0u);  // some hits come from NVMe
  EXPECT_GT(r->demotions, 0u);
  EXPECT_GT(r->promotions, 0u);
  EXPECT_LE(r->hits, RunBelady(reqs_, 2000).hits);
}

// Regression: the numbers kvtier-sim printed for these runs before the
// remote tier came (HEAD 78d51cc), and ReplayNodes of one node without a
// remote tier gives them too.
TEST_F(SimTraceTest, OneNodeWithoutRemoteKeepsItsNumbers) {
  ReplayConfig host_only;
  host_only.host = PagesTier(1000);
  ReplayConfig two = host_only;
  two.host = PagesTier(500);
  two.nvme = PagesTier(1500);
  struct Want {
    uint64_t hits, host, nvme, evictions, demotions, promotions, dropped;
  };
  const std::pair<ReplayConfig, Want> cases[] = {{host_only, {128, 128, 0, 6749, 0, 0, 6749}},
                                                 {two, {212, 115, 97, 12892, 7159, 97, 5733}}};
  for (const auto& [config, want] : cases) {
    absl::StatusOr<NodesResult> n = ReplayNodes(reqs_, config, 1);
    ASSERT_TRUE(n.ok()) << n.status();
    for (const SimResult& r : {n->nodes[0], n->total}) {
      EXPECT_EQ(r.refs, 7721u);
      EXPECT_EQ(r.hits, want.hits);
      EXPECT_EQ(r.tier_hits[0].hits, want.host);
      if (config.nvme) {
        EXPECT_EQ(r.tier_hits.at(1).hits, want.nvme);
      }
      EXPECT_EQ(r.tier_hits.size(), config.nvme ? 2u : 1u);
      EXPECT_EQ(r.evictions, want.evictions);
      EXPECT_EQ(r.demotions, want.demotions);
      EXPECT_EQ(r.promotions, want.promotions);
      EXPECT_EQ(r.dropped, want.dropped);
      EXPECT_EQ(r.not_stored, 0u);
    }
    absl::StatusOr<SimResult> one = ReplayTierManager(reqs_, config);
    ASSERT_TRUE(one.ok()) << one.status();
    EXPECT_EQ(one->hits, want.hits);
  }
}

}  // namespace
}  // namespace kvtier::sim
