// kvtier-sim's sizing (tools/sim/sizing.h): the capacity it names reaches the
// target and 2% less does not; the split it names reaches it on two tiers;
// a target past the trace's bound is refused naming the bound.
#include <gtest/gtest.h>

#include "tools/sim/belady.h"
#include "tools/sim/sizing.h"
#include "tests/sim/sim_test_util.h"

namespace kvtier::sim {
namespace {

using testing::HandConfig;

// 40 prompts of 20 pages, each read 3 times, round-robin: LRU hits grow
// with capacity up to the working set of 800 pages.
std::vector<SimRequest> Loop() {
  std::vector<SimRequest> reqs;
  for (int round = 0; round < 3; ++round)
    for (uint64_t p = 0; p < 40; ++p) {
      SimRequest r;
      for (uint64_t i = 0; i < 20; ++i) r.pages.push_back(p * 100 + i + 1);
      reqs.push_back(r);
    }
  return reqs;
}

double HitRate(const std::vector<SimRequest>& reqs, uint64_t host, uint64_t nvme) {
  ReplayConfig c = HandConfig(host);
  if (nvme > 0) c.nvme = PagesTier(nvme);
  auto r = ReplayTierManager(reqs, c);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? r->hit_rate() : 0;
}

TEST(SimSizingTest, NamesTheSmallestCapacityThatReachesTheTarget) {
  const std::vector<SimRequest> reqs = Loop();
  SizingConfig sc;
  auto l = NamedModelLayout("llama3-8b");
  ASSERT_TRUE(l.ok());
  sc.layout = *l;
  sc.target = 0.5;
  const SimResult inf = RunInfinite(reqs);
  auto r = SizeFor(reqs, HandConfig(1), inf, sc);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->page_bytes, 32ull << 20);  // 32 x 8 x 128 x 2 (K, V) x 2 bytes x 256 tokens
  EXPECT_DOUBLE_EQ(r->bytes_per_token, 131072);
  EXPECT_GE(r->hit_rate, 0.5);
  EXPECT_GE(HitRate(reqs, r->pages, 0), 0.5);
  EXPECT_LT(HitRate(reqs, static_cast<uint64_t>(r->pages / 1.03), 0), 0.5)
      << r->pages << " pages is not the smallest within 2%";
  EXPECT_GE(r->split_hit_rate, 0.5);
  EXPECT_GE(HitRate(reqs, r->split_host_pages, r->split_nvme_pages), 0.5);
  EXPECT_EQ(r->split_host_pages, r->pages / 4);
  const std::string text = FormatSizing(sc, *r);
  EXPECT_NE(text.find("131072 bytes of KV per token"), std::string::npos) << text;
  EXPECT_NE(text.find("--host_slab_bytes=32MiB"), std::string::npos) << text;
}

TEST(SimSizingTest, RefusesATargetPastTheBound) {
  const std::vector<SimRequest> reqs = Loop();  // bound: 2 of 3 reads repeat
  SizingConfig sc;
  sc.layout = *NamedModelLayout("16:4:64");
  sc.target = 0.7;
  auto r = SizeFor(reqs, HandConfig(1), RunInfinite(reqs), sc);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("66.67%"), std::string::npos) << r.status();
  EXPECT_FALSE(NamedModelLayout("nonsense").ok());
}

}  // namespace
}  // namespace kvtier::sim
