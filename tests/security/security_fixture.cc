// Helpers of the attack-suite fixture; see security_fixture.h.
#include "client/wire_calls.h"
#include "tests/security/security_fixture.h"

#include "tools/common/page_pattern.h"

namespace kvtier::security {

std::string TenantsJson(const std::string& alice_extra, const std::string& mallory_extra,
                        bool mallory_first) {
  auto entry = [](const char* name, const char* token, const std::string& extra) {
    return absl::StrCat(R"({"name": ")", name, R"(", "token": ")", token, "\"",
                        extra.empty() ? "" : ", ", extra, "}");
  };
  std::string alice = entry(kAlice, kAliceToken, alice_extra);
  std::string mallory = entry(kMallory, kMalloryToken, mallory_extra);
  return absl::StrCat(R"({"tenants": [{"name": "ops", "token": ")", kAdminToken,
                      R"(", "admin": true}, )", mallory_first ? mallory : alice, ", ",
                      mallory_first ? alice : mallory, "]}");
}

std::vector<std::string> PatternPages(const std::vector<PageKey>& keys, uint64_t bytes,
                                      uint8_t salt) {
  std::vector<std::string> pages;
  pages.reserve(keys.size());
  for (const PageKey& k : keys)
    pages.push_back(salt == 0 ? itest::PatternPage(k, bytes) : itest::SaltedPage(k, bytes, salt));
  return pages;
}

void SecurityTest::SetUp() {
  const itest::DaemonOptions opts = DaemonOpts();
  auto d = itest::DaemonProcess::Start(opts, ProbeTenant(), ProbeToken());
  if (!d.ok() && opts.nvme &&
      (absl::StrContains(d.status().message(), "refuses O_DIRECT") ||
       absl::StrContains(d.status().message(), "is on tmpfs")))
    GTEST_SKIP() << "no O_DIRECT under /tmp: " << d.status();
  ASSERT_TRUE(d.ok()) << d.status();
  daemon_ = *std::move(d);
}

void SecurityTest::TearDown() {
  if (daemon_ && !daemon_->Alive()) {
    std::string log = daemon_->Log();
    if (log.size() > 4000) log = "..." + log.substr(log.size() - 4000);
    ADD_FAILURE() << "kvtierd died during the attack; log tail:\n" << log;
  }
  itest::DaemonTest::TearDown();
}

std::unique_ptr<Client> SecurityTest::Alice(const Layout& layout) {
  ClientOptions o = itest::Options(daemon_->endpoint(), kAlice, kAliceToken);
  o.layout = layout;
  o.client_name = "alice";
  auto c = Client::Connect(o);
  EXPECT_TRUE(c.ok()) << "alice cannot connect: " << c.status();
  return c.ok() ? *std::move(c) : nullptr;
}

std::unique_ptr<Client> SecurityTest::Admin() {
  return Connect(kAdmin, kAdminToken, /*with_layout=*/false);
}

std::unique_ptr<WirePeer> SecurityTest::Mallory(const std::optional<Layout>& layout) {
  auto p = std::make_unique<WirePeer>(daemon_->endpoint(), kMallory, kMalloryToken);
  auto r = p->Hello(kMallory, kMalloryToken, layout, "mallory");
  EXPECT_TRUE(r.ok()) << r.status();
  if (r.ok()) {
    EXPECT_EQ(r->response.code(), wire::OK) << r->response.message();
  }
  return p;
}

void SecurityTest::PlantAlice(Client& alice, const std::vector<PageKey>& keys) {
  std::vector<std::string> pages = PatternPages(keys, alice.page_bytes());
  std::vector<absl::string_view> views(pages.begin(), pages.end());
  auto put = alice.PutInline(keys, PageKey::Zero(), views);
  ASSERT_TRUE(put.ok()) << put.status();
  ASSERT_EQ(put->stored + put->deduplicated, keys.size()) << put->not_stored_reason;
}

void SecurityTest::ExpectAliceIntact(const std::vector<PageKey>& keys, const Layout& layout) {
  ASSERT_TRUE(daemon_->Alive()) << "kvtierd died";
  auto alice = Alice(layout);
  ASSERT_TRUE(alice);
  auto look = alice->Lookup(keys);
  ASSERT_TRUE(look.ok()) << look.status();
  EXPECT_EQ(look->hits, keys.size()) << "alice lost pages";
  auto pages = alice->GetInline(keys);
  ASSERT_TRUE(pages.ok()) << pages.status();
  size_t bad = 0;
  for (size_t i = 0; i < keys.size(); ++i)
    if ((*pages)[i] != itest::PatternPage(keys[i], layout.PageBytes())) ++bad;
  EXPECT_EQ(bad, 0u) << "of alice's " << keys.size() << " pages, " << bad
                     << " are missing or not her bytes";
}

void SecurityTest::ExpectUnseenBy(WirePeer& mallory, const std::vector<PageKey>& keys) {
  auto look = mallory.Call(LookupReq(keys));
  EXPECT_WIRE_CODE(look, OK);
  EXPECT_EQ(look->response.lookup().hits(), 0u) << "mallory sees alice's pages";
  wire::Request leased = LookupReq(keys);
  leased.mutable_lookup()->set_lease_ms(30000);
  auto held = mallory.Call(leased);
  EXPECT_WIRE_CODE(held, OK);
  EXPECT_EQ(held->response.lookup().hits(), 0u) << "mallory leased alice's pages";
  EXPECT_EQ(held->response.lookup().leased(), 0u);
  auto get = mallory.Call(GetInlineReq(keys));
  EXPECT_WIRE_CODE(get, OK);
  EXPECT_EQ(get->response.get().tiers(), std::string(keys.size(), '\0'));
  EXPECT_TRUE(get->payloads.empty()) << "mallory got " << get->payloads.size() << " pages";
}

wire::StatsReply SecurityTest::AdminStats() {
  auto admin = Admin();
  if (!admin) return {};
  auto s = WireStats(*admin);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *s : wire::StatsReply();
}

void SecurityTest::FlushAll() {
  auto admin = Admin();
  ASSERT_TRUE(admin);
  auto f = admin->Flush();
  ASSERT_TRUE(f.ok()) << f.status();
}

}  // namespace kvtier::security
