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

}  // namespace
}  // namespace kvtier::sim
