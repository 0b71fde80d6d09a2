// Per-tenant Redis ACL users in the remote tier (RemoteTierConfig::
// ns_credentials): a namespace with its own user reads and writes its
// records on its own connections; the cluster itself refuses that user
// another tenant's records (AclKeyPattern is exact); a namespace whose
// user is refused misses, and the others go on.
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "tests/remote/cluster_fixture.h"
#include "tests/remote/remote_test_env.h"
#include "tiers/remote/remote_record.h"
#include "tiers/remote/remote_tier.h"
#include "tiers/shared_tier.h"

namespace kvtier::tiers::remote {
namespace {

constexpr uint64_t kPage = 64 << 10;

PageKey Key(uint64_t i) { return testing::TestKey(i, 0xac); }

class RemoteAclTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!testing::RedisInstalled()) GTEST_SKIP() << "redis-server not installed";
    ASSERT_NE(testing::SharedCluster(), nullptr);
    const std::string tag = std::to_string(getpid());
    alice_ = "alice-" + tag;
    alice_sub_ = alice_ + ":sub";  // a name the loose pattern "alice:*" would cover
    for (const std::string& ns : {alice_, alice_sub_}) {
      ASSERT_TRUE(testing::SharedCluster()
                      ->OnAllNodes({"ACL", "SETUSER", "u-" + ns, "on", ">pw-" + ns,
                                    "~" + AclKeyPattern(ns), "+get", "+set", "+exists",
                                    "+unlink", "+asking", "+cluster|slots", "+ping"})
                      .ok());
    }
  }
  RemoteTierConfig Config() const {
    RemoteTierConfig c;
    c.cluster = testing::SharedCluster()->Config();
    c.capacity_bytes = 64 * kPage;
    c.ns_credentials[alice_] = RemoteCredentials{"u-" + alice_, "pw-" + alice_};
    c.ns_credentials[alice_sub_] = RemoteCredentials{"u-" + alice_sub_, "pw-" + alice_sub_};
    return c;
  }
  std::string alice_, alice_sub_;
};

TEST_F(RemoteAclTest, TenantUserStoresReadsAndAdoptsItsOwnPages) {
  auto tier = CreateRemoteTier(Config());
  ASSERT_TRUE(tier.ok()) << tier.status();
  std::vector<uint8_t> page(kPage, 0x3c);
  auto slot = (*tier)->Allocate(kPage);
  ASSERT_TRUE(slot.ok());
  ASSERT_TRUE((*tier)->Write(*slot, 0, page.data(), kPage).ok());
  std::vector<bool> written;
  ASSERT_TRUE((*tier)->PersistBatch({*slot}, {PageMeta{.ns_name = alice_, .key = Key(1)}}, &written)
                  .ok());
  EXPECT_EQ(written, std::vector<bool>{true});
  std::vector<uint8_t> got(kPage);
  ASSERT_TRUE((*tier)->Read(*slot, 0, got.data(), kPage).ok());
  EXPECT_EQ(got, page);
  auto* shared = dynamic_cast<SharedTier*>(tier->get());
  ASSERT_NE(shared, nullptr);
  auto found = shared->AdoptShared(alice_, {Key(1)}, kPage);
  ASSERT_TRUE(found[0].has_value());
  (*tier)->Free(*found[0]);
  EXPECT_EQ((*tier)->counters().down, 0u);
}

TEST_F(RemoteAclTest, TheClusterRefusesATenantUserAnotherTenantsRecords) {
  // alice's record, written by alice's user.
  RedisClusterConfig as_alice = testing::SharedCluster()->Config();
  as_alice.user = "u-" + alice_;
  as_alice.password = "pw-" + alice_;
  auto alice = RedisCluster::Create(as_alice);
  ASSERT_TRUE(alice.ok()) << alice.status();
  const std::string record = RecordKey(alice_, Key(2));
  ASSERT_TRUE((*alice)->MultiSet({KeyValue{record, "v"}})[0].ok());
  // alice:sub's user may not read it, nor write into alice's names, even
  // though "alice:sub" starts with "alice".
  RedisClusterConfig as_sub = testing::SharedCluster()->Config();
  as_sub.user = "u-" + alice_sub_;
  as_sub.password = "pw-" + alice_sub_;
  auto sub = RedisCluster::Create(as_sub);
  ASSERT_TRUE(sub.ok()) << sub.status();
  auto read = (*sub)->MultiGet({record});
  EXPECT_EQ(read[0].status().code(), absl::StatusCode::kPermissionDenied) << read[0].status();
  auto write = (*sub)->MultiSet({KeyValue{record, "forged"}});
  EXPECT_EQ(write[0].code(), absl::StatusCode::kPermissionDenied) << write[0];
  // And alice's user may not reach alice:sub's records.
  auto cross = (*alice)->MultiExists({RecordKey(alice_sub_, Key(2))});
  EXPECT_EQ(cross[0].status().code(), absl::StatusCode::kPermissionDenied) << cross[0].status();
}

TEST_F(RemoteAclTest, ARefusedTenantUserMissesAndOtherNamespacesGoOn) {
  RemoteTierConfig c = Config();
  c.ns_credentials[alice_].password = "wrong";
  auto tier = CreateRemoteTier(c);
  ASSERT_TRUE(tier.ok()) << tier.status();
  std::vector<uint8_t> page(kPage, 0x11);
  std::vector<Slot> slots;
  for (int i = 0; i < 2; ++i) {
    auto slot = (*tier)->Allocate(kPage);
    ASSERT_TRUE(slot.ok());
    ASSERT_TRUE((*tier)->Write(*slot, 0, page.data(), kPage).ok());
    slots.push_back(*slot);
  }
  std::vector<bool> written;
  (void)(*tier)->PersistBatch(slots,
                              {PageMeta{.ns_name = alice_, .key = Key(3)},
                               PageMeta{.ns_name = "plain-" + alice_, .key = Key(3)}},
                              &written);
  EXPECT_EQ(written, (std::vector<bool>{false, true}));
  auto* shared = dynamic_cast<SharedTier*>(tier->get());
  EXPECT_FALSE(shared->AdoptShared(alice_, {Key(3)}, kPage)[0].has_value());
  auto other = shared->AdoptShared("plain-" + alice_, {Key(3)}, kPage);
  ASSERT_TRUE(other[0].has_value());
  std::vector<uint8_t> got(kPage);
  EXPECT_TRUE((*tier)->Read(*other[0], 0, got.data(), kPage).ok());
  EXPECT_EQ(got, page);
  EXPECT_EQ((*tier)->counters().down, 0u);  // the default link is up
  EXPECT_GE((*tier)->counters().down_events, 1u);
}

}  // namespace
}  // namespace kvtier::tiers::remote
