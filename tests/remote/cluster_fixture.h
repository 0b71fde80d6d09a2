// A real loopback Redis Cluster for the shared cache's integration tests:
// started and stopped with scripts/redis_cluster.sh in a fresh temp dir, plus
// admin commands sent straight to one node (migrations, ACL users).
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tiers/remote/redis_cluster.h"
#include "tiers/remote/redis_conn.h"

namespace kvtier::tiers::remote::testing {

// Whether redis-server and redis-cli are on PATH (tests skip without them).
bool RedisInstalled();

class LoopbackCluster {
 public:
  // Starts 3 masters + 3 replicas; fails with the script's output.
  static absl::StatusOr<std::unique_ptr<LoopbackCluster>> Start();
  ~LoopbackCluster();  // stops the nodes and removes the dir

  absl::Status Stop();
  const std::vector<std::string>& seeds() const { return seeds_; }
  // The seeds with short timeouts, as the tests want them.
  RedisClusterConfig Config() const;
  // The pid of the node at "127.0.0.1:port" (its pid file); -1 when unknown.
  pid_t PidOf(const std::string& endpoint) const;
  // One command on one node (a fresh connection).
  absl::StatusOr<ReplyPtr> Admin(const std::string& endpoint,
                                 const std::vector<std::string>& argv) const;
  // One command on every node; fails on the first error reply.
  absl::Status OnAllNodes(const std::vector<std::string>& argv) const;

 private:
  explicit LoopbackCluster(std::string dir) : dir_(std::move(dir)) {}
  std::string dir_;
  std::vector<std::string> seeds_;
  bool running_ = false;
};

}  // namespace kvtier::tiers::remote::testing
