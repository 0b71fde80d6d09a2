// The shared cluster of remote_test_env.h, as a gtest environment.
#include "tests/remote/remote_test_env.h"

#include <gtest/gtest.h>

namespace kvtier::tiers::remote::testing {
namespace {

LoopbackCluster* g_cluster = nullptr;

class SharedClusterEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    if (!RedisInstalled()) return;
    auto cluster = LoopbackCluster::Start();
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(*cluster);
    g_cluster = cluster_.get();
  }
  void TearDown() override {
    g_cluster = nullptr;
    cluster_.reset();
  }

 private:
  std::unique_ptr<LoopbackCluster> cluster_;
};

const auto* const kEnv = ::testing::AddGlobalTestEnvironment(new SharedClusterEnvironment);

}  // namespace

LoopbackCluster* SharedCluster() { return g_cluster; }

}  // namespace kvtier::tiers::remote::testing
