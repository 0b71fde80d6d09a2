// Per-tenant Redis ACL users in the shared cache (RedisSharedCacheConfig::
// ns_credentials): a namespace with its own user reads and writes its
// records on its own connections; the cluster itself refuses that user
// another tenant's records (AclKeyPattern is exact); a namespace whose user
// is refused misses, and the other namespaces' publishes go on.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "tests/remote/cluster_fixture.h"
#include "tests/remote/remote_test_env.h"
#include "tests/shared_cache/shared_cache_util.h"
#include "tiers/shared_cache/record_key.h"

namespace kvtier::tiers::shared_cache {
namespace {

using remote::testing::SharedCluster;

constexpr uint64_t kPage = 64 << 10;

PageKey Key(uint64_t i) { return remote::testing::TestKey(i, 0xac); }

class SharedCacheAclTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!remote::testing::RedisInstalled()) GTEST_SKIP() << "redis-server not installed";
    ASSERT_NE(SharedCluster(), nullptr);
    const std::string tag = std::to_string(getpid());
    alice_ = "alice-" + tag;
    alice_sub_ = alice_ + ":sub";  // a name the loose pattern "alice:*" would cover
    for (const std::string& ns : {alice_, alice_sub_}) {
      ASSERT_TRUE(SharedCluster()
                      ->OnAllNodes({"ACL", "SETUSER", "u-" + ns, "on", ">pw-" + ns,
                                    "~" + AclKeyPattern(ns), "+get", "+getrange", "+set",
                                    "+exists", "+unlink", "+asking", "+cluster|slots", "+ping"})
                      .ok());
    }
  }
  RedisSharedCacheConfig Config(const std::string& alice_password) const {
    RedisSharedCacheConfig c;
    c.ns_credentials[alice_] = RedisCredentials{"u-" + alice_, alice_password};
    c.ns_credentials[alice_sub_] = RedisCredentials{"u-" + alice_sub_, "pw-" + alice_sub_};
    return c;
  }
  std::unique_ptr<SharedCache> Cache(const std::string& alice_password) const {
    return MakeCache(SharedCluster()->Config(),
                     {{alice_, "ta"}, {alice_sub_, "ts"}, {"plain-" + alice_, "tp"}}, kSecretA,
                     Config(alice_password));
  }
  std::string alice_, alice_sub_;
};

TEST_F(SharedCacheAclTest, TenantUserPublishesFindsAndFetchesItsOwnPages) {
  auto cache = Cache("pw-" + alice_);
  std::vector<uint8_t> page(kPage, 0x3c);
  ASSERT_TRUE(cache->Publish(alice_, Key(1), PageKey::Zero(), page.data(), kPage));
  cache->Drain();
  EXPECT_EQ(ContainsNow(*cache, alice_, {Key(1)}), std::vector<bool>{true});
  std::vector<FetchedPage> got = FetchNow(*cache, alice_, {Key(1)}, kPage);
  ASSERT_TRUE(got[0].status.ok()) << got[0].status;
  EXPECT_EQ(std::memcmp(got[0].bytes.get(), page.data(), kPage), 0);
  EXPECT_EQ(cache->counters().io_errors, 0u);
}

TEST_F(SharedCacheAclTest, TheClusterRefusesATenantUserAnotherTenantsRecords) {
  // alice's record, written by alice's user.
  remote::RedisClusterConfig as_alice = SharedCluster()->Config();
  as_alice.user = "u-" + alice_;
  as_alice.password = "pw-" + alice_;
  auto alice = remote::RedisCluster::Create(as_alice);
  ASSERT_TRUE(alice.ok()) << alice.status();
  const std::string record = RecordKey(alice_, Key(2));
  ASSERT_TRUE((*alice)->MultiSet({remote::KeyValue{record, "v"}})[0].ok());
  // alice:sub's user may not read it, nor write into alice's names, even
  // though "alice:sub" starts with "alice".
  remote::RedisClusterConfig as_sub = SharedCluster()->Config();
  as_sub.user = "u-" + alice_sub_;
  as_sub.password = "pw-" + alice_sub_;
  auto sub = remote::RedisCluster::Create(as_sub);
  ASSERT_TRUE(sub.ok()) << sub.status();
  auto read = (*sub)->MultiGet({record});
  EXPECT_EQ(read[0].status().code(), absl::StatusCode::kPermissionDenied) << read[0].status();
  auto write = (*sub)->MultiSet({remote::KeyValue{record, "forged"}});
  EXPECT_EQ(write[0].code(), absl::StatusCode::kPermissionDenied) << write[0];
  auto cross = (*alice)->MultiExists({RecordKey(alice_sub_, Key(2))});
  EXPECT_EQ(cross[0].status().code(), absl::StatusCode::kPermissionDenied) << cross[0].status();
}

TEST_F(SharedCacheAclTest, ARefusedTenantUserMissesAndOtherNamespacesGoOn) {
  auto cache = Cache("wrong");
  std::vector<uint8_t> page(kPage, 0x11);
  // Interleaved, so the publisher's batches hold both links' jobs.
  for (int i = 0; i < 8; ++i) {
    cache->Publish(alice_, Key(10 + i), PageKey::Zero(), page.data(), kPage);
    ASSERT_TRUE(cache->Publish("plain-" + alice_, Key(10 + i), PageKey::Zero(), page.data(), kPage));
  }
  cache->Drain();
  std::vector<PageKey> keys;
  for (int i = 0; i < 8; ++i) keys.push_back(Key(10 + i));
  for (bool present : ContainsNow(*cache, alice_, keys)) EXPECT_FALSE(present);
  for (bool present : ContainsNow(*cache, "plain-" + alice_, keys)) EXPECT_TRUE(present);
  std::vector<FetchedPage> got = FetchNow(*cache, "plain-" + alice_, {Key(10)}, kPage);
  ASSERT_TRUE(got[0].status.ok()) << got[0].status;
  EXPECT_EQ(std::memcmp(got[0].bytes.get(), page.data(), kPage), 0);
  EXPECT_EQ(cache->counters().published, 8u);  // plain's only
}

}  // namespace
}  // namespace kvtier::tiers::shared_cache
