// Fixture of the attack suite (tests/security/): one real kvtierd per test
// with three tenants — the admin `ops`, the victim `alice` and the attacker
// `mallory` — plus helpers to plant alice's pages and check afterwards that
// they are intact and were never seen. Attackers speak the wire (WirePeer);
// the victim and the admin use the client library.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "kvtier.pb.h"
#include "kvtier/client.h"
#include "tests/integration/daemon_fixture.h"
#include "tests/security/victim_probe.h"
#include "tests/security/wire_peer.h"

namespace kvtier::security {

inline constexpr char kAdmin[] = "ops";
inline constexpr char kAdminToken[] = "ops-secret-0001";
inline constexpr char kAlice[] = "alice";
inline constexpr char kAliceToken[] = "alice-secret-01";
inline constexpr char kMallory[] = "mallory";
inline constexpr char kMalloryToken[] = "mallory-secret-1";

// `alice_extra`/`mallory_extra`: more JSON members of those tenants, e.g.
// R"("quota": {"host": "2MiB"})". `first`: which of alice/mallory is listed
// first (the order must not matter across restarts).
std::string TenantsJson(const std::string& alice_extra = "", const std::string& mallory_extra = "",
                        bool mallory_first = false);

inline constexpr uint64_t kPage = itest::kSmallPageBytes;  // 64 KiB pages

#define EXPECT_WIRE_CODE(reply, code_)                                                 \
  do {                                                                                 \
    auto&& r_ = (reply);                                                               \
    ASSERT_TRUE(r_.ok()) << r_.status();                                               \
    EXPECT_EQ(r_->response.code(), wire::code_)                                        \
        << wire::Code_Name(r_->response.code()) << ": " << r_->response.message();    \
  } while (0)

class SecurityTest : public itest::DaemonTest {
 protected:
  // Subclasses add flags (later ones win over the harness defaults).
  virtual std::vector<std::string> Flags() const { return {}; }
  virtual bool Nvme() const { return false; }
  virtual std::string Tenants() const { return TenantsJson(); }

  itest::DaemonOptions DaemonOpts() const override {
    itest::DaemonOptions o;
    o.tenants_json = Tenants();
    o.flags = Flags();
    o.nvme = Nvme();
    return o;
  }
  std::string ProbeTenant() const override { return kAdmin; }
  std::string ProbeToken() const override { return kAdminToken; }
  // Skips only where the file system really refuses O_DIRECT (the harness's
  // own check would also skip a daemon that crashed with an NVMe tier).
  // Subclasses return early from their SetUp when IsSkipped().
  void SetUp() override;
  void TearDown() override;

  std::unique_ptr<Client> Alice(const Layout& layout = itest::SmallLayout());
  std::unique_ptr<Client> Admin();
  // A raw peer with a mallory session (the small layout unless told).
  std::unique_ptr<WirePeer> Mallory(const std::optional<Layout>& layout = itest::SmallLayout());

  // Stores `keys` (one chain) for alice, pattern bytes; all must be stored.
  void PlantAlice(Client& alice, const std::vector<PageKey>& keys);
  // Every key is a leading LOOKUP hit for alice and GETs back byte-exact.
  void ExpectAliceIntact(const std::vector<PageKey>& keys, const Layout& layout = itest::SmallLayout());
  // Mallory's view of `keys`: no LOOKUP hit, every GET a miss.
  void ExpectUnseenBy(WirePeer& mallory, const std::vector<PageKey>& keys);
  wire::StatsReply AdminStats();
  uint32_t DaemonSessions() { return AdminStats().daemon().sessions(); }
  // Admin FLUSH: every RAM page to NVMe.
  void FlushAll();
};

// A SecurityTest with some of alice's pages planted before the attack and
// checked intact after it (while the daemon lives). `kSeed` picks the keys.
template <uint64_t kSeed>
class WithAlicePages : public SecurityTest {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(SecurityTest::SetUp());
    if (IsSkipped()) return;
    keys_ = itest::MakeChain(itest::SmallLayout(), kSeed, 4);
    auto alice = Alice();
    ASSERT_TRUE(alice);
    ASSERT_NO_FATAL_FAILURE(PlantAlice(*alice, keys_));
  }
  void TearDown() override {
    if (daemon_ && daemon_->Alive() && !IsSkipped()) ExpectAliceIntact(keys_);
    SecurityTest::TearDown();
  }
  std::vector<PageKey> keys_;
};

// Page bytes for an inline PUT from the wire: pattern bytes, or salted ones.
std::vector<std::string> PatternPages(const std::vector<PageKey>& keys, uint64_t bytes,
                                      uint8_t salt = 0);

}  // namespace kvtier::security
