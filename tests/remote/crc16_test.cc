// Unit tests of the key -> slot mapping against the Redis Cluster spec's own
// examples, and of the configuration checks.
#include "tiers/remote/crc16.h"

#include <gtest/gtest.h>

#include <string>

#include "tiers/remote/redis_cluster.h"

namespace kvtier::tiers::remote {
namespace {

TEST(Crc16Test, SpecCheckValue) {
  EXPECT_EQ(Crc16("123456789"), 0x31C3);
  EXPECT_EQ(Crc16(""), 0);
}

TEST(KeySlotTest, KnownSlots) {
  // Values redis-cli CLUSTER KEYSLOT gives.
  EXPECT_EQ(KeySlot("foo"), 12182);
  EXPECT_EQ(KeySlot("bar"), 5061);
  EXPECT_EQ(KeySlot("123456789"), 0x31C3 & 16383);
}

TEST(KeySlotTest, HashTagsAsInTheSpec) {
  EXPECT_EQ(KeySlot("{user1000}.following"), KeySlot("{user1000}.followers"));
  EXPECT_EQ(KeySlot("{user1000}.following"), KeySlot("user1000"));
  EXPECT_EQ(HashTag("foo{}{bar}"), "foo{}{bar}");  // empty first tag: whole key
  EXPECT_EQ(HashTag("foo{{bar}}zap"), "{bar");
  EXPECT_EQ(HashTag("foo{bar}{zap}"), "bar");
  EXPECT_EQ(KeySlot("foo{bar}{zap}"), KeySlot("bar"));
  EXPECT_EQ(KeySlot("foo{{bar}}zap"), KeySlot("{bar"));
  EXPECT_EQ(HashTag("no}tag{here"), "no}tag{here");
  EXPECT_EQ(HashTag("open{only"), "open{only");
}

TEST(KeySlotTest, BinaryKeysStayInRange) {
  std::string key(16, '\0');
  for (int i = 0; i < 1000; ++i) {
    key[i % 16] = static_cast<char>(i * 37);
    EXPECT_LT(KeySlot(key), kNumSlots);
  }
}

TEST(RedisClusterConfigTest, Validate) {
  RedisClusterConfig config;
  EXPECT_EQ(config.Validate().code(), absl::StatusCode::kInvalidArgument);  // no seed
  config.seeds = {"127.0.0.1:7000", "[::1]:7001", "redis-a.example:6379"};
  EXPECT_TRUE(config.Validate().ok());
  for (const char* bad : {"127.0.0.1", ":7000", "host:0", "host:65536", "host:x"}) {
    RedisClusterConfig c = config;
    c.seeds = {bad};
    EXPECT_EQ(c.Validate().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  RedisClusterConfig c = config;
  c.command_timeout = absl::ZeroDuration();
  EXPECT_FALSE(c.Validate().ok());
  c = config;
  c.user = "tenant";  // a user without a password
  EXPECT_FALSE(c.Validate().ok());
  c = config;
  c.max_redirects = -1;
  EXPECT_FALSE(c.Validate().ok());
}

TEST(RedisClusterTest, CreateWithNoLiveSeedIsUnavailableQuickly) {
  RedisClusterConfig config;
  config.seeds = {"127.0.0.1:1", "127.0.0.1:2"};  // nothing listens there
  const absl::Time start = absl::Now();
  auto cluster = RedisCluster::Create(config);
  EXPECT_EQ(cluster.status().code(), absl::StatusCode::kUnavailable) << cluster.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
}

}  // namespace
}  // namespace kvtier::tiers::remote
