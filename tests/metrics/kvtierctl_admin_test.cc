// kvtierctl as an operator runs it against a real kvtierd with a tenants
// file: ping, stats with latency quantiles, top without a terminal, and the
// admin commands (tenants, evict, flush) with and without an admin token,
// checked by what a client sees afterwards (LOOKUP hits, a restart).
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"
#include "tests/integration/daemon_fixture.h"

namespace kvtier::itest {
namespace {

constexpr char kTenants[] = R"({"tenants": [
  {"name": "ops",   "token": "ops-secret-333", "admin": true},
  {"name": "alice", "token": "alice-secret-1", "quota": {"host": "8MiB"}},
  {"name": "bob",   "token": "bob-secret-22"}
]})";

nlohmann::json Json(const CommandResult& r) {
  auto j = nlohmann::json::parse(r.out, nullptr, /*allow_exceptions=*/false);
  EXPECT_FALSE(j.is_discarded()) << r.out << r.err;
  return j;
}

class KvtierctlAdminTest : public DaemonTest {
 protected:
  DaemonOptions DaemonOpts() const override { return {.tenants_json = kTenants}; }
  std::string ProbeTenant() const override { return "ops"; }
  std::string ProbeToken() const override { return "ops-secret-333"; }

  CommandResult Ctl(const std::string& tenant, std::vector<std::string> args) {
    static const std::map<std::string, std::string> tokens = {
        {"ops", "ops-secret-333"}, {"alice", "alice-secret-1"}, {"bob", "bob-secret-22"}};
    std::vector<std::string> argv = {KVTIERCTL_PATH, "--endpoint=" + daemon_->endpoint(),
                                     "--tenant=" + tenant, "--token=" + tokens.at(tenant)};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunCommand(argv);
  }

  // Puts an n-page chain as `tenant`; returns its keys.
  std::vector<PageKey> PutChain(const std::string& tenant, uint64_t seed, size_t n) {
    static const std::map<std::string, std::string> tokens = {
        {"ops", "ops-secret-333"}, {"alice", "alice-secret-1"}, {"bob", "bob-secret-22"}};
    auto c = Connect(tenant, tokens.at(tenant));
    auto keys = MakeChain(SmallLayout(), seed, n);
    std::vector<std::string> pages;
    for (const auto& k : keys) pages.push_back(PatternPage(k, kSmallPageBytes));
    std::vector<absl::string_view> views(pages.begin(), pages.end());
    EXPECT_EQ(c->PutInline(keys, PageKey::Zero(), views)->stored, n);
    return keys;
  }

  uint32_t Hits(const std::string& tenant, const std::string& token,
                const std::vector<PageKey>& keys) {
    auto c = Connect(tenant, token);
    auto r = c->Lookup(keys);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->hits : 0;
  }
};

TEST_F(KvtierctlAdminTest, PingShowsVersionRoundTripAndWhoYouAre) {
  auto r = Ctl("alice", {"ping"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, KVTIER_TEST_VERSION)) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "rtt")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "'alice'")) << r.out;
  auto j = Json(Ctl("ops", {"ping", "--json", "--count=3"}));
  EXPECT_EQ(j["version"], KVTIER_TEST_VERSION);
  EXPECT_EQ(j["namespace"], "ops");
  EXPECT_EQ(j["admin"], true);
  EXPECT_EQ(j["count"], 3);
  const double lo = j["rtt_us"]["min"], avg = j["rtt_us"]["avg"], hi = j["rtt_us"]["max"];
  EXPECT_GT(lo, 0);
  EXPECT_LE(lo, avg);
  EXPECT_LE(avg, hi);
}

TEST_F(KvtierctlAdminTest, StatsShowsLatencyQuantilesToAdmins) {
  auto keys = PutChain("alice", 1, 4);
  EXPECT_EQ(Hits("alice", "alice-secret-1", keys), 4u);
  auto j = Json(Ctl("ops", {"stats", "--json"}));
  ASSERT_TRUE(j.contains("latency") && j["latency"].is_array()) << j.dump();
  std::set<std::string> seen;
  for (const auto& l : j["latency"]) {
    seen.insert(l["request"]);
    const double p50 = l["p50_us"], p90 = l["p90_us"], p99 = l["p99_us"], max = l["max_us"];
    EXPECT_GT(max, 0) << l.dump();
    EXPECT_LE(p50, p90) << l.dump();
    EXPECT_LE(p90, p99) << l.dump();
    EXPECT_LE(p99, max) << l.dump();
    // 64-bit counters are JSON numbers, not the protobuf mapping's strings.
    ASSERT_TRUE(l["count"].is_number_unsigned()) << l.dump();
    EXPECT_GE(l["count"].get<uint64_t>(), 1u) << l.dump();
  }
  for (const char* type : {"HELLO", "PUT", "LOOKUP"}) EXPECT_TRUE(seen.count(type)) << type;
  auto text = Ctl("ops", {"stats"});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_TRUE(absl::StrContains(text.out, "P99")) << text.out;
  // Latency sums over every tenant's requests: not for non-admins.
  auto alice = Json(Ctl("alice", {"stats", "--json"}));
  EXPECT_TRUE(!alice.contains("latency") || alice["latency"].empty()) << alice.dump();
}

TEST_F(KvtierctlAdminTest, TopPrintsRefreshesWithoutATerminal) {
  auto r = Ctl("ops", {"top", "--count=2", "--interval=0.2", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<std::string> lines = absl::StrSplit(r.out, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 2u) << r.out;
  auto second = nlohmann::json::parse(lines[1]);
  EXPECT_TRUE(second["rates"].contains("requests_per_s")) << lines[1];
  // The first refresh's STATS is one request in the second's interval.
  EXPECT_GT(second["rates"]["requests_per_s"].get<double>(), 0) << lines[1];
  auto text = Ctl("ops", {"watch", "--count=2", "--interval=0.1"});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_TRUE(absl::StrContains(text.out, "RATES")) << text.out;
  EXPECT_FALSE(absl::StrContains(text.out, "\x1b[")) << "no screen control without a terminal";
}

TEST_F(KvtierctlAdminTest, TenantsNeedAnAdminToken) {
  PutChain("alice", 2, 3);
  auto denied = Ctl("alice", {"tenants"});
  EXPECT_EQ(denied.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(denied.err, "not an admin")) << denied.err;
  auto j = Json(Ctl("ops", {"tenants", "--json"}));
  ASSERT_EQ(j["tenants"].size(), 3u) << j.dump();
  for (const auto& t : j["tenants"]) {
    if (t["name"] == "alice") {
      // Numbers, in map values too (the protobuf mapping wrote "3").
      EXPECT_EQ(t["pages"], 3u);
      EXPECT_EQ(t["tier_bytes"]["host"], 3 * kSmallPageBytes);
      EXPECT_EQ(t["tier_quota_bytes"]["host"], uint64_t{8} << 20);
      EXPECT_EQ(t["admin"], false);
    }
    if (t["name"] == "ops") {
      EXPECT_EQ(t["admin"], true);
    }
  }
  auto table = Ctl("ops", {"tenants"});
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_TRUE(absl::StrContains(table.out, "alice")) << table.out;
  EXPECT_TRUE(absl::StrContains(table.out, "8.0 MiB")) << table.out;
}

TEST_F(KvtierctlAdminTest, EvictRemovesPagesAndStaysInsideItsNamespace) {
  auto a = PutChain("alice", 3, 6);
  auto b = PutChain("bob", 3, 4);  // same tokens, another namespace
  // bob cannot evict alice; nothing of hers moves.
  auto denied = Ctl("bob", {"evict", "--namespace=alice", "--all"});
  EXPECT_EQ(denied.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(denied.err, "PERMISSION") ||
              absl::StrContains(denied.err, "admin")) << denied.err;
  EXPECT_EQ(Hits("alice", "alice-secret-1", a), 6u);
  // alice evicts two of her own pages: leaf-first, so the chain's tail goes.
  auto own = Json(Ctl("alice", {"evict", "--pages=2", "--json"}));
  EXPECT_EQ(own["evicted"], 2);
  EXPECT_EQ(own["remaining"], 4);
  EXPECT_EQ(Hits("alice", "alice-secret-1", a), 4u);
  // The admin empties alice from the host tier (no NVMe here: dropped).
  auto all = Ctl("ops", {"evict", "--namespace=alice", "--tier=host", "--all"});
  ASSERT_EQ(all.exit_code, 0) << all.err;
  EXPECT_TRUE(absl::StrContains(all.out, "evicted 4 pages of namespace 'alice'")) << all.out;
  EXPECT_EQ(Hits("alice", "alice-secret-1", a), 0u);
  EXPECT_EQ(Hits("bob", "bob-secret-22", b), 4u);
  // Errors name the problem.
  auto nobody = Ctl("ops", {"evict", "--namespace=nobody", "--all"});
  EXPECT_EQ(nobody.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(nobody.err, "'nobody'")) << nobody.err;
  auto no_tier = Ctl("ops", {"evict", "--namespace=bob", "--tier=nvme", "--all"});
  EXPECT_EQ(no_tier.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(no_tier.err, "no nvme tier")) << no_tier.err;
  EXPECT_EQ(Ctl("ops", {"evict", "--namespace=bob"}).exit_code, 2);
  EXPECT_EQ(Ctl("ops", {"evict", "--tier=disk", "--all"}).exit_code, 2);
  EXPECT_EQ(Hits("bob", "bob-secret-22", b), 4u);
}

TEST_F(KvtierctlAdminTest, FlushNeedsAdminAndAPersistentTier) {
  auto denied = Ctl("alice", {"flush"});
  EXPECT_EQ(denied.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(denied.err, "not an admin")) << denied.err;
  auto none = Ctl("ops", {"flush"});
  EXPECT_EQ(none.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(none.err, "no persistent tier")) << none.err;
}

std::unique_ptr<Client> Open(const std::string& endpoint) {
  auto c = Client::Connect(Options(endpoint));
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *std::move(c) : nullptr;
}

// FLUSH with an NVMe tier: what was flushed survives a restart, what was
// stored after the flush (RAM only, write-back) does not.
TEST(KvtierctlFlushTest, FlushedPagesSurviveARestart) {
  TempDir state;
  // Lookahead off: the LOOKUP below must not promote the flushed pages back
  // to RAM (under write-back a promoted page leaves NVMe, and would then not
  // survive the restart this test checks).
  DaemonOptions opts{.flags = {"--state_dir=" + state.File("s"), "--prefetch_lookahead=false"},
                     .nvme = true};
  auto d = DaemonProcess::Start(opts);
  ASSERT_TRUE(d.ok()) << d.status();
  const auto flushed = MakeChain(SmallLayout(), 41, 5);
  const auto later = MakeChain(SmallLayout(), 42, 3);
  auto put = [&](const std::vector<PageKey>& keys) {
    auto c = Open((*d)->endpoint());
    std::vector<std::string> pages;
    for (const auto& k : keys) pages.push_back(PatternPage(k, kSmallPageBytes));
    std::vector<absl::string_view> views(pages.begin(), pages.end());
    ASSERT_EQ(c->PutInline(keys, PageKey::Zero(), views)->stored, keys.size());
  };
  put(flushed);
  auto r = RunCommand({KVTIERCTL_PATH, "flush", "--json", "--endpoint=" + (*d)->endpoint()});
  ASSERT_EQ(r.exit_code, 0) << r.err << (*d)->Log();
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["flushed"], 5);
  EXPECT_EQ(j["not_flushed"], 0);
  {
    auto c = Open((*d)->endpoint());
    auto hit = c->Lookup(flushed);
    ASSERT_TRUE(hit.ok());
    EXPECT_EQ(hit->hits, 5u);
    for (TierKind t : hit->tiers) EXPECT_EQ(t, TierKind::kNvme);
  }
  put(later);
  ASSERT_TRUE((*d)->Stop().ok());
  d->reset();

  auto again = DaemonProcess::Start(opts);
  ASSERT_TRUE(again.ok()) << again.status();
  auto c = Open((*again)->endpoint());
  EXPECT_EQ(c->Lookup(flushed)->hits, 5u);
  EXPECT_EQ(c->Lookup(later)->hits, 0u);
  auto pages = c->GetInline(flushed);
  ASSERT_TRUE(pages.ok()) << pages.status();
  for (size_t i = 0; i < flushed.size(); ++i)
    EXPECT_EQ((*pages)[i], PatternPage(flushed[i], kSmallPageBytes)) << i;
  c.reset();
  EXPECT_TRUE((*again)->Stop().ok());
}

}  // namespace
}  // namespace kvtier::itest
