// kvtierd --eviction (issue 30) on a real daemon: under 2q and prefix pages
// read again outlive another tenant's flood of one-off pages that takes them
// under lru,
// kvtierctl's stats say which policy a tier runs and how many pages it
// protects, and an unknown policy or a tier the daemon lacks is refused at
// start (exit 2) naming the choices.
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "client/wire_calls.h"
#include "tests/integration/daemon_fixture.h"

namespace kvtier::itest {
namespace {

constexpr char kTenants[] = R"({"tenants": [
  {"name": "alice", "token": "alice-secret-1"},
  {"name": "flood", "token": "flood-secret-2"},
  {"name": "ops",   "token": "ops-secret-333", "admin": true}
]})";

constexpr size_t kHot = 8;
constexpr size_t kFlood = 512;  // 4x the host tier's 128 pages

// One-page prompts: no chain, so leaf-first plays no part.
std::vector<PageKey> OnePagePrompts(uint64_t first_seed, size_t n) {
  std::vector<PageKey> keys;
  for (size_t i = 0; i < n; ++i) keys.push_back(MakeChain(SmallLayout(), first_seed + i, 1)[0]);
  return keys;
}

void PutEach(Client& c, const std::vector<PageKey>& keys) {
  for (const PageKey& k : keys) {
    const std::string page = PatternPage(k, kSmallPageBytes);
    const std::vector<absl::string_view> views = {page};
    auto put = c.PutInline(absl::MakeConstSpan(&k, 1), PageKey::Zero(), views);
    ASSERT_TRUE(put.ok()) << put.status();
  }
}

// Hot pages PUT and read once by tenant alice, then tenant flood's one-off
// pages; returns how many hot pages come back byte for byte.
size_t HotPagesLeft(const std::string& eviction, std::string* tier_policy,
                    uint64_t* protected_pages) {
  DaemonOptions o;
  o.flags = {"--host_bytes=8MiB", "--host_slab_bytes=1MiB", "--eviction=" + eviction,
             "--prefetch_lookahead=false"};
  o.tenants_json = kTenants;
  auto d = DaemonProcess::Start(o, "ops", "ops-secret-333");
  EXPECT_TRUE(d.ok()) << d.status();
  if (!d.ok()) return 0;
  auto hot_client = ConnectClient((*d)->endpoint(), "alice", "alice-secret-1");
  auto flood_client = ConnectClient((*d)->endpoint(), "flood", "flood-secret-2");
  auto ops = ConnectClient((*d)->endpoint(), "ops", "ops-secret-333");
  EXPECT_TRUE(hot_client && flood_client && ops);
  if (!hot_client || !flood_client || !ops) return 0;
  const std::vector<PageKey> hot = OnePagePrompts(1000, kHot);
  PutEach(*hot_client, hot);
  auto read = hot_client->GetInline(hot);
  EXPECT_TRUE(read.ok()) << read.status();
  PutEach(*flood_client, OnePagePrompts(5000, kFlood));
  auto stats = WireStats(*ops);  // tier counters: admins only
  EXPECT_TRUE(stats.ok()) << stats.status();
  if (stats.ok()) {
    const wire::TierStats* host = FindTier(*stats, "host");
    EXPECT_NE(host, nullptr);
    if (host != nullptr) {
      *tier_policy = host->eviction();
      *protected_pages = host->protected_pages();
      EXPECT_GT(host->evictions(), kFlood / 2);  // the flood did evict
    }
  }
  auto after = hot_client->GetInline(hot);
  EXPECT_TRUE(after.ok()) << after.status();
  size_t left = 0;
  for (size_t i = 0; after.ok() && i < hot.size(); ++i) {
    if ((*after)[i].empty()) continue;
    EXPECT_EQ((*after)[i], PatternPage(hot[i], kSmallPageBytes)) << i;
    ++left;
  }
  return left;
}

TEST(EvictionFlagTest, Under2qAndPrefixPagesReadAgainOutliveAFloodThatTakesThemUnderLru) {
  std::string policy;
  uint64_t protected_pages = 0;
  EXPECT_EQ(HotPagesLeft("2q", &policy, &protected_pages), kHot);
  EXPECT_EQ(policy, "2q");
  EXPECT_GE(protected_pages, kHot);
  EXPECT_EQ(HotPagesLeft("prefix", &policy, &protected_pages), kHot);
  EXPECT_EQ(policy, "prefix");
  EXPECT_GE(protected_pages, kHot);
  EXPECT_EQ(HotPagesLeft("lru", &policy, &protected_pages), 0u);
  EXPECT_EQ(policy, "lru");
  EXPECT_EQ(protected_pages, 0u);
}

TEST(EvictionFlagTest, AnUnknownPolicyOrTierIsRefusedAtStartNamingTheChoices) {
  TempDir dir;
  struct Case {
    std::string flag, says;
  };
  for (const Case& c : std::vector<Case>{
           {"--eviction=fifo",
            "unknown eviction policy 'fifo' (choices: lru, 2q, arc, s3fifo, prefix)"},
           {"--eviction=nvme=2q", "tier 'nvme', which this store does not have (its tiers: host)"},
           {"--eviction=host=lfu", "for tier 'host': unknown eviction policy 'lfu'"}}) {
    CommandResult r = RunCommand({KVTIERD_PATH, "--state_dir=" + dir.File("state"),
                                  "--socket=" + dir.File("d.sock"), "--host_bytes=8MiB",
                                  "--host_slab_bytes=1MiB", "--nvme_bytes=0", c.flag});
    EXPECT_EQ(r.exit_code, 2) << c.flag << ": " << r.out << r.err;
    EXPECT_TRUE(absl::StrContains(r.out + r.err, c.says)) << c.flag << ": " << r.out << r.err;
  }
}

}  // namespace
}  // namespace kvtier::itest
