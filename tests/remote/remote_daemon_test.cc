// Real kvtierds sharing a loopback Redis Cluster as their shared cache:
// pages leaving a daemon's store (default admission: NVMe evictions) reach
// the cluster, and a second daemon finds them (LOOKUP: "remote"), fetches
// them byte-exact (GET) and keeps them; DELETE on one daemon forgets them
// cluster-wide, so no daemon serves them after; with one master hung, a
// tenant whose pages are in RAM waits for no one, and LOOKUPs of the hung
// master's slots answer misses within a timeout.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "client/wire_calls.h"
#include "kvtier.pb.h"
#include "tests/integration/daemon_process.h"
#include "tests/remote/cluster_fixture.h"
#include "tools/common/page_pattern.h"

namespace kvtier::itest {
namespace {

using tiers::remote::testing::LoopbackCluster;

constexpr uint64_t kPage = kSmallPageBytes;
constexpr int kRemoteTier = 4;  // wire.Tier TIER_REMOTE

// Both daemons' tenants: the shared cache seals each tenant's records with
// a key derived from the fleet secret and the tenant's token.
constexpr char kTenants[] = R"({"tenants": [
  {"name": "admin", "token": "tok-admin", "admin": true},
  {"name": "alice", "token": "tok-alice"},
  {"name": "victim", "token": "tok-victim"}]})";

class RemoteDaemonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!tiers::remote::testing::RedisInstalled()) GTEST_SKIP() << "redis-server not installed";
    auto cluster = LoopbackCluster::Start();
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = *std::move(cluster);
    secret_ = ::testing::TempDir() + "kvtier-secret-" + std::to_string(getpid());
    std::ofstream(secret_) << std::string(64, 'a') << "\n";
    ASSERT_EQ(chmod(secret_.c_str(), 0600), 0);
    a_ = StartDaemon();
    b_ = StartDaemon();
    ASSERT_TRUE(a_ && b_);
  }
  void TearDown() override {
    for (auto* d : {&a_, &b_}) {
      if (!*d) continue;
      auto code = (*d)->Stop();
      EXPECT_TRUE(code.ok() && *code == 0) << (*d)->Log();
      if (HasFailure()) std::cerr << "---- kvtierd log ----\n" << (*d)->Log() << "\n";
    }
    std::remove(secret_.c_str());
  }
  std::unique_ptr<DaemonProcess> StartDaemon() {
    DaemonOptions o;
    o.nvme = true;
    o.tenants_json = kTenants;
    o.flags = {"--host_bytes=2MiB", "--nvme_bytes=4MiB", "--log_level=warn",
               "--remote_seeds=" + absl::StrJoin(cluster_->seeds(), ","),
               "--remote_secret_file=" + secret_, "--remote_connect_timeout_ms=200",
               "--remote_command_timeout_ms=500",
               // LOOKUP moves nothing, so the tiers it reports stay true.
               "--prefetch_lookahead=false"};
    auto d = DaemonProcess::Start(o, "admin", "tok-admin");
    EXPECT_TRUE(d.ok()) << d.status();
    return d.ok() ? *std::move(d) : nullptr;
  }
  std::unique_ptr<Client> Connect(const DaemonProcess& d, const std::string& tenant,
                                  const std::string& token) {
    auto c = Client::Connect(Options(d.endpoint(), tenant, token));
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *std::move(c) : nullptr;
  }
  // PUTs a chain of n pages as `c`, then pushes it out of host and NVMe, so
  // it is in the cluster (EVICT returns once its publishes were sent).
  std::vector<PageKey> PutAndPushOut(Client& c, uint64_t seed, size_t n) {
    std::vector<PageKey> keys = MakeChain(SmallLayout(), seed, n);
    std::vector<std::string> pages;
    std::vector<absl::string_view> views;
    for (const PageKey& k : keys) pages.push_back(PatternPage(k, kPage));
    for (const std::string& p : pages) views.push_back(p);
    auto put = c.PutInline(keys, PageKey::Zero(), views);
    EXPECT_TRUE(put.ok()) << put.status();
    EXPECT_TRUE(c.Evict("", TierKind::kHost, 0).ok());
    EXPECT_TRUE(c.Evict("", TierKind::kNvme, 0).ok());
    return keys;
  }
  static size_t Count(const std::vector<TierKind>& tiers, TierKind t) {
    return std::count(tiers.begin(), tiers.end(), t);
  }
  static void ExpectPages(const std::vector<PageKey>& keys, const std::vector<std::string>& got) {
    ASSERT_EQ(got.size(), keys.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      ASSERT_EQ(got[i].size(), kPage) << "page " << i << " missing";
      EXPECT_EQ(tools::CheckPattern(keys[i], reinterpret_cast<const uint8_t*>(got[i].data()), kPage),
                kPage)
          << "page " << i << " corrupted";
    }
  }

  std::unique_ptr<LoopbackCluster> cluster_;
  std::string secret_;
  std::unique_ptr<DaemonProcess> a_, b_;
};

TEST_F(RemoteDaemonTest, ASecondDaemonFindsAndFetchesWhatTheFirstPushedOut) {
  auto alice_a = Connect(*a_, "alice", "tok-alice");
  auto alice_b = Connect(*b_, "alice", "tok-alice");
  const std::vector<PageKey> keys = PutAndPushOut(*alice_a, 1, 8);
  auto on_a = alice_a->Lookup(keys);  // A's own pages left its store: the cluster has them
  ASSERT_TRUE(on_a.ok()) << on_a.status();
  EXPECT_EQ(on_a->hits, keys.size());
  auto l = alice_b->Lookup(keys);
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->hits, keys.size());
  EXPECT_EQ(Count(l->tiers, TierKind::kRemote), keys.size());
  auto got = alice_b->GetInline(keys);
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectPages(keys, *got);
  // B keeps what it fetched: the next LOOKUP finds it locally.
  auto again = alice_b->Lookup(keys);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(Count(again->tiers, TierKind::kRemote), 0u);
  auto admin = Connect(*b_, "admin", "tok-admin");
  auto s = WireStats(*admin);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->shared_cache().fetch_hits(), keys.size());
  EXPECT_EQ(s->shared_cache().rejected(), 0u);
}

TEST_F(RemoteDaemonTest, AfterDeleteNoDaemonServesThePage) {
  auto alice_a = Connect(*a_, "alice", "tok-alice");
  auto alice_b = Connect(*b_, "alice", "tok-alice");
  const std::vector<PageKey> keys = PutAndPushOut(*alice_a, 2, 6);
  // A GET on A brings the pages back into A's store (from the cluster).
  auto got = alice_a->GetInline(keys);
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectPages(keys, *got);
  auto deleted = alice_a->Delete(keys);
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  EXPECT_EQ(*deleted, keys.size());
  for (Client* c : {alice_a.get(), alice_b.get()}) {
    auto l = c->Lookup(keys);
    ASSERT_TRUE(l.ok()) << l.status();
    EXPECT_EQ(l->hits, 0u);
    auto g = c->GetInline(keys);
    ASSERT_TRUE(g.ok()) << g.status();
    for (const std::string& p : *g) EXPECT_TRUE(p.empty());
  }
  auto admin = Connect(*a_, "admin", "tok-admin");
  auto s = WireStats(*admin);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->shared_cache().forgotten(), keys.size());
}

TEST_F(RemoteDaemonTest, AnotherTenantFindsNothingOfAlices) {
  auto alice_a = Connect(*a_, "alice", "tok-alice");
  auto victim_b = Connect(*b_, "victim", "tok-victim");
  const std::vector<PageKey> keys = PutAndPushOut(*alice_a, 3, 4);
  auto l = victim_b->Lookup(keys);
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->hits, 0u);
  auto g = victim_b->GetInline(keys);
  ASSERT_TRUE(g.ok());
  for (const std::string& p : *g) EXPECT_TRUE(p.empty());
}

// p-th quantile (0..1) of `v`, in ms.
double Quantile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * v.size()))];
}

TEST_F(RemoteDaemonTest, AHungMasterStallsNoOneElse) {
  auto victim = Connect(*a_, "victim", "tok-victim");
  auto prober = Connect(*a_, "alice", "tok-alice");
  // The victim's pages are in RAM; alice's chains miss locally, so each of
  // her LOOKUPs asks the cluster, a third of it on the hung master.
  std::vector<PageKey> mine = MakeChain(SmallLayout(), 4, 4);
  std::vector<std::string> pages;
  std::vector<absl::string_view> views;
  for (const PageKey& k : mine) pages.push_back(PatternPage(k, kPage));
  for (const std::string& p : pages) views.push_back(p);
  ASSERT_TRUE(victim->PutInline(mine, PageKey::Zero(), views).ok());
  const std::string master = cluster_->seeds()[0];
  const pid_t pid = cluster_->PidOf(master);
  ASSERT_GT(pid, 0);
  ASSERT_EQ(kill(pid, SIGSTOP), 0);
  std::atomic<bool> stop{false};
  std::atomic<int> probes{0};
  std::atomic<int64_t> slowest_probe_ms{0};
  std::thread t([&] {
    for (uint64_t seed = 100; !stop; ++seed) {
      const absl::Time t0 = absl::Now();
      auto l = prober->Lookup(MakeChain(SmallLayout(), seed, 16));
      const int64_t ms = absl::ToInt64Milliseconds(absl::Now() - t0);
      EXPECT_TRUE(l.ok()) << l.status();
      if (l.ok()) EXPECT_EQ(l->hits, 0u);
      slowest_probe_ms = std::max<int64_t>(slowest_probe_ms, ms);
      ++probes;
    }
  });
  std::vector<double> ping, lookup, get;
  const absl::Time end = absl::Now() + absl::Seconds(3);
  while (absl::Now() < end) {
    absl::Time t0 = absl::Now();
    ASSERT_TRUE(victim->Ping().ok());
    ping.push_back(absl::ToDoubleMilliseconds(absl::Now() - t0));
    t0 = absl::Now();
    auto l = victim->Lookup(mine);
    lookup.push_back(absl::ToDoubleMilliseconds(absl::Now() - t0));
    ASSERT_TRUE(l.ok());
    EXPECT_EQ(l->hits, mine.size());
    t0 = absl::Now();
    auto g = victim->GetInline(mine);
    get.push_back(absl::ToDoubleMilliseconds(absl::Now() - t0));
    ASSERT_TRUE(g.ok());
  }
  stop = true;
  t.join();
  kill(pid, SIGCONT);
  std::printf("hung master: victim p99 PING %.2f ms, LOOKUP %.2f ms, GET %.2f ms (%zu each); "
              "%d prober LOOKUPs, slowest %ld ms\n",
              Quantile(ping, 0.99), Quantile(lookup, 0.99), Quantile(get, 0.99), ping.size(),
              probes.load(), static_cast<long>(slowest_probe_ms.load()));
  // 20 ms is the target (docs/BENCHMARKS.md); the bound leaves room for a
  // loaded 2-core CI machine. Before, each of them took ~2 s.
  EXPECT_LT(Quantile(ping, 0.99), 100);
  EXPECT_LT(Quantile(lookup, 0.99), 100);
  EXPECT_LT(Quantile(get, 0.99), 100);
  EXPECT_GT(probes.load(), 3);
  // One command timeout (500 ms) for the first LOOKUP to touch the hung
  // node; after that its slots are skipped for the backoff.
  EXPECT_LT(slowest_probe_ms.load(), 2000);
  auto admin = Connect(*a_, "admin", "tok-admin");
  auto s = WireStats(*admin);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->shared_cache().frontend_io(), 0u);
  EXPECT_GT(s->shared_cache().io_errors(), 0u);  // the hung node's keys: misses
}

}  // namespace
}  // namespace kvtier::itest
