// Integration tests of RedisCluster when nodes fail, each on its own loopback
// cluster: a master killed (Unavailable until its replica takes over, never a
// hang), a master hung (SIGSTOP: bounded by the timeouts), the whole cluster
// gone (every call Unavailable, quickly).
#include <gtest/gtest.h>
#include <signal.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "tests/remote/cluster_fixture.h"
#include "tiers/remote/crc16.h"
#include "tiers/remote/redis_cluster.h"

namespace kvtier::tiers::remote {
namespace {

using testing::LoopbackCluster;

// The calls' bound: connect (300 ms) + a read and a write (500 ms each) per
// round, with slack for two slow shared cores.
constexpr absl::Duration kCallBound = absl::Seconds(3);

class RedisClusterFailureTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!testing::RedisInstalled()) GTEST_SKIP() << "redis-server not installed";
    auto cluster = LoopbackCluster::Start();
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(*cluster);
    auto client = RedisCluster::Create(cluster_->Config());
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = std::move(*client);
    for (int i = 0; i < 48; ++i) keys_.push_back(absl::StrCat("f-", i));
    std::vector<KeyValue> kvs;
    for (const std::string& k : keys_) kvs.push_back({k, k});
    for (const absl::Status& s : client_->MultiSet(kvs)) ASSERT_TRUE(s.ok()) << s;
  }

  // Keys served by `master`, and the others.
  void Split(const std::string& master, std::vector<std::string>& on,
             std::vector<std::string>& off) const {
    const SlotMap map = client_->slot_map();
    for (const std::string& k : keys_)
      (*map.MasterOf(KeySlot(k)) == master ? on : off).push_back(k);
  }

  // MultiGet of `keys`, checking the call's duration. True when every key OK.
  bool GetAllOk(const std::vector<std::string>& keys, int* unavailable) {
    const absl::Time start = absl::Now();
    auto got = client_->MultiGet(keys);
    EXPECT_LT(absl::Now() - start, kCallBound);
    bool all_ok = true;
    for (const auto& g : got) {
      if (g.ok()) continue;
      all_ok = false;
      EXPECT_EQ(g.status().code(), absl::StatusCode::kUnavailable) << g.status();
      EXPECT_NE(g.status().message().find("slot "), std::string::npos) << g.status();
      ++*unavailable;
    }
    return all_ok;
  }

  // Polls until every key of `keys` is served again (or `bound` passes).
  bool RecoversWithin(const std::vector<std::string>& keys, absl::Duration bound,
                      int* unavailable) {
    const absl::Time deadline = absl::Now() + bound;
    while (absl::Now() < deadline) {
      if (GetAllOk(keys, unavailable)) return true;
      absl::SleepFor(absl::Milliseconds(100));
    }
    return false;
  }

  std::unique_ptr<LoopbackCluster> cluster_;
  std::unique_ptr<RedisCluster> client_;
  std::vector<std::string> keys_;
};

TEST_F(RedisClusterFailureTest, KilledMasterFailsOverAndRoutingRecovers) {
  const std::string victim = *client_->slot_map().MasterOf(KeySlot(keys_[0]));
  std::vector<std::string> on, off;
  Split(victim, on, off);
  ASSERT_GT(off.size(), 0u);
  const pid_t pid = cluster_->PidOf(victim);
  ASSERT_GT(pid, 0);
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  int unavailable = 0;
  EXPECT_FALSE(GetAllOk(on, &unavailable));  // its keys: Unavailable, at once
  EXPECT_GT(unavailable, 0);
  EXPECT_TRUE(GetAllOk(off, &unavailable));  // the other masters' keys: served
  EXPECT_TRUE(RecoversWithin(on, absl::Seconds(20), &unavailable)) << "no failover";
  EXPECT_NE(*client_->slot_map().MasterOf(KeySlot(keys_[0])), victim);
  std::vector<std::string> values;
  for (const std::string& k : keys_) values.push_back("after-" + k);
  std::vector<KeyValue> kvs;
  for (size_t i = 0; i < keys_.size(); ++i) kvs.push_back({keys_[i], values[i]});
  for (const absl::Status& s : client_->MultiSet(kvs)) EXPECT_TRUE(s.ok()) << s;
  auto got = client_->MultiGet(keys_);
  for (size_t i = 0; i < keys_.size(); ++i) EXPECT_EQ(**got[i], "after-" + keys_[i]);
  EXPECT_GT(client_->stats().refreshes, 1u);
}

// hiredis writes with write(2): a pipeline to a killed node raises SIGPIPE,
// which must not kill the process (this binary does not ignore SIGPIPE).
TEST_F(RedisClusterFailureTest, WritingToAKilledMasterDoesNotRaiseSigpipe) {
  const std::string victim = *client_->slot_map().MasterOf(KeySlot(keys_[0]));
  std::vector<std::string> on, off;
  Split(victim, on, off);
  ASSERT_EQ(kill(cluster_->PidOf(victim), SIGKILL), 0);
  absl::SleepFor(absl::Milliseconds(100));  // the reset reaches our socket
  // More bytes than the socket buffer takes: hiredis needs a second write.
  const std::string big(4 << 20, 'x');
  std::vector<KeyValue> kvs;
  for (size_t i = 0; i < on.size() && i < 4; ++i) kvs.push_back({on[i], big});
  for (const absl::Status& s : client_->MultiSet(kvs)) {
    EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  }
  // Again, on a fresh connection (refused) or the replica (taken over).
  for (const absl::Status& s : client_->MultiSet(kvs)) {
    EXPECT_TRUE(s.ok() || s.code() == absl::StatusCode::kUnavailable) << s;
  }
}

TEST_F(RedisClusterFailureTest, HungMasterIsBoundedByTimeouts) {
  const std::string victim = *client_->slot_map().MasterOf(KeySlot(keys_[0]));
  std::vector<std::string> on, off;
  Split(victim, on, off);
  const pid_t pid = cluster_->PidOf(victim);
  ASSERT_GT(pid, 0);
  ASSERT_EQ(kill(pid, SIGSTOP), 0);
  int unavailable = 0;
  EXPECT_FALSE(GetAllOk(keys_, &unavailable));  // times out on the hung node only
  EXPECT_EQ(unavailable, static_cast<int>(on.size()));
  ASSERT_EQ(kill(pid, SIGCONT), 0);
  // Back as master, or demoted after its replica's takeover: either way served.
  EXPECT_TRUE(RecoversWithin(keys_, absl::Seconds(20), &unavailable));
}

TEST_F(RedisClusterFailureTest, WholeClusterDownIsUnavailableEverywhere) {
  ASSERT_TRUE(cluster_->Stop().ok());
  const absl::Time start = absl::Now();
  for (const auto& g : client_->MultiGet(keys_)) {
    EXPECT_EQ(g.status().code(), absl::StatusCode::kUnavailable) << g.status();
  }
  for (const absl::Status& s : client_->MultiSet({{"a", "b"}})) {
    EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  }
  for (const auto& e : client_->MultiExists(keys_)) EXPECT_FALSE(e.ok());
  for (const auto& d : client_->MultiDelete(keys_)) EXPECT_FALSE(d.ok());
  EXPECT_EQ(client_->Refresh().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(RedisCluster::Create(cluster_->Config()).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_LT(absl::Now() - start, kCallBound);
}

}  // namespace
}  // namespace kvtier::tiers::remote
