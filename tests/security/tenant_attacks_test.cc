// A hostile second tenant against alice's pages: what STATS leaks (hole 5),
// pinning the host tier through PREFETCH with a tiny declared layout
// (hole 10), flooding past quotas and reserves (hole 11), every request
// type aimed at alice's keys in RAM and on NVMe, and LOOKUP timing.
#include <google/protobuf/util/message_differencer.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <random>
#include <thread>

#include "kvtier/shm_buffer.h"
#include "tests/security/security_fixture.h"
#include "tools/common/page_pattern.h"

namespace kvtier::security {
namespace {

using Clock = std::chrono::steady_clock;

// Inline PUTs of `keys` (one chain) from the wire in batches; returns pages stored.
uint64_t WirePutChain(WirePeer& peer, const std::vector<PageKey>& keys, uint64_t page_bytes,
                      size_t batch, uint8_t salt = 0) {
  uint64_t stored = 0;
  for (size_t i = 0; i < keys.size(); i += batch) {
    std::vector<PageKey> part(keys.begin() + i, keys.begin() + std::min(keys.size(), i + batch));
    auto r = peer.Call(PutInlineReq(part, i == 0 ? PageKey::Zero() : keys[i - 1]),
                       PatternPages(part, page_bytes, salt), 30000);
    if (r.ok() && r->response.code() == wire::OK) stored += r->response.put().stored();
  }
  return stored;
}

// ---------------------------------------------------------------- hole 5 --

class Hole05_StatsSideChannel : public SecurityTest {};

TEST_F(Hole05_StatsSideChannel, NonAdminStatsRevealNothingOfOthers) {
  auto mallory = Mallory();
  auto before = mallory->Call(StatsReq());
  EXPECT_WIRE_CODE(before, OK);
  wire::StatsReply s1 = before->response.stats();
  EXPECT_EQ(s1.daemon().rss_bytes(), 0u);
  EXPECT_EQ(s1.daemon().rss_anon_bytes(), 0u);
  EXPECT_EQ(s1.latency_size(), 0);
  EXPECT_FALSE(s1.has_prefetch());
  wire::StatsReply admin = AdminStats();
  EXPECT_GT(admin.daemon().rss_bytes(), 0u) << "admins still see the daemon's memory";
  EXPECT_GT(admin.daemon().rss_anon_bytes(), 0u);

  auto alice = Alice();
  ASSERT_TRUE(alice);
  auto keys = itest::MakeChain(itest::SmallLayout(), 501, 200);
  for (size_t i = 0; i < keys.size(); i += 50) {
    std::vector<PageKey> part(keys.begin() + i, keys.begin() + i + 50);
    std::vector<std::string> pages = PatternPages(part, kPage);
    std::vector<absl::string_view> views(pages.begin(), pages.end());
    auto put = alice->PutInline(part, i == 0 ? PageKey::Zero() : keys[i - 1], views);
    ASSERT_TRUE(put.ok()) << put.status();
  }
  auto after = mallory->Call(StatsReq());
  EXPECT_WIRE_CODE(after, OK);
  wire::StatsReply s2 = after->response.stats();
  s1.mutable_daemon()->clear_uptime_ms();
  s2.mutable_daemon()->clear_uptime_ms();
  std::string diff;
  google::protobuf::util::MessageDifferencer d;
  d.ReportDifferencesToString(&diff);
  EXPECT_TRUE(d.Compare(s1, s2)) << "mallory's STATS changed when alice stored 200 pages:\n"
                                 << diff;
  for (const auto& ns : s2.namespaces()) EXPECT_EQ(ns.name(), kMallory);
}

// --------------------------------------------------------------- hole 10 --

// 32 KiB pages: 2 layers x {K,V} x 2 heads x 32 tokens x 64 dims x fp16.
Layout Layout32K() {
  return Layout{.layers = 2, .kv_heads = 2, .head_dim = 64, .tokens_per_page = 32,
                .dtype = Dtype::kFp16};
}
// 10-byte pages: 1 layer x {K,V} x 1 head x 1 token x (1 fp8 + 4-byte scale).
Layout TinyLayout() {
  return Layout{.layers = 1, .kv_heads = 1, .head_dim = 1, .tokens_per_page = 1,
                .dtype = Dtype::kFp8E4M3};
}
constexpr uint64_t k32K = 32 << 10;

class Hole10_PrefetchBudgetBypass : public SecurityTest {
 protected:
  bool Nvme() const override { return true; }
  std::vector<std::string> Flags() const override {
    return {"--host_bytes=8MiB", "--nvme_bytes=64MiB", "--prefetch_max_leased_per_tenant=1MiB"};
  }
  // Real bytes pinned by prefetch, whatever the requests declared.
  uint64_t PinnedNow() {
    wire::StatsReply s = AdminStats();
    uint64_t host_pinned = 0;
    for (const auto& t : s.tiers())
      if (t.name() == "host") host_pinned = t.pinned_pages() * k32K;
    return std::max({s.prefetch().pinned_bytes(), s.prefetch().leased_pages() * k32K, host_pinned});
  }
  void RunAttack(uint64_t cap);
};

void Hole10_PrefetchBudgetBypass::RunAttack(uint64_t cap) {
  ASSERT_EQ(Layout32K().PageBytes(), k32K);
  ASSERT_EQ(TinyLayout().PageBytes(), 10u);
  auto m1 = Mallory(Layout32K());
  auto keys = itest::MakeChain(Layout32K(), 1001, 240);
  EXPECT_EQ(WirePutChain(*m1, keys, k32K, 40), keys.size());
  // Down to NVMe, all of them.
  EXPECT_WIRE_CODE(m1->Call(EvictReq("", wire::TIER_HOST, 0, true), {}, 30000), OK);
  auto m2 = Mallory(TinyLayout());
  uint64_t peak = 0;
  for (int round = 0; round < 8; ++round) {
    auto r = m2->Call(PrefetchReq(keys, /*lease_ms=*/60000, /*priority=*/100));
    ASSERT_TRUE(r.ok()) << r.status();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    peak = std::max(peak, PinnedNow());
  }
  wire::StatsReply s = AdminStats();
  std::printf("SECURITY_PREFETCH cap_kib=%lu peak_pinned_kib=%lu leased_pages=%lu "
              "reported_pinned_bytes=%lu\n",
              static_cast<unsigned long>(cap >> 10), static_cast<unsigned long>(peak >> 10),
              static_cast<unsigned long>(s.prefetch().leased_pages()),
              static_cast<unsigned long>(s.prefetch().pinned_bytes()));
  EXPECT_LE(peak, cap + k32K) << "prefetch pinned " << (peak >> 10) << " KiB of the 8 MiB host tier";
  // Alice's PUTs still land in RAM.
  auto alice = Alice(Layout32K());
  ASSERT_TRUE(alice);
  auto mine = itest::MakeChain(Layout32K(), 1002, 32);
  ASSERT_NO_FATAL_FAILURE(PlantAlice(*alice, mine));
  auto look = alice->Lookup(mine);
  ASSERT_TRUE(look.ok()) << look.status();
  EXPECT_EQ(look->hits, mine.size());
  size_t in_host = std::count(look->tiers.begin(), look->tiers.end(), TierKind::kHost);
  EXPECT_EQ(in_host, mine.size()) << "alice's fresh pages did not find room in RAM";
  ExpectAliceIntact(mine, Layout32K());
}

TEST_F(Hole10_PrefetchBudgetBypass, TinyLayoutLeasesStayWithinTheTenantCap) {
  RunAttack(1 << 20);
}

// The same attack against the daemon-wide budget (--prefetch_max_pinned),
// which counts the declared page size instead of the real one.
class Hole10_PrefetchGlobalBudget : public Hole10_PrefetchBudgetBypass {
 protected:
  std::vector<std::string> Flags() const override {
    return {"--host_bytes=8MiB", "--nvme_bytes=64MiB", "--prefetch_max_pinned=1MiB"};
  }
};

TEST_F(Hole10_PrefetchGlobalBudget, TinyLayoutLeasesStayWithinTheDaemonBudget) {
  RunAttack(1 << 20);
}

// --------------------------------------------------------------- hole 11 --

class Hole11_QuotaBelowRam : public SecurityTest {
 protected:
  bool Nvme() const override { return true; }
  std::vector<std::string> Flags() const override {
    return {"--host_bytes=8MiB", "--nvme_bytes=64MiB"};
  }
  std::string Tenants() const override { return TenantsJson("", R"("quota": {"host": "2MiB"})"); }
};

TEST_F(Hole11_QuotaBelowRam, HostQuotaAlsoBoundsNvme) {
  auto keys = itest::MakeChain(itest::SmallLayout(), 1101, 64);
  {
    auto alice = Alice();
    ASSERT_TRUE(alice);
    ASSERT_NO_FATAL_FAILURE(PlantAlice(*alice, keys));
    auto ev = alice->Evict("", TierKind::kHost, 0);  // all of hers down to NVMe
    ASSERT_TRUE(ev.ok()) << ev.status();
    auto look = alice->Lookup(keys);
    ASSERT_TRUE(look.ok());
    ASSERT_EQ(look->hits, keys.size());
  }
  auto mallory = Mallory();
  auto flood = itest::MakeChain(itest::SmallLayout(), 1102, 1600);  // 100 MiB
  uint64_t stored = WirePutChain(*mallory, flood, kPage, 32);
  std::printf("SECURITY_FLOOD attack=quota_below_ram mallory_stored=%lu\n",
              static_cast<unsigned long>(stored));
  ExpectAliceIntact(keys);
}

class Hole11_Reserve : public SecurityTest {
 protected:
  bool Nvme() const override { return true; }
  std::vector<std::string> Flags() const override {
    return {"--host_bytes=8MiB", "--nvme_bytes=64MiB"};
  }
  std::string Tenants() const override {
    return TenantsJson(R"("reserve": {"host": "1MiB", "nvme": "4MiB"})", "");
  }
};

TEST_F(Hole11_Reserve, PagesWithinTheReserveSurviveAFlood) {
  auto keys = itest::MakeChain(itest::SmallLayout(), 1111, 48);  // 3 MiB < 4 MiB
  {
    auto alice = Alice();
    ASSERT_TRUE(alice);
    ASSERT_NO_FATAL_FAILURE(PlantAlice(*alice, keys));
  }
  auto mallory = Mallory();
  auto flood = itest::MakeChain(itest::SmallLayout(), 1112, 1600);  // 100 MiB
  uint64_t stored = WirePutChain(*mallory, flood, kPage, 32);
  std::printf("SECURITY_FLOOD attack=reserve mallory_stored=%lu\n", static_cast<unsigned long>(stored));
  ExpectAliceIntact(keys);
}

// ------------------------------------------- every request type vs alice --

class HostileTenant : public SecurityTest {
 protected:
  bool Nvme() const override { return true; }
  // No lookahead: a LOOKUP must not move alice's NVMe pages, so where they
  // are afterwards shows what mallory's requests did.
  std::vector<std::string> Flags() const override { return {"--prefetch_lookahead=false"}; }

  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(SecurityTest::SetUp());
    if (IsSkipped()) return;
    on_nvme_ = itest::MakeChain(itest::SmallLayout(), 1301, 8);
    in_ram_ = itest::MakeChain(itest::SmallLayout(), 1302, 8);
    auto alice = Alice();
    ASSERT_TRUE(alice);
    ASSERT_NO_FATAL_FAILURE(PlantAlice(*alice, on_nvme_));
    auto ev = alice->Evict("", TierKind::kHost, 0);
    ASSERT_TRUE(ev.ok()) << ev.status();
    ASSERT_NO_FATAL_FAILURE(PlantAlice(*alice, in_ram_));
    ASSERT_NO_FATAL_FAILURE(ExpectTiers(*alice));
  }
  void ExpectTiers(Client& alice) {
    auto ram = alice.Lookup(in_ram_);
    auto nvme = alice.Lookup(on_nvme_);
    ASSERT_TRUE(ram.ok() && nvme.ok());
    ASSERT_EQ(ram->hits, in_ram_.size());
    ASSERT_EQ(nvme->hits, on_nvme_.size());
    for (TierKind t : ram->tiers) EXPECT_EQ(t, TierKind::kHost);
    for (TierKind t : nvme->tiers) EXPECT_EQ(t, TierKind::kNvme);
  }
  std::vector<PageKey> AllKeys() const {
    std::vector<PageKey> all = in_ram_;
    all.insert(all.end(), on_nvme_.begin(), on_nvme_.end());
    return all;
  }
  std::vector<PageKey> on_nvme_, in_ram_;
};

TEST_F(HostileTenant, EveryRequestTypeAgainstAlicesKeys) {
  auto m = Mallory();
  for (const auto* chain : {&in_ram_, &on_nvme_}) {
    ExpectUnseenBy(*m, *chain);
    auto pf = m->Call(PrefetchReq(*chain, 60000, 100));
    EXPECT_WIRE_CODE(pf, OK);
    EXPECT_EQ(pf->response.prefetch().missing(), chain->size());
    EXPECT_EQ(pf->response.prefetch().queued() + pf->response.prefetch().merged() +
                  pf->response.prefetch().resident(), 0u);
    auto del = m->Call(DeleteReq(*chain));
    EXPECT_WIRE_CODE(del, OK);
    EXPECT_EQ(del->response.delete_().deleted(), 0u);
  }
  // GET into mallory's own buffer: nothing is written there.
  auto buf = ShmBuffer::Create(16 * kPage);
  ASSERT_TRUE(buf.ok());
  auto reg = m->Call(RegisterShmReq((*buf)->name(), (*buf)->size()));
  EXPECT_WIRE_CODE(reg, OK);
  std::vector<uint64_t> offsets;
  for (size_t i = 0; i < 16; ++i) offsets.push_back(i * kPage);
  for (int policy : {0, 1, 2}) {
    wire::Request get = GetReq(AllKeys(), reg->response.register_buffer().buffer_id(), offsets);
    get.mutable_get()->set_policy(static_cast<wire::GetPolicy>(policy));
    if (policy == wire::GET_TIMEOUT) get.mutable_get()->set_timeout_ms(200);
    auto g = m->Call(get);
    EXPECT_WIRE_CODE(g, OK);
    EXPECT_EQ(g->response.get().tiers(), std::string(16, '\0'));
  }
  EXPECT_EQ(std::count((*buf)->data(), (*buf)->data() + (*buf)->size(), 0),
            static_cast<long>((*buf)->size()))
      << "bytes landed in mallory's buffer";
  // Operator requests.
  for (wire::Tier tier : {wire::TIER_NONE, wire::TIER_HOST, wire::TIER_NVME}) {
    auto ev = m->Call(EvictReq(kAlice, tier, 0, true), {}, 30000);
    EXPECT_WIRE_CODE(ev, PERMISSION_DENIED);
  }
  auto ev_ghost = m->Call(EvictReq("nobody-such", wire::TIER_NONE, 0, true));
  EXPECT_WIRE_CODE(ev_ghost, PERMISSION_DENIED);  // same answer: no probing of names
  EXPECT_WIRE_CODE(m->Call(EvictReq("", wire::TIER_NONE, 0, true), {}, 30000), OK);
  EXPECT_WIRE_CODE(m->Call(EvictReq("", wire::TIER_HOST, 0, true), {}, 30000), OK);
  EXPECT_WIRE_CODE(m->Call(TenantsReq()), PERMISSION_DENIED);
  EXPECT_WIRE_CODE(m->Call(FlushReq(), {}, 30000), PERMISSION_DENIED);
  auto stats = m->Call(StatsReq());
  EXPECT_WIRE_CODE(stats, OK);
  for (const auto& ns : stats->response.stats().namespaces()) EXPECT_EQ(ns.name(), kMallory);
  for (const auto& t : stats->response.stats().tiers()) {
    EXPECT_EQ(t.pages(), 0u) << t.name();
    EXPECT_EQ(t.used_bytes(), 0u) << t.name();
  }
  // PUT alice's keys with other bytes: they go to mallory's namespace only.
  for (const auto* chain : {&in_ram_, &on_nvme_}) {
    auto put = m->Call(PutInlineReq(*chain, PageKey::Zero()), PatternPages(*chain, kPage, 0x5a));
    EXPECT_WIRE_CODE(put, OK);
    EXPECT_EQ(put->response.put().stored(), chain->size()) << "dedup across namespaces";
    auto got = m->Call(GetInlineReq(*chain));
    EXPECT_WIRE_CODE(got, OK);
    ASSERT_EQ(got->payloads.size(), chain->size());
    for (size_t i = 0; i < chain->size(); ++i)
      EXPECT_EQ(got->payloads[i], itest::SaltedPage((*chain)[i], kPage, 0x5a));
    auto del = m->Call(DeleteReq(*chain));
    EXPECT_WIRE_CODE(del, OK);
    EXPECT_EQ(del->response.delete_().deleted(), chain->size());
  }
  EXPECT_WIRE_CODE(m->Call(EvictReq("", wire::TIER_NONE, 0, true), {}, 30000), OK);
  // Alice: every page where it was, byte-exact.
  auto alice = Alice();
  ASSERT_TRUE(alice);
  ExpectTiers(*alice);
  ExpectAliceIntact(AllKeys());
}

// LOOKUP with a lease names keys; in mallory's namespace alice's keys are
// absent, so nothing of alice's is held: alice's own eviction still moves
// her pages.
TEST_F(HostileTenant, LeasedLookupsOfAlicesKeysHoldNothing) {
  auto m = Mallory();
  wire::Request look = LookupReq(AllKeys());
  look.mutable_lookup()->set_lease_ms(30000);
  auto r = m->Call(look);
  EXPECT_WIRE_CODE(r, OK);
  EXPECT_EQ(r->response.lookup().hits(), 0u);
  EXPECT_EQ(AdminStats().prefetch().lookup_leased(), 0u);
  auto alice = Alice();
  ASSERT_TRUE(alice);
  ASSERT_TRUE(alice->Evict("", TierKind::kHost, 0).ok());
  auto after = alice->Lookup(in_ram_);
  ASSERT_TRUE(after.ok());
  ASSERT_EQ(after->hits, in_ram_.size());
  for (TierKind t : after->tiers) EXPECT_EQ(t, TierKind::kNvme) << "a page of alice's stayed held";
  ExpectAliceIntact(AllKeys());
}

// Leases are capped per tenant: mallory holding all she may hold leaves
// alice's leased LOOKUPs whole.
class HostileLeases : public HostileTenant {
 protected:
  // 8 MiB of host: prefetch may pin 2 MiB, one tenant 1 MiB (16 pages).
  std::vector<std::string> Flags() const override {
    return {"--prefetch_lookahead=false", "--host_bytes=8MiB"};
  }
};

TEST_F(HostileLeases, OneTenantsLeasesDoNotStarveAnother) {
  auto m = Mallory();
  auto hoard = itest::MakeChain(itest::SmallLayout(), 1303, 48);
  ASSERT_EQ(WirePutChain(*m, hoard, kPage, 16), hoard.size());
  wire::Request look = LookupReq(hoard);
  look.mutable_lookup()->set_lease_ms(30000);
  for (int round = 0; round < 3; ++round) {
    auto r = m->Call(look);
    EXPECT_WIRE_CODE(r, OK);
    EXPECT_LE(r->response.lookup().hits(), 16u) << "mallory held more than her lease cap";
    EXPECT_EQ(r->response.lookup().leased(), r->response.lookup().hits());
  }
  auto alice = Alice();
  ASSERT_TRUE(alice);
  auto mine = alice->Lookup(in_ram_, LookupOptions{.lease = std::chrono::seconds(30)});
  ASSERT_TRUE(mine.ok()) << mine.status();
  EXPECT_EQ(mine->hits, in_ram_.size());
  EXPECT_EQ(mine->leased, in_ram_.size());
  auto deep = alice->Lookup(on_nvme_, LookupOptions{.lease = std::chrono::seconds(30)});
  ASSERT_TRUE(deep.ok()) << deep.status();
  EXPECT_EQ(deep->hits, on_nvme_.size());
  ExpectAliceIntact(AllKeys());
}

// ------------------------------------------------ issue 24: lease shares --

// Two hostile tenants, mallory and trudy, each flood leased LOOKUPs at their
// cap (--prefetch_max_leased_per_tenant, default half the prefetch budget):
// together they hold the whole budget. Alice, arriving after them, must still
// get her fair share (budget / 3 active tenants) of leased hits at once.
constexpr char kTrudy[] = "trudy";
constexpr char kTrudyToken[] = "trudy-secret-001";

class LeaseShares : public SecurityTest {
 protected:
  // 8 MiB of host: prefetch may pin 2 MiB (32 pages of 64 KiB), one tenant
  // 1 MiB (16 pages). No lookahead: only leases pin.
  std::vector<std::string> Flags() const override {
    return {"--prefetch_lookahead=false", "--host_bytes=8MiB"};
  }
  std::string Tenants() const override {
    std::string json = TenantsJson();
    json.insert(json.rfind("]}"), absl::StrCat(R"(, {"name": ")", kTrudy, R"(", "token": ")",
                                               kTrudyToken, R"("})"));
    return json;
  }
  std::unique_ptr<WirePeer> Trudy() {
    auto p = std::make_unique<WirePeer>(daemon_->endpoint(), kTrudy, kTrudyToken);
    auto r = p->Hello(kTrudy, kTrudyToken, itest::SmallLayout(), "trudy");
    EXPECT_TRUE(r.ok()) << r.status();
    if (r.ok()) {
      EXPECT_EQ(r->response.code(), wire::OK) << r->response.message();
    }
    return p;
  }
};

TEST_F(LeaseShares, TwoFloodingTenantsLeaveAThirdItsFairShareOfLeases) {
  constexpr uint64_t kBudgetPages = 32, kCapPages = 16;
  constexpr uint32_t kFairPages = static_cast<uint32_t>(kBudgetPages * kPage / 3 / kPage);  // 10
  auto m = Mallory();
  auto t = Trudy();
  const auto hoard_m = itest::MakeChain(itest::SmallLayout(), 2401, 48);
  const auto hoard_t = itest::MakeChain(itest::SmallLayout(), 2402, 48);
  ASSERT_EQ(WirePutChain(*m, hoard_m, kPage, 16), hoard_m.size());
  ASSERT_EQ(WirePutChain(*t, hoard_t, kPage, 16), hoard_t.size());
  auto alice = Alice();
  ASSERT_TRUE(alice);
  const auto mine = itest::MakeChain(itest::SmallLayout(), 2403, 16);
  ASSERT_NO_FATAL_FAILURE(PlantAlice(*alice, mine));

  std::atomic<bool> stop{false};
  std::atomic<uint32_t> leased_m{0}, leased_t{0};
  std::atomic<uint64_t> rounds{0};
  auto flood = [&](WirePeer* peer, const std::vector<PageKey>* keys, std::atomic<uint32_t>* out) {
    wire::Request look = LookupReq(*keys);
    look.mutable_lookup()->set_lease_ms(30000);
    while (!stop.load()) {
      auto r = peer->Call(look);
      if (r.ok() && r->response.code() == wire::OK) out->store(r->response.lookup().leased());
      rounds.fetch_add(1);
    }
  };
  std::thread fm(flood, m.get(), &hoard_m, &leased_m);
  std::thread ft(flood, t.get(), &hoard_t, &leased_t);
  // Both at their caps: the whole budget is held.
  const auto until = Clock::now() + std::chrono::seconds(10);
  while (Clock::now() < until && (leased_m.load() < kCapPages || leased_t.load() < kCapPages))
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(leased_m.load(), kCapPages);
  EXPECT_EQ(leased_t.load(), kCapPages);

  const auto t0 = Clock::now();
  auto first = alice->Lookup(mine, LookupOptions{.lease = std::chrono::seconds(30)});
  const long first_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
  ASSERT_TRUE(first.ok()) << first.status();
  // A second later, with the flood still going: still held, not taken back.
  std::this_thread::sleep_for(std::chrono::seconds(1));
  auto later = alice->Lookup(mine, LookupOptions{.lease = std::chrono::seconds(30)});
  ASSERT_TRUE(later.ok()) << later.status();
  stop = true;
  fm.join();
  ft.join();
  wire::StatsReply s = AdminStats();
  std::printf("SECURITY_LEASE_SHARE victim_leased=%u victim_hits=%u fair_share_pages=%u "
              "victim_leased_after_1s=%u budget_pages=%lu flooder_leased=%u,%u first_lookup_ms=%ld "
              "flood_lookups=%lu lease_revoked=%lu pinned_kib=%lu\n",
              first->leased, first->hits, kFairPages, later->leased,
              static_cast<unsigned long>(kBudgetPages), leased_m.load(), leased_t.load(), first_ms,
              static_cast<unsigned long>(rounds.load()),
              static_cast<unsigned long>(s.prefetch().lease_revoked()),
              static_cast<unsigned long>(s.prefetch().pinned_bytes() >> 10));
  EXPECT_GE(first->leased, kFairPages) << "alice got less than her fair share of leases";
  EXPECT_EQ(first->hits, first->leased);
  EXPECT_GE(later->leased, kFairPages) << "alice's share was taken back during the flood";
  EXPECT_LE(leased_m.load() + leased_t.load() + later->leased, kBudgetPages);
  EXPECT_LE(s.prefetch().pinned_bytes(), kBudgetPages * kPage);
  ExpectAliceIntact(mine);
}

double MedianUs(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

TEST_F(HostileTenant, LookupTimingDoesNotRevealAlicesKeys) {
  auto m = Mallory();
  std::mt19937_64 rng(1303);
  std::vector<PageKey> random(8);
  std::vector<double> ram_us, nvme_us, rand_us;
  auto time_lookup = [&m](const std::vector<PageKey>& keys) {
    const auto t0 = Clock::now();
    auto r = m->Call(LookupReq(keys));
    const auto t1 = Clock::now();
    EXPECT_TRUE(r.ok() && r->response.code() == wire::OK && r->response.lookup().hits() == 0);
    return std::chrono::duration<double, std::micro>(t1 - t0).count();
  };
  for (int round = 0; round < 50; ++round) time_lookup(in_ram_);  // warm-up
  for (int round = 0; round < 600; ++round) {
    for (PageKey& k : random)
      for (auto& b : k.bytes) b = static_cast<uint8_t>(rng());
    rand_us.push_back(time_lookup(random));
    ram_us.push_back(time_lookup(in_ram_));
    nvme_us.push_back(time_lookup(on_nvme_));
  }
  const double r = MedianUs(rand_us), a = MedianUs(ram_us), n = MedianUs(nvme_us);
  std::printf("SECURITY_TIMING lookup_median_us random=%.1f alice_ram=%.1f alice_nvme=%.1f "
              "ratio_ram=%.3f ratio_nvme=%.3f samples=%zu\n",
              r, a, n, a / r, n / r, rand_us.size());
  EXPECT_LE(std::abs(a - r), 0.2 * r) << "LOOKUP of alice's RAM keys is distinguishable";
  EXPECT_LE(std::abs(n - r), 0.2 * r) << "LOOKUP of alice's NVMe keys is distinguishable";
}

}  // namespace
}  // namespace kvtier::security
