// A real kvtierd with a tiny host tier, a tiny NVMe tier and the remote
// tier on a loopback cluster of its own: PUT pages flow down to Redis and
// GET reads them back byte-exact; with the cluster stopped, remote pages
// are misses, local pages are still served, the daemon stays up and STATS
// shows the remote tier down; a second daemon finds and reads the first
// one's remote pages.
#include <gtest/gtest.h>

#include <algorithm>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kvtier.pb.h"
#include "tests/integration/daemon_process.h"
#include "tests/remote/cluster_fixture.h"
#include "tiers/remote/remote_record.h"
#include "tools/common/page_pattern.h"

namespace kvtier::itest {
namespace {

constexpr uint64_t kPage = kSmallPageBytes;
constexpr size_t kPages = 96;  // host 16 + NVMe 32: the rest can only be remote
constexpr int kRemoteTier = 4;  // wire.Tier TIER_REMOTE

const wire::TierStats* Tier(const wire::StatsReply& s, const std::string& name) {
  for (const auto& t : s.tiers())
    if (t.name() == name) return &t;
  return nullptr;
}

class RemoteDaemonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!tiers::remote::testing::RedisInstalled()) GTEST_SKIP() << "redis-server not installed";
    auto cluster = tiers::remote::testing::LoopbackCluster::Start();
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = *std::move(cluster);
    DaemonOptions o;
    o.nvme = true;
    o.flags = {"--host_bytes=1MiB", "--nvme_bytes=2MiB", "--log_level=warn",
               "--remote_seeds=" + absl::StrJoin(cluster_->seeds(), ","),
               "--remote_connect_timeout_ms=200", "--remote_command_timeout_ms=500",
               // LOOKUP moves nothing, so the tiers it reports stay true.
               "--prefetch_lookahead=false"};
    daemon_options_ = o;
    auto d = DaemonProcess::Start(o);
    ASSERT_TRUE(d.ok()) << d.status();
    daemon_ = *std::move(d);
    auto c = Client::Connect(Options(daemon_->endpoint()));
    ASSERT_TRUE(c.ok()) << c.status();
    client_ = *std::move(c);
  }
  void TearDown() override {
    client_.reset();
    if (daemon_) {
      auto code = daemon_->Stop();
      EXPECT_TRUE(code.ok() && *code == 0) << daemon_->Log();
      if (HasFailure()) std::cerr << "---- kvtierd log ----\n" << daemon_->Log() << "\n";
    }
  }
  // PUTs kPages single-page chains (each its own prefix: LOOKUP per key).
  void PutPages() {
    for (size_t i = 0; i < kPages; ++i) {
      keys_.push_back(MakeChain(SmallLayout(), 1000 + i, 1)[0]);
      const std::string page = PatternPage(keys_.back(), kPage);
      const absl::string_view view = page;
      // The tiers are tiny: a PUT may find RAM and NVMe full of pages not
      // yet moved down (a PUT never lands in the remote tier itself, nor
      // waits for I/O); it is refused, and a client tries again shortly.
      auto put = client_->PutInline(absl::MakeConstSpan(&keys_.back(), 1), PageKey::Zero(),
                                    absl::MakeConstSpan(&view, 1));
      for (int tries = 0; tries < 100 && absl::IsResourceExhausted(put.status()); ++tries) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        put = client_->PutInline(absl::MakeConstSpan(&keys_.back(), 1), PageKey::Zero(),
                                 absl::MakeConstSpan(&view, 1));
      }
      ASSERT_TRUE(put.ok()) << put.status();
      EXPECT_EQ(put->stored, 1u) << "page " << i << ": " << put->not_stored_reason;
    }
  }
  // Waits until the evictor has moved pages down to the remote tier.
  uint64_t WaitForRemotePages(uint64_t want) {
    uint64_t pages = 0;
    for (int i = 0; i < 100 && pages < want; ++i) {
      auto s = client_->Stats();
      if (s.ok() && Tier(*s, "remote") != nullptr) pages = Tier(*s, "remote")->pages();
      if (pages < want) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return pages;
  }
  // Waits until the evictor has stopped moving pages (remote page count
  // steady for half a second).
  void WaitForQuiet() {
    uint64_t last = UINT64_MAX;
    for (int i = 0; i < 40; ++i) {
      auto s = client_->Stats();
      const uint64_t now = s.ok() && Tier(*s, "remote") ? Tier(*s, "remote")->pages() : 0;
      if (now == last) return;
      last = now;
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
  }
  // Index of each page's tier as LOOKUP reports it (0: absent).
  std::vector<int> TiersOfPages() {
    std::vector<int> out;
    for (const PageKey& k : keys_) {
      auto r = client_->Lookup(absl::MakeConstSpan(&k, 1));
      out.push_back(r.ok() && r->hits == 1 ? static_cast<int>(r->tiers[0]) : 0);
    }
    return out;
  }
  std::unique_ptr<tiers::remote::testing::LoopbackCluster> cluster_;
  DaemonOptions daemon_options_;
  std::unique_ptr<DaemonProcess> daemon_;
  std::unique_ptr<Client> client_;
  std::vector<PageKey> keys_;
};

TEST_F(RemoteDaemonTest, PagesFlowToRedisAndComeBackByteExact) {
  PutPages();
  EXPECT_GE(WaitForRemotePages(kPages - 48), kPages - 48);
  const std::vector<int> tiers = TiersOfPages();
  EXPECT_GT(std::count(tiers.begin(), tiers.end(), kRemoteTier), 0);
  EXPECT_EQ(std::count(tiers.begin(), tiers.end(), 0), 0)  // every page still somewhere
      << RunCommand({KVTIERCTL_PATH, "stats", "--endpoint=" + daemon_->endpoint()}).out;
  auto pages = client_->GetInline(keys_);
  ASSERT_TRUE(pages.ok()) << pages.status();
  for (size_t i = 0; i < kPages; ++i) {
    ASSERT_EQ((*pages)[i].size(), kPage) << "page " << i << " (tier " << tiers[i] << ") missing";
    EXPECT_EQ(tools::CheckPattern(keys_[i], reinterpret_cast<const uint8_t*>((*pages)[i].data()),
                                  kPage),
              kPage)
        << "page " << i << " corrupted";
  }
  auto s = client_->Stats();
  ASSERT_TRUE(s.ok());
  const wire::TierStats* remote = Tier(*s, "remote");
  ASSERT_NE(remote, nullptr);
  EXPECT_FALSE(remote->down());
  EXPECT_EQ(remote->corrupt_reads(), 0u);
  EXPECT_EQ(remote->checksum_errors(), 0u);
  EXPECT_GT(remote->hits(), 0u);
  // kvtierctl shows the tier and its state.
  CommandResult ctl = RunCommand({KVTIERCTL_PATH, "stats", "--endpoint=" + daemon_->endpoint()});
  EXPECT_NE(ctl.out.find("remote"), std::string::npos) << ctl.out << ctl.err;
  EXPECT_NE(ctl.out.find("cluster up"), std::string::npos) << ctl.out;
}

TEST_F(RemoteDaemonTest, ClusterDownRemotePagesMissLocalPagesServed) {
  PutPages();
  ASSERT_GE(WaitForRemotePages(kPages - 48), kPages - 48);
  WaitForQuiet();
  const std::vector<int> tiers = TiersOfPages();
  ASSERT_TRUE(cluster_->Stop().ok());
  auto pages = client_->GetInline(keys_);
  ASSERT_TRUE(pages.ok()) << pages.status();  // faults are misses, never errors
  size_t local = 0, remote_missed = 0;
  for (size_t i = 0; i < kPages; ++i) {
    if ((*pages)[i].empty()) {
      EXPECT_EQ(tiers[i], kRemoteTier) << "local page " << i << " missed";
      ++remote_missed;
      continue;
    }
    ASSERT_EQ((*pages)[i].size(), kPage);
    EXPECT_EQ(tools::CheckPattern(keys_[i], reinterpret_cast<const uint8_t*>((*pages)[i].data()),
                                  kPage),
              kPage);
    if (tiers[i] != kRemoteTier) ++local;
  }
  EXPECT_EQ(local, static_cast<size_t>(std::count_if(tiers.begin(), tiers.end(),
                                                     [](int t) { return t != kRemoteTier; })));
  EXPECT_GT(remote_missed, 0u);
  EXPECT_TRUE(daemon_->Alive());
  auto s = client_->Stats();
  ASSERT_TRUE(s.ok());
  ASSERT_NE(Tier(*s, "remote"), nullptr);
  EXPECT_TRUE(Tier(*s, "remote")->down());
  EXPECT_GE(Tier(*s, "remote")->down_events(), 1u);
  // PUTs still work with the cluster down.
  const PageKey k = MakeChain(SmallLayout(), 99999, 1)[0];
  const std::string page = PatternPage(k, kPage);
  const absl::string_view view = page;
  EXPECT_TRUE(client_->PutInline(absl::MakeConstSpan(&k, 1), PageKey::Zero(),
                                 absl::MakeConstSpan(&view, 1)).ok());
}

// Cross-node reuse: daemon A's pages that reached the cluster are found by
// daemon B's LOOKUP (separate state dirs, one cluster), reported on tier
// remote, and read back byte-exact by B's GET; pages A holds only locally
// are misses on B.
TEST_F(RemoteDaemonTest, AnotherDaemonFindsAndReadsPagesByteExact) {
  PutPages();
  ASSERT_GE(WaitForRemotePages(kPages - 48), kPages - 48);
  WaitForQuiet();
  const std::vector<int> on_a = TiersOfPages();
  auto b = DaemonProcess::Start(daemon_options_);
  ASSERT_TRUE(b.ok()) << b.status();
  auto cb = Client::Connect(Options((*b)->endpoint()));
  ASSERT_TRUE(cb.ok()) << cb.status();
  std::vector<int> on_b;
  for (const PageKey& k : keys_) {
    auto r = (*cb)->Lookup(absl::MakeConstSpan(&k, 1));
    ASSERT_TRUE(r.ok()) << r.status();
    on_b.push_back(r->hits == 1 ? static_cast<int>(r->tiers[0]) : 0);
  }
  size_t shared = 0;
  for (size_t i = 0; i < kPages; ++i) {
    if (on_a[i] == kRemoteTier) {
      EXPECT_EQ(on_b[i], kRemoteTier) << "page " << i << " A stored remotely, B did not find";
      ++shared;
    } else {
      EXPECT_EQ(on_b[i], 0) << "page " << i << " is local to A";
    }
  }
  EXPECT_GT(shared, 0u);
  auto pages = (*cb)->GetInline(keys_);
  ASSERT_TRUE(pages.ok()) << pages.status();
  for (size_t i = 0; i < kPages; ++i) {
    if (on_a[i] != kRemoteTier) continue;
    ASSERT_EQ((*pages)[i].size(), kPage) << "page " << i;
    EXPECT_EQ(tools::CheckPattern(keys_[i], reinterpret_cast<const uint8_t*>((*pages)[i].data()),
                                  kPage),
              kPage)
        << "page " << i << " corrupted";
  }
  // B's reads left A's records in place: A still reads them.
  auto again = client_->GetInline(keys_);
  ASSERT_TRUE(again.ok());
  for (size_t i = 0; i < kPages; ++i) EXPECT_EQ((*again)[i].size(), kPage) << "page " << i;
  cb->reset();
  auto code = (*b)->Stop();
  EXPECT_TRUE(code.ok() && *code == 0) << (*b)->Log();
}

// Write-through with per-tenant Redis ACL users, as docs/OPERATIONS.md sets
// them up: the cluster's default user may touch no kvtier record, each
// tenant's user only its own (AclKeyPattern). alice's PUT on A is in the
// cluster at once (written as alice's user: nobody else could), B finds and
// reads it for alice, and bob finds nothing of it.
TEST_F(RemoteDaemonTest, WriteThroughAsEachTenantsOwnAclUser) {
  for (const std::string ns : {"alice", "bob"}) {
    ASSERT_TRUE(cluster_
                    ->OnAllNodes({"ACL", "SETUSER", "u-" + ns, "on", ">pw-" + ns + "-secret",
                                  "~" + tiers::remote::AclKeyPattern(ns), "+get", "+set",
                                  "+exists", "+unlink", "+asking", "+cluster|slots", "+ping"})
                    .ok());
  }
  ASSERT_TRUE(cluster_->OnAllNodes({"ACL", "SETUSER", "default", "resetkeys", "~other:*"}).ok());
  const std::string tenants = R"({"tenants": [
    {"name": "alice", "token": "alice-token", "redis_user": "u-alice", "redis_password": "pw-alice-secret"},
    {"name": "bob", "token": "bob-token-1", "redis_user": "u-bob", "redis_password": "pw-bob-secret"},
    {"name": "ops", "token": "ops-token-1", "admin": true}]})";
  DaemonOptions o = daemon_options_;
  o.tenants_json = tenants;
  o.flags.push_back("--remote_admission=put");
  auto a = DaemonProcess::Start(o, "alice", "alice-token");
  ASSERT_TRUE(a.ok()) << a.status();
  auto b = DaemonProcess::Start(o, "alice", "alice-token");
  ASSERT_TRUE(b.ok()) << b.status();
  auto alice_a = Client::Connect(Options((*a)->endpoint(), "alice", "alice-token"));
  auto alice_b = Client::Connect(Options((*b)->endpoint(), "alice", "alice-token"));
  auto bob_b = Client::Connect(Options((*b)->endpoint(), "bob", "bob-token-1"));
  auto ops_a = Client::Connect(Options((*a)->endpoint(), "ops", "ops-token-1"));  // tier stats
  ASSERT_TRUE(alice_a.ok() && alice_b.ok() && bob_b.ok() && ops_a.ok());
  std::vector<PageKey> chain = MakeChain(SmallLayout(), 77, 4);
  std::vector<std::string> pages;
  std::vector<absl::string_view> views;
  for (const PageKey& k : chain) pages.push_back(PatternPage(k, kPage));
  for (const std::string& p : pages) views.push_back(p);
  auto put = (*alice_a)->PutInline(chain, PageKey::Zero(), views);
  ASSERT_TRUE(put.ok()) << put.status();
  ASSERT_EQ(put->stored, chain.size());
  uint64_t published = 0;
  for (int i = 0; i < 100 && published < chain.size(); ++i) {
    auto s = (*ops_a)->Stats();
    if (s.ok() && Tier(*s, "remote") != nullptr) published = Tier(*s, "remote")->published();
    if (published < chain.size()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_EQ(published, chain.size()) << (*a)->Log();
  auto found = (*alice_b)->Lookup(chain);
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(found->hits, chain.size());
  auto got = (*alice_b)->GetInline(chain);
  ASSERT_TRUE(got.ok()) << got.status();
  for (size_t i = 0; i < chain.size(); ++i) EXPECT_EQ((*got)[i], pages[i]) << "page " << i;
  auto bobs = (*bob_b)->Lookup(chain);
  ASSERT_TRUE(bobs.ok()) << bobs.status();
  EXPECT_EQ(bobs->hits, 0u);
  alice_a->reset();
  alice_b->reset();
  bob_b->reset();
  ops_a->reset();
  for (auto* d : {&*a, &*b}) {
    auto code = (*d)->Stop();
    EXPECT_TRUE(code.ok() && *code == 0) << (*d)->Log();
  }
}

}  // namespace
}  // namespace kvtier::itest
