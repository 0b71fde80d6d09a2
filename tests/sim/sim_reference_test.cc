// kvtier-sim's references (Belady's optimum, the infinite-cache bound), its
// accounting tier and capacity arguments, and its table/JSON/plot output.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/sim/sim_test_util.h"
#include "tools/sim/accounting_tier.h"
#include "tools/sim/belady.h"
#include "tools/sim/capacity.h"
#include "tools/sim/sim_report.h"

namespace kvtier::sim {
namespace {

using testing::HandConfig;
using testing::Req;

TEST(BeladyTest, KeepsWhatIsNeededSoonestAndBypassesTheRest) {
  // Capacity 2: [1] [2] [1] [3] [2] [1]. 1 and 2 are cached; at r4, 3 is
  // never used again, so it is not cached (bypass); r3, r5, r6 hit: 3 hits.
  // LRU on the same trace gets 1 (SimPolicyTest.LruEvicts...).
  const std::vector<SimRequest> reqs = {Req({1}), Req({2}), Req({1}), Req({3}), Req({2}), Req({1})};
  const SimResult r = RunBelady(reqs, 2);
  EXPECT_EQ(r.refs, 6u);
  EXPECT_EQ(r.hits, 3u);
}

TEST(BeladyTest, BeatsLruOnALoopLargerThanTheCache) {
  // Capacity 2, the loop [1] [2] [3] [1] [2] [3]. LRU misses all 6. MIN
  // keeps 1 and 2 (next used at r4, r5) and bypasses 3 (next use r6): r4 and
  // r5 hit; r6 misses. Infinite cache: r4, r5, r6.
  const std::vector<SimRequest> reqs = {Req({1}), Req({2}), Req({3}), Req({1}), Req({2}), Req({3})};
  EXPECT_EQ(RunBelady(reqs, 2).hits, 2u);
  absl::StatusOr<SimResult> lru = ReplayTierManager(reqs, HandConfig(2));
  ASSERT_TRUE(lru.ok());
  EXPECT_EQ(lru->hits, 0u);
  EXPECT_EQ(RunInfinite(reqs).hits, 3u);
}

TEST(BeladyTest, CountsPrefixHits) {
  // Capacity 2: [1,2] [3] [1,2]. MIN keeps 1 and 2 (both next used at r3)
  // and bypasses 3: r3 hits both: 2 of 5. LRU evicts 2 (its oldest leaf) for
  // 3 and hits only 1 at r3.
  const std::vector<SimRequest> reqs = {Req({1, 2}), Req({3}), Req({1, 2})};
  const SimResult b = RunBelady(reqs, 2);
  EXPECT_EQ(b.refs, 5u);
  EXPECT_EQ(b.hits, 2u);
  absl::StatusOr<SimResult> lru = ReplayTierManager(reqs, HandConfig(2));
  ASSERT_TRUE(lru.ok());
  EXPECT_EQ(lru->hits, 1u);
}

TEST(BeladyTest, TiesGoToTheDeeperPageSoTheCacheStaysPrefixClosed) {
  // Capacity 1: [1,2] [1,2]. Both pages are next used at r2; caching the
  // child 2 would give r2 no leading hit. The deeper page is bypassed: 1 hit.
  const std::vector<SimRequest> reqs = {Req({1, 2}), Req({1, 2})};
  EXPECT_EQ(RunBelady(reqs, 1).hits, 1u);
}

TEST(BeladyTest, ZeroCapacityHitsNothing) {
  const std::vector<SimRequest> reqs = {Req({1}), Req({1})};
  EXPECT_EQ(RunBelady(reqs, 0).hits, 0u);
}

TEST(InfiniteTest, EveryRepeatedPrefixPageHits) {
  // [1,2,3] [1,2,4] [5] [1,2,4,6]: r2 hits 1,2; r4 hits 1,2,4: 5 of 11.
  // [1,7,2] then hits only 1: 7 was never seen, so 2 does not count.
  std::vector<SimRequest> reqs = {Req({1, 2, 3}), Req({1, 2, 4}), Req({5}), Req({1, 2, 4, 6})};
  SimResult r = RunInfinite(reqs);
  EXPECT_EQ(r.refs, 11u);
  EXPECT_EQ(r.hits, 5u);
  EXPECT_EQ(r.capacity_pages, 6u);  // unique pages
  reqs.push_back(Req({1, 7, 2}));
  EXPECT_EQ(RunInfinite(reqs).hits, 6u);
}

TEST(AccountingTierTest, CountsSlotsWithoutBytes) {
  auto tier = AccountingTier::Create(tiers::TierKind::kHost, PagesTier(2));
  ASSERT_TRUE(tier.ok()) << tier.status();
  AccountingTier& t = **tier;
  absl::StatusOr<tiers::Slot> a = t.Allocate(kSimPageBytes);
  absl::StatusOr<tiers::Slot> b = t.Allocate(kSimPageBytes);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(t.used_bytes(), 2 * kSimPageBytes);
  EXPECT_TRUE(absl::IsResourceExhausted(t.Allocate(kSimPageBytes).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(t.Allocate(kSimPageBytes + 1).status()));
  EXPECT_NE(t.Address(*a), nullptr);
  std::vector<uint8_t> buf(kSimPageBytes, 0xAB);
  ASSERT_TRUE(t.Read(*a, 0, buf.data(), buf.size()).ok());
  EXPECT_EQ(buf[0], 0);                                      // every page reads back as zeros
  EXPECT_FALSE(t.Read(*a, 1, buf.data(), buf.size()).ok());  // past the page
  t.Free(*a);
  t.Free(*a);  // a double free is caught, not counted twice
  EXPECT_EQ(t.bad_frees(), 1u);
  EXPECT_EQ(t.used_slots(), 1u);
  EXPECT_TRUE(t.Allocate(kSimPageBytes).ok());

  auto nvme = AccountingTier::Create(tiers::TierKind::kNvme, PagesTier(1));
  ASSERT_TRUE(nvme.ok());
  EXPECT_TRUE((*nvme)->persistent());
  absl::StatusOr<tiers::Slot> n = (*nvme)->Allocate(kSimPageBytes);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ((*nvme)->Address(*n), nullptr);
}

TEST(CapacityTest, ParsesPagesAndBytes) {
  struct Case {
    const char* text;
    bool bytes;
    uint64_t value;
  };
  for (const Case& c :
       {Case{"4k", false, 4000}, Case{"4Ki", false, 4096}, Case{"4096", false, 4096},
        Case{"1.5k", false, 1500}, Case{"1GiB", true, 1ull << 30}, Case{"512MB", true, 512000000},
        Case{"64B", true, 64}}) {
    absl::StatusOr<CapacitySpec> s = ParseCapacity(c.text);
    ASSERT_TRUE(s.ok()) << c.text << ": " << s.status();
    EXPECT_EQ(s->bytes, c.bytes) << c.text;
    EXPECT_EQ(s->value, c.value) << c.text;
  }
  for (const char* bad : {"", "0", "-4k", "abc", "1.5", "4kk", "nan"}) {
    absl::StatusOr<CapacitySpec> s = ParseCapacity(bad);
    EXPECT_FALSE(s.ok()) << bad;
  }
  EXPECT_NE(ParseCapacity("4x").status().message().find("'4x'"), std::string::npos);
  absl::StatusOr<std::vector<CapacitySpec>> list = ParseCapacityList("1k, 4k,16k");
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->size(), 3u);
  EXPECT_FALSE(ParseCapacityList(" , ").ok());
  EXPECT_EQ(*ParseByteSize("16MiB"), 16ull << 20);
  EXPECT_EQ(*ParseByteSize("4096"), 4096u);
  EXPECT_FALSE(ParseByteSize("4k").ok());  // a page count, not bytes
}

TEST(CapacityTest, BytesFollowTheDaemonsSlabArithmetic) {
  // 1000 MiB of 16 MiB slabs = 62 slabs of 16 one-MiB pages.
  absl::StatusOr<TierSize> host = BytesTier(1000ull << 20, 1 << 20, 16 << 20, 64);
  ASSERT_TRUE(host.ok());
  EXPECT_EQ(host->slots, 992u);
  EXPECT_DOUBLE_EQ(host->capacity_pages, 992.0);
  // NVMe slots round 1,000,000 bytes up to 1,003,520 (4 KiB): 16 a slab,
  // 64 slabs in 1 GiB; the watermarks see 2^30 / 1,003,520 pages.
  absl::StatusOr<TierSize> nvme = BytesTier(1ull << 30, 1000000, 16 << 20, 4096);
  ASSERT_TRUE(nvme.ok());
  EXPECT_EQ(nvme->slots, 1024u);
  EXPECT_DOUBLE_EQ(nvme->capacity_pages, (1ull << 30) / 1003520.0);
  EXPECT_FALSE(BytesTier(8 << 20, 1 << 20, 16 << 20, 64).ok());   // under one slab
  EXPECT_FALSE(BytesTier(1 << 30, 32 << 20, 16 << 20, 64).ok());  // page over a slab
  absl::StatusOr<TierSize> no_page = ResolveTier(*ParseCapacity("1GiB"), 0, 16 << 20, 64);
  ASSERT_FALSE(no_page.ok());
  EXPECT_NE(no_page.status().message().find("--page_bytes"), std::string::npos);
  EXPECT_EQ(ResolveTier(*ParseCapacity("4k"), 0, 16 << 20, 64)->slots, 4000u);
}

SimReport SmallReport() {
  const std::vector<SimRequest> reqs = {Req({1}), Req({2}), Req({1}), Req({3}), Req({2}), Req({1})};
  SimReport rep;
  rep.trace = "hand:it's small";
  rep.infinite = RunInfinite(reqs);
  rep.requests = rep.infinite.requests;
  rep.refs = rep.infinite.refs;
  for (uint64_t cap : {1, 2}) {
    CapacityRow row;
    row.label = std::to_string(cap);
    row.capacity_pages = cap;
    row.lru = *ReplayTierManager(reqs, HandConfig(cap));
    row.belady = RunBelady(reqs, cap);
    rep.rows.push_back(row);
  }
  return rep;
}

TEST(SimReportTest, TableAndJsonCarryTheResults) {
  const SimReport rep = SmallReport();
  const std::string table = FormatReport(rep);
  // Capacity 2: LRU 1/6, Belady 3/6, infinite 3/6.
  EXPECT_NE(table.find(" 16.67%"), std::string::npos) << table;
  EXPECT_NE(table.find(" 50.00%"), std::string::npos) << table;
  const nlohmann::json j = ReportJson(rep);
  ASSERT_EQ(j["capacities"].size(), 2u);
  EXPECT_EQ(j["capacities"][1]["lru"]["hits"], 1);
  EXPECT_EQ(j["capacities"][1]["belady"]["hits"], 3);
  EXPECT_EQ(j["infinite"]["hits"], 3);
  EXPECT_DOUBLE_EQ(j["capacities"][1]["lru"]["tier_hit_rate"]["host"].get<double>(), 1.0 / 6);
}

TEST(SimReportTest, PlotScriptHasTheDataAndAQuotedPath) {
  const std::string script = PlotScript(SmallReport(), "/tmp/it's.png");
  EXPECT_NE(script.find("set output '/tmp/it''s.png'"), std::string::npos) << script;
  EXPECT_NE(script.find("2 16.6667 50.0000 50.0000\n"), std::string::npos) << script;
}

TEST(SimReportTest, MissingGnuplotIsAClearError) {
  const std::string saved = std::getenv("PATH") ? std::getenv("PATH") : "";
  setenv("PATH", "/nonexistent-kvtier-sim", 1);
  absl::Status st = WritePlot(SmallReport(), "/tmp/kvtier_sim_never.png");
  setenv("PATH", saved.c_str(), 1);
  EXPECT_TRUE(absl::IsFailedPrecondition(st)) << st;
  EXPECT_NE(st.message().find("gnuplot not found"), std::string::npos);
}

TEST(SimReportTest, GnuplotRendersAPng) {
  const std::string path =
      ::testing::TempDir() + "/kvtier_sim_test_" + std::to_string(getpid()) + ".png";
  absl::Status st = WritePlot(SmallReport(), path);
  ASSERT_TRUE(st.ok()) << st << " (scripts/setup.sh installs gnuplot-nox)";
  std::ifstream f(path, std::ios::binary);
  char magic[8] = {};
  f.read(magic, 8);
  EXPECT_EQ(std::string(magic + 1, 3), "PNG");
  std::remove(path.c_str());
}

}  // namespace
}  // namespace kvtier::sim
