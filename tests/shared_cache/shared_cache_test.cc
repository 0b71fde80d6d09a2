// The shared cache (tiers/shared_cache/redis_shared_cache.h) on a real
// loopback Redis Cluster: what one daemon publishes another finds, fetches
// and forgets; and every record a tenant's key did not seal — forged with
// valid framing, oversized, of a same-named tenant with another secret — is
// a miss and a counter, never bytes.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <future>
#include <string>
#include <vector>

#include "tests/remote/cluster_fixture.h"
#include "tests/remote/remote_test_env.h"
#include "tests/shared_cache/shared_cache_util.h"
#include "tiers/shared_cache/record_key.h"
#include "tiers/shared_cache/sealed_record.h"

namespace kvtier::tiers::shared_cache {
namespace {

using remote::testing::SharedCluster;

constexpr uint64_t kPage = 64 << 10;

PageKey Key(uint64_t i) { return remote::testing::TestKey(i, 0x5c); }

uint64_t RssAnonBytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("RssAnon:", 0) == 0) return std::stoull(line.substr(8)) * 1024;
  return 0;
}

class SharedCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!remote::testing::RedisInstalled()) GTEST_SKIP() << "redis-server not installed";
    ASSERT_NE(SharedCluster(), nullptr);
    ns_ = "t-" + std::to_string(getpid());
    cache_ = MakeCache(SharedCluster()->Config(), {{ns_, "token-a"}}, kSecretA);
  }
  std::vector<uint8_t> Page(uint8_t fill) const { return std::vector<uint8_t>(kPage, fill); }

  std::string ns_;
  std::unique_ptr<SharedCache> cache_;
};

TEST_F(SharedCacheTest, PublishedPagesAreFoundFetchedAndForgotten) {
  auto other = MakeCache(SharedCluster()->Config(), {{ns_, "token-a"}}, kSecretA);  // another daemon
  std::vector<uint8_t> p1 = Page(0x11), p2 = Page(0x22);
  ASSERT_TRUE(cache_->Publish(ns_, Key(1), PageKey::Zero(), p1.data(), kPage));
  ASSERT_TRUE(cache_->Publish(ns_, Key(2), Key(1), p2.data(), kPage));
  cache_->Drain();
  EXPECT_EQ(ContainsNow(*other, ns_, {Key(1), Key(2), Key(3)}), (std::vector<bool>{true, true, false}));
  std::vector<FetchedPage> got = FetchNow(*other, ns_, {Key(1), Key(2), Key(3)}, kPage);
  ASSERT_TRUE(got[0].status.ok()) << got[0].status;
  ASSERT_TRUE(got[1].status.ok()) << got[1].status;
  EXPECT_EQ(std::memcmp(got[0].bytes.get(), p1.data(), kPage), 0);
  EXPECT_EQ(std::memcmp(got[1].bytes.get(), p2.data(), kPage), 0);
  EXPECT_EQ(got[1].parent, Key(1));  // authenticated with the record
  EXPECT_TRUE(absl::IsNotFound(got[2].status)) << got[2].status;
  // Forgotten cluster-wide: no daemon finds it afterwards.
  auto [st, forgotten] = ForgetNow(*other, ns_, {Key(1), Key(2)});
  EXPECT_TRUE(st.ok()) << st;
  EXPECT_EQ(forgotten, 2u);
  EXPECT_EQ(ContainsNow(*cache_, ns_, {Key(1), Key(2)}), (std::vector<bool>{false, false}));
  EXPECT_TRUE(absl::IsNotFound(FetchNow(*cache_, ns_, {Key(1)}, kPage)[0].status));
  EXPECT_EQ(other->counters().fetch_hits, 2u);
}

TEST_F(SharedCacheTest, AForgetWaitsForPublishesQueuedBeforeIt) {
  std::vector<uint8_t> p = Page(0x33);
  for (int i = 0; i < 32; ++i) ASSERT_TRUE(cache_->Publish(ns_, Key(100 + i), PageKey::Zero(), p.data(), kPage));
  std::vector<PageKey> keys;
  for (int i = 0; i < 32; ++i) keys.push_back(Key(100 + i));
  // No Drain: the DELETE comes while the publishes may still be queued.
  auto [st, forgotten] = ForgetNow(*cache_, ns_, keys);
  EXPECT_TRUE(st.ok()) << st;
  cache_->Drain();
  for (bool present : ContainsNow(*cache_, ns_, keys)) EXPECT_FALSE(present);
}

TEST_F(SharedCacheTest, AForgedRecordWithValidFramingIsAMissAndCounted) {
  // Whoever can write to the cluster (no tenant key) builds a record with
  // the right magic, version, sizes and a key id copied from a real one.
  std::vector<uint8_t> p = Page(0x44);
  ASSERT_TRUE(cache_->Publish(ns_, Key(5), PageKey::Zero(), p.data(), kPage));
  cache_->Drain();
  auto raw = remote::RedisCluster::Create(SharedCluster()->Config());
  ASSERT_TRUE(raw.ok());
  auto real = (*raw)->MultiGet({RecordKey(ns_, Key(5))});
  ASSERT_TRUE(real[0].ok() && real[0]->has_value());
  std::string forged = **real[0];
  std::memset(forged.data() + kSealHeaderBytes, 0x66, kPage);  // attacker bytes
  ASSERT_TRUE((*raw)->MultiSet({remote::KeyValue{RecordKey(ns_, Key(5)), forged}})[0].ok());
  std::vector<FetchedPage> got = FetchNow(*cache_, ns_, {Key(5)}, kPage);
  EXPECT_TRUE(absl::IsDataLoss(got[0].status)) << got[0].status;
  EXPECT_EQ(got[0].bytes, nullptr);
  EXPECT_EQ(cache_->counters().rejected, 1u);
}

TEST_F(SharedCacheTest, ARecordOfAnotherTenantsKeyOrSecretIsAMiss) {
  std::vector<uint8_t> p = Page(0x55);
  // A same-named tenant elsewhere with another token, and one with another
  // fleet secret: each publishes under the very same Redis key.
  auto other_token = MakeCache(SharedCluster()->Config(), {{ns_, "token-b"}}, kSecretA);
  auto other_secret = MakeCache(SharedCluster()->Config(), {{ns_, "token-a"}}, kSecretB);
  ASSERT_TRUE(other_token->Publish(ns_, Key(6), PageKey::Zero(), p.data(), kPage));
  ASSERT_TRUE(other_secret->Publish(ns_, Key(7), PageKey::Zero(), p.data(), kPage));
  other_token->Drain();
  other_secret->Drain();
  std::vector<FetchedPage> got = FetchNow(*cache_, ns_, {Key(6), Key(7)}, kPage);
  EXPECT_TRUE(absl::IsDataLoss(got[0].status)) << got[0].status;
  EXPECT_TRUE(absl::IsDataLoss(got[1].status)) << got[1].status;
  EXPECT_EQ(cache_->counters().rejected, 2u);
  // Each reads its own.
  EXPECT_TRUE(FetchNow(*other_token, ns_, {Key(6)}, kPage)[0].status.ok());
}

TEST_F(SharedCacheTest, AnOversizedRecordIsRefusedBeforeItIsReadIntoMemory) {
  auto raw = remote::RedisCluster::Create(SharedCluster()->Config());
  ASSERT_TRUE(raw.ok());
  const std::string huge(64u << 20, 'x');
  ASSERT_TRUE((*raw)->MultiSet({remote::KeyValue{RecordKey(ns_, Key(8)), huge}})[0].ok());
  const uint64_t before = RssAnonBytes();
  std::vector<FetchedPage> got = FetchNow(*cache_, ns_, {Key(8)}, kPage);
  const uint64_t after = RssAnonBytes();
  EXPECT_TRUE(absl::IsDataLoss(got[0].status)) << got[0].status;
  EXPECT_EQ(cache_->counters().oversized, 1u);
  EXPECT_LT(after, before + (16u << 20)) << "RssAnon grew by " << (after - before);
  (void)(*raw)->MultiDelete({RecordKey(ns_, Key(8))});
}

TEST_F(SharedCacheTest, ANamespaceWithoutKeysSharesNothing) {
  std::vector<uint8_t> p = Page(0x77);
  EXPECT_FALSE(cache_->Publish("nobody", Key(9), PageKey::Zero(), p.data(), kPage));
  EXPECT_EQ(ContainsNow(*cache_, "nobody", {Key(9)}), std::vector<bool>{false});
  EXPECT_EQ(cache_->counters().publish_drops, 1u);
}

TEST_F(SharedCacheTest, AfterStopEveryCallIsAnsweredAtOnce) {
  cache_->Stop();
  EXPECT_EQ(ContainsNow(*cache_, ns_, {Key(1)}), std::vector<bool>{false});
  EXPECT_FALSE(FetchNow(*cache_, ns_, {Key(1)}, kPage)[0].status.ok());
  EXPECT_FALSE(ForgetNow(*cache_, ns_, {Key(1)}).first.ok());
}

}  // namespace
}  // namespace kvtier::tiers::shared_cache
