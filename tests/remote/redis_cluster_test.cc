// Integration tests of RedisCluster on one real loopback cluster (started once
// for the binary): binary round trips, size-capped reads, one pipeline per
// node, ASK during a slot migration, MOVED after it, per-tenant ACL users.
#include "tiers/remote/redis_cluster.h"

#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include <random>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "tests/remote/cluster_fixture.h"
#include "tests/remote/remote_test_env.h"
#include "tiers/remote/crc16.h"

namespace kvtier::tiers::remote {
namespace {

using testing::LoopbackCluster;

class RedisClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!testing::RedisInstalled()) GTEST_SKIP() << "redis-server not installed";
    ASSERT_NE(testing::SharedCluster(), nullptr);
    auto client = RedisCluster::Create(testing::SharedCluster()->Config());
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = std::move(*client);
  }
  std::unique_ptr<RedisCluster> client_;
};

std::string RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (size_t i = 0; i < n; i += 3) s[i] = static_cast<char>(rng());  // 2/3 zero bytes
  return s;
}

TEST_F(RedisClusterTest, BinaryMiBValuesRoundTripAcrossSlots) {
  std::vector<std::string> keys, values;
  std::set<uint16_t> slots;
  for (int i = 0; i < 24; ++i) {
    keys.push_back(absl::StrCat(std::string("bin\0key", 7), i));
    keys.back().push_back('\0');  // binary keys too
    values.push_back(RandomBytes((1 << 20) + i, i));
    slots.insert(KeySlot(keys.back()));
  }
  EXPECT_GT(slots.size(), 20u);
  std::vector<KeyValue> kvs;
  for (size_t i = 0; i < keys.size(); ++i) kvs.push_back({keys[i], values[i]});
  for (const absl::Status& s : client_->MultiSet(kvs)) ASSERT_TRUE(s.ok()) << s;
  auto got = client_->MultiGet(keys);
  ASSERT_EQ(got.size(), keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_TRUE(got[i].ok()) << got[i].status();
    ASSERT_TRUE(got[i]->has_value());
    EXPECT_TRUE(**got[i] == values[i]) << "value " << i << " differs";
  }
  for (const auto& e : client_->MultiExists(keys)) EXPECT_TRUE(e.ok() && *e);
  for (const auto& d : client_->MultiDelete(keys)) EXPECT_TRUE(d.ok() && *d);
  for (const auto& d : client_->MultiDelete(keys)) EXPECT_TRUE(d.ok() && !*d);
  for (const auto& g : client_->MultiGet(keys)) EXPECT_TRUE(g.ok() && !g->has_value());
}

TEST_F(RedisClusterTest, MissingKeysAreNullopt) {
  std::vector<std::string> keys = {"never-set-1", "never-set-2", "{x}never"};
  for (const auto& g : client_->MultiGet(keys)) {
    ASSERT_TRUE(g.ok()) << g.status();
    EXPECT_FALSE(g->has_value());
  }
  for (const auto& e : client_->MultiExists(keys)) EXPECT_TRUE(e.ok() && !*e);
  EXPECT_TRUE(client_->MultiGet({}).empty());
}

// GETRANGE key 0 max: a value of max bytes whole, a longer one cut to max + 1
// bytes (never read whole), a missing key absent.
TEST_F(RedisClusterTest, GetCappedReadsAtMostMaxPlusOneByte) {
  constexpr uint64_t kMax = 1 << 20;
  const std::vector<std::string> keys = {"cap-exact", "cap-huge", "cap-missing", "cap-small"};
  const std::string exact = RandomBytes(kMax, 11);
  const std::string huge = RandomBytes(10 << 20, 12);
  for (const absl::Status& s :
       client_->MultiSet({{keys[0], exact}, {keys[1], huge}, {keys[3], "abc"}})) {
    ASSERT_TRUE(s.ok()) << s;
  }
  std::vector<std::optional<std::string>> got(keys.size());
  int calls = 0;
  client_->VisitGetCapped(keys, kMax,
                          [&](size_t i, absl::StatusOr<std::optional<absl::string_view>> v) {
                            ++calls;
                            ASSERT_TRUE(v.ok()) << v.status();
                            if (v->has_value()) got[i] = std::string(**v);
                          });
  EXPECT_EQ(calls, 4);
  ASSERT_TRUE(got[0].has_value());
  EXPECT_TRUE(*got[0] == exact) << "exact: " << got[0]->size() << " bytes";
  ASSERT_TRUE(got[1].has_value());
  EXPECT_EQ(got[1]->size(), kMax + 1);
  EXPECT_TRUE(*got[1] == huge.substr(0, kMax + 1));
  EXPECT_FALSE(got[2].has_value());
  EXPECT_EQ(got[3], "abc");
  // The plain GET still reads the whole value.
  auto whole = client_->MultiGet({keys[1]});
  ASSERT_TRUE(whole[0].ok() && whole[0]->has_value());
  EXPECT_EQ((*whole[0])->size(), huge.size());
  for (const auto& d : client_->MultiDelete(keys)) EXPECT_TRUE(d.ok());
}

// Values of a page's size are read straight off the socket (past hiredis's
// buffer), smaller ones by hiredis: one pipeline on one node (a hash tag)
// that alternates both kinds, sizes just around the switch (16 KiB) and
// missing keys between them, must come back byte for byte and in order.
TEST_F(RedisClusterTest, GetCappedMixesDirectAndBufferedRepliesInOnePipeline) {
  constexpr uint64_t kMax = 2 << 20;
  const std::vector<size_t> sizes = {1 << 20, 7,          (16 << 10) - 1, 16 << 10, 0,
                                     (16 << 10) + 1, 300, 2 << 20,        1,        (1 << 20) + 3};
  std::vector<std::string> keys, values;
  std::vector<KeyValue> kvs;
  for (int round = 0; round < 3; ++round) {
    for (size_t i = 0; i < sizes.size(); ++i) {
      keys.push_back(absl::StrCat("{mix}", round, "-", i));
      values.push_back(RandomBytes(sizes[i], 100 + round * 16 + i));
    }
  }
  for (size_t i = 0; i < keys.size(); ++i)  // views, taken once the vectors stopped growing
    if (!values[i].empty()) kvs.push_back({keys[i], values[i]});  // empty: never stored
  for (const absl::Status& s : client_->MultiSet(kvs)) ASSERT_TRUE(s.ok()) << s;
  for (int pass = 0; pass < 2; ++pass) {  // the second reuses the grown buffers
    std::vector<int> calls(keys.size(), 0);
    client_->VisitGetCapped(keys, kMax,
                            [&](size_t i, absl::StatusOr<std::optional<absl::string_view>> v) {
                              ++calls[i];
                              ASSERT_TRUE(v.ok()) << v.status();
                              if (values[i].empty()) {
                                EXPECT_FALSE(v->has_value()) << "key " << i;
                                return;
                              }
                              ASSERT_TRUE(v->has_value()) << "key " << i;
                              EXPECT_EQ((*v)->size(), values[i].size()) << "key " << i;
                              EXPECT_TRUE(**v == values[i]) << "key " << i << " differs";
                            });
    for (size_t i = 0; i < keys.size(); ++i) EXPECT_EQ(calls[i], 1) << "key " << i;
  }
  for (const auto& d : client_->MultiDelete(keys)) EXPECT_TRUE(d.ok());
}

TEST(RedisClusterConfigTest, NodeBackoffIsValidated) {
  RedisClusterConfig config;
  config.seeds = {"127.0.0.1:7000"};
  EXPECT_TRUE(config.Validate().ok());
  config.node_min_backoff = absl::ZeroDuration();
  EXPECT_EQ(config.Validate().code(), absl::StatusCode::kInvalidArgument);
  config.node_min_backoff = absl::Seconds(1);
  config.node_max_backoff = absl::Milliseconds(500);
  EXPECT_EQ(config.Validate().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(RedisClusterTest, OneRoundTripPerNodeTouched) {
  std::vector<std::string> keys;
  std::set<std::string> nodes;
  const SlotMap map = client_->slot_map();
  for (int i = 0; i < 60; ++i) {
    keys.push_back(absl::StrCat("rt-", i));
    nodes.insert(*map.MasterOf(KeySlot(keys.back())));
  }
  ASSERT_EQ(nodes.size(), 3u);
  std::vector<KeyValue> kvs;
  for (const std::string& k : keys) kvs.push_back({k, k});
  const RedisClusterStats before = client_->stats();
  for (const absl::Status& s : client_->MultiSet(kvs)) ASSERT_TRUE(s.ok()) << s;
  auto got = client_->MultiGet(keys);
  const RedisClusterStats after = client_->stats();
  EXPECT_EQ(after.pipelines - before.pipelines, 6u);  // 3 nodes x (SET batch + GET batch)
  EXPECT_EQ(after.requests - before.requests, 120u);
  EXPECT_EQ(after.moved + after.ask, before.moved + before.ask);
  for (size_t i = 0; i < keys.size(); ++i) EXPECT_EQ(**got[i], keys[i]);
}

TEST_F(RedisClusterTest, TtlExpires) {
  std::vector<KeyValue> kvs = {{"ttl-a", "1"}, {"ttl-b", "2"}};
  for (const absl::Status& s : client_->MultiSet(kvs, absl::Milliseconds(100))) ASSERT_TRUE(s.ok());
  absl::SleepFor(absl::Milliseconds(400));
  for (const auto& g : client_->MultiGet({"ttl-a", "ttl-b"}))
    EXPECT_TRUE(g.ok() && !g->has_value());
  EXPECT_EQ(client_->MultiSet(kvs, absl::Microseconds(10))[0].code(),
            absl::StatusCode::kInvalidArgument);
}

// Admin helpers for the migration test.
void ExpectOk(const std::string& node, const std::vector<std::string>& argv) {
  auto reply = testing::SharedCluster()->Admin(node, argv);
  ASSERT_TRUE(reply.ok()) << reply.status();
  ASSERT_NE((*reply)->type, REDIS_REPLY_ERROR) << node << ": " << (*reply)->str;
}

// SETSLOT NODE reaches each master on its own, and until the new owner's
// epoch has spread, a master may still answer CLUSTER SLOTS with the old
// owner (a clean local ctest run once refreshed the client's map from such
// a master): true once every master names `owner` for `slot`.
bool EveryMasterSays(const SlotMap& map, uint16_t slot, const std::string& owner) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (absl::Now() < deadline) {
    bool all = true;
    for (const MasterInfo& m : map.masters()) {
      auto reply = testing::SharedCluster()->Admin(m.endpoint, {"CLUSTER", "SLOTS"});
      if (!reply.ok() || (*reply)->type == REDIS_REPLY_ERROR) return false;
      auto seen = SlotMap::FromClusterSlots(**reply, ParseEndpoint(m.endpoint)->host);
      all = all && seen.ok() && seen->MasterOf(slot) && *seen->MasterOf(slot) == owner;
    }
    if (all) return true;
    absl::SleepFor(absl::Milliseconds(50));
  }
  return false;
}

TEST_F(RedisClusterTest, FollowsAskDuringMigrationAndMovedAfter) {
  const uint16_t slot = KeySlot("mig");
  const SlotMap map = client_->slot_map();
  const MasterInfo* src = nullptr;
  const MasterInfo* dst = nullptr;
  for (const MasterInfo& m : map.masters()) {
    (m.endpoint == *map.MasterOf(slot) ? src : dst) = &m;
  }
  ASSERT_TRUE(src && dst && !src->id.empty() && !dst->id.empty());
  std::vector<std::string> old_keys = {"{mig}a", "{mig}b", "{mig}c"};
  std::vector<std::string> old_values;
  for (const std::string& k : old_keys) old_values.push_back("old-" + k);
  std::vector<KeyValue> kvs;  // views: the strings above must outlive the call
  for (size_t i = 0; i < old_keys.size(); ++i) kvs.push_back({old_keys[i], old_values[i]});
  for (const absl::Status& s : client_->MultiSet(kvs)) ASSERT_TRUE(s.ok());

  const std::string s = absl::StrCat(slot);
  ExpectOk(dst->endpoint, {"CLUSTER", "SETSLOT", s, "IMPORTING", src->id});
  ExpectOk(src->endpoint, {"CLUSTER", "SETSLOT", s, "MIGRATING", dst->id});
  // A new key is not on the source: it answers ASK, the target takes it.
  RedisClusterStats before = client_->stats();
  ASSERT_TRUE(client_->MultiSet({{"{mig}new", "fresh"}})[0].ok());
  auto got = client_->MultiGet({"{mig}new", "{mig}a"});
  EXPECT_EQ(**got[0], "fresh");
  EXPECT_EQ(**got[1], "old-{mig}a");  // still on the source
  EXPECT_EQ(client_->stats().ask - before.ask, 2u);
  EXPECT_EQ(client_->stats().moved, before.moved);
  EXPECT_EQ(*client_->slot_map().MasterOf(slot), src->endpoint);  // ASK leaves the map alone

  // Finish the migration: move the old keys, then give the slot to dst.
  const Endpoint dst_ep = ParseEndpoint(dst->endpoint).value();
  std::vector<std::string> migrate = {"MIGRATE", dst_ep.host, absl::StrCat(dst_ep.port), "", "0",
                                      "5000",    "KEYS"};
  migrate.insert(migrate.end(), old_keys.begin(), old_keys.end());
  ExpectOk(src->endpoint, migrate);
  for (const MasterInfo& m : map.masters()) {
    ExpectOk(m.endpoint, {"CLUSTER", "SETSLOT", s, "NODE", dst->id});
  }
  ASSERT_TRUE(EveryMasterSays(map, slot, dst->endpoint)) << "the masters did not agree in 10 s";
  before = client_->stats();
  std::vector<std::string> all = old_keys;
  all.push_back("{mig}new");
  got = client_->MultiGet(all);
  for (size_t i = 0; i < all.size(); ++i) {
    ASSERT_TRUE(got[i].ok() && got[i]->has_value()) << all[i] << " " << got[i].status();
  }
  EXPECT_EQ(**got[3], "fresh");
  EXPECT_GE(client_->stats().moved - before.moved, 1u);
  EXPECT_GE(client_->stats().refreshes - before.refreshes, 1u);
  EXPECT_EQ(*client_->slot_map().MasterOf(slot), dst->endpoint);
  before = client_->stats();
  got = client_->MultiGet(all);  // the map is right now: no redirect
  EXPECT_EQ(client_->stats().moved, before.moved);
  EXPECT_EQ(client_->stats().pipelines - before.pipelines, 1u);
}

TEST_F(RedisClusterTest, AclUserPerTenant) {
  ASSERT_TRUE(testing::SharedCluster()
                  ->OnAllNodes({"ACL", "SETUSER", "tenant1", "on", ">s3cret", "~t1:*", "+@all",
                                "-@dangerous", "+cluster|slots", "+asking"})
                  .ok());
  RedisClusterConfig config = testing::SharedCluster()->Config();
  config.user = "tenant1";
  config.password = "wrong";
  auto denied = RedisCluster::Create(config);
  EXPECT_EQ(denied.status().code(), absl::StatusCode::kPermissionDenied) << denied.status();
  config.password = "s3cret";
  auto tenant = RedisCluster::Create(config);
  ASSERT_TRUE(tenant.ok()) << tenant.status();
  EXPECT_TRUE((*tenant)->MultiSet({{"t1:a", "x"}})[0].ok());
  auto got = (*tenant)->MultiGet({"t1:a", "t2:a"});
  EXPECT_EQ(**got[0], "x");
  EXPECT_EQ(got[1].status().code(), absl::StatusCode::kPermissionDenied) << got[1].status();
}

}  // namespace
}  // namespace kvtier::tiers::remote
