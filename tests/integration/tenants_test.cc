// Namespaces against a real kvtierd with a tenants file: isolation of keys,
// STATS visibility and per-namespace quotas.
#include <gtest/gtest.h>

#include "client/wire_calls.h"
#include "kvtier/shm_buffer.h"
#include "tests/integration/daemon_fixture.h"
#include "tools/common/page_pattern.h"

namespace kvtier::itest {
namespace {

constexpr uint64_t kPage = kSmallPageBytes;

constexpr char kTenants[] = R"({"tenants": [
  {"name": "alice", "token": "alice-secret-1", "admin": false},
  {"name": "bob",   "token": "bob-secret-22",  "admin": false, "quota": {"host": "1MiB"}},
  {"name": "ops",   "token": "ops-secret-333", "admin": true}
]})";

class TenantsTest : public DaemonTest {
 protected:
  DaemonOptions DaemonOpts() const override { return {.tenants_json = kTenants}; }
  std::string ProbeTenant() const override { return "ops"; }
  std::string ProbeToken() const override { return "ops-secret-333"; }

  std::unique_ptr<Client> Alice() { return Connect("alice", "alice-secret-1"); }
  std::unique_ptr<Client> Bob() { return Connect("bob", "bob-secret-22"); }
  std::unique_ptr<Client> Ops() { return Connect("ops", "ops-secret-333"); }

  static absl::StatusOr<PutResult> Put(Client& c, absl::Span<const PageKey> keys, uint8_t salt) {
    std::vector<std::string> pages;
    for (const PageKey& k : keys) pages.push_back(SaltedPage(k, kPage, salt));
    std::vector<absl::string_view> views(pages.begin(), pages.end());
    return c.PutInline(keys, PageKey::Zero(), views);
  }
  static void ExpectPages(Client& c, absl::Span<const PageKey> keys, uint8_t salt) {
    auto pages = c.GetInline(keys);
    ASSERT_TRUE(pages.ok()) << pages.status();
    for (size_t i = 0; i < keys.size(); ++i)
      EXPECT_EQ((*pages)[i], SaltedPage(keys[i], kPage, salt)) << "page " << i;
  }
};

TEST_F(TenantsTest, NamespaceComesFromTheToken) {
  auto a = Alice();
  ASSERT_TRUE(a);
  EXPECT_EQ(a->namespace_name(), "alice");
  auto bad = Client::Connect(Options(daemon_->endpoint(), "alice", "bob-secret-22"));
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(absl::IsUnauthenticated(bad.status())) << bad.status();
  auto unknown = Client::Connect(Options(daemon_->endpoint(), "mallory", "whatever-123"));
  ASSERT_FALSE(unknown.ok());
  EXPECT_TRUE(absl::IsUnauthenticated(unknown.status())) << unknown.status();
  // The built-in default tenant does not exist once a tenants file is given.
  auto dflt = Client::Connect(Options(daemon_->endpoint(), "default", ""));
  EXPECT_FALSE(dflt.ok());
}

TEST_F(TenantsTest, TenantsCannotSeeEachOthersPages) {
  auto a = Alice();
  auto b = Bob();
  ASSERT_TRUE(a && b);
  auto keys = MakeChain(SmallLayout(), 42, 4);  // identical keys for both
  auto pa = Put(*a, keys, 0x11);
  ASSERT_TRUE(pa.ok()) << pa.status();
  EXPECT_EQ(pa->stored, 4u);

  auto look = b->Lookup(keys);
  ASSERT_TRUE(look.ok()) << look.status();
  EXPECT_EQ(look->hits, 0u) << "bob can probe alice's keys";
  auto got = b->GetInline(keys);
  ASSERT_TRUE(got.ok()) << got.status();
  for (const auto& p : *got) EXPECT_TRUE(p.empty()) << "bob can read alice's page";
  auto del = b->Delete(keys);
  ASSERT_TRUE(del.ok());
  EXPECT_EQ(*del, 0u) << "bob can delete alice's pages";

  // Bob's PUT of the same keys stores his own copy: no cross-namespace dedup.
  auto pb = Put(*b, keys, 0x22);
  ASSERT_TRUE(pb.ok()) << pb.status();
  EXPECT_EQ(pb->stored, 4u);
  EXPECT_EQ(pb->deduplicated, 0u);
  ExpectPages(*a, keys, 0x11);
  ExpectPages(*b, keys, 0x22);
  // Deleting his copy leaves hers.
  auto del2 = b->Delete(keys);
  ASSERT_TRUE(del2.ok());
  EXPECT_EQ(*del2, 4u);
  ExpectPages(*a, keys, 0x11);
}

TEST_F(TenantsTest, NonAdminStatsShowOnlyItsOwnNamespace) {
  auto a = Alice();
  auto b = Bob();
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(Put(*a, MakeChain(SmallLayout(), 1, 3), 1).ok());
  ASSERT_TRUE(Put(*b, MakeChain(SmallLayout(), 2, 2), 2).ok());
  auto sa = WireStats(*a);
  ASSERT_TRUE(sa.ok()) << sa.status();
  ASSERT_EQ(sa->namespaces_size(), 1);
  EXPECT_EQ(sa->namespaces(0).name(), "alice");
  EXPECT_EQ(sa->namespaces(0).pages(), 3u);
  // Tier-wide figures would reveal other tenants' activity.
  for (const auto& t : sa->tiers()) {
    EXPECT_EQ(t.pages(), 0u);
    EXPECT_EQ(t.used_bytes(), 0u);
  }
  EXPECT_EQ(sa->daemon().sessions(), 0u);

  auto so = WireStats(*Ops());
  ASSERT_TRUE(so.ok()) << so.status();
  EXPECT_EQ(so->namespaces_size(), 3);
  ASSERT_GE(so->tiers_size(), 1);
  EXPECT_EQ(so->tiers(0).pages(), 5u);
}

TEST_F(TenantsTest, QuotaBoundsANamespaceAndSparesOthers) {
  auto a = Alice();
  auto b = Bob();
  ASSERT_TRUE(a && b);
  auto alice_keys = MakeChain(SmallLayout(), 500, 8);
  ASSERT_TRUE(Put(*a, alice_keys, 0x33).ok());
  // Bob's quota is 1 MiB = 16 pages; he writes 40.
  std::vector<std::vector<PageKey>> chains;
  for (int ch = 0; ch < 10; ++ch) {
    chains.push_back(MakeChain(SmallLayout(), 600 + ch, 4));
    auto put = Put(*b, chains.back(), 0x44);
    ASSERT_TRUE(put.ok()) << "chain " << ch << ": " << put.status();
    EXPECT_EQ(put->stored, 4u) << "chain " << ch;
  }
  auto sb = WireStats(*b);
  ASSERT_TRUE(sb.ok());
  ASSERT_EQ(sb->namespaces_size(), 1);
  const auto& ns = sb->namespaces(0);
  EXPECT_LE(ns.bytes(), 1u << 20);
  EXPECT_LE(ns.pages(), 16u);
  EXPECT_GT(ns.quota_evictions(), 0u);
  ASSERT_EQ(ns.tier_quota_bytes().count("host"), 1u);
  EXPECT_EQ(ns.tier_quota_bytes().at("host"), 1u << 20);
  auto newest = b->Lookup(chains.back());
  ASSERT_TRUE(newest.ok());
  EXPECT_EQ(newest->hits, 4u);
  ExpectPages(*b, chains.back(), 0x44);
  auto oldest = b->Lookup(chains.front());
  ASSERT_TRUE(oldest.ok());
  EXPECT_EQ(oldest->hits, 0u);
  // Alice (no quota) lost nothing to Bob's pressure.
  ExpectPages(*a, alice_keys, 0x33);
}

// REGISTER_BUFFER maps shm objects by name, and client buffer names are
// predictable, so bob could name alice's KV arena. An object registered by
// one namespace is refused to every other while her registration lives.
// (Full proof of ownership needs peer credentials or fd passing; see
// docs/OPERATIONS.md, "Isolation".)
TEST_F(TenantsTest, AnotherTenantsShmBufferIsRefused) {
  auto a = Alice();
  auto b = Bob();
  ASSERT_TRUE(a && b);
  auto buf = ShmBuffer::Create(4 * kPage);
  ASSERT_TRUE(buf.ok());
  ASSERT_TRUE(a->RegisterBuffer((*buf)->name(), (*buf)->size()).ok());
  auto stolen = b->RegisterBuffer((*buf)->name(), (*buf)->size());
  EXPECT_FALSE(stolen.ok()) << "bob mapped alice's buffer " << (*buf)->name();
  if (!stolen.ok()) {
    EXPECT_TRUE(absl::IsPermissionDenied(stolen.status())) << stolen.status();
  }
}

}  // namespace
}  // namespace kvtier::itest
